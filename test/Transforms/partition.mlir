// RUN: stpar-opt %s -stp-partition -split-input-file | FileCheck %s
// RUN: stpar-opt %s -stp-partition -split-input-file | stpar-opt -split-input-file > /dev/null
//
// Numerics: every case below, run unpartitioned and as the SPMD program on
// all ranks (collectives simulated with numpy, Inputs/spmd-sim.py), gives
// the same results on random inputs.
// RUN: stpar-opt %s -split-input-file --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -split-input-file -stp-partition --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM-COUNT-11: ok: {{[0-9]+}} results match on {{4|16}} ranks
// SIM-NOT: MISMATCH

// Megatron MLP on 4 devices: the first matmul splits its output columns
// (column parallel), the second its reduced dim (row parallel). The weights
// arrive split, the hidden activation stays split, and one all-reduce
// resolves the second matmul's partial sums before the replicated result.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: module attributes
// CHECK-SAME: stp.partitioned
// CHECK: shard.grid @grid(shape = 4)
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<8x32xf32> {stp.name = "x", stp.split = {{\[\[\], \[\]\]}}},
// CHECK-SAME: %[[W1:[a-z0-9_]+]]: tensor<32x16xf32> {stp.param = #stp.param<name = "w1"{{.*}}>, stp.split = {{\[\[\], \[0\]\]}}},
// CHECK-SAME: %[[W2:[a-z0-9_]+]]: tensor<16x32xf32> {stp.param = #stp.param<name = "w2"{{.*}}>, stp.split = {{\[\[0\], \[\]\]}}})
// CHECK-SAME: -> (tensor<8x32xf32> {stp.name = "y", stp.split = {{\[\[\], \[\]\]}}})
// CHECK: %[[Z1:[a-z0-9_]+]] = linalg.fill {{.*}} -> tensor<8x16xf32>
// CHECK: %[[H:[a-z0-9_]+]] = linalg.matmul ins(%[[X]], %[[W1]] : tensor<8x32xf32>, tensor<32x16xf32>) outs(%[[Z1]] : tensor<8x16xf32>)
// CHECK-NOT: shard.
// CHECK: %[[P:[a-z0-9_]+]] = linalg.matmul ins(%[[H]], %[[W2]] : tensor<8x16xf32>, tensor<16x32xf32>)
// CHECK-NEXT: %[[O:[a-z0-9_]+]] = shard.all_reduce %[[P]] on @grid grid_axes = [0]
// CHECK-SAME: stp.plan_step = "linalg.matmul#6 forward: all-reduce of the partial sum over x0 (reduction loop k split)"
// CHECK-NOT: shard.
// CHECK: return %[[O]] : tensor<8x32xf32>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                  %w1: tensor<32x64xf32> {stp.param = #stp.param<name = "w1", data = embedded, trainable = true>},
                  %w2: tensor<64x32xf32> {stp.param = #stp.param<name = "w2", data = embedded, trainable = true>})
      -> (tensor<8x32xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<8x64xf32>
    %z1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 64 {"x0"}, "k" = 32 reduction]>}
      ins(%x, %w1 : tensor<8x32xf32>, tensor<32x64xf32>) outs(%z1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %e2 = tensor.empty() : tensor<8x32xf32>
    %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<8x32xf32>) -> tensor<8x32xf32>
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 32, "k" = 64 reduction {"x0"}]>}
      ins(%h, %w2 : tensor<8x64xf32>, tensor<64x32xf32>) outs(%z2 : tensor<8x32xf32>) -> tensor<8x32xf32>
    return %o : tensor<8x32xf32>
  }
}

// -----

