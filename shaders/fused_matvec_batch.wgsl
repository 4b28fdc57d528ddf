// fused_matvec.wgsl over the rows of a batched decode step: each workgroup computes its blocks of
// weight rows for every batch row in turn, the same code as one row's, so a row's sums never
// depend on the others and the weights of rows 2.. come from cache. The row count is read at run
// time (batch_count(), uniform: the loop may hold reduce_team's barriers); row b reads x from
// element b * X_STRIDE and writes y from element b * Y_STRIDE.
//
// kernels/fused-matvec.ts (fusedMatvecSpec with a batch) composes, in front: what
// fused_matvec.wgsl takes, with the activation snippet reading x at x_base; X_STRIDE, Y_STRIDE;
// batchRowsWgsl; and after: fused_matvec.wgsl with its main's per-row part (from `var acc`) in a
// loop over the rows that sets x_base and y_base, and its emit writing at y_base.

/** The current row's first element of x and of y. */
var<private> x_base: u32;
var<private> y_base: u32;
