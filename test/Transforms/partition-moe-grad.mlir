// RUN: stpar-opt %s -stp-partition -split-input-file | FileCheck %s
// RUN: stpar-opt %s -stp-partition -split-input-file | stpar-opt -split-input-file > /dev/null
//
// Each case run unpartitioned (stp.moe_grad densely: every expert on
// every token, weighted by the top-k gates) and as the SPMD program on all
// ranks (collectives simulated with numpy, Inputs/spmd-sim.py) gives the
// same results and gradients.
// RUN: stpar-opt %s -split-input-file --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -split-input-file -stp-partition --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM-COUNT-5: ok: 5 results match on 4 ranks
// SIM-NOT: MISMATCH
//
// The backward of an stp.moe (stp.moe_grad, made by -stp-training-step)
// under expert parallelism inside data parallelism on 2 x 2 (tokens over
// x0 and x1, experts over x1), routed like its forward (docs/moe.md,
// "Training"): it reuses the forward's routing, slots, returned outputs
// and received rows; the gates' gradient and dy times the gates on the
// tokens' ranks; one all-to-all to the experts' ranks and one back; the
// experts' weight gradients summed over x0 (their replicas), the router's
// over every token axis. (Gradients against PyTorch:
// test/Verify/moe-train.test.)

// CHECK-LABEL: func.func @main(
// CHECK: %[[G:[a-z0-9_]+]], %[[E:[a-z0-9_]+]] = stp.moe_route
// CHECK: %{{.*}}, %{{.*}}, %[[S:[a-z0-9_]+]] = stp.moe_dispatch
// CHECK: %[[ROWS:[a-z0-9_]+]], %[[COUNTS:[a-z0-9_]+]] = stp.moe_all_to_all
// CHECK: %{{.*}}, %[[A:[a-z0-9_]+]] = stp.moe_experts %[[ROWS]], %[[COUNTS]] {{.*}} -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>)
// CHECK: %[[BACK:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all {{.*}}reverse
// CHECK: stp.moe_combine %[[BACK]], %[[S]], %[[E]], %[[G]]
// CHECK-NEXT: %[[DG:[0-9]+]] = stp.moe_gate_grad %[[BACK]], %[[S]], %[[E]], %[[DY:arg4]]
// CHECK-NEXT: %[[DB:[a-z0-9_]+]], %[[DC:[a-z0-9_]+]], %{{.*}} = stp.moe_dispatch %[[DY]], %[[E]] weighted %[[G]]
// CHECK-NEXT: %[[DR:[a-z0-9_]+]], %[[DRC:[a-z0-9_]+]] = stp.moe_all_to_all %[[DB]], %[[DC]] on @grid grid_axes = [1] {routed_rows = 8 : i64, stp.plan_step = "/moe/grad input_grad: all-to-all dispatching the output gradient to the experts over x1 (expert parallelism, backward)"}
// CHECK-NEXT: %[[DROWS:[a-z0-9_]+]], %[[DW1:[a-z0-9_]+]], %[[DW2:[a-z0-9_]+]] = stp.moe_experts_grad %[[DR]] of %[[ROWS]], %[[COUNTS]] experts %arg2 down %arg3 hidden %[[A]] {activation = "gelu"} : {{.*}} -> (tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>)
// CHECK-NEXT: %[[DBACK:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all %[[DROWS]], %[[DRC]] on @grid grid_axes = [1] {reverse
// CHECK: %[[DXE:[0-9]+]] = stp.moe_combine %[[DBACK]], %[[S]], %[[E]], %{{[0-9]+}}
// CHECK-NEXT: %[[DX:[a-z0-9_]+]], %[[DRT:[a-z0-9_]+]] = stp.moe_route_grad %[[DG]] of %arg0, %arg1, %[[E]]
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[DXE]] : tensor<4x16xf32>) outs(%[[DX]] : tensor<4x16xf32>)
// CHECK: shard.all_reduce %[[DRT]] on @grid grid_axes = [0, 1] {stp.plan_step = "/moe/grad grad_sum: all-reduce of the partial sum over x0,x1
// CHECK: shard.all_reduce %[[DW1]] on @grid grid_axes = [0] {stp.plan_step = "/moe/grad grad_sum: all-reduce of the partial sum over x0
// CHECK: shard.all_reduce %[[DW2]] on @grid grid_axes = [0] {stp.plan_step = "/moe/grad grad_sum

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0", "x1"}, "h" = 16, "e" = 4 experts {"x1"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    %dx, %dr, %dw1, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.phase = "input_grad",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0", "x1"}, "h" = 16, "e" = 4 experts {"x1"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %y, %dx, %dr, %dw1, %dw2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  }
}

// -----

// Smart scheduling (groups of 1: 4 steps) with gated experts on EP 4: the
// backward runs the forward's steps, each step's experts on the rows that
// step received and the A and U it kept, the weight gradients summed over
// the steps.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: func.func @main(
// CHECK-COUNT-4: %{{.*}}, %{{.*}}:2 = stp.moe_experts
// CHECK: stp.moe_dispatch %arg5, %{{.*}} weighted
// CHECK-COUNT-4: stp.moe_experts_grad {{.*}} hidden %{{.*}}#0, %{{.*}}#1
// CHECK: stp.moe_route_grad
// CHECK-NOT: stp.moe_experts_grad
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) {
    %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>,
        stp.plan_ops = [{moe = {schedule_group_size = 1 : i64}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    %dx, %dr, %dw1, %dw3, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 gated %w3 down %w2
        {top_k = 2 : i64, normalize, activation = "silu", stp.phase = "input_grad",
         stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>,
           tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %y, %dx, %dr, %dw1, %dw3 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>
  }
}

// -----

// Expert parallelism over x0 with each expert's hidden dim over x1 (EP 2 x
// TP 2): the tokens' gradient is a partial sum over x1, reduced where it
// is returned; the router's gradient sums over x0 and x1.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK-LABEL: func.func @main(
// CHECK: stp.moe_experts_grad {{.*}} -> (tensor<2x16x16xf32>, tensor<2x16x4xf32>, tensor<2x4x16xf32>)
// CHECK: shard.all_reduce %{{.*}} on @grid grid_axes = [1] {stp.plan_step = "/moe/grad input_grad: all-reduce of the partial sum over x1
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 1 : i64, activation = "relu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8 {"x1"}]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    %dx, %dr, %dw1, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 down %w2 {top_k = 1 : i64, activation = "relu",
        stp.phase = "input_grad",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8 {"x1"}]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %y, %dx, %dr, %dw1, %dw2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  }
}

