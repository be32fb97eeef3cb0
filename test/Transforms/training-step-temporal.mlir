// PrimePar's temporal primitive in the training step (docs/training.md,
// "The temporal primitive"): two linear layers O = I * W partitioned with
// the primitive on a 2x2 grid (M = s, N = n, K = k). -stp-training-step
// gives their gradients the same temporal spec; -stp-partition runs the
// paper's three phases with their own slice-index rules (Wang et al.,
// ASPLOS'24, Eqs. 4-6, Table 1):
//   F  O[M r, K c]   += I[M r, N r+c+t]     * W[N r+c+t, K c]
//   B  dI[M r, N r+c-1] += dO[M r, K c+t]   * W[N r+c-1, K c+t]
//   G  dW[N r+c-1+d, K c-1+d] += I[M r+t, N r+c-1+d] * dO[M r+t, K c-1+d]
// No collective runs in any phase of a temporal layer: only ring shifts
// (shard.shift) and point-to-point transfers (stp.grid_permute).
//
// RUN: stpar-opt %s -stp-training-step="loss=mean-square" | FileCheck %s --check-prefix=IR
// RUN: stpar-opt %s -stp-training-step="loss=mean-square" -stp-partition | FileCheck %s
// RUN: stpar-opt %s -stp-training-step="loss=mean-square" -stp-partition | FileCheck %s --check-prefix=NOCOLL
//
// Numerics: the partitioned step computes the unpartitioned one (loss,
// gradients, updated weights) on 4 ranks, and on a 4x4 grid (16 ranks,
// q = 4: the regular steps run in an scf.for, G's last step is peeled).
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true" --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -stp-training-step="loss=mean-square return-gradients=true" -stp-partition --mlir-print-op-generic > %t.q2.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.q2.mlir 4 | FileCheck %s --check-prefix=SIM2
// SIM2: ok: 5 results match on 4 ranks
// RUN: sed -e 's/devices_per_node = 4/devices_per_node = 16/' -e 's/"x0" = 2, "x1" = 2/"x0" = 4, "x1" = 4/' -e 's/steps = 2/steps = 4/' %s > %t.q4.in.mlir
// RUN: stpar-opt %t.q4.in.mlir -stp-training-step="loss=mean-square return-gradients=true" --mlir-print-op-generic > %t.global4.mlir
// RUN: stpar-opt %t.q4.in.mlir -stp-training-step="loss=mean-square return-gradients=true" -stp-partition > %t.q4.mlir
// RUN: FileCheck %s --check-prefix=Q4 < %t.q4.mlir
// RUN: stpar-opt %t.q4.mlir --mlir-print-op-generic > %t.q4.generic.mlir
// RUN: rm -rf %t.q4.cuda && stpar emit --target cuda %t.q4.mlir -o %t.q4.cuda
// RUN: FileCheck %s --check-prefix=CUDA < %t.q4.cuda/program.cu
// RUN: %python %S/Inputs/spmd-sim.py %t.global4.mlir %t.q4.generic.mlir 16 | FileCheck %s --check-prefix=SIM4
// SIM4: ok: 5 results match on 16 ranks

// The gradient ops carry the forward op's temporal spec, with the loop
// kinds of their product: B reduces K (loop "k"), G reduces M and b.
// IR: stp.phase = "input_grad", stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8, "k" = 16 reduction, "n" = 16], temporal = <grid = ["x0", "x1"], matmul = ["s", "n", "k"], steps = 2>>
// IR: stp.phase = "weight_grad", stp.spec = #stp.spec<#mesh, loops = ["b" = 2 reduction, "s" = 8 reduction, "k" = 16, "n" = 16], temporal = <grid = ["x0", "x1"], matmul = ["s", "n", "k"], steps = 2>>

