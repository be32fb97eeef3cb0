// RUN: stpar-opt %s | stpar-opt | FileCheck %s
// RUN: stpar-opt %s --mlir-print-op-generic | stpar-opt | FileCheck %s

// Every stp attribute, parsed, printed and parsed again.

// CHECK-DAG: #[[DEV:.*]] = #stp.device<fp32 = 1.570000e+13, fp16 = 1.250000e+14, hbm_capacity = 34359738368, hbm_bandwidth = 9.000000e+11>
// CHECK-DAG: #[[CL:.*]] = #stp.cluster<name = "v100-sxm2-32g-4x8", nodes = 8, devices_per_node = 4, device = #[[DEV]], intra_node = <bandwidth = 1.500000e+11, latency = 5.000000e-06>, inter_node = <bandwidth = 3.125000e+09, latency = 1.000000e-05>>
// CHECK-DAG: #[[A100:.*]] = #stp.device<fp32 = 1.950000e+13, tf32 = 1.560000e+14, fp16 = 3.120000e+14, bf16 = 3.120000e+14, hbm_capacity = 85899345920, hbm_bandwidth = 2.039000e+12>
// CHECK-DAG: #[[MESH:.*]] = #stp.mesh<#[[CL]], ["dp" = 2, "x" = 4, "y" = 4]>

#v100 = #stp.device<fp32 = 1.57e13, fp16 = 1.25e14, hbm_capacity = 34359738368,
                    hbm_bandwidth = 9.0e11>
#v100x32 = #stp.cluster<name = "v100-sxm2-32g-4x8", nodes = 8,
    devices_per_node = 4, device = #v100,
    intra_node = <bandwidth = 1.5e11, latency = 5.0e-6>,
    inter_node = <bandwidth = 3.125e9, latency = 1.0e-5>>
#mesh = #stp.mesh<#v100x32, ["dp" = 2, "x" = 4, "y" = 4]>

// CHECK: module attributes {stp.mesh = #[[MESH]]}
module attributes {stp.mesh = #mesh} {

// CHECK-LABEL: func.func @hardware
// CHECK-SAME: a100 = #[[A100]]
// CHECK-SAME: cluster = #[[CL]]
// CHECK-SAME: link = #stp.link<bandwidth = 2.500000e+10, latency = 0.000000e+00>
func.func @hardware() attributes {
    a100 = #stp.device<fp32 = 1.95e13, tf32 = 1.56e14, fp16 = 3.12e14,
                       bf16 = 3.12e14, hbm_capacity = 85899345920,
                       hbm_bandwidth = 2.039e12>,
    link = #stp.link<bandwidth = 25000000000, latency = 0>,
    cluster = #v100x32} {
  return
}

// CHECK-LABEL: func.func @axis_and_loop
// CHECK-SAME: axis = #stp.axis<"tp" = 8>
// CHECK-SAME: loop = #stp.loop<"n" = 1000 reduction {"x", "y"} padded>
// CHECK-SAME: loop_plain = #stp.loop<"b" = 16>
func.func @axis_and_loop() attributes {
    axis = #stp.axis<"tp" = 8>,
    loop = #stp.loop<"n" = 1000 reduction {"x", "y"} padded>,
    loop_plain = #stp.loop<"b" = 16 parallel {}>} {
  return
}

// Megatron column-parallel linear: batch over "dp", K over "x" then "y".
// CHECK-LABEL: func.func @spatial
// CHECK-SAME: stp.spec = #stp.spec<#[[MESH]], loops = ["b" = 8 {"dp"}, "m" = 2048, "k" = 4096 {"x", "y"}, "n" = 1024 reduction]>
func.func @spatial() attributes {
    stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "m" = 2048,
                                         "k" = 4096 {"x", "y"},
                                         "n" = 1024 reduction]>} {
  return
}

// PrimePar's temporal primitive on the 4x4 grid (x, y); its rules are
// PrimePar's and are therefore not printed.
// CHECK-LABEL: func.func @temporal
// CHECK-SAME: stp.spec = #stp.spec<#[[MESH]], loops = ["b" = 8 {"dp"}, "m" = 2048, "n" = 1024 reduction, "k" = 4096], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 4>>
func.func @temporal() attributes {
    stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "m" = 2048,
                                         "n" = 1024 reduction, "k" = 4096],
                         temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"],
                                     steps = 4>>} {
  return
}

// The same rules written out are recognized as PrimePar's.
// CHECK-LABEL: func.func @temporal_explicit
// CHECK-SAME: temporal = <grid = ["y", "x"], matmul = ["m", "n", "k"], steps = 4>>
func.func @temporal_explicit() attributes {
    stp.spec = #stp.spec<#mesh, loops = ["m" = 64, "n" = 64 reduction, "k" = 64],
        temporal = <grid = ["y", "x"], matmul = ["m", "n", "k"], steps = 4,
          forward = (r, c, t) -> (r, r + c + t, c),
          input_grad = (r, c, t) -> (r, r + c - 1, c + t),
          weight_grad = (r, c, t)[d] -> (r + t, r + c - 1 + d, c - 1 + d)>>} {
  return
}

// A different valid schedule (row and column roles swapped) is kept.
// CHECK-LABEL: func.func @temporal_custom
// CHECK-SAME: forward = (d0, d1, d2) -> (d1, d0 + d1 + d2, d0)>>
func.func @temporal_custom() attributes {
    stp.spec = #stp.spec<#mesh, loops = ["m" = 64, "n" = 64 reduction, "k" = 64],
        temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 4,
          forward = (r, c, t) -> (c, r + c + t, r)>>} {
  return
}

// Nested attributes may be written without their `#stp.` prefix; the same
// mesh written inline is the same (uniqued) attribute.
// CHECK-LABEL: func.func @inline
// CHECK-SAME: stp.spec = #stp.spec<#[[MESH]], loops = ["b" = 2 {"dp"}]>
func.func @inline() attributes {
    stp.spec = #stp.spec<<<name = "v100-sxm2-32g-4x8", nodes = 8,
        devices_per_node = 4,
        device = <fp32 = 1.57e13, fp16 = 1.25e14, hbm_capacity = 34359738368,
                  hbm_bandwidth = 9.0e11>,
        intra_node = <bandwidth = 1.5e11, latency = 5.0e-6>,
        inter_node = <bandwidth = 3.125e9, latency = 1.0e-5>>,
      ["dp" = 2, "x" = 4, "y" = 4]>, loops = ["b" = 2 {"dp"}]>} {
  return
}

// A standalone temporal attribute.
// CHECK-LABEL: func.func @temporal_attr
// CHECK-SAME: t = #stp.temporal<grid = ["x", "y"], matmul = ["i", "j", "l"], steps = 2>
func.func @temporal_attr() attributes {
    t = #stp.temporal<grid = ["x", "y"], matmul = ["i", "j", "l"], steps = 2>} {
  return
}

}

// CHECK-LABEL: func.func @grid_permute
// CHECK: stp.grid_permute %{{.*}} on @grid grid_axes = [0, 1] sources = [3, 2, 1, 0] : tensor<4x8xf32>
func.func @grid_permute(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = stp.grid_permute %x on @grid grid_axes = [0, 1] sources = [3, 2, 1, 0] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
