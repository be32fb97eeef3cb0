// A hand-written partitioned module on a 2x2 grid (docs/spmd-ir.md): every
// shard collective, process_multi_index with dynamic slices, and a Cannon
// matmul as an scf.for temporal loop with double-buffered ring shifts.
// Inputs: x [4x8] split [[0],[1]], i and w [4x4] replicated.
// Expected results (collectives-2x2.py): see the comments of each return.
module attributes {stp.partitioned} {
  shard.grid @grid(shape = 2x2)
  func.func @main(%x: tensor<2x4xf32> {stp.name = "x", stp.split = [[0], [1]]},
                  %i: tensor<4x4xf32> {stp.name = "i", stp.split = [[], []]},
                  %w: tensor<4x4xf32> {stp.name = "w", stp.split = [[], []]})
      -> (tensor<4x8xf32> {stp.name = "gathered", stp.split = [[], []]},
          tensor<2x4xf32> {stp.name = "reduced", stp.split = [[], []]},
          tensor<4x8xf32> {stp.name = "scattered", stp.split = [[], []]},
          tensor<4x8xf32> {stp.name = "sliced", stp.split = [[], []]},
          tensor<4x8xf32> {stp.name = "alltoall", stp.split = [[], []]},
          tensor<4x8xf32> {stp.name = "shifted", stp.split = [[], []]},
          tensor<4x8xf32> {stp.name = "dynslice", stp.split = [[], []]},
          tensor<4x4xf32> {stp.name = "cannon", stp.split = [[], []]}) {
    // x
    %g1 = shard.all_gather %x on @grid grid_axes = [1] gather_axis = 1 {stp.plan_step = "x: gather columns"} : tensor<2x4xf32> -> tensor<2x8xf32>
    %full = shard.all_gather %g1 on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "x: gather rows"} : tensor<2x8xf32> -> tensor<4x8xf32>
    // sum of the four blocks
    %red = shard.all_reduce %x on @grid grid_axes = [0, 1] reduction = sum {stp.plan_step = "x: all-reduce"} : tensor<2x4xf32> -> tensor<2x4xf32>
    // 2 * x
    %rs = shard.reduce_scatter %full on @grid grid_axes = [0] scatter_axis = 0 {stp.plan_step = "x: reduce-scatter rows"} : tensor<4x8xf32> -> tensor<2x8xf32>
    %rsg = shard.all_gather %rs on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "rs: gather"} : tensor<2x8xf32> -> tensor<4x8xf32>
    // x
    %sl = shard.all_slice %full on @grid grid_axes = [1] slice_axis = 1 {stp.plan_step = "x: slice columns"} : tensor<4x8xf32> -> tensor<4x4xf32>
    %slg = shard.all_gather %sl on @grid grid_axes = [1] gather_axis = 1 {stp.plan_step = "sl: gather"} : tensor<4x4xf32> -> tensor<4x8xf32>
    // x (device (p0, p1) ends with row 2 * p0 + p1)
    %a2a = shard.all_to_all %x on @grid grid_axes = [1] split_axis = 0 concat_axis = 1 {stp.plan_step = "x: all-to-all"} : tensor<2x4xf32> -> tensor<1x8xf32>
    %a2ag = shard.all_gather %a2a on @grid grid_axes = [0, 1] gather_axis = 0 {stp.plan_step = "a2a: gather"} : tensor<1x8xf32> -> tensor<4x8xf32>
    // x with its two column blocks swapped
    %sh = shard.shift %x on @grid grid_axes = [1] shift_axis = 1 offset = 1 rotate {stp.plan_step = "x: shift right"} : tensor<2x4xf32> -> tensor<2x4xf32>
    %shg1 = shard.all_gather %sh on @grid grid_axes = [1] gather_axis = 1 {stp.plan_step = "sh: gather columns"} : tensor<2x4xf32> -> tensor<2x8xf32>
    %shg = shard.all_gather %shg1 on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "sh: gather rows"} : tensor<2x8xf32> -> tensor<4x8xf32>
    // x, sliced by this device's coordinates
    %p:2 = shard.process_multi_index on @grid axes = [0, 1] : index, index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %r0 = arith.muli %p#0, %c2 : index
    %q0 = arith.muli %p#1, %c4 : index
    %ds = tensor.extract_slice %full[%r0, %q0] [2, 4] [1, 1] : tensor<4x8xf32> to tensor<2x4xf32>
    %dsg1 = shard.all_gather %ds on @grid grid_axes = [1] gather_axis = 1 {stp.plan_step = "ds: gather columns"} : tensor<2x4xf32> -> tensor<2x8xf32>
    %dsg = shard.all_gather %dsg1 on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "ds: gather rows"} : tensor<2x8xf32> -> tensor<4x8xf32>
    // i @ w by Cannon's algorithm: device (r, c) starts with i block
    // (r, r + c) and w block (r + c, c); i moves left, w moves up.
    %s = arith.addi %p#0, %p#1 : index
    %k = arith.remsi %s, %c2 : index
    %kk = arith.muli %k, %c2 : index
    %col = arith.muli %p#1, %c2 : index
    %i0 = tensor.extract_slice %i[%r0, %kk] [2, 2] [1, 1] : tensor<4x4xf32> to tensor<2x2xf32>
    %w0 = tensor.extract_slice %w[%kk, %col] [2, 2] [1, 1] : tensor<4x4xf32> to tensor<2x2xf32>
    %zero = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x2xf32>
    %acc0 = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
    %res:3 = scf.for %t = %c0 to %c2 step %c1 iter_args(%acc = %acc0, %a = %i0, %b = %w0) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
      %m = linalg.matmul ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>) outs(%acc : tensor<2x2xf32>) -> tensor<2x2xf32>
      %an = shard.shift %a on @grid grid_axes = [1] shift_axis = 1 offset = -1 rotate {stp.double_buffer, stp.plan_step = "matmul F: I ring shift left"} : tensor<2x2xf32> -> tensor<2x2xf32>
      %bn = shard.shift %b on @grid grid_axes = [0] shift_axis = 0 offset = -1 rotate {stp.double_buffer, stp.plan_step = "matmul F: W ring shift up"} : tensor<2x2xf32> -> tensor<2x2xf32>
      scf.yield %m, %an, %bn : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
    }
    %og1 = shard.all_gather %res#0 on @grid grid_axes = [1] gather_axis = 1 {stp.plan_step = "O: gather columns"} : tensor<2x2xf32> -> tensor<2x4xf32>
    %og = shard.all_gather %og1 on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "O: gather rows"} : tensor<2x4xf32> -> tensor<4x4xf32>
    return %full, %red, %rsg, %slg, %a2ag, %shg, %dsg, %og : tensor<4x8xf32>, tensor<2x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x4xf32>
  }
}
