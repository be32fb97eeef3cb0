// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=mean-square return-gradients=true" | FileCheck %s
// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=mean-square return-gradients=true" -stp-partition -mlir-print-debuginfo | FileCheck %s --check-prefix=SPMD
//
// Numerics: the training step, unpartitioned and as the SPMD program on
// every rank (collectives simulated with numpy, Inputs/spmd-sim.py), gives
// the same loss, gradients and updated parameters on random inputs.
// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=mean-square return-gradients=true" --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=mean-square return-gradients=true" -stp-partition --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM: ok: 5 results match on 2 ranks
// SIM: ok: 5 results match on 2 ranks
// SIM: ok: 5 results match on 2 ranks
// SIM: ok: 3 results match on 2 ranks
// SIM-NOT: MISMATCH

// A data-parallel linear layer with a bias and tanh: y = tanh(x W + b).
// The gradients are generics over the forward ops' loops with their
// specs; the batch loop m, split over dp, is a reduction of the weight
// gradients, so -stp-partition all-reduces them (the gradient sync) and
// nothing else. The bias gets its gradient once (a row-parallel layer's
// bias is added after the reduction: the same generic).

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "dp" = 2]>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: module attributes
// CHECK-SAME: stp.training = {loss = "mean-square", lr = 1.000000e-03 : f64, micro_batches = 1 : i64, optimizer = "sgd", parameters = 2 : i64, recompute = false
// CHECK: func.func @main(
// CHECK-SAME: -> (tensor<f32> {stp.name = "loss"}, tensor<32x16xf32> {stp.name = "grad:w"}, tensor<16xf32> {stp.name = "grad:b"}, tensor<32x16xf32> {stp.name = "param:w"}, tensor<16xf32> {stp.name = "param:b"})
// CHECK: %[[H:.+]] = linalg.matmul
// CHECK: %[[Y:.+]] = linalg.generic
// The loss: sum of squares / 128 over both loops (reductions).
// CHECK: %[[LOSS:.+]] = linalg.generic {{.*}} iterator_types = ["reduction", "reduction"]} ins(%[[Y]] : tensor<8x16xf32>)
// CHECK-SAME: stp.phase = "loss", stp.spec = #stp.spec<#mesh, loops = ["d0" = 8 reduction {"dp"}, "d1" = 16 reduction]>
// CHECK: %[[DY:.+]] = linalg.generic {{.*}}stp.phase = "loss"
// d(tanh)/d(pre-activation): the forward body recomputed, then 1 - t^2.
// CHECK: %[[DH:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[H]], %{{.*}}, %[[DY]] :
// CHECK-SAME: stp.phase = "input_grad", stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"dp"}, "n" = 16]>
// CHECK: math.tanh
// CHECK: arith.subf
// CHECK: %[[DB:.+]] = linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]}
// CHECK-SAME: stp.phase = "weight_grad", stp.spec = #stp.spec<#mesh, loops = ["m" = 8 reduction {"dp"}, "n" = 16]>
// dW[k, n] = sum_m x[m, k] dh[m, n]: W itself is not read.
// CHECK: %[[DW:.+]] = linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "parallel"]} ins(%arg0, %[[DH]] : tensor<8x32xf32>, tensor<8x16xf32>)
// CHECK-SAME: stp.phase = "weight_grad", stp.spec = #stp.spec<#mesh, loops = ["m" = 8 reduction {"dp"}, "n" = 16, "k" = 32]>
// SGD: w - lr * g.
// CHECK: %[[NW:.+]] = linalg.generic {{.*}} ins(%arg1, %[[DW]] :
// CHECK-SAME: stp.phase = "optimizer"
// CHECK: return %[[LOSS]], %[[DW]], %[[DB]], %[[NW]], %{{.*}} :

