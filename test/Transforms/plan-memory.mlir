// RUN: stpar-opt %s --stp-plan-memory --split-input-file | FileCheck %s

// A chain: every buffer gets an offset in one arena; one whose last use is
// over is reused (%c takes %a's bytes), a returned value lives to the end.
#id = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %e0 = tensor.empty() : tensor<64xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf32>) outs(%e0 : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %e1 = tensor.empty() : tensor<64xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<64xf32>) outs(%e1 : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %e2 = tensor.empty() : tensor<64xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b : tensor<64xf32>) outs(%e2 : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %v = tensor.expand_shape %c [[0, 1]] output_shape [8, 8] : tensor<64xf32> into tensor<8x8xf32>
  %w = tensor.collapse_shape %v [[0, 1]] : tensor<8x8xf32> into tensor<64xf32>
  return %w : tensor<64xf32>
}
// CHECK-LABEL: func.func @main
// CHECK-SAME: stp.arena = {arena = 1024 : i64, arguments = 256 : i64, buffers = 1792 : i64, live_peak = 768 : i64}
// CHECK-SAME: stp.arg_buffers = array<i64: 0>
// CHECK: tensor.empty() {stp.buffers = array<i64: 256>}
// CHECK: linalg.generic {{.*}}stp.buffers = array<i64: 512>}
// CHECK: tensor.empty() {stp.buffers = array<i64: 256>}
// CHECK: linalg.generic {{.*}}stp.buffers = array<i64: 768>}
// CHECK: tensor.empty() {stp.buffers = array<i64: 256>}
// CHECK: linalg.generic {{.*}}stp.buffers = array<i64: 512>}
// Views share their source's buffer: no attribute.
// CHECK: tensor.expand_shape
// CHECK-NOT: stp.buffers
// CHECK: return

// -----

// A value a loop carries to its next step gets an even- and an odd-step
// buffer; both live as long as the loop's result.
#id = affine_map<(d0) -> (d0)>
func.func @loop(%x: tensor<64xf32>) -> tensor<64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (tensor<64xf32>) {
    %e = tensor.empty() : tensor<64xf32>
    %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
        ins(%acc : tensor<64xf32>) outs(%e : tensor<64xf32>) {
    ^bb0(%in: f32, %out: f32):
      %s = arith.addf %in, %in : f32
      linalg.yield %s : f32
    } -> tensor<64xf32>
    scf.yield %n : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}
// CHECK-LABEL: func.func @loop
// CHECK: scf.for
// CHECK: linalg.generic {{.*}}stp.buffers = array<i64: 512>, stp.odd_buffers = array<i64: 768>}
