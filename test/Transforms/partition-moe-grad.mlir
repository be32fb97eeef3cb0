// RUN: stpar-opt %s -stp-partition | FileCheck %s
// RUN: stpar-opt %s -stp-partition | stpar-opt > /dev/null
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
// CHECK: %[[BACK:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all {{.*}}reverse
// CHECK: stp.moe_combine %[[BACK]], %[[S]], %[[E]], %[[G]]
// CHECK-NEXT: %[[DG:[0-9]+]] = stp.moe_gate_grad %[[BACK]], %[[S]], %[[E]], %[[DY:arg4]]
// CHECK-NEXT: %[[DB:[a-z0-9_]+]], %[[DC:[a-z0-9_]+]], %{{.*}} = stp.moe_dispatch %[[DY]], %[[E]] weighted %[[G]]
// CHECK-NEXT: %[[DR:[a-z0-9_]+]], %[[DRC:[a-z0-9_]+]] = stp.moe_all_to_all %[[DB]], %[[DC]] on @grid grid_axes = [1] {routed_rows = 8 : i64, stp.plan_step = "/moe/grad input_grad: all-to-all dispatching the output gradient to the experts over x1 (expert parallelism, backward)"}
// CHECK-NEXT: %[[DROWS:[a-z0-9_]+]], %[[DW1:[a-z0-9_]+]], %[[DW2:[a-z0-9_]+]] = stp.moe_experts_grad %[[DR]] of %[[ROWS]], %[[COUNTS]] experts %arg2 down %arg3 {activation = "gelu"} : {{.*}} -> (tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>)
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
