// RUN: stpar-opt %S/../Target/Inputs/collectives-2x2.mlir --stp-schedule-collectives --stp-plan-memory --stp-lower-collectives | FileCheck %s
// RUN: not stpar-opt %s --split-input-file --stp-lower-collectives 2>&1 | FileCheck %s --check-prefix=ERR
// Each collective becomes the runtime call that performs it, with its
// events, communicator axes and the memory plan's buffer kept; each wait a
// call right before the op that first uses the result.

// CHECK-LABEL: func.func @main
// CHECK: %[[G:.*]] = emitc.call_opaque "stpar_rt::allGather"(%arg0) {args = [#emitc.opaque<"ctx">, 0, 1, #emitc.opaque<"stpar_rt::Shape{1}">, #emitc.opaque<"stpar_rt::Shape{2, 4}">, 1, 0 : index], stp.buffers = array<i64: {{[0-9]+}}>, stp.collective = "shard.all_gather", stp.events = array<i64: 0, 1>, stp.grid_axes = array<i16: 1>, stp.plan_step = "x: gather columns"} : (tensor<2x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: emitc.call_opaque "stpar_rt::waitTransfer"() {args = [#emitc.opaque<"ctx">, 1]} : () -> ()
// CHECK-NEXT: emitc.call_opaque "stpar_rt::allGather"(%[[G]])
// CHECK-NOT: stp.waits
// CHECK: "stpar_rt::allReduce"(%arg0) {args = [#emitc.opaque<"ctx">, 4, 5, #emitc.opaque<"stpar_rt::Shape{0, 1}">, #emitc.opaque<"stpar_rt::Reduction::Sum">, 0 : index]
// CHECK: "stpar_rt::reduceScatter"({{.*}}#emitc.opaque<"stpar_rt::Reduction::Sum">, #emitc.opaque<"stpar_rt::Shape{4, 8}">, 0, 0 : index]
// All-slice is local: no events, no communicator.
// CHECK: "stpar_rt::allSlice"({{.*}}) {args = [#emitc.opaque<"ctx">, #emitc.opaque<"stpar_rt::Shape{1}">, #emitc.opaque<"stpar_rt::Shape{4, 8}">, 1, 0 : index], stp.buffers = array<i64: {{[0-9]+}}>, stp.collective = "shard.all_slice", stp.plan_step
// CHECK: "stpar_rt::allToAll"(%arg0) {args = [#emitc.opaque<"ctx">, 12, 13, #emitc.opaque<"stpar_rt::Shape{1}">, #emitc.opaque<"stpar_rt::Shape{2, 4}">, 0, 1, 0 : index]
// CHECK: "stpar_rt::ringShift"(%arg0) {args = [#emitc.opaque<"ctx">, 16, 17, 1, 1, #emitc.opaque<"true">, 0 : index]
// The temporal loop: the shifts (first in the body) write the even/odd
// buffers and are waited for at the yield.
// CHECK: scf.for
// CHECK: "stpar_rt::ringShift"({{.*}}) {args = [#emitc.opaque<"ctx">, {{[0-9]+}}, [[D1:[0-9]+]], 1, -1, #emitc.opaque<"true">, 0 : index], stp.buffers = {{.*}}stp.double_buffer
// CHECK-SAME: stp.odd_buffers
// CHECK-NEXT: "stpar_rt::ringShift"({{.*}}) {args = [#emitc.opaque<"ctx">, {{[0-9]+}}, [[D2:[0-9]+]], 0, -1,
// CHECK-NEXT: linalg.matmul
// CHECK-NEXT: emitc.call_opaque "stpar_rt::waitTransfer"() {args = [#emitc.opaque<"ctx">, [[D1]]]}
// CHECK-NEXT: emitc.call_opaque "stpar_rt::waitTransfer"() {args = [#emitc.opaque<"ctx">, [[D2]]]}
// CHECK-NEXT: scf.yield

// -----

module attributes {stp.partitioned} {
  shard.grid @grid(shape = 2)
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    // ERR: error: cannot lower 'shard.all_reduce': it has no stp.events (run -stp-schedule-collectives)
    %r = shard.all_reduce %x on @grid grid_axes = [0] : tensor<2xf32> -> tensor<2xf32>
    return %r : tensor<2xf32>
  }
}
