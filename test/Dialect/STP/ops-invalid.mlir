// RUN: stpar-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<8x768xf32>, %g: tensor<512xf32>) -> tensor<8x768xf32> {
  // expected-error @+1 {{'stp.layer_norm' op scale/bias shape 'tensor<512xf32>' does not broadcast to the normalized dims of 'tensor<8x768xf32>'}}
  %0 = stp.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<8x768xf32>, tensor<512xf32>) -> tensor<8x768xf32>
  return %0 : tensor<8x768xf32>
}

// -----

func.func @f(%x: tensor<8x768xf32>, %g: tensor<768xf32>) -> tensor<8x768xf32> {
  // expected-error @+1 {{'stp.rms_norm' op axis 2 out of range for rank 2}}
  %0 = stp.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<8x768xf32>, tensor<768xf32>) -> tensor<8x768xf32>
  return %0 : tensor<8x768xf32>
}

// -----

func.func @f(%q: tensor<2x6x16x64xf32>, %k: tensor<2x4x16x64xf32>) -> tensor<2x6x16x64xf32> {
  // expected-error @+1 {{'stp.attention' op query heads (6) must be a multiple of key/value heads (4)}}
  %0 = stp.attention %q, %k, %k {scale = 0.125 : f32} : (tensor<2x6x16x64xf32>, tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>) -> tensor<2x6x16x64xf32>
  return %0 : tensor<2x6x16x64xf32>
}

// -----

func.func @f(%x: tensor<16x8xf32>) -> tensor<16x9xf32> {
  // expected-error @+1 {{'stp.topk' op k = 9 exceeds the axis size 8}}
  %v, %i = stp.topk %x {axis = 1 : i64, k = 9 : i64, largest = true, sorted = true} : (tensor<16x8xf32>) -> (tensor<16x9xf32>, tensor<16x9xi64>)
  return %v : tensor<16x9xf32>
}

// -----

// expected-error @+1 {{external parameter "w" needs a 'file'}}
func.func private @f(tensor<4xf32> {stp.param = #stp.param<name = "w", data = external>})

// -----

// expected-error @+1 {{embedded parameter "w" names a file but no length}}
func.func private @f(tensor<4xf32> {stp.param = #stp.param<name = "w", data = embedded, file = "model.onnx", offset = 8>})

// -----

// expected-error @+1 {{'func.func' op 'stp.param' must be a #stp.param}}
func.func private @f(tensor<4xf32> {stp.param = "w"})

// -----

// expected-error @+1 {{'func.func' op unknown stp result attribute 'stp.param'}}
func.func private @f() -> (tensor<4xf32> {stp.param = #stp.param<name = "w", data = embedded>})

// -----

func.func @f(%d: tensor<4x8xf32>, %i: tensor<4x2xi64>, %u: tensor<4x2xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'stp.scatter_elements' op unknown reduction 'avg' (expected none, add, mul, max or min)}}
  %0 = stp.scatter_elements %d, %i, %u {axis = 1 : i64, reduction = "avg"} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'stp.grid_permute' op sources must be a permutation of 0 .. 3}}
  %0 = stp.grid_permute %x on @grid grid_axes = [0, 1] sources = [0, 1, 1, 2] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'stp.grid_permute' op grid axis 1 is negative or listed twice}}
  %0 = stp.grid_permute %x on @grid grid_axes = [1, 1] sources = [0, 1, 2, 3] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>) -> tensor<16x32xf32> {
  // expected-error @+1 {{'stp.moe' op top_k must be in [1, 4], got 5}}
  %0 = stp.moe %x, %r experts %w1 down %w2 {top_k = 5 : i64, activation = "silu"} : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>) -> tensor<16x32xf32> {
  // expected-error @+1 {{'stp.moe' op activation must be silu, gelu, gelu_tanh or relu, got 'swish'}}
  %0 = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "swish"} : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x32x32xf32>) -> tensor<16x32xf32> {
  // expected-error @+1 {{'stp.moe' op w_out dim 1 must be 64, got 'tensor<4x32x32xf32>'}}
  %0 = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "silu"} : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x32x32xf32>) -> tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

// -----