// PrimePar's temporal primitive on a 2x2 grid: a linear layer
// O[b, s, k] = sum_n I[b, s, n] W[n, k] with M = s, N = n, K = k. I and W
// arrive in their blocked layouts (I: s over x0, n over x1; W: n over x0, k
// over x1) and are permuted point to point into step 0's slices (device
// (r, c) holds I[M r, N r+c] and W[N r+c, K c]); at the next step I comes
// from (r, c+1) and W from (r+1, c) by ring shifts issued before step 0's
// product. O[M r, K c] accumulates locally: no collective.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
#map_i = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#map_w = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#map_o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK: shard.grid @grid(shape = 2x2)
// CHECK: func.func @main(%[[I:[a-z0-9_]+]]: tensor<2x4x16xf32> {stp.name = "x", stp.split = {{\[\[\], \[0\], \[1\]\]}}},
// CHECK-SAME: %[[W:[a-z0-9_]+]]: tensor<16x8xf32> {{{.*}}stp.split = {{\[\[0\], \[1\]\]}}})
// CHECK: %[[I0:[a-z0-9_]+]] = stp.grid_permute %[[I]] on @grid grid_axes = [0, 1] sources = [0, 1, 3, 2] {stp.plan_step = "linalg.generic#3 forward: temporal forward start: I from its blocked layout: point-to-point permutation over x0,x1"} : tensor<2x4x16xf32>
// CHECK-NEXT: %[[W0:[a-z0-9_]+]] = stp.grid_permute %[[W]] on @grid grid_axes = [0, 1] sources = [0, 3, 2, 1] {{.*}} : tensor<16x8xf32>
// CHECK: %[[Z:[a-z0-9_]+]] = linalg.fill {{.*}} -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[I1:[a-z0-9_]+]] = shard.shift %[[I0]] on @grid grid_axes = [1] shift_axis = 1 offset = -1 rotate {stp.double_buffer, stp.plan_step = "linalg.generic#3 forward: temporal forward step: next block of I: ring shift along x1 (receive from (r, c+1))"} : tensor<2x4x16xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[W1:[a-z0-9_]+]] = shard.shift %[[W0]] on @grid grid_axes = [0] shift_axis = 0 offset = -1 rotate {stp.double_buffer, stp.plan_step = "linalg.generic#3 forward: temporal forward step: next block of W: ring shift along x0 (receive from (r+1, c))"} : tensor<16x8xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[S0:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[I0]], %[[W0]] : tensor<2x4x16xf32>, tensor<16x8xf32>) outs(%[[Z]] : tensor<2x4x8xf32>) {
// CHECK: %[[S1:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[I1]], %[[W1]] : tensor<2x4x16xf32>, tensor<16x8xf32>) outs(%[[S0]] : tensor<2x4x8xf32>) {
// CHECK-NOT: grid_permute
// CHECK: shard.all_gather %[[S1]] on @grid grid_axes = [0] gather_axis = 1
// CHECK: shard.all_gather %{{.*}} on @grid grid_axes = [1] gather_axis = 2
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<2x8x32xf32> {stp.name = "x"},
                  %w: tensor<32x16xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>})
      -> (tensor<2x8x16xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x8x16xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %o = linalg.generic {indexing_maps = [#map_i, #map_w, #map_o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<2x8x32xf32>, tensor<32x16xf32>) outs(%z : tensor<2x8x16xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8, "d2" = 16, "d3" = 32 reduction],
               temporal = <grid = ["x0", "x1"], matmul = ["s", "d3", "d2"], steps = 2>>} {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x16xf32>
    return %o : tensor<2x8x16xf32>
  }
}

// -----

// Attention split by batch (x0) and heads (x1): query, key, value and the
// mask's batch dim arrive split; no collective until the result is gathered.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK: func.func @main(%[[Q:[a-z0-9_]+]]: tensor<1x2x8x16xf32> {stp.split = {{\[\[0\], \[1\], \[\], \[\]\]}}},
// CHECK-SAME: %[[K:[a-z0-9_]+]]: tensor<1x2x8x16xf32> {stp.split = {{\[\[0\], \[1\], \[\], \[\]\]}}},
// CHECK-SAME: %[[V:[a-z0-9_]+]]: tensor<1x2x8x16xf32> {stp.split = {{\[\[0\], \[1\], \[\], \[\]\]}}},
// CHECK-SAME: %[[M:[a-z0-9_]+]]: tensor<1x1x8x8xf32> {stp.split = {{\[\[0\], \[\], \[\], \[\]\]}}})
// CHECK-NEXT: %[[A:[a-z0-9_]+]] = stp.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {causal, scale = 2.500000e-01 : f32} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x8x8xf32>) -> tensor<1x2x8x16xf32>
// CHECK-NEXT: shard.all_gather %[[A]] on @grid grid_axes = [0] gather_axis = 0
// CHECK-NEXT: shard.all_gather %{{.*}} on @grid grid_axes = [1] gather_axis = 1
module attributes {stp.mesh = #mesh} {
  func.func @main(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>,
                  %mask: tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32> {
    %o = stp.attention %q, %k, %v mask %mask {scale = 0.25 : f32, causal,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 2 {"x0"}, "h" = 4 {"x1"}, "s" = 8, "t" = 8, "d" = 16 reduction]>}
        : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32>
    return %o : tensor<2x4x8x16xf32>
  }
}

// -----

// Layer norm whose normalized dim is split (x1): the local sums of x and of
// the squared deviations are all-reduced over x1, then one elementwise
// generic normalizes with the local blocks of scale and bias; the batch
// split (x0) is kept. The next op wants the x0 split moved from the batch to
// the sequence dim: an all-to-all.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<2x8x16xf32> {stp.split = {{\[\[0\], \[\], \[1\]\]}}},
// CHECK-SAME: %[[G:[a-z0-9_]+]]: tensor<16xf32> {stp.split = {{\[\[1\]\]}}}, %[[B:[a-z0-9_]+]]: tensor<16xf32> {stp.split = {{\[\[1\]\]}}})
// CHECK: %[[R:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[X]] : tensor<2x8x16xf32>)
// CHECK: %[[S1:[a-z0-9_]+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[R]] : tensor<2x8x16xf32>) outs(%{{.*}} : tensor<2x8xf32>)
// CHECK: %[[M:[a-z0-9_]+]] = shard.all_reduce %[[S1]] on @grid grid_axes = [1] {stp.plan_step = "stp.layer_norm#2 forward: all-reduce of the normalization statistics (sum of x) over x1 (normalized dims split)"} : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK: %[[S2:[a-z0-9_]+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[R]], %[[M]] : tensor<2x8x16xf32>, tensor<2x8xf32>) outs(%{{.*}} : tensor<2x8xf32>)
// CHECK: %[[V:[a-z0-9_]+]] = shard.all_reduce %[[S2]] on @grid grid_axes = [1] {stp.plan_step = "stp.layer_norm#2 forward: all-reduce of the normalization statistics (sum of squared deviations) over x1 (normalized dims split)"}
// CHECK: %[[N:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[R]], %[[M]], %[[V]], %[[G]], %[[B]] : tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<16xf32>, tensor<16xf32>) outs(%{{.*}} : tensor<2x8x16xf32>)
// CHECK: math.sqrt
// CHECK: %[[T:[a-z0-9_]+]] = shard.all_to_all %[[N]] on @grid grid_axes = [0] split_axis = 1 concat_axis = 0 {stp.plan_step = "linalg.generic#4 forward: all-to-all moving the split over x0 from dim 0 to dim 1{{.*}}"} : tensor<2x8x16xf32> -> tensor<4x4x16xf32>
// CHECK-NOT: shard.
// CHECK: linalg.generic {{.*}} ins(%[[T]] : tensor<4x4x16xf32>)
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<4x8x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<4x8x32xf32> {
    %e = tensor.empty() : tensor<4x8x32xf32>
    %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<4x8x32xf32>) outs(%e : tensor<4x8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 4 {"x0"}, "s" = 8, "d2" = 32 {"x1"}]>} {
    ^bb0(%a: f32, %o: f32):
      %m = arith.maximumf %a, %a : f32
      linalg.yield %m : f32
    } -> tensor<4x8x32xf32>
    %y = stp.layer_norm %r, %g, %b {axis = 2 : i64, epsilon = 1.0e-5 : f32,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 4 {"x0"}, "s" = 8, "d2" = 32 reduction {"x1"} ]>}
        : (tensor<4x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
    %e2 = tensor.empty() : tensor<4x8x32xf32>
    %z = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : tensor<4x8x32xf32>) outs(%e2 : tensor<4x8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 4, "s" = 8 {"x0"}, "d2" = 32 {"x1"}]>} {
    ^bb0(%a: f32, %o: f32):
      %m = arith.negf %a : f32
      linalg.yield %m : f32
    } -> tensor<4x8x32xf32>
    return %z : tensor<4x8x32xf32>
  }
}

