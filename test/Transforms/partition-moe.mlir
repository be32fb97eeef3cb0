// RUN: stpar-opt %s -stp-partition -split-input-file | FileCheck %s
// RUN: stpar-opt %s -stp-partition -split-input-file | stpar-opt -split-input-file > /dev/null
//
// stp.moe under expert parallelism (docs/moe.md, docs/partition.md). Each
// case run unpartitioned and as the SPMD program on all ranks (collectives
// simulated with numpy, Inputs/spmd-sim.py) gives the same results.
// RUN: stpar-opt %s -split-input-file --mlir-print-op-generic > %t.global.mlir
// RUN: stpar-opt %s -split-input-file -stp-partition --mlir-print-op-generic > %t.spmd.mlir
// RUN: %python %S/Inputs/spmd-sim.py %t.global.mlir %t.spmd.mlir 8 | FileCheck %s --check-prefix=SIM
// SIM-COUNT-6: ok: {{[0-9]+}} results match on 4 ranks
// SIM-NOT: MISMATCH

// Expert parallelism over all 4 devices: each rank routes its 4 tokens,
// dispatches them into a [4 experts, 4 rows, 16] buffer (capacity = its
// tokens: nothing is dropped), sends the used rows of each expert (8 in
// all: 4 tokens x top-2; the counts travel first) to the expert's rank,
// runs its one expert on the used rows of the 4 x 4 it may receive, sends
// the results back the same way and combines them with the gates.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: module attributes
// CHECK: func.func @main(%[[X:[a-z0-9_]+]]: tensor<4x16xf32> {stp.split = {{\[\[0\], \[\]\]}}},
// CHECK-SAME: %[[R:[a-z0-9_]+]]: tensor<16x4xf32> {stp.split = {{\[\[\], \[\]\]}}},
// CHECK-SAME: %[[W1:[a-z0-9_]+]]: tensor<1x16x8xf32> {stp.split = {{\[\[0\], \[\], \[\]\]}}},
// CHECK-SAME: %[[W3:[a-z0-9_]+]]: tensor<1x16x8xf32> {stp.split = {{\[\[0\], \[\], \[\]\]}}},
// CHECK-SAME: %[[W2:[a-z0-9_]+]]: tensor<1x8x16xf32> {stp.split = {{\[\[0\], \[\], \[\]\]}}})
// CHECK: %[[G:[a-z0-9_]+]], %[[E:[a-z0-9_]+]] = stp.moe_route %[[X]], %[[R]] {normalize, top_k = 2 : i64} : (tensor<4x16xf32>, tensor<16x4xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
// CHECK-NEXT: %[[B:[a-z0-9_]+]], %[[C:[a-z0-9_]+]], %[[S:[a-z0-9_]+]] = stp.moe_dispatch %[[X]], %[[E]] : (tensor<4x16xf32>, tensor<4x2xi64>) -> (tensor<4x4x16xf32>, tensor<4x1xi64>, tensor<4x2xi64>)
// CHECK-NEXT: %[[RB:[a-z0-9_]+]], %[[RC:[a-z0-9_]+]] = stp.moe_all_to_all %[[B]], %[[C]] on @grid grid_axes = [0] {routed_rows = 8 : i64, stp.plan_step = "/moe forward: all-to-all dispatching the tokens to their experts over x0 (expert parallelism; 8 rows per device, buffers of 4 rows per expert)"} : (tensor<4x4x16xf32>, tensor<4x1xi64>) -> (tensor<1x16x16xf32>, tensor<1x4xi64>)
// CHECK-NEXT: %[[O:[a-z0-9_]+]] = stp.moe_experts %[[RB]], %[[RC]] experts %[[W1]] gated %[[W3]] down %[[W2]] {activation = "silu"} : (tensor<1x16x16xf32>, tensor<1x4xi64>, tensor<1x16x8xf32>, tensor<1x16x8xf32>, tensor<1x8x16xf32>) -> tensor<1x16x16xf32>
// CHECK-NEXT: %[[BACK:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all %[[O]], %[[RC]] on @grid grid_axes = [0] {reverse, routed_rows = 8 : i64, {{.*}}} : (tensor<1x16x16xf32>, tensor<1x4xi64>) -> (tensor<4x4x16xf32>, tensor<4x1xi64>)
// CHECK-NEXT: %[[Y:[a-z0-9_]+]] = stp.moe_combine %[[BACK]], %[[S]], %[[E]], %[[G]] : (tensor<4x4x16xf32>, tensor<4x2xi64>, tensor<4x2xi64>, tensor<4x2xf32>) -> tensor<4x16xf32>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    return %y : tensor<16x16xf32>
  }
}

