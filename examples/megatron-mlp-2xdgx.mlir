// A Megatron-style MLP (two linear layers) on 2 DGX A100 nodes, annotated
// with stp partition specs by hand: batch over "dp" (across the two nodes),
// the first layer column-parallel and the second row-parallel over "tp"
// (NVSwitch inside a node).
//
//   stpar-opt examples/megatron-mlp-2xdgx.mlir --stp-print-mesh-placement
//
// Until the `stpar` driver exists (ONNX import, search, partitioning and
// emission are open issues), this is what stpar can run: parse, verify and
// print the partition attributes, and report where each mesh axis lies.

#a100 = #stp.device<fp32 = 1.95e13, tf32 = 1.56e14, fp16 = 3.12e14,
                    bf16 = 3.12e14, hbm_capacity = 85899345920,
                    hbm_bandwidth = 2.039e12>
#dgx2 = #stp.cluster<name = "dgx-a100-80g-2", nodes = 2, devices_per_node = 8,
    device = #a100,
    intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
    inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#dgx2, ["dp" = 2, "tp" = 8]>

module attributes {stp.mesh = #mesh} {
  func.func @mlp(%x: tensor<8x1024x4096xf32>, %w1: tensor<4096x16384xf32>,
                 %w2: tensor<16384x4096xf32>) -> tensor<8x1024x4096xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<8x1024x16384xf32>
    %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x1024x16384xf32>) -> tensor<8x1024x16384xf32>
    // Column-parallel: the output features "k" split over "tp".
    %h = linalg.generic {
        indexing_maps = [affine_map<(b, m, k, n) -> (b, m, n)>,
                         affine_map<(b, m, k, n) -> (n, k)>,
                         affine_map<(b, m, k, n) -> (b, m, k)>],
        iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %w1 : tensor<8x1024x4096xf32>, tensor<4096x16384xf32>)
        outs(%i1 : tensor<8x1024x16384xf32>)
        attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "m" = 1024, "k" = 16384 {"tp"}, "n" = 4096 reduction]>} {
      ^bb0(%a: f32, %w: f32, %acc: f32):
        %p = arith.mulf %a, %w : f32
        %s = arith.addf %acc, %p : f32
        linalg.yield %s : f32
    } -> tensor<8x1024x16384xf32>
    %e2 = tensor.empty() : tensor<8x1024x4096xf32>
    %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<8x1024x4096xf32>) -> tensor<8x1024x4096xf32>
    // Row-parallel: the reduced dim "n" split over "tp" (partial sums are
    // all-reduced over "tp").
    %y = linalg.generic {
        indexing_maps = [affine_map<(b, m, k, n) -> (b, m, n)>,
                         affine_map<(b, m, k, n) -> (n, k)>,
                         affine_map<(b, m, k, n) -> (b, m, k)>],
        iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%h, %w2 : tensor<8x1024x16384xf32>, tensor<16384x4096xf32>)
        outs(%i2 : tensor<8x1024x4096xf32>)
        attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "m" = 1024, "k" = 4096, "n" = 16384 reduction {"tp"}]>} {
      ^bb0(%a: f32, %w: f32, %acc: f32):
        %p = arith.mulf %a, %w : f32
        %s = arith.addf %acc, %p : f32
        linalg.yield %s : f32
    } -> tensor<8x1024x4096xf32>
    return %y : tensor<8x1024x4096xf32>
  }
}
