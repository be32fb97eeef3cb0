func.func @main(%a: tensor<4xf32> {stp.name = "a"},
                %w: tensor<4xf32> {stp.param = #stp.param<name = "no.such.weight", data = embedded, trainable = true>}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