// -----

// Expert parallelism inside data parallelism (BaGuaLu's hybrid) on 2 x 2:
// tokens over x0 and x1, experts over x1 only; the all-to-alls run in
// groups of 2 (grid_axes = [1]) and each expert is held by 2 ranks.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK-LABEL: module attributes
// CHECK: func.func @main(%{{.*}}: tensor<4x16xf32> {stp.split = {{\[\[0, 1\], \[\]\]}}},
// CHECK-SAME: tensor<2x16x8xf32> {stp.split = {{\[\[1\], \[\], \[\]\]}}},
// CHECK: stp.moe_dispatch {{.*}} -> (tensor<4x4x16xf32>, tensor<4x1xi64>, tensor<4x2xi64>)
// CHECK: stp.moe_all_to_all {{.*}} grid_axes = [1] {routed_rows = 8 : i64{{.*}} : (tensor<4x4x16xf32>, tensor<4x1xi64>) -> (tensor<2x8x16xf32>, tensor<2x2xi64>)
// CHECK: stp.moe_experts {{.*}} -> tensor<2x8x16xf32>
// CHECK: stp.moe_all_to_all {{.*}} grid_axes = [1] {reverse, {{.*}} : (tensor<2x8x16xf32>, tensor<2x2xi64>) -> (tensor<4x4x16xf32>, tensor<4x1xi64>)
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0", "x1"}, "h" = 16, "e" = 4 experts {"x1"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    return %y : tensor<16x16xf32>
  }
}

// -----

// Expert parallelism over x0 with tensor parallelism inside the experts
// over x1: each rank holds half of each of its experts' hidden dim, so the
// experts' outputs are partial sums over x1; they stay partial through the
// return all-to-all and the (linear) combine, and are all-reduced once, on
// the layer's [tokens, h] result.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK-LABEL: module attributes
// CHECK: func.func @main(%{{.*}}: tensor<8x16xf32> {stp.split = {{\[\[0\], \[\]\]}}},
// CHECK-SAME: tensor<2x16x4xf32> {stp.split = {{\[\[0\], \[\], \[1\]\]}}},
// CHECK-SAME: tensor<2x16x4xf32> {stp.split = {{\[\[0\], \[\], \[1\]\]}}},
// CHECK-SAME: tensor<2x4x16xf32> {stp.split = {{\[\[0\], \[1\], \[\]\]}}})
// CHECK: stp.moe_experts {{.*}} -> tensor<2x16x16xf32>
// CHECK: %[[Y:[a-z0-9_]+]] = stp.moe_combine {{.*}} -> tensor<8x16xf32>
// CHECK-NEXT: shard.all_reduce %[[Y]] on @grid grid_axes = [1] {{.*}}all-reduce of the partial sum over x1 (expert hidden dim f of the MoE experts split)
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8 {"x1"}]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    return %y : tensor<16x16xf32>
  }
}

// -----

