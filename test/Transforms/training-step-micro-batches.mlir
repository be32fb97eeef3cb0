// Micro-batches with gradient accumulation (-stp-training-step
// micro-batches=M, -stp-partition; docs/partition.md "Micro-batches"): a
// data-parallel linear layer whose bias is used twice, batch 8 on 2 ranks.
// RUN: stpar-opt %s -stp-training-step="loss=mean-square micro-batches=4" -stp-partition | FileCheck %s
// RUN: stpar-opt %s -stp-training-step="loss=mean-square micro-batches=2 zero-stage=2" -stp-partition | FileCheck %s --check-prefix=ZERO2
// Without the option, the plan's micro-batch count (stp.plan's mesh).
// RUN: sed -e 's/module attributes {stp.mesh = #mesh}/module attributes {stp.mesh = #mesh, stp.plan = {mesh = {micro_batches = 2 : i64}}}/' %s \
// RUN:   | stpar-opt -stp-training-step="loss=mean-square" -stp-partition | FileCheck %s --check-prefix=PLAN
// PLAN: stp.training = {{.*}}micro_batches = 2
// PLAN: scf.for %{{.+}} = %c0 to %c2 step %c1
//
// Numerics: a fixed global batch of 8 on one rank (the mesh's dp = 1) as
// 1, 2, 4 and 8 micro-batches (8x1, 4x2, 2x4, 1x8), and on 2 ranks as 2
// and 4 micro-batches per rank (also with ZeRO-2): loss, gradients and
// updated parameters equal the unsplit step's in every case.
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true micro-batches=1" --mlir-print-op-generic > %t.global.mlir
// RUN: sed -e 's/"dp" = 2/"dp" = 1/' -e 's/devices_per_node = 2/devices_per_node = 1/' %s > %t.one.mlir
// RUN: stpar-opt %t.one.mlir -stp-training-step="loss=mean-square return-gradients=true micro-batches=1" -stp-partition --mlir-print-op-generic > %t.one1.mlir
// RUN: stpar-opt %t.one.mlir -stp-training-step="loss=mean-square return-gradients=true micro-batches=2" -stp-partition --mlir-print-op-generic > %t.one2.mlir
// RUN: stpar-opt %t.one.mlir -stp-training-step="loss=mean-square return-gradients=true micro-batches=4" -stp-partition --mlir-print-op-generic > %t.one4.mlir
// RUN: stpar-opt %t.one.mlir -stp-training-step="loss=mean-square return-gradients=true micro-batches=8" -stp-partition --mlir-print-op-generic > %t.one8.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.one1.mlir | FileCheck %s --check-prefix=SIM1
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.one2.mlir | FileCheck %s --check-prefix=SIM1
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.one4.mlir | FileCheck %s --check-prefix=SIM1
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.one8.mlir | FileCheck %s --check-prefix=SIM1
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true micro-batches=2" -stp-partition --mlir-print-op-generic > %t.two2.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true micro-batches=4" -stp-partition --mlir-print-op-generic > %t.two4.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true micro-batches=2 zero-stage=2" -stp-partition --mlir-print-op-generic > %t.zero2.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.two2.mlir | FileCheck %s --check-prefix=SIM2
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.two4.mlir | FileCheck %s --check-prefix=SIM2
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.zero2.mlir | FileCheck %s --check-prefix=SIM2
// SIM1: ok: 5 results match on 1 ranks
// SIM2: ok: 5 results match on 2 ranks
//
// Errors: a micro-batch count that does not divide a rank's batch block.
// RUN: not stpar-opt %s -stp-training-step="loss=mean-square micro-batches=3" -stp-partition 2>&1 | FileCheck %s --check-prefix=ERR3
// RUN: not stpar-opt %s -stp-training-step="loss=mean-square micro-batches=8" -stp-partition 2>&1 | FileCheck %s --check-prefix=ERR8
// RUN: not stpar-opt %s -stp-training-step="loss=mean-square micro-batches=0" 2>&1 | FileCheck %s --check-prefix=ERR0
// ERR3: error: loc("/fc/MatMul"): extent 8 of loop 'b' is not divisible by 6 (3 micro-batches of each block)
// ERR8: error: loc("/fc/MatMul"): extent 8 of loop 'b' is not divisible by 16 (8 micro-batches of each block)
// ERR0: error: micro-batches must be at least 1 (or -1: the plan's), got 0

