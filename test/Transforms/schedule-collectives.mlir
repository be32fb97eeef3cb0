// RUN: stpar-opt %S/../Target/Inputs/collectives-2x2.mlir --stp-schedule-collectives | FileCheck %s
// The decisions the emitters follow, in the IR: every communicating
// collective's two events, the compute stream's wait at the first use of
// each result (or at the block's end), the double-buffered ring shifts first
// in the loop body, the communicators in first-use order.

// CHECK-LABEL: func.func @main
// CHECK-SAME: stp.streams = {communicators = [array<i64: 1>, array<i64: 0>, array<i64: 0, 1>], events = 34 : i64}
// CHECK: %[[G:.*]] = shard.all_gather %arg0 {{.*}}stp.events = array<i64: 0, 1>
// CHECK-NOT: stp.waits
// CHECK: shard.all_gather %[[G]] {{.*}}stp.events = array<i64: 2, 3>, {{.*}}stp.waits = array<i64: 1>
// All-slice is a local copy: no events.
// CHECK: shard.all_slice
// CHECK-NOT: stp.events
// CHECK-SAME: : tensor
// The temporal loop: both shifts first (their operands are ready when the
// step starts), waited for at the yield, their first use.
// CHECK: scf.for
// CHECK-NEXT: shard.shift {{.*}}stp.double_buffer, stp.events = array<i64: [[R1:[0-9]+]], [[D1:[0-9]+]]>
// CHECK-NEXT: shard.shift {{.*}}stp.double_buffer, stp.events = array<i64: [[R2:[0-9]+]], [[D2:[0-9]+]]>
// CHECK: scf.yield {stp.waits = array<i64: [[D1]], [[D2]]>}
// Results nothing else uses are waited for before the return.
// CHECK: return {stp.waits = array<i64:
