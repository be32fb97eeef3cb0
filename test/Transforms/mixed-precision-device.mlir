// RUN: not stpar-opt %s --stp-mixed-precision=compute-type=bf16 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BF16
// RUN: stpar-opt %s --stp-mixed-precision=compute-type=auto 2>&1 | FileCheck %s --check-prefix=AUTO
// RUN: not stpar-opt %s --stp-mixed-precision -o /dev/null 2>&1 | FileCheck %s --check-prefix=BF16
// The plan's devices (stp.mesh) have no bf16 tensor cores (a V100: no bf16
// peak; cuBLAS takes bf16 operands from sm_80 on): compute-type=bf16 (the
// default, precision=mixed) is an error; auto (precision=auto, the
// pipeline's default) leaves the program f32 and says so.

// BF16: error: -stp-mixed-precision: the devices of cluster 'v100-sxm2-32g-4x8' have no bf16 tensor cores (no 'bf16' peak): use fp32 precision (fp16 with loss scaling is not implemented)
// AUTO: remark: -stp-mixed-precision: the devices of cluster 'v100-sxm2-32g-4x8' have no bf16 tensor cores: the program stays fp32 (fp16 with loss scaling is not implemented)
// AUTO-NOT: bf16
// AUTO: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<16x32xf32>)

#device = #stp.device<fp32 = 1.570000e+13, fp16 = 1.250000e+14, hbm_capacity = 34359738368, hbm_bandwidth = 9.000000e+11>
#cluster = #stp.cluster<name = "v100-sxm2-32g-4x8", nodes = 1, devices_per_node = 2, device = #device, intra_node = <bandwidth = 1.500000e+11, latency = 5.000000e-06>, inter_node = <bandwidth = 1.250000e+10, latency = 1.000000e-05>>
#mesh = #stp.mesh<#cluster, ["x0" = 2]>
module attributes {stp.mesh = #mesh} {
  func.func @f(%a: tensor<8x16xf32>, %w: tensor<16x32xf32>, %c: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %r = linalg.matmul ins(%a, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
    return %r : tensor<8x32xf32>
  }
}
