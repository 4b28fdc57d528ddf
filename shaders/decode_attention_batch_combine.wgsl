// The second pass of the batched decode attention split over the sequence: attention.wgsl's
// split_combine for every row (one thread per (row, output float)), each row's chunks from its
// own partials at its own position. Composed after decode_attention_batch.wgsl (the split variant).

@compute @workgroup_size(64)
fn combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let flat = (wg.y * grid.x + wg.x) * 64u + lid; // flat (row, h, d)
  let per_row = params.num_heads * HEAD_DIM;
  let row = flat / per_row;
  if (row >= batch_count()) {
    return;
  }
  set_row(row);
  let i = flat % per_row;
  let h = i / HEAD_DIM;
  let d = i % HEAD_DIM;
  let pos = start_pos();
  let c_lo = first_key(pos) / params.chunk_keys;
  let c_hi = min(pos / params.chunk_keys, chunk_limit(c_lo));
  let ml = partial_base + params.num_heads * params.num_chunks * HEAD_DIM + 2u * h * params.num_chunks;
  var m = NEG_LARGE;
  for (var c = c_lo; c <= c_hi; c++) {
    m = max(m, partials[ml + 2u * chunk_slot(c)]);
  }
  var l = 0.0;
  var a = 0.0;
  for (var c = c_lo; c <= c_hi; c++) {
    let s = chunk_slot(c);
    let w = exp(partials[ml + 2u * s] - m);
    l += w * partials[ml + 2u * s + 1u];
    a += w * partials[partial_base + (h * params.num_chunks + s) * HEAD_DIM + d];
  }
  out[out_base + i] = a / l;
}
