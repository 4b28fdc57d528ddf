// The second pass of the batched decode attention split over the sequence: attention.wgsl's
// split_combine for every row (one thread per (row, output float)), each row's chunks from its
// own partials at its own position. Composed after decode_attention_batch.wgsl (the split variant)
// and attention.wgsl's combine_chunks, the per-float combine split_combine runs.

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
  out[out_base + i] = combine_chunks(i / HEAD_DIM, i % HEAD_DIM, start_pos(), partial_base);
}
