func.func @main(%a: tensor<4xf32> {stp.name = "a"}) -> tensor<2x4xf32> {
  %c = arith.constant 0.0 : f32
  %p = tensor.pad %a low[1] high[1] {
  ^bb0(%i: index):
    tensor.yield %c : f32
  } : tensor<4xf32> to tensor<6xf32>
  %e = tensor.empty() : tensor<2x4xf32>
  return %e : tensor<2x4xf32>
}
