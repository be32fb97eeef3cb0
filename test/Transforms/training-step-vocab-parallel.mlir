// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=cross-entropy=labels return-gradients=true" -stp-partition | FileCheck %s
// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=cross-entropy=labels return-gradients=true" --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -split-input-file -stp-training-step="loss=cross-entropy=labels return-gradients=true" -stp-partition --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 --bitwise | FileCheck %s --check-prefix=SIM
// SIM: ok: 3 results match on 2 ranks, bitwise equal on all ranks
// SIM: ok: 7 results match on 2 ranks, bitwise equal on all ranks
// SIM-NOT: MISMATCH

// Vocabulary-parallel cross-entropy (-stp-training-step, docs/training.md):
// logits [6, 8] with the class dim split 2 ways over tp. The max, the sum
// of exponentials and the target logit are partial results that
// -stp-partition all-reduces (max, sum, sum); the loss and the logits'
// gradient (through the head's weight gradient) equal the unsplit ones on
// both ranks, bit for bit the same on both (SIM).

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "tp" = 2]>
// CHECK-LABEL: module attributes
// CHECK: func.func @main({{.*}}%[[LABELS:.+]]: tensor<6xi64> {stp.name = "labels"
// CHECK: shard.all_reduce {{.*}} reduction = max {stp.plan_step = "loss loss: all-reduce of the partial max over tp (reduction loop d1 split)"}
// CHECK: shard.all_reduce {{.*}}"loss loss: all-reduce of the partial sum over tp (reduction loop d1 split)"
// CHECK: shard.all_reduce {{.*}}"loss loss: all-reduce of the partial sum over tp (reduction loop d1 split)"
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<6x4xf32> {stp.name = "x"},
                  %w: tensor<4x8xf32> {stp.param = #stp.param<name = "head", data = embedded, trainable = true>})
      -> (tensor<6x8xf32> {stp.name = "logits"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<6x8xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<6x8xf32>) -> tensor<6x8xf32>
    %l = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 6, "n" = 8 {"tp"}, "k" = 4 reduction]>}
      ins(%x, %w : tensor<6x4xf32>, tensor<4x8xf32>) outs(%z : tensor<6x8xf32>) -> tensor<6x8xf32> loc("/head/MatMul")
    return %l : tensor<6x8xf32>
  }
}

// -----

// A sequence-parallel norm: the norm's sequence loop is split over tp, so
// its weight and bias (replicated over tp) get partial gradients that are
// summed over tp; after the update they are the same bits on both ranks
// (SIM --bitwise) and equal the one-rank step.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "tp" = 2]>
// CHECK-LABEL: module attributes
// CHECK: shard.all_reduce {{.*}}"/ln/grad optimizer: all-reduce of the partial sum over tp (reduction loop d1 split)"
// CHECK: shard.all_reduce {{.*}}"/ln/grad optimizer: all-reduce of the partial sum over tp (reduction loop d1 split)"
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<2x4x8xf32> {stp.name = "x"},
                  %g: tensor<8xf32> {stp.param = #stp.param<name = "ln.weight", data = embedded, trainable = true>},
                  %bb: tensor<8xf32> {stp.param = #stp.param<name = "ln.bias", data = embedded, trainable = true>},
                  %w: tensor<8x8xf32> {stp.param = #stp.param<name = "head", data = embedded, trainable = true>})
      -> (tensor<2x4x8xf32> {stp.name = "logits"}) {
    %y = stp.layer_norm %x, %g, %bb {axis = 2 : i64, epsilon = 1.0e-5 : f32,
        stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 4 {"tp"}, "h" = 8]>}
        : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("/ln")
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x4x8xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>,
                                          affine_map<(d0, d1, d2, d3) -> (d3, d2)>,
                                          affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>],
                         iterator_types = ["parallel", "parallel", "parallel", "reduction"],
                         stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 4 {"tp"}, "v" = 8, "h" = 8 reduction]>}
      ins(%y, %w : tensor<2x4x8xf32>, tensor<8x8xf32>) outs(%z : tensor<2x4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %o, %p : f32
      linalg.yield %s : f32
    } -> tensor<2x4x8xf32> loc("/head/MatMul")
    return %l : tensor<2x4x8xf32>
  }
}
