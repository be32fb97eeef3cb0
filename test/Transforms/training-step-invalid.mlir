// RUN: stpar-opt %s -split-input-file -verify-diagnostics -stp-training-step="loss=next-token"
// RUN: not stpar-opt %s -stp-training-step="loss=cross-entropy=" -split-input-file 2>&1 | FileCheck %s --check-prefix=LOSS
// RUN: not stpar-opt %s -stp-training-step="loss=hinge" -split-input-file 2>&1 | FileCheck %s --check-prefix=LOSS
// RUN: not stpar-opt %s -stp-training-step="optimizer=lamb" -split-input-file 2>&1 | FileCheck %s --check-prefix=OPT
// LOSS: error: {{unknown loss 'hinge'|--loss cross-entropy=NAME needs the name of the new labels input}}
// OPT: error: unknown optimizer 'lamb' (expected sgd or adamw)

// A max reduction (ReduceMax) on the path to the loss has no gradient rule.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main(%ids: tensor<2xi64> {stp.name = "ids"},
                  %w: tensor<2x4x3xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>})
      -> (tensor<2x3xf32> {stp.name = "logits"}) {
    %cst = arith.constant 0xFF800000 : f32
    %e = tensor.empty() : tensor<2x3xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
    // expected-error @+1 {{gradient of a reduction other than a sum is not supported}}
    %m = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%w : tensor<2x4x3xf32>) outs(%z : tensor<2x3xf32>) {
    ^bb0(%a: f32, %o: f32):
      %r = arith.maximumf %o, %a : f32
      linalg.yield %r : f32
    } -> tensor<2x3xf32>
    return %m : tensor<2x3xf32>
  }
}

// -----

// next-token needs the token ids: an integer input shaped like the logits
// without the class dim.
module {
  // expected-error @+1 {{--loss next-token: no integer graph input of shape 'tensor<2x8xi64>'}}
  func.func @main(%x: tensor<2x8x4xf32> {stp.name = "x"},
                  %w: tensor<4x5xf32> {stp.param = #stp.param<name = "w", data = embedded, trainable = true>})
      -> (tensor<2x8x5xf32> {stp.name = "logits"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x8x5xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x8x5xf32>) -> tensor<2x8x5xf32>
    %l = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>,
                                          affine_map<(d0, d1, d2, d3) -> (d3, d2)>,
                                          affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>],
                         iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<2x8x4xf32>, tensor<4x5xf32>) outs(%z : tensor<2x8x5xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %o, %p : f32
      linalg.yield %s : f32
    } -> tensor<2x8x5xf32>
    return %l : tensor<2x8x5xf32>
  }
}

// -----

// Nothing to train: no trainable parameter reaches the output (a buffer).
module {
  // expected-error @+1 {{the loss does not depend on any floating-point parameter: nothing to train}}
  func.func @main(%ids: tensor<2x8xi64> {stp.name = "ids"},
                  %mask: tensor<2x8x5xf32> {stp.param = #stp.param<name = "mask", data = embedded>})
      -> (tensor<2x8x5xf32> {stp.name = "logits"}) {
    return %mask : tensor<2x8x5xf32>
  }
}
