// RUN: stpar-opt %s -stp-partition -split-input-file -verify-diagnostics

// expected-error @+1 {{module has no 'stp.mesh' attribute}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// A spec with fewer loops than the op.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
module attributes {stp.mesh = #mesh} {
  func.func @main(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // expected-error @+1 {{stp.spec has 2 loops but the op has 3 loops}}
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"x0"}, "n" = 8]>}
      ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%c : tensor<8x8xf32>) -> tensor<8x8xf32>
    return %o : tensor<8x8xf32>
  }
}

// -----

// A spec whose extents are not the op's.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
module attributes {stp.mesh = #mesh} {
  func.func @main(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // expected-error @+1 {{stp.spec loop 'm' has extent 16 but the op's loop 0 has extent 8}}
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 16 {"x0"}, "n" = 8, "k" = 16 reduction]>}
      ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%c : tensor<8x8xf32>) -> tensor<8x8xf32>
    return %o : tensor<8x8xf32>
  }
}

// -----

// A spec marking a parallel loop as a reduction.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
module attributes {stp.mesh = #mesh} {
  func.func @main(%a: tensor<8x16xf32>, %b: tensor<16x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // expected-error @+1 {{stp.spec loop 'n' is a reduction but the op's loop 1 is not}}
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 16 reduction]>}
      ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%c : tensor<8x8xf32>) -> tensor<8x8xf32>
    return %o : tensor<8x8xf32>
  }
}

// -----

// A padded split (extent 6 over 4 devices).
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
module attributes {stp.mesh = #mesh} {
  func.func @main(%a: tensor<6x16xf32>, %b: tensor<16x8xf32>, %c: tensor<6x8xf32>) -> tensor<6x8xf32> {
    // expected-error @+1 {{padded split of loop 'm' is not supported}}
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 6 {"x0"} padded, "n" = 8, "k" = 16 reduction]>}
      ins(%a, %b : tensor<6x16xf32>, tensor<16x8xf32>) outs(%c : tensor<6x8xf32>) -> tensor<6x8xf32>
    return %o : tensor<6x8xf32>
  }
}

// -----

// The temporal primitive on an op that is not a contraction.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<4x4x4xf32>, %y: tensor<4x4x4xf32>) -> tensor<4x4x4xf32> {
    // expected-error @+1 {{temporal primitive on an op that is not a two-input one-output contraction}}
    %o = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%x : tensor<4x4x4xf32>) outs(%y : tensor<4x4x4xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["m" = 4, "n" = 4 reduction, "k" = 4],
               temporal = <grid = ["x0", "x1"], matmul = ["m", "n", "k"], steps = 2>>} {
    ^bb0(%a: f32, %acc: f32):
      %s = arith.addf %acc, %a : f32
      linalg.yield %s : f32
    } -> tensor<4x4x4xf32>
    return %o : tensor<4x4x4xf32>
  }
}
