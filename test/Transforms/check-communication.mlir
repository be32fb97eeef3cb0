// RUN: stpar-opt %s --split-input-file --stp-check-communication --verify-diagnostics -o /dev/null | FileCheck %s
// The plan <=> program check: per operator and phase, the elements every
// collective of the partitioned program sends (ring volume x loop trip
// counts) against the plan's "communication" records (sent_bytes /
// element_bytes per micro-batch x micro_batches).

// Agreeing: fc's partial sums (2 x 1/2 x 64 = 64 elements on a group of
// 2), a ring shift run 3 times in a loop (3 x 32), an all-slice (nothing);
// the gather of the result (labelled `return`) is not compared; gradient
// syncs are listed only.
// CHECK-LABEL: plan check: elements sent per device per step, by operator and phase (plan: per micro-batch x 1)
// CHECK: fc      forward                64             64  ok
// CHECK: ring    forward                96             96  ok
// CHECK: return  forward                 0             32  (not compared)
// CHECK: (all parameters) gradient sync 32 0 (not compared)
// CHECK: plan check: 2 of 2 (operator, phase) pairs agree (forward compared); element width: the program moves 4-byte elements, the plan costs 2-byte ones
#device = #stp.device<fp32 = 1.0e+13, hbm_capacity = 1000000000, hbm_bandwidth = 1.0e+12>
#cluster = #stp.cluster<name = "c", nodes = 1, devices_per_node = 4, device = #device, intra_node = <bandwidth = 1.0e+11, latency = 1.0e-06>, inter_node = <bandwidth = 1.0e+10, latency = 1.0e-05>>
module attributes {stp.partitioned, stp.mesh = #stp.mesh<#cluster, ["pp" = 1, "dp" = 2, "tp" = 2]>,
    stp.plan = {mesh = {micro_batches = 1 : i64}, communication = [
      {label = "fc", phase = "forward", kind = "all-reduce", axes = ["tp"], bytes = 128 : i64, element_bytes = 2 : i64, count = 1 : i64, sent_bytes = 128 : i64},
      {label = "ring", phase = "forward", kind = "ring-shift", axes = ["dp"], bytes = 64 : i64, element_bytes = 2 : i64, count = 3 : i64, sent_bytes = 192 : i64},
      {label = "fc", phase = "grad_sum", kind = "all-reduce", axes = ["dp"], bytes = 64 : i64, element_bytes = 2 : i64, count = 1 : i64, sent_bytes = 64 : i64}]}} {
  shard.grid @grid(shape = 2x2)
  func.func @main(%x: tensor<8x8xf32>, %y: tensor<4x8xf32>) -> tensor<8x8xf32> {
    %r = shard.all_reduce %x on @grid grid_axes = [1] reduction = sum {stp.plan_step = "fc forward: all-reduce of the partial sum over tp"} : tensor<8x8xf32> -> tensor<8x8xf32>
    %s = shard.all_slice %r on @grid grid_axes = [0] slice_axis = 0 {stp.plan_step = "fc forward: all-slice"} : tensor<8x8xf32> -> tensor<4x8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %l = scf.for %i = %c0 to %c3 step %c1 iter_args(%a = %y) -> (tensor<4x8xf32>) {
      %n = shard.shift %a on @grid grid_axes = [0] shift_axis = 0 offset = -1 rotate {stp.plan_step = "ring forward: temporal shift"} : tensor<4x8xf32> -> tensor<4x8xf32>
      scf.yield %n : tensor<4x8xf32>
    }
    %g = shard.all_gather %l on @grid grid_axes = [0] gather_axis = 0 {stp.plan_step = "return forward: all-gather"} : tensor<4x8xf32> -> tensor<8x8xf32>
    return %g : tensor<8x8xf32>
  }
}

// -----

// A deliberately wrong plan: it predicts no partial sums for fc, but the
// program all-reduces them; and it predicts a gather for proj that the
// program does not run.
// CHECK-LABEL: plan check: elements sent per device per step
// CHECK: fc      forward                 0             64  DIFFERS
// CHECK-NEXT: program: all-reduce over tp 64
// CHECK: proj    forward                48              0  DIFFERS
// CHECK-NEXT: plan:    all-gather over dp 48
// CHECK: plan check: 0 of 2 (operator, phase) pairs agree (forward compared)
#device = #stp.device<fp32 = 1.0e+13, hbm_capacity = 1000000000, hbm_bandwidth = 1.0e+12>
#cluster = #stp.cluster<name = "c", nodes = 1, devices_per_node = 4, device = #device, intra_node = <bandwidth = 1.0e+11, latency = 1.0e-06>, inter_node = <bandwidth = 1.0e+10, latency = 1.0e-05>>
// expected-error @below {{plan check: 2 of 2 (operator, phase) pairs communicate other than the plan predicts; first 'fc' forward: plan 0 elements (none), program 64 (all-reduce over tp 64)}}
module attributes {stp.partitioned, stp.mesh = #stp.mesh<#cluster, ["pp" = 1, "dp" = 2, "tp" = 2]>,
    stp.plan = {mesh = {micro_batches = 2 : i64}, communication = [
      {label = "proj", phase = "forward", kind = "all-gather", axes = ["dp"], bytes = 96 : i64, element_bytes = 4 : i64, count = 1 : i64, sent_bytes = 96 : i64}]}} {
  shard.grid @grid(shape = 2x2)
  func.func @main(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %r = shard.all_reduce %x on @grid grid_axes = [1] reduction = sum {stp.plan_step = "fc forward: all-reduce of the partial sum over tp"} : tensor<8x8xf32> -> tensor<8x8xf32>
    return %r : tensor<8x8xf32>
  }
}

