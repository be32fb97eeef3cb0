// RUN: stpar-opt %s --split-input-file --stp-mixed-precision | FileCheck %s
// RUN: stpar-opt %s --split-input-file --stp-mixed-precision --stp-lower-contractions | FileCheck %s --check-prefix=GEMM
// -stp-mixed-precision (docs/training.md, "Mixed precision"): both
// operands of every f32 GEMM are rounded to bf16 (one copy per value and
// block), the contraction widens them and accumulates in f32; a named op
// becomes a generic that keeps its attributes. -stp-lower-contractions
// then calls the bf16 GEMM (cuBLAS CUDA_R_16BF inputs, f32 output).

// CHECK-LABEL: func.func @forward_and_input_grad
// CHECK-SAME: (%[[A:.*]]: tensor<8x16xf32>, %[[W:.*]]: tensor<16x32xf32>, %[[C:.*]]: tensor<8x32xf32>, %[[D:.*]]: tensor<4x32xf32>, %[[E:.*]]: tensor<4x16xf32>)
// CHECK: %[[AB:.*]] = linalg.generic {{.*}} ins(%[[A]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>) attrs = {stp.phase = "forward"}
// CHECK-NEXT: ^bb0(%[[X:.*]]: f32, %{{.*}}: bf16):
// CHECK-NEXT: arith.truncf %[[X]] : f32 to bf16
// CHECK: %[[WB:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<16x32xf32>) outs(%{{.*}} : tensor<16x32xbf16>)
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[AB]], %[[WB]] : tensor<8x16xbf16>, tensor<16x32xbf16>) outs(%[[C]] : tensor<8x32xf32>) attrs = {stp.phase = "forward", stp.plan_step = "kept"}
// CHECK-NEXT: ^bb0(%[[P:.*]]: bf16, %[[Q:.*]]: bf16, %[[ACC:.*]]: f32):
// CHECK-DAG: arith.extf %[[P]] : bf16 to f32
// CHECK-DAG: arith.extf %[[Q]] : bf16 to f32
// CHECK: arith.addf %[[ACC]]
// The input gradient reads the same rounded weight; only dO is rounded.
// CHECK: %[[DB:.*]] = linalg.generic {{.*}} ins(%[[D]] : tensor<4x32xf32>) outs(%{{.*}} : tensor<4x32xbf16>) attrs = {stp.phase = "input_grad"}
// CHECK-NOT: ins(%[[W]]
// CHECK: linalg.generic {{.*}} ins(%[[DB]], %[[WB]] : tensor<4x32xbf16>, tensor<16x32xbf16>) outs(%[[E]] : tensor<4x16xf32>) attrs = {stp.phase = "input_grad"}
// GEMM-LABEL: func.func @forward_and_input_grad
// GEMM: emitc.call_opaque "stpar_rt::gemm"({{.*}}) {{.*}} : (tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<8x32xf32>) -> tensor<8x32xf32>
// GEMM: emitc.call_opaque "stpar_rt::gemm"({{.*}}) {{.*}} : (tensor<4x32xbf16>, tensor<16x32xbf16>, tensor<4x16xf32>) -> tensor<4x16xf32>
func.func @forward_and_input_grad(%a: tensor<8x16xf32>, %w: tensor<16x32xf32>, %c: tensor<8x32xf32>, %d: tensor<4x32xf32>, %e: tensor<4x16xf32>) -> (tensor<8x32xf32>, tensor<4x16xf32>) {
  %r = linalg.matmul {stp.phase = "forward", stp.plan_step = "kept"} ins(%a, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %g = linalg.generic {
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%d, %w : tensor<4x32xf32>, tensor<16x32xf32>) outs(%e : tensor<4x16xf32>) attrs = {stp.phase = "input_grad"} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %r, %g : tensor<8x32xf32>, tensor<4x16xf32>
}

// -----

// Not a GEMM (a broadcast matrix dim cuBLAS cannot express; integers;
// elementwise ops): left in f32 / as it is.
// CHECK-LABEL: func.func @not_gemms
// CHECK-NOT: bf16
// GEMM-LABEL: func.func @not_gemms
// GEMM-NOT: stpar_rt::gemm
func.func @not_gemms(%a: tensor<8x16xf32>, %b: tensor<16xf32>, %c: tensor<8x32xf32>, %i: tensor<8x16xi64>, %j: tensor<16x32xi64>, %k: tensor<8x32xi64>) -> (tensor<8x32xf32>, tensor<8x32xi64>) {
  %r = linalg.generic {
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k)>,
                       affine_map<(m, n, k) -> (m, n)>],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<8x16xf32>, tensor<16xf32>) outs(%c : tensor<8x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  %n = linalg.matmul ins(%i, %j : tensor<8x16xi64>, tensor<16x32xi64>) outs(%k : tensor<8x32xi64>) -> tensor<8x32xi64>
  return %r, %n : tensor<8x32xf32>, tensor<8x32xi64>
}

// -----

// The experts of an MoE layer: their runtime call rounds its own GEMM
// operands (rows, weights, activation), so the op only gets the flag.
// CHECK-LABEL: func.func @moe_experts
// CHECK: stp.moe_experts {{.*}} {activation = "silu", bf16_operands} : (tensor<2x8x16xf32>,
func.func @moe_experts(%rows: tensor<2x8x16xf32>, %counts: tensor<2x1xi64>, %w1: tensor<2x16x8xf32>, %w3: tensor<2x16x8xf32>, %w2: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %o = stp.moe_experts %rows, %counts experts %w1 gated %w3 down %w2 {activation = "silu"} : (tensor<2x8x16xf32>, tensor<2x1xi64>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// Their backward likewise (rows, output gradients, weights, H, dA, dU).
// CHECK-LABEL: func.func @moe_experts_grad
// CHECK: stp.moe_experts_grad {{.*}} {activation = "silu", bf16_operands} : (tensor<2x8x16xf32>,
func.func @moe_experts_grad(%rows: tensor<2x8x16xf32>, %d: tensor<2x8x16xf32>, %counts: tensor<2x1xi64>, %w1: tensor<2x16x8xf32>, %w3: tensor<2x16x8xf32>, %w2: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %dr, %dw1, %dw3, %dw2 = stp.moe_experts_grad %d of %rows, %counts experts %w1 gated %w3 down %w2 {activation = "silu"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x1xi64>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>)
  return %dr : tensor<2x8x16xf32>
}