// -----

// A split reduction whose consumer wants the output split on the same axis:
// reduce-scatter instead of all-reduce.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK: func.func @main(%[[A:[a-z0-9_]+]]: tensor<8x16xf32> {stp.split = {{\[\[\], \[0\]\]}}}, %[[W:[a-z0-9_]+]]: tensor<16x32xf32> {stp.split = {{\[\[0\], \[\]\]}}})
// CHECK: %[[P:[a-z0-9_]+]] = linalg.matmul ins(%[[A]], %[[W]] : tensor<8x16xf32>, tensor<16x32xf32>)
// CHECK-NEXT: %[[RS:[a-z0-9_]+]] = shard.reduce_scatter %[[P]] on @grid grid_axes = [0] scatter_axis = 0 {stp.plan_step = "linalg.matmul#3 forward: reduce-scatter of the partial sum over x0 (reduction loop k split) into dim 0 over x0 for linalg.generic#4"} : tensor<8x32xf32> -> tensor<2x32xf32>
// CHECK: linalg.generic {{.*}} ins(%[[RS]] : tensor<2x32xf32>)
module attributes {stp.mesh = #mesh} {
  func.func @main(%a: tensor<8x64xf32>, %w: tensor<64x32xf32>) -> tensor<8x32xf32> {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<8x32xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
    %p = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 32, "k" = 64 reduction {"x0"}]>}
      ins(%a, %w : tensor<8x64xf32>, tensor<64x32xf32>) outs(%z : tensor<8x32xf32>) -> tensor<8x32xf32>
    %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"x0"}, "n" = 32]>} {
    ^bb0(%x: f32, %o: f32):
      %y = arith.negf %x : f32
      linalg.yield %y : f32
    } -> tensor<8x32xf32>
    return %r : tensor<8x32xf32>
  }
}