// F of the second layer: I and W permuted from their blocked layouts into
// step 0's slices, one ring shift each, two local products.
// CHECK-LABEL: func.func @main
// CHECK: stp.grid_permute {{.*}} sources = [0, 1, 3, 2] {{.*}}stp.plan_step = "/fc2/MatMul forward: temporal forward start: I from its blocked layout
// CHECK: stp.grid_permute {{.*}} sources = [0, 3, 2, 1] {{.*}}stp.plan_step = "/fc2/MatMul forward: temporal forward start: W from its blocked layout
// CHECK: shard.shift {{.*}} shift_axis = 1 offset = -1 {{.*}}"/fc2/MatMul forward: temporal forward step: next block of I: ring shift along x1 (receive from (r, c+1))"
// CHECK: shard.shift {{.*}} shift_axis = 0 offset = -1 {{.*}}"/fc2/MatMul forward: temporal forward step: next block of W: ring shift along x0 (receive from (r+1, c))"
//
// B of the second layer: dO arrives in its blocked layout (step 0's), W is
// F's last-step buffer (no transfer before B); W then comes from the
// upper-right neighbour (r-1, c+1), which is (r+1, c+1) for q = 2
// (diagonal: a point-to-point transfer), dO from the right; dI ends skewed
// and goes to its blocked layout.
// CHECK: stp.grid_permute {{.*}} sources = [3, 2, 1, 0] {{.*}}stp.plan_step = "/fc2/MatMul/grad0 input_grad: temporal input gradient step: next block of W: diagonal point-to-point transfer over x0,x1 (receive from (r+1, c+1))"}
// CHECK: shard.shift {{.*}}"/fc2/MatMul/grad0 input_grad: temporal input gradient step: next block of dO: ring shift along x1 (receive from (r, c+1))"
// CHECK: stp.grid_permute {{.*}}"/fc2/MatMul/grad0 input_grad: temporal input gradient end: dI to its blocked layout
//
// G of the second layer: I is F's stashed buffer, dO is B's last-step
// buffer (no transfer before G). q = 2: the only transition is the last
// one, where I comes from below, dO from the lower right and the partial
// dW moves to its final owner (from the right) while the last product
// runs; dW ends in W's home layout (N r+c, K c) and goes to its blocked
// layout.
// CHECK-NOT: temporal weight gradient start
// CHECK: shard.shift {{.*}}"/fc2/MatMul/grad1 weight_grad: temporal weight gradient step: next block of I: ring shift along x0 (receive from (r+1, c))"
// CHECK: stp.grid_permute {{.*}} sources = [3, 2, 1, 0] {{.*}}stp.plan_step = "/fc2/MatMul/grad1 weight_grad: temporal weight gradient step: next block of dO: diagonal point-to-point transfer over x0,x1 (receive from (r+1, c+1))"}
// CHECK: shard.shift {{.*}}"/fc2/MatMul/grad1 weight_grad: temporal weight gradient last step: partial dW to its final owner: ring shift along x1 (receive from (r, c+1))"
// CHECK: stp.grid_permute {{.*}}"/fc2/MatMul/grad1 weight_grad: temporal weight gradient end: dW to its blocked layout

// No all-reduce, all-gather, reduce-scatter, all-to-all or all-slice in
// any phase of either temporal layer.
// NOCOLL-NOT: shard.{{all_reduce|all_gather|reduce_scatter|all_to_all|all_slice}} {{.*}}"/fc{{[12]}}/MatMul{{[^ ]*}} {{[a-z_]+}}: {{[^t]}}

// q = 4: F and B run their three regular steps in one scf.for each; G's
// first two transitions are regular (I from (r+1, c-1), dO from below), the
// last one is peeled.
// Q4: scf.for
// Q4: "/fc2/MatMul forward: temporal forward step: next block of I: ring shift along x1 (receive from (r, c+1))"
// Q4: scf.for
// Q4: "/fc2/MatMul/grad0 input_grad: temporal input gradient step: next block of W: diagonal point-to-point transfer over x0,x1 (receive from (r-1, c+1))"
// Q4: scf.for
// Q4: "/fc2/MatMul/grad1 weight_grad: temporal weight gradient step: next block of I: diagonal point-to-point transfer over x0,x1 (receive from (r+1, c-1))"
// Q4: "/fc2/MatMul/grad1 weight_grad: temporal weight gradient step: next block of dO: ring shift along x0 (receive from (r+1, c))"
// Q4: "/fc2/MatMul/grad1 weight_grad: temporal weight gradient last step: partial dW to its final owner