// SPMD-LABEL: module attributes
// SPMD: shard.all_reduce {{.*}}"/fc/MatMul/grad1 optimizer: all-reduce of the partial sum over dp (reduction loop m split)"
// SPMD: shard.all_reduce {{.*}}"/fc/Add/grad1 optimizer: all-reduce of the partial sum over dp (reduction loop m split)"
// SPMD: shard.all_reduce {{.*}}"loss result: all-reduce of the partial sum over dp (reduction loop d0 split)"
// SPMD-NOT: shard.all_
// SPMD-LABEL: module attributes
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                  %w: tensor<32x16xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>},
                  %b: tensor<16xf32> {stp.param = #stp.param<name = "b", data = embedded, trainable = true>})
      -> (tensor<8x16xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<8x16xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"dp"}, "n" = 16, "k" = 32 reduction]>}
      ins(%x, %w : tensor<8x32xf32>, tensor<32x16xf32>) outs(%z : tensor<8x16xf32>) -> tensor<8x16xf32> loc("/fc/MatMul")
    %e2 = tensor.empty() : tensor<8x16xf32>
    %y = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"dp"}, "n" = 16]>}
      ins(%h, %b : tensor<8x16xf32>, tensor<16xf32>) outs(%e2 : tensor<8x16xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %s = arith.addf %a, %c : f32
      %t = math.tanh %s : f32
      linalg.yield %t : f32
    } -> tensor<8x16xf32> loc("/fc/Add")
    return %y : tensor<8x16xf32>
  }
}

// -----

// A layer norm whose weight is used twice (a shared initializer, as
// PyTorch's exporter stores identical tensors once): the weight receives
// the sum of both uses' gradients, and is updated once.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "dp" = 2]>

// CHECK-LABEL: module attributes
// CHECK: func.func @main(
// CHECK-SAME: -> (tensor<f32> {stp.name = "loss"}, tensor<8xf32> {stp.name = "grad:ln.weight"}, tensor<8xf32> {stp.name = "grad:ln.bias"}, tensor<8xf32> {stp.name = "param:ln.weight"}, tensor<8xf32> {stp.name = "param:ln.bias"})
// CHECK: %[[Y1:.+]] = stp.layer_norm %arg0, %arg1, %arg2
// CHECK: stp.layer_norm %[[Y1]], %arg1, %arg2
// The second norm's gradients first (reverse order), then the first's;
// each parameter sums the two.
// CHECK: %[[S2:.+]] = linalg.generic {{.*}}["reduction", "parallel"]{{.*}}stp.phase = "weight_grad"
// CHECK: %[[B2:.+]] = linalg.generic {{.*}}["reduction", "parallel"]{{.*}}stp.phase = "weight_grad"
// CHECK: %[[S1:.+]] = linalg.generic {{.*}}["reduction", "parallel"]{{.*}}stp.phase = "weight_grad"
// CHECK: %[[SSUM:.+]] = linalg.generic {{.*}} ins(%[[S2]], %[[S1]] : tensor<8xf32>, tensor<8xf32>) {{.*}}stp.phase = "grad_sum"
// CHECK: %[[B1:.+]] = linalg.generic {{.*}}["reduction", "parallel"]{{.*}}stp.phase = "weight_grad"
// CHECK: %[[BSUM:.+]] = linalg.generic {{.*}} ins(%[[B2]], %[[B1]] : tensor<8xf32>, tensor<8xf32>) {{.*}}stp.phase = "grad_sum"
// CHECK-COUNT-2: stp.phase = "optimizer"
// CHECK-NOT: stp.phase = "optimizer"
// CHECK: return %{{.*}}, %[[SSUM]], %[[BSUM]],
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<4x8xf32> {stp.name = "x"},
                  %g: tensor<8xf32> {stp.param = #stp.param<name = "ln.weight", data = embedded, trainable = true>},
                  %bb: tensor<8xf32> {stp.param = #stp.param<name = "ln.bias", data = embedded, trainable = true>})
      -> (tensor<4x8xf32> {stp.name = "y"}) {
    %y1 = stp.layer_norm %x, %g, %bb {axis = 1 : i64, epsilon = 1.0e-5 : f32,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 4 {"dp"}, "h" = 8]>}
        : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("/ln1")
    %y2 = stp.layer_norm %y1, %g, %bb {axis = 1 : i64, epsilon = 1.0e-5 : f32,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 4 {"dp"}, "h" = 8]>}
        : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("/ln2")
    return %y2 : tensor<4x8xf32>
  }
}

// -----

