// RUN: stpar-opt %s --stp-lower-contractions | FileCheck %s
// f32 contractions become one strided-batched GEMM call each, with the
// column-major view, transposes and leading dims decided by the pass; the
// result starts as the init (stp.accumulate = 2). Others stay linalg ops.

// CHECK-LABEL: func.func @matmul
// C^T (32x8) = B^T (32x16, ld 32) * A^T (16x8, ld 16), C row-major (ld 32).
// CHECK: emitc.call_opaque "stpar_rt::gemm"(%arg0, %arg1, %arg2) {args = [#emitc.opaque<"ctx">, #emitc.opaque<"false">, #emitc.opaque<"false">, 32, 8, 16, 1 : index, 32, 0, 0 : index, 16, 0, 32, 0, 1], stp.accumulate = 2 : i64, stp.buffers = array<i64: 64>}
// CHECK-NOT: linalg.matmul
func.func @matmul(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>, %c: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %r = linalg.matmul {stp.buffers = array<i64: 64>} ins(%a, %b : tensor<8x16xf32>, tensor<16x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// CHECK-LABEL: func.func @transposed_b
// B indexed (n, k): X = B is transposed, ld 16.
// CHECK: "stpar_rt::gemm"(%arg0, %arg1, %arg2) {args = [#emitc.opaque<"ctx">, #emitc.opaque<"true">, #emitc.opaque<"false">, 32, 8, 16, 1 : index, 16, 0, 0 : index, 16, 0, 32, 0, 1]
func.func @transposed_b(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>, %c: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %r = linalg.generic {
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<8x16xf32>, tensor<32x16xf32>) outs(%c : tensor<8x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// CHECK-LABEL: func.func @batched
// Batch strides 512 (B), 128 (A), 256 (C); 4 products.
// CHECK: "stpar_rt::gemm"(%arg0, %arg1, %arg2) {args = [#emitc.opaque<"ctx">, #emitc.opaque<"false">, #emitc.opaque<"false">, 32, 8, 16, 1 : index, 32, 512, 0 : index, 16, 128, 32, 256, 4]
func.func @batched(%a: tensor<4x8x16xf32>, %b: tensor<4x16x32xf32>, %c: tensor<4x8x32xf32>) -> tensor<4x8x32xf32> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x8x16xf32>, tensor<4x16x32xf32>) outs(%c : tensor<4x8x32xf32>) -> tensor<4x8x32xf32>
  return %r : tensor<4x8x32xf32>
}

// CHECK-LABEL: func.func @integer
// Not f32: stays a linalg op (printed as loops).
// CHECK-NOT: emitc.call_opaque
// CHECK: linalg.matmul
func.func @integer(%a: tensor<8x16xi64>, %b: tensor<16x32xi64>, %c: tensor<8x32xi64>) -> tensor<8x32xi64> {
  %r = linalg.matmul ins(%a, %b : tensor<8x16xi64>, tensor<16x32xi64>) outs(%c : tensor<8x32xi64>) -> tensor<8x32xi64>
  return %r : tensor<8x32xi64>
}