// -----

// FasterMoE's dynamic shadowing (Sec. 4.1) of experts 0 and 3 on EP 4 in
// 2 smart-schedule steps, gated experts: their owners broadcast their
// weights (one stp.moe_shadow_broadcast per weight matrix), every rank
// runs them on its own rows (sent as count 0) with the first step's
// experts, their outputs join the returned rows before the combine; in the
// backward their rows' gradients stay too and their weight gradients are
// reduced to the owners (stp.moe_shadow_reduce into the owners' own
// gradients).
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: func.func @main(
// CHECK: %[[B:[a-z0-9_]+]], %{{.*}}, %[[SL:[a-z0-9_]+]] = stp.moe_dispatch %arg0
// CHECK: %[[WI:[0-9]+]] = stp.moe_shadow_broadcast %arg2 on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64, stp.plan_step = "/moe forward: broadcast of the shadowed experts' weights from their owners over x0 (FasterMoE shadowing, 2 expert(s))"} : (tensor<1x16x8xf32>) -> tensor<2x16x8xf32>
// CHECK: %[[WM:[0-9]+]] = stp.moe_shadow_broadcast %arg3
// CHECK: %[[WO:[0-9]+]] = stp.moe_shadow_broadcast %arg4 {{.*}} : (tensor<1x8x16xf32>) -> tensor<2x8x16xf32>
// CHECK: %[[R0:.*]] = tensor.extract_slice %[[B]][0, 0, 0] [1, 4, 16] [1, 1, 1]
// CHECK: %[[R3:.*]] = tensor.extract_slice %[[B]][3, 0, 0] [1, 4, 16] [1, 1, 1]
// CHECK: %[[SR:.*]] = tensor.concat dim(0) %[[R0]], %[[R3]]
// CHECK: stp.moe_all_to_all
// CHECK: %[[SO:[a-z0-9_]+]], %[[SH:[a-z0-9_]+]]:2 = stp.moe_experts %[[SR]], %{{.*}} experts %[[WI]] gated %[[WM]] down %[[WO]] {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: stp.moe_experts
// CHECK: stp.moe_all_to_all {{.*}}reverse
// CHECK: stp.moe_all_to_all {{.*}}reverse
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[3, 0, 0] [1, 4, 16] [1, 1, 1]
// CHECK: stp.moe_combine
// CHECK: stp.moe_dispatch %arg5, %{{.*}} weighted
// CHECK: stp.moe_experts_grad %{{.*}} of %[[SR]], %{{.*}} experts %[[WI]] gated %[[WM]] down %[[WO]] hidden %[[SH]]#0, %[[SH]]#1
// CHECK: stp.moe_shadow_reduce %{{.*}} into %{{.*}} on @grid grid_axes = [0] experts = [0, 3] {num_experts = 4 : i64, stp.plan_step = "/moe/grad input_grad: reduce of the shadowed experts' weight gradients to their owners over x0 (FasterMoE shadowing, 2 expert(s))"} : (tensor<2x16x8xf32>, tensor<1x16x8xf32>) -> tensor<1x16x8xf32>
// CHECK-COUNT-2: stp.moe_shadow_reduce
// CHECK: stp.moe_route_grad
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
    %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>,
        stp.plan_ops = [{moe = {schedule_group_size = 2 : i64, shadowed_experts = [3 : i64, 0 : i64]}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    %dx, %dr, %dw1, %dw3, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 gated %w3 down %w2
        {top_k = 2 : i64, normalize, activation = "silu", stp.phase = "input_grad",
         stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>,
           tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %y, %dx, %dr, %dw1, %dw2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  }
}

// -----

// Shadowing under EP inside DP (tokens over x0 and x1, experts over x1)
// with expert 1 shadowed. Its
// gradient is reduced to its owner over x1, then summed over x0 with the
// other experts' gradients (the gradient sync).
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK-LABEL: func.func @main(
// CHECK: stp.moe_shadow_broadcast %arg2 on @grid grid_axes = [1] experts = [1] {{.*}} : (tensor<2x16x8xf32>) -> tensor<1x16x8xf32>
// CHECK: %[[DW1:[0-9]+]] = stp.moe_shadow_reduce %{{.*}} into %{{.*}} on @grid grid_axes = [1] experts = [1]
// CHECK: shard.all_reduce %[[DW1]] on @grid grid_axes = [0] {stp.plan_step = "/moe/grad grad_sum: all-reduce of the partial sum over x0
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>, %dy: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0", "x1"}, "h" = 16, "e" = 4 experts {"x1"}, "f" = 8]>,
        stp.plan_ops = [{moe = {shadowed_experts = [1 : i64]}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    %dx, %dr, %dw1, %dw2 = stp.moe_grad %dy of %y, %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.phase = "input_grad",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0", "x1"}, "h" = 16, "e" = 4 experts {"x1"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>)
        -> (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) loc("/moe/grad")
    return %y, %dx, %dr, %dw1, %dw2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  }
}
