// ZeRO in the training step (-stp-training-step zero-stage=N, docs/training.md):
// a data-parallel linear layer on 2 ranks.
// RUN: stpar-opt %s -stp-training-step="loss=mean-square zero-stage=1" -stp-partition | FileCheck %s --check-prefix=ZERO1
// RUN: stpar-opt %s -stp-training-step="loss=mean-square zero-stage=2" -stp-partition | FileCheck %s --check-prefix=ZERO2
// RUN: stpar-opt %s -stp-training-step="loss=mean-square zero-stage=3" -stp-partition | FileCheck %s --check-prefix=ZERO3
// RUN: stpar-opt %s -stp-training-step="loss=mean-square zero-stage=3" | FileCheck %s --check-prefix=IR3
//
// Numerics: every stage computes the unpartitioned step (SIM).
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=0" --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=1" -stp-partition --mlir-print-op-generic > %t.z1.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=2" -stp-partition --mlir-print-op-generic > %t.z2.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=3" -stp-partition --mlir-print-op-generic > %t.z3.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.z1.mlir 8 | FileCheck %s --check-prefix=SIM
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.z2.mlir 8 | FileCheck %s --check-prefix=SIM
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.z3.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM: ok: 5 results match on 2 ranks

// Stage 1: the weight gradient is all-reduced (every rank holds all of
// it), then each rank updates its half of W (dim 0 split over dp): the
// optimizer op works on 16x16 blocks and the new W is gathered.
// ZERO1: shard.all_reduce {{.*}}"/fc/MatMul/grad1 optimizer: all-reduce of the partial sum over dp (reduction loop b split)"
// ZERO1: shard.all_slice {{.*}}"optimizer:w optimizer: all-slice dim 0 over dp for operand 1 of optimizer:w (produced by zero1:w)"
// ZERO1: } -> tensor<16x16xf32>
// ZERO1: shard.all_gather {{.*}} "return result: all-gather dim 0 over dp for result 1 of return (produced by optimizer:w)"

// Stage 2: the partial sums are reduce-scattered straight into the shard.
// ZERO2-NOT: shard.all_reduce {{.*}}/fc/MatMul/grad1
// ZERO2: shard.reduce_scatter {{.*}}"/fc/MatMul/grad1 optimizer: reduce-scatter of the partial sum over dp (reduction loop b split) into dim 0 over dp
// ZERO2: } -> tensor<16x16xf32>
// ZERO2: shard.all_gather {{.*}} "return result: all-gather dim 0 over dp

// Stage 3: W and b are stored sharded (the arguments arrive split),
// gathered before their forward use; b, which the backward pass reads
// again, is gathered again from a fresh sharded copy right before it (the
// forward gather is dead in between); the gradients are reduce-scattered
// into the shards.
// ZERO3: func.func @main({{.*}}tensor<16x16xf32> {stp.param = #stp.param<name = "w"{{.*}}stp.split = {{\[\[0\], \[\]\]}}}
// ZERO3: shard.all_gather {{.*}}"zero3:gather:w forward: all-gather dim 0 over dp
// ZERO3: linalg.matmul
// ZERO3: shard.all_gather {{.*}}"zero3:gather:b forward: all-gather dim 0 over dp
// ZERO3: shard.all_gather {{.*}}"zero3:gather:b:backward input_grad: all-gather dim 0 over dp
// ZERO3: shard.reduce_scatter {{.*}}"/fc/MatMul/grad1 optimizer: reduce-scatter of the partial sum over dp (reduction loop b split) into dim 0 over dp
// ZERO3: shard.reduce_scatter {{.*}}"/fc/Add/grad1 optimizer: reduce-scatter
// ZERO3-NOT: shard.all_reduce {{.*}}grad
// IR3: stp.training = {{.*}}zero_stage = 3 : i64
// IR3: %[[BS:.+]] = linalg.generic {{.*}} ins(%arg2 : tensor<16xf32>) {{.*}}stp.phase = "forward", stp.spec = #stp.spec<#mesh, loops = ["d0" = 16 {"dp"}]>
// IR3: %[[WS:.+]] = linalg.generic {{.*}} ins(%arg1 : tensor<32x16xf32>) {{.*}}loops = ["d0" = 32 {"dp"}, "d1" = 16]>
// IR3: %[[WF:.+]] = linalg.generic {{.*}} ins(%[[WS]] : tensor<32x16xf32>) {{.*}}loops = ["d0" = 32, "d1" = 16]>
// IR3: linalg.matmul {{.*}} ins(%arg0, %[[WF]] :
// IR3: %[[BF:.+]] = linalg.generic {{.*}} ins(%[[BS]] : tensor<16xf32>) {{.*}}stp.phase = "forward"
// IR3: %[[BS2:.+]] = linalg.generic {{.*}} ins(%arg2 : tensor<16xf32>) {{.*}}stp.phase = "forward"
// IR3: %[[BB:.+]] = linalg.generic {{.*}} ins(%[[BS2]] : tensor<16xf32>) {{.*}}stp.phase = "input_grad"
// IR3: ins({{.*}}%[[BB]]{{.*}}) {{.*}}stp.phase = "input_grad"

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 2, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "dp" = 2]>
#id = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                  %w: tensor<32x16xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>},
                  %b: tensor<16xf32> {stp.param = #stp.param<name = "b", data = embedded, trainable = true>})
      -> (tensor<8x16xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<8x16xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "n" = 16, "k" = 32 reduction]>}
      ins(%x, %w : tensor<8x32xf32>, tensor<32x16xf32>) outs(%z : tensor<8x16xf32>) -> tensor<8x16xf32> loc("/fc/MatMul")
    %e2 = tensor.empty() : tensor<8x16xf32>
    %y = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "n" = 16]>}
      ins(%h, %b : tensor<8x16xf32>, tensor<16xf32>) outs(%e2 : tensor<8x16xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %s = arith.addf %a, %c : f32
      %t = math.tanh %s : f32
      linalg.yield %t : f32
    } -> tensor<8x16xf32> loc("/fc/Add")
    return %y : tensor<8x16xf32>
  }
}