// -----

// An embedding split along the hidden dim: the table stays replicated and
// linalg.index of the split loop gets this device's block offset. A slice
// across the split dim gathers it first; reshapes then follow the (now
// replicated) layout; stp.topk along the split dim reuses the gathered
// value. An op without a local rule (arith.addf on tensors) on a split
// value runs replicated and says why.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK: func.func @main(%[[IDS:[a-z0-9_]+]]: tensor<4x8xi64> {stp.split = {{\[\[\], \[\]\]}}}, %[[TABLE:[a-z0-9_]+]]: tensor<100x32xf32> {stp.split = {{\[\[\], \[\]\]}}})
// CHECK: %[[E:[a-z0-9_]+]] = tensor.empty() : tensor<4x8x8xf32>
// CHECK: %[[BLK:[a-z0-9_]+]] = shard.process_multi_index on @grid axes = [0] : index
// CHECK: %[[OFF:[a-z0-9_]+]] = arith.muli %[[BLK]], %{{.*}} : index
// CHECK: %[[EMB:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[IDS]] : tensor<4x8xi64>) outs(%[[E]] : tensor<4x8x8xf32>)
// CHECK: %[[COL:[a-z0-9_]+]] = linalg.index 2 : index
// CHECK-NEXT: %[[GCOL:[a-z0-9_]+]] = arith.addi %[[COL]], %[[OFF]] : index
// CHECK-NEXT: tensor.extract %[[TABLE]][%{{.*}}, %[[GCOL]]] : tensor<100x32xf32>
// CHECK: %[[G:[a-z0-9_]+]] = shard.all_gather %[[EMB]] on @grid grid_axes = [0] gather_axis = 2 {stp.plan_step = "tensor.extract_slice#2 forward: all-gather dim 2 over x0 for operand 0 of tensor.extract_slice#2 (produced by linalg.generic#1)"} : tensor<4x8x8xf32> -> tensor<4x8x32xf32>
// CHECK-NEXT: tensor.extract_slice %[[G]][0, 0, 0] [4, 8, 16] [1, 1, 1]
// CHECK: stp.topk %[[G]] {axis = 2 : i64, k = 2 : i64, largest = true, sorted = true} : (tensor<4x8x32xf32>)
// CHECK: arith.addf %[[G]], %[[G]] {stp.fallback = "no local rule for this op"} : tensor<4x8x32xf32>
module attributes {stp.mesh = #mesh} {
  func.func @main(%ids: tensor<4x8xi64>, %table: tensor<100x32xf32>) -> (tensor<4x8x2x8xf32>, tensor<4x8x2xf32>, tensor<4x8x32xf32>) {
    %e = tensor.empty() : tensor<4x8x32xf32>
    %emb = linalg.generic {indexing_maps = [#ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<4x8xi64>) outs(%e : tensor<4x8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 4, "s" = 8, "d2" = 32 {"x0"}, "d3" = 100 reduction]>} {
    ^bb0(%in: i64, %out: f32):
      %row = arith.index_cast %in : i64 to index
      %col = linalg.index 2 : index
      %v = tensor.extract %table[%row, %col] : tensor<100x32xf32>
      linalg.yield %v : f32
    } -> tensor<4x8x32xf32>
    %s = tensor.extract_slice %emb[0, 0, 0] [4, 8, 16] [1, 1, 1] : tensor<4x8x32xf32> to tensor<4x8x16xf32>
    %x = tensor.expand_shape %s [[0], [1], [2, 3]] output_shape [4, 8, 2, 8] : tensor<4x8x16xf32> into tensor<4x8x2x8xf32>
    %v, %i = stp.topk %emb {axis = 2 : i64, k = 2 : i64, largest = true, sorted = true}
        : (tensor<4x8x32xf32>) -> (tensor<4x8x2xf32>, tensor<4x8x2xi64>)
    %sum = arith.addf %emb, %emb : tensor<4x8x32xf32>
    return %x, %v, %sum : tensor<4x8x2x8xf32>, tensor<4x8x2xf32>, tensor<4x8x32xf32>
  }
}

// -----

// Reshapes keep a batch split when it lands on the major dim of a group.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<2x8x32xf32> {stp.split = {{\[\[0\], \[\], \[\]\]}}})
// CHECK: %[[R:[a-z0-9_]+]] = linalg.generic
// CHECK: } -> tensor<2x8x32xf32>
// CHECK-NEXT: %[[EX:[a-z0-9_]+]] = tensor.expand_shape %[[R]] {{\[\[0\], \[1\], \[2, 3\]\]}} output_shape [2, 8, 4, 8] : tensor<2x8x32xf32> into tensor<2x8x4x8xf32>
// CHECK-NEXT: %[[CO:[a-z0-9_]+]] = tensor.collapse_shape %[[EX]] {{\[\[0, 1\], \[2\], \[3\]\]}} : tensor<2x8x4x8xf32> into tensor<16x4x8xf32>
// CHECK-NEXT: shard.all_gather %[[CO]] on @grid grid_axes = [0] gather_axis = 0 {{.*}} : tensor<16x4x8xf32> -> tensor<64x4x8xf32>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x8x32xf32>) -> tensor<64x4x8xf32> {
    %e = tensor.empty() : tensor<8x8x32xf32>
    %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<8x8x32xf32>) outs(%e : tensor<8x8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"x0"}, "s" = 8, "d2" = 32]>} {
    ^bb0(%a: f32, %o: f32):
      %y = arith.negf %a : f32
      linalg.yield %y : f32
    } -> tensor<8x8x32xf32>
    %ex = tensor.expand_shape %r [[0], [1], [2, 3]] output_shape [8, 8, 4, 8] : tensor<8x8x32xf32> into tensor<8x8x4x8xf32>
    %co = tensor.collapse_shape %ex [[0, 1], [2], [3]] : tensor<8x8x4x8xf32> into tensor<64x4x8xf32>
    return %co : tensor<64x4x8xf32>
  }
}

