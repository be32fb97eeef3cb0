// RUN: not stpar-opt %s -stp-partition -split-input-file 2>&1 | FileCheck %s
//
// stp.moe_grad reuses its forward's expansion (docs/moe.md, "Training"):
// one whose `forward` is no partitioned stp.moe is an error, not a
// silently recomputed layer.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK: error: loc("/moe/grad"): stp.moe_grad: its forward stp.moe was not partitioned before it
module attributes {stp.mesh = #mesh} {
  func.func @main(%y: tensor<16x16xf32>, %x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>) -> tensor<16x4xf32> {
    %dx, %dr, %dw1, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.phase = "input_grad",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %dr : tensor<16x4xf32>
  }
}

// -----

// A plan (file) that shadows an expert the layer does not have is an error
// (FasterMoE's shadowing, docs/moe.md), not a silently different program.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK: error: loc("/moe"): the plan's shadowed_experts must be expert indices in [0, 4), got 7 : i64
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>,
        stp.plan_ops = [{moe = {shadowed_experts = [1 : i64, 7 : i64]}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    return %y : tensor<16x16xf32>
  }
}