// The step: x arrives whole along the batch (the micro-batch is the major
// split of the batch); accumulators start at zero before the loop; in it,
// micro-batch i's rows of this rank (row 2 i + rank of the 8: a 1-row
// slice at the loop counter) run through forward, loss and backward with
// no collective; the loop carries the loss's and the weight gradients'
// partial sums.
// CHECK: stp.training = {{.*}}micro_batches = 4
// CHECK: func.func @main(%[[X:.+]]: tensor<8x32xf32> {stp.name = "x", stp.split = {{\[\[\], \[\]\]}}}
// CHECK: linalg.fill {{.*}} -> tensor<32x16xf32>
// CHECK: %[[LOOP:.+]]:{{[0-9]+}} = scf.for %[[I:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(
// CHECK-NOT: shard.
// CHECK: %[[RANK:.+]] = shard.process_multi_index on @grid axes = [0]
// CHECK: arith.muli %[[I]], %c2
// CHECK: arith.addi %{{.+}}, %[[RANK]]
// CHECK: tensor.extract_slice %[[X]][%{{.+}}, 0] [1, 32] [1, 1] : tensor<8x32xf32> to tensor<1x32xf32>
// CHECK-NOT: shard.
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x32xf32>, tensor<32x16xf32>)
// CHECK-NOT: shard.
// CHECK: scf.yield
// CHECK-NEXT: } {stp.micro_batch_loop, stp.plan_step = "micro-batches: forward and backward of each of 4 micro-batches, gradients accumulated"}
// After the loop, once: the gradient sync of the accumulated sums, the
// shared bias's two gradients summed, the update.
// CHECK: shard.all_reduce %[[LOOP]]#1 {{.*}}"/fc/Scale/grad1 grad_sum: all-reduce of the partial sum over dp
// CHECK: shard.all_reduce %[[LOOP]]#2 {{.*}}"/fc/Add/grad1 grad_sum: all-reduce of the partial sum over dp
// CHECK: linalg.generic {{.*}}stp.phase = "grad_sum"
// CHECK: shard.all_reduce %[[LOOP]]#3 {{.*}}"/fc/MatMul/grad1 optimizer: all-reduce of the partial sum over dp
// CHECK: stp.phase = "optimizer"
// CHECK: shard.all_reduce %[[LOOP]]#0 {{.*}}"loss result: all-reduce of the partial sum over dp

// ZeRO-2: the gradients leave the loop as sums and are reduce-scattered
// once.
// ZERO2: scf.for
// ZERO2-NOT: shard.reduce_scatter
// ZERO2: scf.yield
// ZERO2: shard.reduce_scatter {{.*}}"/fc/MatMul/grad1 optimizer: reduce-scatter of the partial sum over dp

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
    %t = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "n" = 16]>}
      ins(%h, %b : tensor<8x16xf32>, tensor<16xf32>) outs(%e2 : tensor<8x16xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %s = arith.addf %a, %c : f32
      %r = math.tanh %s : f32
      linalg.yield %r : f32
    } -> tensor<8x16xf32> loc("/fc/Add")
    %e3 = tensor.empty() : tensor<8x16xf32>
    %y = linalg.generic {indexing_maps = [#id, #bias, #id], iterator_types = ["parallel", "parallel"],
                         stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "n" = 16]>}
      ins(%t, %b : tensor<8x16xf32>, tensor<16xf32>) outs(%e3 : tensor<8x16xf32>) {
    ^bb0(%a: f32, %c: f32, %o: f32):
      %m = arith.mulf %a, %c : f32
      linalg.yield %m : f32
    } -> tensor<8x16xf32> loc("/fc/Scale")
    return %y : tensor<8x16xf32>
  }
}