// -----

// A training step (stp.training): an operator's gradient ops ("fc/grad0", "fc/grad1")
// count as the operator, and its input- and weight-gradient phases are
// compared together as "backward" (the plan's dX all-reduce against the
// program's reduction in whichever gradient op it lands).
// CHECK-LABEL: plan check: elements sent per device per step
// CHECK: fc      backward               64             64  ok
// CHECK: (all parameters) gradient sync 16 16 (not compared)
// CHECK: plan check: 1 of 1 (operator, phase) pairs agree (forward and backward compared)
#device = #stp.device<fp32 = 1.0e+13, hbm_capacity = 1000000000, hbm_bandwidth = 1.0e+12>
#cluster = #stp.cluster<name = "c", nodes = 1, devices_per_node = 4, device = #device, intra_node = <bandwidth = 1.0e+11, latency = 1.0e-06>, inter_node = <bandwidth = 1.0e+10, latency = 1.0e-05>>
module attributes {stp.partitioned, stp.training = {micro_batches = 1 : i64}, stp.mesh = #stp.mesh<#cluster, ["pp" = 1, "dp" = 2, "tp" = 2]>,
    stp.plan = {mesh = {micro_batches = 1 : i64}, communication = [
      {label = "fc", phase = "input_grad", kind = "all-reduce", axes = ["tp"], bytes = 128 : i64, element_bytes = 2 : i64, count = 1 : i64, sent_bytes = 128 : i64},
      {label = "fc", phase = "grad_sum", kind = "all-reduce", axes = ["dp"], bytes = 32 : i64, element_bytes = 2 : i64, count = 1 : i64, sent_bytes = 32 : i64}]}} {
  shard.grid @grid(shape = 2x2)
  func.func @main(%x: tensor<8x8xf32>, %g: tensor<4x4xf32>) -> (tensor<8x8xf32>, tensor<4x4xf32>) {
    %r = shard.all_reduce %x on @grid grid_axes = [1] reduction = sum {stp.plan_step = "fc/grad0 input_grad: all-reduce of the partial sum over tp"} : tensor<8x8xf32> -> tensor<8x8xf32>
    %s = shard.all_reduce %g on @grid grid_axes = [0] reduction = sum {stp.plan_step = "fc/grad1 grad_sum: all-reduce of the gradient over dp"} : tensor<4x4xf32> -> tensor<4x4xf32>
    return %r, %s : tensor<8x8xf32>, tensor<4x4xf32>
  }
}

// -----

// A forward program (no micro-batch loop) of a plan with 4 micro-batches:
// records that are a micro-batch's share (the I shift) count 4 times,
// those that are not (the W shift) once, as the program runs them.
// CHECK-LABEL: plan check: elements sent per device per step, by operator and phase (plan: per micro-batch x 4)
// CHECK-NEXT: plan check: the program runs 1 micro-batch(es), the plan 4
// CHECK: fc      forward               160            160  ok
#device = #stp.device<fp32 = 1.0e+13, hbm_capacity = 1000000000, hbm_bandwidth = 1.0e+12>
#cluster = #stp.cluster<name = "c", nodes = 1, devices_per_node = 4, device = #device, intra_node = <bandwidth = 1.0e+11, latency = 1.0e-06>, inter_node = <bandwidth = 1.0e+10, latency = 1.0e-05>>
module attributes {stp.partitioned, stp.mesh = #stp.mesh<#cluster, ["pp" = 1, "dp" = 2, "tp" = 2]>,
    stp.plan = {mesh = {micro_batches = 4 : i64}, communication = [
      {label = "fc", phase = "forward", kind = "ring-shift", axes = ["tp"], bytes = 64 : i64, element_bytes = 2 : i64, count = 1 : i64, per_micro_batch = true, sent_bytes = 64 : i64},
      {label = "fc", phase = "forward", kind = "ring-shift", axes = ["dp"], bytes = 64 : i64, element_bytes = 2 : i64, count = 1 : i64, per_micro_batch = false, sent_bytes = 64 : i64}]}} {
  shard.grid @grid(shape = 2x2)
  func.func @main(%i: tensor<8x16xf32>, %w: tensor<4x8xf32>) -> (tensor<8x16xf32>, tensor<4x8xf32>) {
    %a = shard.shift %i on @grid grid_axes = [1] shift_axis = 1 offset = -1 rotate {stp.plan_step = "fc forward: temporal shift of I"} : tensor<8x16xf32> -> tensor<8x16xf32>
    %b = shard.shift %w on @grid grid_axes = [0] shift_axis = 0 offset = -1 rotate {stp.plan_step = "fc forward: temporal shift of W"} : tensor<4x8xf32> -> tensor<4x8xf32>
    return %a, %b : tensor<8x16xf32>, tensor<4x8xf32>
  }
}

// -----

// expected-error @below {{plan check: the module has no plan ('stp.mesh' and 'stp.plan'): nothing to compare the program with}}
module attributes {stp.partitioned} {
  shard.grid @grid(shape = 2)
  func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

// expected-error @below {{plan check: the module is not partitioned (run -stp-partition first)}}
module {
  func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}
