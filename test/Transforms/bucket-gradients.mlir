// RUN: stpar-opt %s -stp-training-step="loss=mean-square" -stp-partition -stp-bucket-gradients | FileCheck %s
// RUN: stpar-opt %s -stp-training-step="loss=mean-square" -stp-partition -stp-bucket-gradients="bucket-bytes=1024" | FileCheck %s --check-prefix=SMALL
// RUN: not stpar-opt %s -stp-bucket-gradients 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true" --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true" -stp-partition -stp-bucket-gradients --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM: ok: 5 results match on 2 ranks
//
// ZeRO 2 and 3: the gradient reduce-scatters are bucketed too.
// RUN: stpar-opt %s -stp-training-step="loss=mean-square zero-stage=2" -stp-partition -stp-bucket-gradients | FileCheck %s --check-prefix=RS
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=2" --mlir-print-op-generic > %t.global2.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=2" -stp-partition -stp-bucket-gradients --mlir-print-op-generic > %t.spmd2.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global2.mlir %t.spmd2.mlir 8 | FileCheck %s --check-prefix=SIM
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=3" --mlir-print-op-generic > %t.global3.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true zero-stage=3" -stp-partition -stp-bucket-gradients --mlir-print-op-generic > %t.spmd3.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global3.mlir %t.spmd3.mlir 8 | FileCheck %s --check-prefix=SIM
// RUN: FileCheck %s --check-prefix=RS3 < %t.spmd3.mlir
// RS3: "gradient bucket 0: reduce-scatter of 2 gradients
// With K = 33, W's first dim does not divide over dp: ZeRO shards dim 1,
// and the bucket moves it first (transposes there and back).
// RUN: sed -e 's/8x32xf32/8x33xf32/g' -e 's/32x16xf32/33x16xf32/g' -e 's/"k" = 32 reduction/"k" = 33 reduction/' %s > %t.odd.mlir
// RUN: stpar-opt %t.odd.mlir -stp-training-step="loss=mean-square return-gradients=true zero-stage=2" --mlir-print-op-generic > %t.oddglobal.mlir
// RUN: stpar-opt %t.odd.mlir -stp-training-step="loss=mean-square return-gradients=true zero-stage=2" -stp-partition -stp-bucket-gradients > %t.oddspmd.mlir
// RUN: FileCheck %s --check-prefix=ODD < %t.oddspmd.mlir
// RUN: stpar-opt %t.oddspmd.mlir --mlir-print-op-generic > %t.oddspmd.g.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.oddglobal.mlir %t.oddspmd.g.mlir 8 | FileCheck %s --check-prefix=SIM
// ODD: linalg.transpose ins(%{{.*}} : tensor<33x16xf32>) outs(%{{.*}} : tensor<16x33xf32>) permutation = [1, 0]
// ODD: shard.reduce_scatter {{.*}}"gradient bucket 0: reduce-scatter of 2 gradients
// ODD: linalg.transpose ins(%{{.*}} : tensor<8x33xf32>) outs(%{{.*}} : tensor<33x8xf32>) permutation = [1, 0]

// -stp-bucket-gradients on a data-parallel linear layer: the two gradient
// all-reduces (the bias's 16 floats, then W's 32x16) become one all-reduce
// of their concatenation, placed right after the last of them is computed
// (W's gradient), before the optimizer ops read slices of it.
// CHECK: %[[DB:.+]] = linalg.generic {{.*}}stp.phase = "weight_grad"
// CHECK: %[[DW:.+]] = linalg.generic {{.*}}stp.phase = "weight_grad"
// CHECK: %[[FLAT:.+]] = tensor.collapse_shape %[[DW]] {{\[\[0, 1\]\]}} : tensor<32x16xf32> into tensor<512xf32>
// CHECK-NEXT: %[[CAT:.+]] = tensor.concat dim(0) %[[DB]], %[[FLAT]] : (tensor<16xf32>, tensor<512xf32>) -> tensor<528xf32>
// CHECK-NEXT: %[[SUM:.+]] = shard.all_reduce %[[CAT]] on @grid grid_axes = [0] {stp.plan_step = "gradient bucket 0: all-reduce of 2 gradients (2112 bytes) as soon as the last is computed: [/fc/Add/grad1 optimizer: {{.*}}] [/fc/MatMul/grad1 optimizer: {{.*}}]"}
// CHECK-NEXT: %[[B:.+]] = tensor.extract_slice %[[SUM]][0] [16] [1]
// CHECK-NEXT: %[[W1:.+]] = tensor.extract_slice %[[SUM]][16] [512] [1]
// CHECK-NEXT: %[[W:.+]] = tensor.expand_shape %[[W1]] {{\[\[0, 1\]\]}} output_shape [32, 16]
// CHECK: linalg.generic {{.*}} ins(%arg1, %[[W]] : {{.*}}stp.phase = "optimizer"
// CHECK: linalg.generic {{.*}} ins(%arg2, %[[B]] : {{.*}}stp.phase = "optimizer"
// CHECK-NOT: gradient bucket 1

// A bucket of at most 1 KiB: W's gradient (2 KiB) goes alone, so nothing
// is packed.
// SMALL-NOT: gradient bucket
// SMALL-COUNT-2: shard.all_reduce {{.*}}grad1 optimizer: all-reduce

// ZeRO 2: the bias (16) and W (32x16) gradients, each viewed as [2, n/2]
// (row i: the block rank i keeps), concatenated along dim 1, one
// reduce-scatter of dim 0, then each rank's blocks sliced out.
// RS: tensor.expand_shape %{{.*}} {{\[\[0, 1\]\]}} output_shape [2, 8] : tensor<16xf32> into tensor<2x8xf32>
// RS: tensor.expand_shape %{{.*}} {{\[\[0, 1\]\]}} output_shape [2, 256] : tensor<512xf32> into tensor<2x256xf32>
// RS-NEXT: %[[CAT:.+]] = tensor.concat dim(1) {{.*}} : (tensor<2x8xf32>, tensor<2x256xf32>) -> tensor<2x264xf32>
// RS-NEXT: %[[RS:.+]] = shard.reduce_scatter %[[CAT]] on @grid grid_axes = [0] scatter_axis = 0 {stp.plan_step = "gradient bucket 0: reduce-scatter of 2 gradients (2112 bytes) as soon as the last is computed: [/fc/Add/grad1 optimizer: reduce-scatter {{.*}}] [/fc/MatMul/grad1 optimizer: reduce-scatter {{.*}}]"} : tensor<2x264xf32> -> tensor<1x264xf32>
// RS-NEXT: tensor.extract_slice %[[RS]][0, 0] [1, 8] [1, 1]
// RS: tensor.extract_slice %[[RS]][0, 8] [1, 256] [1, 1]
// RS: tensor.expand_shape %{{.*}} output_shape [16, 16] : tensor<256xf32> into tensor<16x16xf32>
// RS-NOT: shard.reduce_scatter

// ERR: error: -stp-bucket-gradients runs on the partitioned program (after -stp-partition)

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
