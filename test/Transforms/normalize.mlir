// RUN: stpar-opt %s --stp-normalize -split-input-file | FileCheck %s

// The IR below is in the ONNX importer's form: single-op elementwise
// linalg.generics with numpy broadcasting maps, ReduceMean as a sum generic
// over a zero fill then a divide, MatMul as a generic with a reduction loop.
// Pass statistics are checked by the per-model tests in test/Import/models.

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>
#ch3 = affine_map<(d0, d1, d2) -> (d2)>

// PyTorch's opset-13 LayerNorm: ReduceMean, Sub, Pow 2, ReduceMean, Add eps,
// Sqrt, Div, Mul gamma, Add beta.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[X:.*]]: tensor<2x8x32xf32>, %[[G:.*]]: tensor<32xf32>, %[[B:.*]]: tensor<32xf32>)
// CHECK-NEXT: %[[Y:.*]] = stp.layer_norm %[[X]], %[[G]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m1 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %d = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m1 : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.subf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %two : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %s2 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m2 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s2 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999974E-6> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m2, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %gm = linalg.generic {indexing_maps = [#ch3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%g, %n : tensor<32xf32>, tensor<2x8x32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %y = linalg.generic {indexing_maps = [#id3, #ch3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%gm, %b : tensor<2x8x32xf32>, tensor<32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// Megatron's export: two identical subtractions, no affine parameters (the
// scale becomes ones).
// CHECK-LABEL: func.func @layer_norm_two_subs_no_affine(
// CHECK-SAME: %[[X:.*]]: tensor<2x8x32xf32>)
// CHECK: %[[ONES:.*]] = arith.constant dense<1.000000e+00> : tensor<32xf32>
// CHECK-NEXT: %[[Y:.*]] = stp.layer_norm %[[X]], %[[ONES]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NOT: linalg.generic
// CHECK: return %[[Y]]
func.func @layer_norm_two_subs_no_affine(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m1 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %d = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m1 : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.subf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %d2 = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m1 : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.subf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %p = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %d : tensor<2x8x32xf32>, tensor<2x8x32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %s2 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m2 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s2 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999974E-6> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#sc3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%eps, %m2 : tensor<f32>, tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d2, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %n : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// Epsilon added after the square root: (x - m) / (sqrt(var) + eps) is not a
// LayerNorm; nothing changes.
// CHECK-LABEL: func.func @layer_norm_eps_after_sqrt(
// CHECK-NOT: stp.layer_norm
// CHECK: math.sqrt
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK: return
func.func @layer_norm_eps_after_sqrt(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m1 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %d = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m1 : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.subf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %two : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %s2 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m2 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s2 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m2 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999974E-6> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sd, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %v : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %n : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// The centered value also feeds the result: it cannot be dropped, nothing
// changes.
// CHECK-LABEL: func.func @layer_norm_escaping_value(
// CHECK-NOT: stp.layer_norm
// CHECK: math.sqrt
// CHECK: return
func.func @layer_norm_escaping_value(%x: tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s1 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m1 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s1 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %d = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %m1 : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.subf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %two : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %s2 = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m2 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s2 : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999974E-6> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m2, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %n, %d : tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>
#ch3 = affine_map<(d0, d1, d2) -> (d2)>

// Llama's RMSNorm as PyTorch 1.13 exports it: the weight multiplies x first,
// then Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)).
// CHECK-LABEL: func.func @rms_norm_reciprocal(
// CHECK-SAME: %[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<32xf32>)
// CHECK-NEXT: %[[Y:.*]] = stp.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_reciprocal(%x: tensor<2x8x32xf32>, %w: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %wx = linalg.generic {indexing_maps = [#ch3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%w, %x : tensor<32xf32>, tensor<2x8x32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %two : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999997E-7> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %rs = linalg.generic {indexing_maps = [#sc3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%one, %sd : tensor<f32>, tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %y = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%wx, %rs : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>
#ch3 = affine_map<(d0, d1, d2) -> (d2)>

// x / Sqrt(ReduceMean(x * x) + eps) * w: Div form, square as a self-multiply.
// CHECK-LABEL: func.func @rms_norm_div(
// CHECK-SAME: %[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<32xf32>)
// CHECK-NEXT: %[[Y:.*]] = stp.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_div(%x: tensor<2x8x32xf32>, %w: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %p = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %x : tensor<2x8x32xf32>, tensor<2x8x32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %v = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 9.99999974E-6 : f32
    %r = arith.addf %c, %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %y = linalg.generic {indexing_maps = [#id3, #ch3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%n, %w : tensor<2x8x32xf32>, tensor<32xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// Pow with exponent 3 is not a mean square: nothing changes.
// CHECK-LABEL: func.func @rms_norm_pow3(
// CHECK-NOT: stp.rms_norm
// CHECK: math.powf
// CHECK: math.sqrt
// CHECK: return
func.func @rms_norm_pow3(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %three = arith.constant dense<3.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %three : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 3.200000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999997E-7> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %n : tensor<2x8x32xf32>
}

// -----

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#kd3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#sc3 = affine_map<(d0, d1, d2) -> ()>

// The mean divides by 16 but reduces 32 elements: not a mean, no RMSNorm.
// CHECK-LABEL: func.func @rms_norm_wrong_count(
// CHECK-NOT: stp.rms_norm
// CHECK: math.sqrt
// CHECK: return
func.func @rms_norm_wrong_count(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %e3 = tensor.empty() : tensor<2x8x32xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %two : tensor<2x8x32xf32>, tensor<f32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = math.powf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x8x1xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s = linalg.generic {indexing_maps = [#id3, #kd3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p : tensor<2x8x32xf32>) outs(%f1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.addf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %m = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 1.600000e+01 : f32
    %r = arith.divf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %eps = arith.constant dense<9.99999997E-7> : tensor<f32>
  %v = linalg.generic {indexing_maps = [#id3, #sc3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m, %eps : tensor<2x8x1xf32>, tensor<f32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %sd = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<2x8x1xf32>) outs(%e1 : tensor<2x8x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.sqrt %in : f32
    linalg.yield %r : f32
  } -> tensor<2x8x1xf32>
  %n = linalg.generic {indexing_maps = [#id3, #kd3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %sd : tensor<2x8x32xf32>, tensor<2x8x1xf32>) outs(%e3 : tensor<2x8x32xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<2x8x32xf32>
  return %n : tensor<2x8x32xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#sc = affine_map<(d0, d1) -> ()>

// Erf GELU as PyTorch exports it: Div sqrt2, Erf, Add 1, Mul x, Mul 0.5.
// CHECK-LABEL: func.func @gelu_erf(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>) {{.*}}{stp.composite = "gelu"}
// CHECK: math.erf
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
func.func @gelu_erf(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %sqrt2 = arith.constant dense<1.41421354> : tensor<f32>
  %a = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %sqrt2 : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.erf %in : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %c = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%b, %one : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %d = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %c : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %half = arith.constant dense<0.5> : tensor<f32>
  %y = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%d, %half : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#sc = affine_map<(d0, d1) -> ()>

// Megatron's tanh GELU: 0.5x * (1 + tanh(0.79788 x * (1 + 0.044715 x x))).
// CHECK-LABEL: func.func @gelu_tanh_megatron(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>) {{.*}}{stp.composite = "gelu"}
// CHECK: math.tanh
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
func.func @gelu_tanh_megatron(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %half = arith.constant dense<0.5> : tensor<f32>
  %hx = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %half : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %c = arith.constant dense<0.797884583> : tensor<f32>
  %cx = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %c : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %k = arith.constant dense<4.471500e-02> : tensor<f32>
  %kx = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %k : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %kxx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%kx, %x : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %p1 = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%kxx, %one : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %arg = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%cx, %p1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%arg : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.tanh %in : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %t1 = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%t, %one : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%hx, %t1 : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#sc = affine_map<(d0, d1) -> ()>

// 0.6 instead of 0.5: not a GELU, nothing changes.
// CHECK-LABEL: func.func @gelu_wrong_half(
// CHECK-NOT: stp.composite
// CHECK: math.erf
// CHECK: arith.mulf
// CHECK: return
func.func @gelu_wrong_half(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %sqrt2 = arith.constant dense<1.41421354> : tensor<f32>
  %a = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %sqrt2 : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = math.erf %in : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %c = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%b, %one : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %d = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %c : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %half = arith.constant dense<0.6> : tensor<f32>
  %y = linalg.generic {indexing_maps = [#id, #sc, #id], iterator_types = ["parallel", "parallel"]} ins(%d, %half : tensor<4x8xf32>, tensor<f32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// A single generic computing GELU (the importer's Gelu / FastGelu) is only
// marked; one that computes something else is not.
// CHECK-LABEL: func.func @gelu_body(
// CHECK: linalg.generic {{.*}}{stp.composite = "gelu"}
// CHECK: math.tanh
// CHECK: linalg.generic
// CHECK-NOT: stp.composite
// CHECK: math.tanh
// CHECK: return
func.func @gelu_body(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = tensor.empty() : tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %half = arith.constant 5.000000e-01 : f32
    %one = arith.constant 1.000000e+00 : f32
    %c = arith.constant 0.797884583 : f32
    %k = arith.constant 4.471500e-02 : f32
    %0 = arith.mulf %in, %in : f32
    %1 = arith.mulf %in, %0 : f32
    %2 = arith.mulf %k, %1 : f32
    %3 = arith.addf %in, %2 : f32
    %4 = arith.mulf %c, %3 : f32
    %5 = math.tanh %4 : f32
    %6 = arith.addf %one, %5 : f32
    %7 = arith.mulf %half, %in : f32
    %8 = arith.mulf %7, %6 : f32
    linalg.yield %8 : f32
  } -> tensor<4x8xf32>
  %z = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %half = arith.constant 5.000000e-01 : f32
    %one = arith.constant 1.000000e+00 : f32
    %5 = math.tanh %in : f32
    %6 = arith.addf %one, %5 : f32
    %7 = arith.mulf %half, %in : f32
    %8 = arith.mulf %7, %6 : f32
    linalg.yield %8 : f32
  } -> tensor<4x8xf32>
  return %y, %z : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

#mq = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#mo = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#sc4 = affine_map<(d0, d1, d2, d3) -> ()>
#bm4 = affine_map<(d0, d1, d2, d3) -> (d0, 0, 0, d3)>

// BERT: K transposed by [0, 2, 3, 1] from [B, S, H, D], Div by sqrt(D), an
// additive padding mask [B, 1, 1, S].
// CHECK-LABEL: func.func @attention_additive_mask(
// CHECK-SAME: %[[Q:.*]]: tensor<1x2x4x4xf32>, %[[K:.*]]: tensor<1x4x2x4xf32>, %[[V:.*]]: tensor<1x2x4x4xf32>, %[[M:.*]]: tensor<1x1x1x4xf32>)
// CHECK: %[[KT:.*]] = linalg.transpose ins(%[[K]] : tensor<1x4x2x4xf32>) outs(%{{.*}} : tensor<1x2x4x4xf32>) permutation = [0, 2, 1, 3]
// CHECK-NEXT: %[[A:.*]] = stp.attention %[[Q]], %[[KT]], %[[V]] mask %[[M]] {scale = 5.000000e-01 : f32}
// CHECK-NOT: linalg.softmax
// CHECK: return %[[A]]
func.func @attention_additive_mask(%q: tensor<1x2x4x4xf32>, %k: tensor<1x4x2x4xf32>, %v: tensor<1x2x4x4xf32>, %mask: tensor<1x1x1x4xf32>) -> tensor<1x2x4x4xf32> {
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %kt = linalg.transpose ins(%k : tensor<1x4x2x4xf32>) outs(%e : tensor<1x2x4x4xf32>) permutation = [0, 2, 3, 1]
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  %c = arith.constant dense<2.0> : tensor<f32>
  %sc = linalg.generic {indexing_maps = [#id4, #sc4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s, %c : tensor<1x2x4x4xf32>, tensor<f32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x4xf32>
  %l = linalg.generic {indexing_maps = [#id4, #bm4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<1x2x4x4xf32>, tensor<1x1x1x4xf32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x4xf32>
  %p = linalg.softmax dimension(3) ins(%l : tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

#mq = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#mo = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#sc4 = affine_map<(d0, d1, d2, d3) -> ()>
#m2 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#r5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, 0, d3, d4)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>

// Llama: grouped-query attention (2 key/value heads repeated to 4 by
// Unsqueeze/Expand/Reshape), a constant causal mask, Mul by the scale.
// CHECK-LABEL: func.func @attention_gqa_causal(
// CHECK-SAME: %[[Q:.*]]: tensor<1x4x4x4xf32>, %[[K:.*]]: tensor<1x2x4x4xf32>, %[[V:.*]]: tensor<1x2x4x4xf32>)
// CHECK-NEXT: %[[A:.*]] = stp.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32} : (tensor<1x4x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: return %[[A]]
func.func @attention_gqa_causal(%q: tensor<1x4x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %e5 = tensor.empty() : tensor<1x2x2x4x4xf32>
  %ke = tensor.expand_shape %k [[0], [1], [2, 3], [4]] output_shape [1, 2, 1, 4, 4] : tensor<1x2x4x4xf32> into tensor<1x2x1x4x4xf32>
  %kr = linalg.generic {indexing_maps = [#r5, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%ke : tensor<1x2x1x4x4xf32>) outs(%e5 : tensor<1x2x2x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x4x4xf32>
  %kc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x4x4xf32> into tensor<1x4x4x4xf32>
  %ve = tensor.expand_shape %v [[0], [1], [2, 3], [4]] output_shape [1, 2, 1, 4, 4] : tensor<1x2x4x4xf32> into tensor<1x2x1x4x4xf32>
  %vr = linalg.generic {indexing_maps = [#r5, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%ve : tensor<1x2x1x4x4xf32>) outs(%e5 : tensor<1x2x2x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x4x4xf32>
  %vc = tensor.collapse_shape %vr [[0], [1, 2], [3], [4]] : tensor<1x2x2x4x4xf32> into tensor<1x4x4x4xf32>
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %kt = linalg.transpose ins(%kc : tensor<1x4x4x4xf32>) outs(%e : tensor<1x4x4x4xf32>) permutation = [0, 1, 3, 2]
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %s = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) outs(%f : tensor<1x4x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x4x4x4xf32>
  %c = arith.constant dense<0.5> : tensor<f32>
  %sc = linalg.generic {indexing_maps = [#sc4, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %s : tensor<f32>, tensor<1x4x4x4xf32>) outs(%e : tensor<1x4x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.mulf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x4x4x4xf32>
  %mask = arith.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %l = linalg.generic {indexing_maps = [#id4, #m2, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<1x4x4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<1x4x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x4x4x4xf32>
  %p = linalg.softmax dimension(3) ins(%l : tensor<1x4x4x4xf32>) outs(%e : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %vc : tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) outs(%f : tensor<1x4x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x4x4x4xf32>
  return %o : tensor<1x4x4x4xf32>
}

// -----

#mq = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#mo = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#sc4 = affine_map<(d0, d1, d2, d3) -> ()>
#c4 = affine_map<(d0, d1, d2, d3) -> (0, 0, d2, d3)>

// GPT-2 at opset 13: Where(mask == 0, -inf, scores) with the mask a model
// buffer (not provably causal): the condition becomes an additive mask.
// Anti-causal constant mask with Mul is checked in the next case.
// CHECK-LABEL: func.func @attention_where_mask(
// CHECK-SAME: %[[Q:.*]]: tensor<1x2x4x4xf32>, %[[KT:.*]]: tensor<1x2x4x4xf32>, %[[V:.*]]: tensor<1x2x4x4xf32>, %[[C:.*]]: tensor<1x1x4x4xi1>)
// CHECK: %[[K:.*]] = linalg.transpose ins(%[[KT]] : tensor<1x2x4x4xf32>) outs(%{{.*}} : tensor<1x2x4x4xf32>) permutation = [0, 1, 3, 2]
// CHECK: %[[M:.*]] = linalg.generic {{.*}} ins(%[[C]] : tensor<1x1x4x4xi1>)
// CHECK-DAG: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: arith.select %{{.*}}, %[[NEGINF]], %[[ZERO]] : f32
// CHECK: %[[A:.*]] = stp.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 0.353553385 : f32}
// CHECK-NOT: linalg.softmax
// CHECK: return %[[A]]
func.func @attention_where_mask(%q: tensor<1x2x4x4xf32>, %kt: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>, %cond: tensor<1x1x4x4xi1>) -> tensor<1x2x4x4xf32> {
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  %c = arith.constant dense<2.82842708> : tensor<f32>
  %sc = linalg.generic {indexing_maps = [#id4, #sc4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s, %c : tensor<1x2x4x4xf32>, tensor<f32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.divf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x4xf32>
  %ninf = arith.constant dense<0xFF800000> : tensor<f32>
  %l = linalg.generic {indexing_maps = [#c4, #sc4, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %ninf, %sc : tensor<1x1x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: i1, %in1: f32, %in2: f32, %out: f32):
    %r = arith.select %in, %in1, %in2 : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x4xf32>
  %p = linalg.softmax dimension(3) ins(%l : tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

#mq = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#mo = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#m2 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>

// A constant mask that is not causal (it hides the diagonal) stays a mask
// operand; no scale op means scale 1.
// CHECK-LABEL: func.func @attention_noncausal_constant(
// CHECK: %[[M:.*]] = arith.constant dense<{{.*}}> : tensor<4x4xf32>
// CHECK: stp.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[M]] {scale = 1.000000e+00 : f32}
func.func @attention_noncausal_constant(%q: tensor<1x2x4x4xf32>, %kt: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  %mask = arith.constant dense<[[0xFF800000, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000]]> : tensor<4x4xf32>
  %l = linalg.generic {indexing_maps = [#id4, #m2, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s, %mask : tensor<1x2x4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %r = arith.addf %in, %in1 : f32
    linalg.yield %r : f32
  } -> tensor<1x2x4x4xf32>
  %p = linalg.softmax dimension(3) ins(%l : tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

#mq = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mk = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d3)>
#mo = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>

// Softmax over the query axis (dim 2) is not attention: nothing changes.
// CHECK-LABEL: func.func @attention_softmax_wrong_axis(
// CHECK-NOT: stp.attention
// CHECK: linalg.softmax dimension(2)
// CHECK: return
func.func @attention_softmax_wrong_axis(%q: tensor<1x2x4x4xf32>, %kt: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %s = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%q, %kt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  %p = linalg.softmax dimension(2) ins(%s : tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = linalg.generic {indexing_maps = [#mq, #mk, #mo], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%f : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#ea = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#eb = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#ec = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#g3 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#r3 = affine_map<(d0, d1, d2) -> (d1, d2)>

// A top-1 MoE layer over 2 experts: router matmul, softmax, TopK, scatter of
// the gate weights, expert matmuls, gated combine (a reduction over the
// experts). Every op from the router to the combine is marked; the input
// collapse and the output expand are not.
// CHECK-LABEL: func.func @moe(
// CHECK: tensor.collapse_shape
// CHECK-NOT: stp.composite
// CHECK: ins(%collapsed, %arg1 {{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK: ins(%collapsed, %arg2 {{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK: linalg.softmax {stp.composite = "moe", stp.group = 0 : i64}
// CHECK: stp.topk {{.*}}stp.composite = "moe", stp.group = 0 : i64}
// CHECK: stp.scatter_elements {{.*}}stp.composite = "moe", stp.group = 0 : i64}
// CHECK: linalg.transpose {{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK: tensor.expand_shape {{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK: linalg.generic {{.*}}["parallel", "parallel", "parallel"]{{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK: linalg.generic {{.*}}["reduction", "parallel", "parallel"]{{.*}}{stp.composite = "moe", stp.group = 0 : i64}
// CHECK-NOT: stp.composite
// CHECK: return
func.func @moe(%x: tensor<1x4x8xf32>, %router: tensor<8x2xf32>, %w: tensor<2x8x8xf32>) -> tensor<1x4x8xf32> {
  %t = tensor.collapse_shape %x [[0, 1], [2]] : tensor<1x4x8xf32> into tensor<4x8xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %logits = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t, %router : tensor<4x8xf32>, tensor<8x2xf32>) outs(%f : tensor<4x2xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<4x2xf32>
  %ee = tensor.empty() : tensor<2x4x8xf32>
  %fe = linalg.fill ins(%zero : f32) outs(%ee : tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %experts = linalg.generic {indexing_maps = [#ea, #eb, #ec], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%t, %w : tensor<4x8xf32>, tensor<2x8x8xf32>) outs(%fe : tensor<2x4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  } -> tensor<2x4x8xf32>
  %probs = linalg.softmax dimension(1) ins(%logits : tensor<4x2xf32>) outs(%e : tensor<4x2xf32>) -> tensor<4x2xf32>
  %values, %indices = stp.topk %probs {axis = 1 : i64, k = 1 : i64, largest = true, sorted = true} : (tensor<4x2xf32>) -> (tensor<4x1xf32>, tensor<4x1xi64>)
  %zeros = arith.constant dense<0.0> : tensor<4x2xf32>
  %gates = stp.scatter_elements %zeros, %indices, %values {axis = 1 : i64} : (tensor<4x2xf32>, tensor<4x1xi64>, tensor<4x1xf32>) -> tensor<4x2xf32>
  %et = tensor.empty() : tensor<2x4xf32>
  %gt = linalg.transpose ins(%gates : tensor<4x2xf32>) outs(%et : tensor<2x4xf32>) permutation = [1, 0]
  %g3 = tensor.expand_shape %gt [[0], [1, 2]] output_shape [2, 4, 1] : tensor<2x4xf32> into tensor<2x4x1xf32>
  %gated = linalg.generic {indexing_maps = [#id3, #g3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%experts, %g3 : tensor<2x4x8xf32>, tensor<2x4x1xf32>) outs(%ee : tensor<2x4x8xf32>) {
  ^bb0(%in: f32, %in1: f32, %out: f32):
    %0 = arith.mulf %in, %in1 : f32
    linalg.yield %0 : f32
  } -> tensor<2x4x8xf32>
  %eo = tensor.empty() : tensor<4x8xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#id3, #r3], iterator_types = ["reduction", "parallel", "parallel"]} ins(%gated : tensor<2x4x8xf32>) outs(%fo : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<4x8xf32>
  %r = tensor.expand_shape %y [[0, 1], [2]] output_shape [1, 4, 8] : tensor<4x8xf32> into tensor<1x4x8xf32>
  return %r : tensor<1x4x8xf32>
}

// -----

// TopK over raw logits (no softmax router) is not treated as an MoE gate.
// CHECK-LABEL: func.func @topk_without_router(
// CHECK-NOT: stp.composite
// CHECK: return
func.func @topk_without_router(%l: tensor<4x2xf32>) -> tensor<4x2xf32> {
  %values, %indices = stp.topk %l {axis = 1 : i64, k = 1 : i64, largest = true, sorted = true} : (tensor<4x2xf32>) -> (tensor<4x1xf32>, tensor<4x1xi64>)
  %zeros = arith.constant dense<0.0> : tensor<4x2xf32>
  %gates = stp.scatter_elements %zeros, %indices, %values {axis = 1 : i64} : (tensor<4x2xf32>, tensor<4x1xi64>, tensor<4x1xf32>) -> tensor<4x2xf32>
  return %gates : tensor<4x2xf32>
}
