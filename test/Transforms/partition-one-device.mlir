// RUN: stpar-opt %s -stp-partition | FileCheck %s
// RUN: stpar-opt %s -stp-partition | stpar-opt > /dev/null

// One device: the plan's mesh has only "pp" = 1 (the search's 1-device
// plans). The upstream grid needs an axis, so it gets one of size 1; the
// program is the unpartitioned one, without collectives.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 1, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1]>
// CHECK-LABEL: module attributes
// CHECK-SAME: stp.partitioned
// CHECK: shard.grid @grid(shape = 1)
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<8x32xf32> {stp.name = "x", stp.split = {{\[\[\], \[\]\]}}},
// CHECK: linalg.matmul ins(%[[X]], %{{.*}} : tensor<8x32xf32>, tensor<32x64xf32>)
// CHECK-NOT: shard.
// CHECK: return
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                  %w1: tensor<32x64xf32> {stp.param = #stp.param<name = "w1", data = embedded, trainable = true>})
      -> (tensor<8x64xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<8x64xf32>
    %z1 = linalg.fill ins(%cst : f32) outs(%e1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 64, "k" = 32 reduction]>}
      ins(%x, %w1 : tensor<8x32xf32>, tensor<32x64xf32>) outs(%z1 : tensor<8x64xf32>) -> tensor<8x64xf32>
    return %h : tensor<8x64xf32>
  }
}
