module {
  shard.grid @grid(shape = 2)
  func.func @main(%a: tensor<4xf32> {stp.name = "a"}) -> tensor<4xf32> {
    %r = shard.all_reduce %a on @grid grid_axes = [0] : tensor<4xf32> -> tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
