// Stock mlir-opt-22 loads the stp dialect and passes from STPARPlugin.so,
// parses a planned module (stp.mesh, stp.spec) and partitions it.
// REQUIRES: stpar-plugin
// (Passes of a pass plugin are named in --pass-pipeline: mlir-opt parses its
// pass flags before it loads plugins.)
// RUN: %mlir-opt-22 --load-dialect-plugin=%stpar_plugin --load-pass-plugin=%stpar_plugin \
// RUN:   %s --pass-pipeline='builtin.module(stp-partition)' | FileCheck %s
// Without the plugin the dialect is unknown.
// RUN: not %mlir-opt-22 %s 2>&1 | FileCheck %s --check-prefix=NOPLUGIN
// NOPLUGIN: #stp.device

// The whole pipeline (normalize, plan, partition and the lowering:
// schedule of the collectives, memory plan, collectives as runtime calls)
// on an imported model, with Megatron's layout at tp = 2 (the searched plan
// of this small forward pass is data parallel and moves nothing).
// RUN: stpar-translate --import-onnx %shared/models/torch113_gpt2_tiny_op17/model.onnx \
// RUN:   --onnx-dim batch=8 --onnx-dim seq=8 -o %t.model.mlir
// RUN: %mlir-opt-22 --load-dialect-plugin=%stpar_plugin --load-pass-plugin=%stpar_plugin %t.model.mlir \
// RUN:   --pass-pipeline='builtin.module(stp-compile-pipeline{cluster=dgx-a100-80g-1 devices=4 strategy=megatron mesh=2x2},stp-lower-collectives)' \
// RUN:   | FileCheck %s --check-prefix=PIPELINE
// PIPELINE: module attributes {{{.*}}stp.partitioned
// PIPELINE: shard.grid @grid
// PIPELINE: func.func @main
// PIPELINE-SAME: stp.arena = {arena =
// PIPELINE-SAME: stp.streams = {communicators =
// PIPELINE: stp.attention
// PIPELINE: emitc.call_opaque "stpar_rt::{{allReduce|allGather|reduceScatter|allToAll}}"
// PIPELINE-NOT: = shard.all_reduce

// The plan file round-trips through the plugin's passes as well.
// RUN: %mlir-opt-22 --load-dialect-plugin=%stpar_plugin --load-pass-plugin=%stpar_plugin \
// RUN:   %s --pass-pipeline='builtin.module(stp-export-plan{o=%t.plan.json})' > /dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t.plan.json
// PLAN: "format": "stpar-plan"
// PLAN: "ir_op": "fc1"

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK: module attributes {{{.*}}stp.partitioned
// CHECK: shard.grid @grid(shape = 4)
// CHECK: linalg.matmul {{.*}} -> tensor<8x16xf32>
// CHECK: linalg.matmul
// CHECK-NEXT: shard.all_reduce {{.*}} on @grid grid_axes = [0]
// CHECK-SAME: stp.plan_step = "fc2 forward: all-reduce of the partial sum over x0 (reduction loop k split)"
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                  %w1: tensor<32x64xf32> {stp.param = #stp.param<name = "w1", data = embedded, trainable = true>},
                  %w2: tensor<64x32xf32> {stp.param = #stp.param<name = "w2", data = embedded, trainable = true>})
      -> (tensor<8x32xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<8x64xf32>
    %z1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 64 {"x0"}, "k" = 32 reduction]>}
      ins(%x, %w1 : tensor<8x32xf32>, tensor<32x64xf32>) outs(%z1 : tensor<8x64xf32>) -> tensor<8x64xf32> loc("fc1")
    %e2 = tensor.empty() : tensor<8x32xf32>
    %z2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<8x32xf32>) -> tensor<8x32xf32>
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 32, "k" = 64 reduction {"x0"}]>}
      ins(%h, %w2 : tensor<8x64xf32>, tensor<64x32xf32>) outs(%z2 : tensor<8x32xf32>) -> tensor<8x32xf32> loc("fc2")
    return %o : tensor<8x32xf32>
  }
}
