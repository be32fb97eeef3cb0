// RUN: stpar-opt %s | stpar-opt | FileCheck %s
// RUN: stpar-opt %s --mlir-print-op-generic | stpar-opt | FileCheck %s

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<8x128x768xf32>, %g: tensor<768xf32>, %b: tensor<768xf32>)
    -> (tensor<8x128x768xf32>, tensor<8x128x768xf32>, tensor<8x128x768xf32>) {
  // CHECK: stp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<8x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>
  %0 = stp.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<8x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>
  // CHECK: stp.layer_norm %{{.*}}, %{{.*}} {axis = 2 : i64
  %1 = stp.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<8x128x768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>
  // CHECK: stp.rms_norm %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
  %2 = stp.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-6 : f32}
      : (tensor<8x128x768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>
  return %0, %1, %2 : tensor<8x128x768xf32>, tensor<8x128x768xf32>, tensor<8x128x768xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x8x16x64xf32>, %k: tensor<2x2x16x64xf32>,
                     %v: tensor<2x2x16x64xf32>, %m: tensor<2x1x16x16xf32>)
    -> (tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32>) {
  // Grouped-query: 8 query heads over 2 key/value heads.
  // CHECK: stp.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 1.250000e-01 : f32}
  %0 = stp.attention %q, %k, %v {scale = 0.125 : f32, causal}
      : (tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32>) -> tensor<2x8x16x64xf32>
  // CHECK: stp.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {scale
  %1 = stp.attention %q, %k, %v mask %m {scale = 0.125 : f32}
      : (tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x1x16x16xf32>) -> tensor<2x8x16x64xf32>
  return %0, %1 : tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32>
}