// -----

// stp.topk and stp.scatter_elements (an MoE router) keep the token split
// and work on whole expert rows.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK: func.func @main(%[[L:[a-z0-9_]+]]: tensor<4x8xf32> {stp.split = {{\[\[0\], \[\]\]}}}, %[[Z:[a-z0-9_]+]]: tensor<16x8xf32> {stp.split = {{\[\[\], \[\]\]}}})
// CHECK: %[[R:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[L]] : tensor<4x8xf32>)
// CHECK: %[[V:[a-z0-9_]+]], %[[I:[a-z0-9_]+]] = stp.topk %[[R]] {{.*}} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
// CHECK-NEXT: %[[ZS:[a-z0-9_]+]] = shard.all_slice %[[Z]] on @grid grid_axes = [0] slice_axis = 0
// CHECK-NEXT: stp.scatter_elements %[[ZS]], %[[I]], %[[V]] {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x8xf32>
// CHECK-NOT: stp.fallback
module attributes {stp.mesh = #mesh} {
  func.func @main(%logits: tensor<16x8xf32>, %zeros: tensor<16x8xf32>) -> tensor<16x8xf32> {
    %e = tensor.empty() : tensor<16x8xf32>
    %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%logits : tensor<16x8xf32>) outs(%e : tensor<16x8xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 16 {"x0"}, "e" = 8]>} {
    ^bb0(%a: f32, %o: f32):
      %t = math.exp %a : f32
      linalg.yield %t : f32
    } -> tensor<16x8xf32>
    %v, %i = stp.topk %r {axis = 1 : i64, k = 2 : i64, largest = true, sorted = true}
        : (tensor<16x8xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
    %s = stp.scatter_elements %zeros, %i, %v {axis = 1 : i64}
        : (tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x8xf32>
    return %s : tensor<16x8xf32>
  }
}