// The emitted cuda step: the loop's transfers land in alternating buffers
// (double buffering), the diagonal ones as grid permutations (grouped
// ncclSend/ncclRecv in the runtime), the partial dW after the loop.
// CUDA: for (int64_t {{.*}}, ++step{{[0-9]+}}) {
// CUDA: = stpar_rt::at<float>(ctx, (step{{[0-9]+}} & 1 ? {{[0-9]+}}ULL : {{[0-9]+}}ULL), {{[0-9]+}});
// CUDA: stpar_rt::ringShift(ctx,
// CUDA: stpar_rt::gemm(ctx,
// CUDA: // stp.plan_step: /fc2/MatMul/grad0 input_grad: temporal input gradient step: next block of W
// CUDA: stpar_rt::gridPermute(ctx, {{[0-9]+}}, {{[0-9]+}}, stpar_rt::Shape{0, 1}, stpar_rt::Shape{
// CUDA: // stp.plan_step: /fc2/MatMul/grad1 weight_grad: temporal weight gradient last step: partial dW to its final owner
// CUDA-NEXT: auto
// CUDA-NEXT: stpar_rt::ringShift(ctx,

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
#i = affine_map<(b, s, k, n) -> (b, s, n)>
#w = affine_map<(b, s, k, n) -> (n, k)>
#o = affine_map<(b, s, k, n) -> (b, s, k)>
#id = affine_map<(b, s, k) -> (b, s, k)>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<2x8x16xf32> {stp.name = "x"},
                  %w1: tensor<16x16xf32> {stp.param = #stp.param<name = "w1", data = embedded, trainable = true>},
                  %w2: tensor<16x16xf32> {stp.param = #stp.param<name = "w2", data = embedded, trainable = true>})
      -> (tensor<2x8x16xf32> {stp.name = "y"}) {
    %cst = arith.constant 0.0 : f32
    %e = tensor.empty() : tensor<2x8x16xf32>
    %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %h = linalg.generic {indexing_maps = [#i, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w1 : tensor<2x8x16xf32>, tensor<16x16xf32>) outs(%z : tensor<2x8x16xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8, "k" = 16, "n" = 16 reduction],
               temporal = <grid = ["x0", "x1"], matmul = ["s", "n", "k"], steps = 2>>} {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x16xf32> loc("/fc1/MatMul")
    %e2 = tensor.empty() : tensor<2x8x16xf32>
    %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%h : tensor<2x8x16xf32>) outs(%e2 : tensor<2x8x16xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8 {"x0"}, "k" = 16 {"x1"}]>} {
    ^bb0(%a: f32, %o: f32):
      %v = math.tanh %a : f32
      linalg.yield %v : f32
    } -> tensor<2x8x16xf32> loc("/act/Tanh")
    %z2 = linalg.fill ins(%cst : f32) outs(%e : tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %y = linalg.generic {indexing_maps = [#i, #w, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%t, %w2 : tensor<2x8x16xf32>, tensor<16x16xf32>) outs(%z2 : tensor<2x8x16xf32>)
      attrs = {stp.spec = #stp.spec<#mesh, loops = ["b" = 2, "s" = 8, "k" = 16, "n" = 16 reduction],
               temporal = <grid = ["x0", "x1"], matmul = ["s", "n", "k"], steps = 2>>} {
    ^bb0(%a: f32, %b: f32, %acc: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %acc, %m : f32
      linalg.yield %s : f32
    } -> tensor<2x8x16xf32> loc("/fc2/MatMul")
    return %y : tensor<2x8x16xf32>
  }
}