// CHECK-LABEL: func.func @moe_pieces
func.func @moe_pieces(%logits: tensor<16x8xf32>, %zeros: tensor<16x8xf32>) -> tensor<16x8xf32> {
  // CHECK: %[[V:.*]], %[[I:.*]] = stp.topk %{{.*}} {axis = 1 : i64, k = 2 : i64, largest = true, sorted = true}
  %v, %i = stp.topk %logits {axis = 1 : i64, k = 2 : i64, largest = true, sorted = true}
      : (tensor<16x8xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
  // CHECK: stp.scatter_elements %{{.*}}, %[[I]], %[[V]] {axis = 1 : i64}
  %r = stp.scatter_elements %zeros, %i, %v {axis = 1 : i64}
      : (tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x8xf32>
  // CHECK: stp.scatter_elements %{{.*}} {axis = 1 : i64, reduction = "add"}
  %s = stp.scatter_elements %r, %i, %v {axis = 1 : i64, reduction = "add"}
      : (tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x8xf32>
  return %s : tensor<16x8xf32>
}

// CHECK-LABEL: func.func private @params
// CHECK-SAME: stp.param = #stp.param<name = "h.0.attn.c_attn.weight", data = external, file = "gpt2.data", offset = 4096, length = 7077888, trainable = true>
// CHECK-SAME: stp.param = #stp.param<name = "bias", data = embedded>
// CHECK-SAME: stp.name = "input_ids"
// CHECK-SAME: stp.name = "logits"
func.func private @params(
    tensor<768x2304xf32> {stp.param = #stp.param<name = "h.0.attn.c_attn.weight", data = external, file = "gpt2.data", offset = 4096, length = 7077888, trainable = true>},
    tensor<1x1x8x8xi1> {stp.param = #stp.param<name = "bias", data = embedded>},
    tensor<1x8xi64> {stp.name = "input_ids"}) -> (tensor<1x8x100xf32> {stp.name = "logits"})

// CHECK-LABEL: func.func @moe
func.func @moe(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>,
               %w3: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>) -> (tensor<16x32xf32>, tensor<16x32xf32>) {
  // CHECK: stp.moe %{{.*}}, %{{.*}} experts %{{.*}} gated %{{.*}} down %{{.*}} {activation = "silu", normalize, top_k = 2 : i64}
  %0 = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu"}
      : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
  // CHECK: stp.moe %{{.*}}, %{{.*}} experts %{{.*}} down %{{.*}} {activation = "gelu", top_k = 1 : i64}
  %1 = stp.moe %x, %r experts %w1 down %w2 {top_k = 1 : i64, activation = "gelu"}
      : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
  return %0, %1 : tensor<16x32xf32>, tensor<16x32xf32>
}

// The per-rank pieces -stp-partition makes of it (2 local experts of 4, 2
// segments of 16 rows).
// CHECK-LABEL: func.func @moe_per_rank
func.func @moe_per_rank(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %recv: tensor<2x32x32xf32>,
                        %counts: tensor<2x2xi64>, %w1: tensor<2x32x64xf32>, %w2: tensor<2x64x32xf32>,
                        %back: tensor<4x16x32xf32>) -> (tensor<4x16x32xf32>, tensor<2x32x32xf32>, tensor<16x32xf32>) {
  // CHECK: stp.moe_route %{{.*}}, %{{.*}} {normalize, top_k = 2 : i64}
  %g, %e = stp.moe_route %x, %r {top_k = 2 : i64, normalize}
      : (tensor<16x32xf32>, tensor<32x4xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
  // CHECK: stp.moe_dispatch
  %buf, %cnt, %slots = stp.moe_dispatch %x, %e
      : (tensor<16x32xf32>, tensor<16x2xi64>) -> (tensor<4x16x32xf32>, tensor<4x1xi64>, tensor<16x2xi64>)
  // CHECK: stp.moe_experts %{{.*}}, %{{.*}} experts %{{.*}} down %{{.*}} {activation = "relu"}
  %out = stp.moe_experts %recv, %counts experts %w1 down %w2 {activation = "relu"}
      : (tensor<2x32x32xf32>, tensor<2x2xi64>, tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> tensor<2x32x32xf32>
  // CHECK: stp.moe_combine
  %y = stp.moe_combine %back, %slots, %e, %g
      : (tensor<4x16x32xf32>, tensor<16x2xi64>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x32xf32>
  return %buf, %out, %y : tensor<4x16x32xf32>, tensor<2x32x32xf32>, tensor<16x32xf32>
}

// The backward of an stp.moe (-stp-training-step) and the per-rank pieces
// -stp-partition makes of it.
// CHECK-LABEL: func.func @moe_backward
func.func @moe_backward(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>,
                        %w3: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>, %dy: tensor<16x32xf32>)
    -> (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x64x32xf32>) {
  %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu"}
      : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
  // CHECK: stp.moe_grad %{{.*}} of %{{.*}}, %{{.*}}, %{{.*}} experts %{{.*}} gated %{{.*}} down %{{.*}} {activation = "silu", normalize, top_k = 2 : i64}
  %dx, %dr, %dw1, %dw3, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 gated %w3 down %w2
      {top_k = 2 : i64, normalize, activation = "silu"}
      : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>,
         tensor<4x64x32xf32>, tensor<16x32xf32>)
      -> (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>)
  return %dx, %dr, %dw2 : tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x64x32xf32>
}

// CHECK-LABEL: func.func @moe_backward_per_rank
func.func @moe_backward_per_rank(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %e: tensor<16x2xi64>,
                                 %g: tensor<16x2xf32>, %slots: tensor<16x2xi64>, %back: tensor<4x16x32xf32>,
                                 %dy: tensor<16x32xf32>, %recv: tensor<2x32x32xf32>, %drecv: tensor<2x32x32xf32>,
                                 %counts: tensor<2x2xi64>, %w1: tensor<2x32x64xf32>, %w2: tensor<2x64x32xf32>)
    -> (tensor<4x16x32xf32>, tensor<2x32x32xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>,
        tensor<16x32xf32>, tensor<32x4xf32>) {
  // CHECK: stp.moe_gate_grad
  %dg = stp.moe_gate_grad %back, %slots, %e, %dy
      : (tensor<4x16x32xf32>, tensor<16x2xi64>, tensor<16x2xi64>, tensor<16x32xf32>) -> tensor<16x2xf32>
  // CHECK: stp.moe_dispatch %{{.*}}, %{{.*}} weighted %{{.*}} :
  %buf, %cnt, %s = stp.moe_dispatch %dy, %e weighted %g
      : (tensor<16x32xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> (tensor<4x16x32xf32>, tensor<4x1xi64>, tensor<16x2xi64>)
  // CHECK: stp.moe_experts_grad %{{.*}} of %{{.*}}, %{{.*}} experts %{{.*}} down %{{.*}} {activation = "gelu"}
  %drows, %dw1, %dw2 = stp.moe_experts_grad %drecv of %recv, %counts experts %w1 down %w2 {activation = "gelu"}
      : (tensor<2x32x32xf32>, tensor<2x32x32xf32>, tensor<2x2xi64>, tensor<2x32x64xf32>, tensor<2x64x32xf32>)
      -> (tensor<2x32x32xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>)
  // CHECK: stp.moe_route_grad %{{.*}} of %{{.*}}, %{{.*}}, %{{.*}} {normalize}
  %dx, %dr = stp.moe_route_grad %dg of %x, %r, %e {normalize}
      : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> (tensor<16x32xf32>, tensor<32x4xf32>)
  return %buf, %drows, %dw1, %dw2, %dx, %dr : tensor<4x16x32xf32>, tensor<2x32x32xf32>, tensor<2x32x64xf32>,
      tensor<2x64x32xf32>, tensor<16x32xf32>, tensor<32x4xf32>
}

// FasterMoE's shadowing: experts 0 and 3 of 4 (2 per device) broadcast from
// their owners; their gradients reduced to them.
// CHECK-LABEL: func.func @moe_shadowing
func.func @moe_shadowing(%w: tensor<2x32x64xf32>, %dw: tensor<2x32x64xf32>) -> tensor<2x32x64xf32> {
  // CHECK: stp.moe_shadow_broadcast %{{.*}} on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64}
  %s = stp.moe_shadow_broadcast %w on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64}
      : (tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
  // CHECK: stp.moe_shadow_reduce %{{.*}} into %{{.*}} on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64}
  %r = stp.moe_shadow_reduce %s into %dw on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64}
      : (tensor<2x32x64xf32>, tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
  return %r : tensor<2x32x64xf32>
}
