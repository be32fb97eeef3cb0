// RUN: stpar-opt %s --verify-diagnostics --stp-mixed-precision=compute-type=f16
// fp16 needs loss scaling, which is not implemented: an error, not a
// silently different program.

// expected-error @+1 {{compute type 'f16' is not supported (only 'bf16' or 'auto'; fp16 needs loss scaling, which is not implemented)}}
module {
  func.func @f(%a: tensor<8x16xf32>, %w: tensor<16x32xf32>, %c: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %r = linalg.matmul ins(%a, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
    return %r : tensor<8x32xf32>
  }
}