// Experts over an axis that does not split the tokens: not expert
// parallelism; the layer runs replicated, reported.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2]>
// CHECK-LABEL: module attributes
// CHECK: stp.moe_dispatch {{.*}} -> (tensor<4x16x16xf32>, tensor<4x1xi64>, tensor<16x1xi64>)
// CHECK-NOT: stp.moe_all_to_all
// CHECK: stp.moe_combine {{.*}}stp.fallback = "expert parallelism over axes that do not split the tokens (or over micro-batches)"
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 1 : i64, activation = "relu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 {"x1"}, "f" = 8]>}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    return %y : tensor<16x16xf32>
  }
}

// -----

// FasterMoE's smart scheduling as the plan chose it (the operator record's
// moe.schedule_group_size, here groups of 1 of the 4 devices): the exchange
// in 4 pairwise steps; step s + 1's dispatch is issued before step s's
// return, so one step's rows travel while the previous step's experts run.
// Each return step fills the blocks of other experts, on top of the
// earlier steps' results (`into`).

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: module attributes
// CHECK: %[[B:[a-z0-9_]+]], %[[C:[a-z0-9_]+]], %{{.*}} = stp.moe_dispatch
// CHECK-NEXT: %[[R0:[a-z0-9_]+]], %[[C0:[a-z0-9_]+]] = stp.moe_all_to_all %[[B]], %[[C]] on @grid grid_axes = [0] {group_size = 1 : i64, routed_rows = 8 : i64, {{.*}}smart schedule step 1 of 4 (groups of 1)"}
// CHECK-NEXT: %[[O0:[a-z0-9_]+]] = stp.moe_experts %[[R0]], %[[C0]]
// CHECK-NEXT: %[[R1:[a-z0-9_]+]], %[[C1:[a-z0-9_]+]] = stp.moe_all_to_all %[[B]], %[[C]] on @grid grid_axes = [0] {group_size = 1 : i64, routed_rows = 8 : i64, step = 1 : i64
// CHECK-NEXT: %[[BACK0:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all %[[O0]], %[[C0]] on @grid grid_axes = [0] {group_size = 1 : i64, reverse, routed_rows = 8 : i64
// CHECK-NEXT: %[[O1:[a-z0-9_]+]] = stp.moe_experts %[[R1]], %[[C1]]
// CHECK-NEXT: stp.moe_all_to_all %[[B]], %[[C]] {{.*}}step = 2 : i64
// CHECK-NEXT: %[[BACK1:[a-z0-9_]+]], %{{.*}} = stp.moe_all_to_all %[[O1]], %[[C1]] into %[[BACK0]] on @grid grid_axes = [0] {group_size = 1 : i64, reverse, routed_rows = 8 : i64, step = 1 : i64
// CHECK-COUNT-3: stp.moe_all_to_all
// CHECK-NOT: stp.moe_all_to_all
// CHECK: stp.moe_combine
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 gated %w3 down %w2 {top_k = 2 : i64, normalize, activation = "silu",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>,
        stp.plan_ops = [{moe = {schedule_group_size = 1 : i64}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32> loc("/moe")
    return %y : tensor<16x16xf32>
  }
}

// -----

// Groups of 2: 2 steps, the first with the device's own group.

#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 4]>
// CHECK-LABEL: module attributes
// CHECK-COUNT-4: stp.moe_all_to_all {{.*}}group_size = 2 : i64
// CHECK-NOT: stp.moe_all_to_all
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<16x16xf32>, %r: tensor<16x4xf32>, %w1: tensor<4x16x8xf32>,
                  %w2: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %y = stp.moe %x, %r experts %w1 down %w2 {top_k = 2 : i64, activation = "gelu_tanh",
        stp.spec = #stp.spec<#mesh, loops = ["n" = 16 {"x0"}, "h" = 16, "e" = 4 experts {"x0"}, "f" = 8]>,
        stp.plan_ops = [{moe = {schedule_group_size = 2 : i64}}]}
        : (tensor<16x16xf32>, tensor<16x4xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    return %y : tensor<16x16xf32>
  }
}