// -----

// RMSNorm with a split normalized dim: one all-reduce of the sum of squares.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<2x4x16xf32> {stp.split = {{\[\[\], \[0\], \[1\]\]}}}, %[[G:[a-z0-9_]+]]: tensor<16xf32> {stp.split = {{\[\[1\]\]}}})
// CHECK: %[[S:[a-z0-9_]+]] = linalg.generic {{.*}} ins(%[[X]] : tensor<2x4x16xf32>) outs(%{{.*}} : tensor<2x4xf32>)
// CHECK: arith.mulf
// CHECK: %[[MS:[a-z0-9_]+]] = shard.all_reduce %[[S]] on @grid grid_axes = [1] {stp.plan_step = "stp.rms_norm#0 forward: all-reduce of the normalization statistics (sum of x^2) over x1 (normalized dims split)"}
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[MS]], %[[G]] : tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<16xf32>)
// CHECK-NOT: shard.all_reduce
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) -> tensor<2x8x32xf32> {
    %y = stp.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-6 : f32,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8 {"x0"}, "d" = 32 reduction {"x1"} ]>}
        : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    return %y : tensor<2x8x32xf32>
  }
}

// -----

// Vocabulary-parallel embedding (Megatron): the table rows are split over
// x0. Each device looks up its block of rows (row - block offset, clamped)
// and yields zero for rows it does not hold; the partial sums are
// all-reduced where the embedding is used.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK: func.func @main(%[[IDS:[a-z0-9_]+]]: tensor<4x8xi64> {stp.split = {{\[\[\], \[\]\]}}}, %[[TABLE:[a-z0-9_]+]]: tensor<2x32xf32> {stp.split = {{\[\[0\], \[\]\]}}})
// CHECK: %[[BLK:[a-z0-9_]+]] = shard.process_multi_index on @grid axes = [0] : index
// CHECK: %[[OFF:[a-z0-9_]+]] = arith.muli %[[BLK]], %{{.*}} : index
// CHECK: %[[EMB:[a-z0-9_]+]] = linalg.generic
// CHECK: %[[LOCAL:[a-z0-9_]+]] = arith.subi %{{.*}}, %[[OFF]] : index
// CHECK: %[[IN:[a-z0-9_]+]] = arith.andi
// CHECK: %[[ROW:[a-z0-9_]+]] = arith.select %[[IN]], %[[LOCAL]], %{{.*}} : index
// CHECK: %[[V:[a-z0-9_]+]] = tensor.extract %[[TABLE]][%[[ROW]], %{{.*}}] : tensor<2x32xf32>
// CHECK: %[[Y:[a-z0-9_]+]] = arith.select %[[IN]], %[[V]], %{{.*}} : f32
// CHECK-NEXT: linalg.yield %[[Y]] : f32
// CHECK: shard.all_reduce %[[EMB]] on @grid grid_axes = [0] {stp.plan_step = "linalg.generic#1 forward: all-reduce of the partial sum over x0 (table rows split (vocabulary-parallel embedding))"}
module attributes {stp.mesh = #mesh} {
  func.func @main(%ids: tensor<4x8xi64>, %table: tensor<8x32xf32>) -> tensor<4x8x32xf32> {
    %e = tensor.empty() : tensor<4x8x32xf32>
    %emb = linalg.generic {indexing_maps = [#ids, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<4x8xi64>) outs(%e : tensor<4x8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 4, "s" = 8, "d2" = 32, "d3" = 8 reduction {"x0"}]>} {
    ^bb0(%in: i64, %out: f32):
      %row = arith.index_cast %in : i64 to index
      %col = linalg.index 2 : index
      %v = tensor.extract %table[%row, %col] : tensor<8x32xf32>
      linalg.yield %v : f32
    } -> tensor<4x8x32xf32>
    return %emb : tensor<4x8x32xf32>
  }
}

// -----

// A view of a value whose re-layout is already made is taken from that
// re-layout: %a's gather of %r also serves %c, which reads %r through an
// expand_shape (as the training step's attention backward reads the query
// through new views): one all-gather, then the expand of its result.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @view_of_gathered
// CHECK: %[[R:[a-z0-9_]+]] = linalg.generic
// CHECK: %[[G:[a-z0-9_]+]] = shard.all_gather %[[R]] on @grid grid_axes = [0] gather_axis = 0 {{.*}} : tensor<2x32xf32> -> tensor<8x32xf32>
// CHECK-NOT: shard.all_gather
// CHECK: tensor.expand_shape %[[G]] {{\[\[0\], \[1, 2\]\]}} output_shape [8, 4, 8] : tensor<8x32xf32> into tensor<8x4x8xf32>
// CHECK-NOT: shard.all_gather
// CHECK: return
module attributes {stp.mesh = #mesh} {
  func.func @view_of_gathered(%x: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x4x8xf32>) {
    %e = tensor.empty() : tensor<8x32xf32>
    %r = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"x0"}, "d1" = 32]>} {
    ^bb0(%in: f32, %out: f32):
      %y = arith.negf %in : f32
      linalg.yield %y : f32
    } -> tensor<8x32xf32>
    %e2 = tensor.empty() : tensor<8x32xf32>
    %a = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%r : tensor<8x32xf32>) outs(%e2 : tensor<8x32xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8, "d1" = 32]>} {
    ^bb0(%in: f32, %out: f32):
      %y = math.exp %in : f32
      linalg.yield %y : f32
    } -> tensor<8x32xf32>
    %ex = tensor.expand_shape %r [[0], [1, 2]] output_shape [8, 4, 8] : tensor<8x32xf32> into tensor<8x4x8xf32>
    %e3 = tensor.empty() : tensor<8x4x8xf32>
    %c = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ex : tensor<8x4x8xf32>) outs(%e3 : tensor<8x4x8xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8, "d1" = 4, "d2" = 8]>} {
    ^bb0(%in: f32, %out: f32):
      %y = arith.mulf %in, %in : f32
      linalg.yield %y : f32
    } -> tensor<8x4x8xf32>
    return %a, %c : tensor<8x32xf32>, tensor<8x4x8xf32>
  }
}