// A row-parallel linear layer with a bias (Megatron's second MLP matmul):
// the reduced dim k is split over tp, so the product is a partial sum and
// the bias must be added once, after the all-reduce. Forward and backward
// match the unpartitioned step (SIM); the bias gradient is the sum of dy
// over the rows, computed once.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "tp" = 2]>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: module attributes
// SPMD-LABEL: module attributes
// The forward partial sum is all-reduced before the bias add.
// SPMD: %[[H:.+]] = shard.all_reduce {{.*}}"/row/MatMul forward: all-reduce of the partial sum over tp (reduction loop k split)"
// SPMD: linalg.generic {{.*}} ins(%[[H]], %arg2 : tensor<4x6xf32>, tensor<6xf32>)
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<4x8xf32> {stp.name = "x"},
                  %w: tensor<8x6xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>},
                  %b: tensor<6xf32> {stp.param = #stp.param<name = "b", data = embedded, trainable = true>})
      -> (tensor<4x6xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<4x6xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x6xf32>) -> tensor<4x6xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 4, "n" = 6, "k" = 8 reduction {"tp"}]>}
      ins(%x, %w : tensor<4x8xf32>, tensor<8x6xf32>) outs(%z : tensor<4x6xf32>) -> tensor<4x6xf32> loc("/row/MatMul")
    %e2 = tensor.empty() : tensor<4x6xf32>
    %y = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["m" = 4, "n" = 6]>}
      ins(%h, %b : tensor<4x6xf32>, tensor<6xf32>) outs(%e2 : tensor<4x6xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %s = arith.addf %a, %c : f32
      linalg.yield %s : f32
    } -> tensor<4x6xf32> loc("/row/Add")
    return %y : tensor<4x6xf32>
  }
}

// -----

// An embedding table split over the vocabulary (the rows loop over tp)
// followed by an op that splits the sequence over the same ranks: the
// table's gradient is a one-hot accumulation over the rows loop, split like
// the table, so each rank builds the rows it holds; rows of tokens not used
// get zero (SIM compares every row with the unpartitioned step).

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "tp" = 2]>
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: module attributes
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "reduction", "parallel", "parallel"]
// CHECK-SAME: stp.phase = "weight_grad", stp.spec = #stp.spec<#mesh, loops = ["b" = 2 reduction, "s" = 4 reduction, "h" = 3, "rows" = 8 {"tp"}]>
// SPMD-LABEL: module attributes
// The table arrives split by rows; its gradient leaves split and is
// gathered only for the result.
// SPMD: func.func @main({{.*}}tensor<4x3xf32> {stp.param = #stp.param<name = "table"{{.*}}stp.split = {{\[\[0\], \[\]\]}}}
module attributes {stp.mesh = #mesh} {
  func.func @main(%tok: tensor<2x4xi64> {stp.name = "ids"},
                  %table: tensor<8x3xf32> {stp.param = #stp.param<name = "table", data = embedded, trainable = true>})
      -> (tensor<2x4x3xf32> {stp.name = "y"}) {
    %e = tensor.empty() : tensor<2x4x3xf32>
    %emb = linalg.generic {indexing_maps = [#ids, #out], iterator_types = ["parallel", "parallel", "parallel"],
                           stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 4, "h" = 3, "rows" = 8 reduction {"tp"}]>}
      ins(%tok : tensor<2x4xi64>) outs(%e : tensor<2x4x3xf32>) {
    ^bb0(%t: i64, %o: f32):
      %r = arith.index_cast %t : i64 to index
      %c = linalg.index 2 : index
      %v = tensor.extract %table[%r, %c] : tensor<8x3xf32>
      linalg.yield %v : f32
    } -> tensor<2x4x3xf32> loc("/wte/Gather")
    %e2 = tensor.empty() : tensor<2x4x3xf32>
    %y = linalg.generic {indexing_maps = [#out, #out], iterator_types = ["parallel", "parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 4 {"tp"}, "h" = 3]>}
      ins(%emb : tensor<2x4x3xf32>) outs(%e2 : tensor<2x4x3xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = math.tanh %a : f32
      linalg.yield %s : f32
    } -> tensor<2x4x3xf32> loc("/act")
    return %y : tensor<2x4x3xf32>
  }
}