func.func @f(%buf: tensor<2x30x32xf32>, %c: tensor<2x4xi64>, %w1: tensor<2x32x64xf32>, %w2: tensor<2x64x32xf32>) -> tensor<2x30x32xf32> {
  // expected-error @+1 {{'stp.moe_experts' op buffer rows (30) must split evenly into the 4 segments of counts}}
  %0 = stp.moe_experts %buf, %c experts %w1 down %w2 {activation = "silu"} : (tensor<2x30x32xf32>, tensor<2x4xi64>, tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> tensor<2x30x32xf32>
  return %0 : tensor<2x30x32xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %e: tensor<16x2xi64>) -> tensor<4x16x32xf32> {
  // expected-error @+1 {{'stp.moe_dispatch' op counts dim 0 must be 4, got 'tensor<3x1xi64>'}}
  %b, %c, %s = stp.moe_dispatch %x, %e : (tensor<16x32xf32>, tensor<16x2xi64>) -> (tensor<4x16x32xf32>, tensor<3x1xi64>, tensor<16x2xi64>)
  return %b : tensor<4x16x32xf32>
}

// -----

// The hierarchical exchange needs whole nodes of 2..P-1 devices.
func.func @f(%rows: tensor<4x4x16xf32>, %c: tensor<4x1xi64>) -> tensor<1x16x16xf32> {
  // expected-error @+1 {{'stp.moe_all_to_all' op intra_node_size 3 is not a proper divisor of the 4 devices of the group (0: a flat exchange)}}
  %r, %rc = stp.moe_all_to_all %rows, %c on @grid grid_axes = [0] {routed_rows = 8 : i64, intra_node_size = 3 : i64} : (tensor<4x4x16xf32>, tensor<4x1xi64>) -> (tensor<1x16x16xf32>, tensor<1x4xi64>)
  return %r : tensor<1x16x16xf32>
}

// -----

func.func @f(%rows: tensor<4x4x16xf32>, %c: tensor<4x1xi64>) -> tensor<1x16x16xf32> {
  // expected-error @+1 {{'stp.moe_all_to_all' op intra_node_size 4 is not a proper divisor of the 4 devices of the group (0: a flat exchange)}}
  %r, %rc = stp.moe_all_to_all %rows, %c on @grid grid_axes = [0] {routed_rows = 8 : i64, intra_node_size = 4 : i64} : (tensor<4x4x16xf32>, tensor<4x1xi64>) -> (tensor<1x16x16xf32>, tensor<1x4xi64>)
  return %r : tensor<1x16x16xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %w1: tensor<4x32x64xf32>, %w2: tensor<4x64x32xf32>,
             %y: tensor<16x32xf32>, %dy: tensor<16x32xf32>) -> tensor<32x8xf32> {
  // expected-error @+1 {{'stp.moe_grad' op each gradient must have its operand's type}}
  %dx, %dr, %dw1, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "relu"}
      : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>, tensor<16x32xf32>)
      -> (tensor<16x32xf32>, tensor<32x8xf32>, tensor<4x32x64xf32>, tensor<4x64x32xf32>)
  return %dr : tensor<32x8xf32>
}

// -----

func.func @f(%buf: tensor<2x32x32xf32>, %d: tensor<2x32x16xf32>, %c: tensor<2x4xi64>, %w1: tensor<2x32x64xf32>,
             %w2: tensor<2x64x32xf32>) -> tensor<2x32x32xf32> {
  // expected-error @+1 {{'stp.moe_experts_grad' op d_out and d_rows must have the buffer's type}}
  %dr, %dw1, %dw2 = stp.moe_experts_grad %d of %buf, %c experts %w1 down %w2 {activation = "silu"}
      : (tensor<2x32x32xf32>, tensor<2x32x16xf32>, tensor<2x4xi64>, tensor<2x32x64xf32>, tensor<2x64x32xf32>)
      -> (tensor<2x32x32xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>)
  return %dr : tensor<2x32x32xf32>
}

// -----

func.func @f(%out: tensor<4x16x32xf32>, %s: tensor<16x2xi64>, %e: tensor<16x2xi64>, %dy: tensor<16x8xf32>) -> tensor<16x2xf32> {
  // expected-error @+1 {{'stp.moe_gate_grad' op dy dim 1 must be 32, got 'tensor<16x8xf32>'}}
  %dg = stp.moe_gate_grad %out, %s, %e, %dy : (tensor<4x16x32xf32>, tensor<16x2xi64>, tensor<16x2xi64>, tensor<16x8xf32>) -> tensor<16x2xf32>
  return %dg : tensor<16x2xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %r: tensor<32x4xf32>, %e: tensor<16x6xi64>, %dg: tensor<16x6xf32>) -> tensor<32x4xf32> {
  // expected-error @+1 {{'stp.moe_route_grad' op experts must hold 1 to 4 choices per token, got 6}}
  %dx, %dr = stp.moe_route_grad %dg of %x, %r, %e : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<16x6xi64>, tensor<16x6xf32>) -> (tensor<16x32xf32>, tensor<32x4xf32>)
  return %dr : tensor<32x4xf32>
}

// -----

func.func @f(%x: tensor<16x32xf32>, %e: tensor<16x2xi64>, %w: tensor<16x3xf32>) -> tensor<4x16x32xf32> {
  // expected-error @+1 {{'stp.moe_dispatch' op weights dim 1 must be 2, got 'tensor<16x3xf32>'}}
  %b, %c, %s = stp.moe_dispatch %x, %e weighted %w : (tensor<16x32xf32>, tensor<16x2xi64>, tensor<16x3xf32>) -> (tensor<4x16x32xf32>, tensor<4x1xi64>, tensor<16x2xi64>)
  return %b : tensor<4x16x32xf32>
}

// -----

func.func @f(%w: tensor<2x32x64xf32>) -> tensor<2x32x64xf32> {
  // expected-error @+1 {{'stp.moe_shadow_broadcast' op experts must ascend and lie in [0, 4), got 0}}
  %s = stp.moe_shadow_broadcast %w on @grid grid_axes = [0] experts = [3, 0] {num_experts = 4 : i64}
      : (tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
  return %s : tensor<2x32x64xf32>
}

// -----

func.func @f(%w: tensor<2x32x64xf32>) -> tensor<1x32x64xf32> {
  // expected-error @+1 {{'stp.moe_shadow_broadcast' op shadowed experts dim 0 must be 2, got 'tensor<1x32x64xf32>'}}
  %s = stp.moe_shadow_broadcast %w on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64}
      : (tensor<2x32x64xf32>) -> tensor<1x32x64xf32>
  return %s : tensor<1x32x64xf32>
}

// -----

func.func @f(%p: tensor<1x32x64xf32>, %dw: tensor<2x32x64xf32>) -> tensor<2x32x64xf32> {
  // expected-error @+1 {{'stp.moe_shadow_reduce' op num_experts 3 is not a multiple of the 2 local experts}}
  %r = stp.moe_shadow_reduce %p into %dw on @grid grid_axes = [0] experts = [1] {num_experts = 3 : i64}
      : (tensor<1x32x64xf32>, tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
  return %r : tensor<2x32x64xf32>
}
