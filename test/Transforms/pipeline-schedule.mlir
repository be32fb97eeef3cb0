// -stp-pipeline-schedule: the plan's pipeline schedule as per-rank slot
// lists (docs/pipeline-parallel.md). The bubble and in-flight counts beside
// them are checked against a simulation of the lists in
// pipeline-schedule-bubble.test.

// 1F1B from the plan (2 stages, 4 micro-batches): rank 0 warms up with one
// forward, the last rank with none; the bubble is p - 1 slots, rank r
// holds p - r micro-batches.
// RUN: stpar-opt --stp-pipeline-schedule %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: module attributes
// CHECK-SAME: bubble_slots = 1.000000e+00 : f64
// CHECK-SAME: in_flight = [2.000000e+00, 1.000000e+00]
// CHECK-SAME: kind = "1f1b"
// CHECK-SAME: micro_batches = 4 : i64
// CHECK-SAME: ranks = {{\[}}["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"], ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]]
// CHECK-SAME: stages = 2 : i64, virtual_stages = 1 : i64
module attributes {stp.plan = {mesh = {pipeline_stages = 2 : i64, micro_batches = 4 : i64, interleave = 1 : i64}}} {}

// -----

// Interleaved from the plan's virtual stages (p = 2, v = 2, m = 4):
// micro-batches in groups of p through chunk 0, then chunk 1; rank 0 warms
// up with (p - 1) * 2 + (v - 1) * p = 4 chunk slots and holds 5 chunks
// (2.5 micro-batches); the bubble is (p - 1) / v.
// CHECK-LABEL: module attributes
// CHECK-SAME: bubble_slots = 5.000000e-01 : f64
// CHECK-SAME: in_flight = [2.500000e+00, 1.500000e+00]
// CHECK-SAME: kind = "interleaved"
// CHECK-SAME: ["F0.0", "F1.0", "F0.1", "F1.1", "F2.0", "B0.1", "F3.0", "B1.1", "F2.1", "B0.0", "F3.1", "B1.0", "B2.1", "B3.1", "B2.0", "B3.0"]
// CHECK-SAME: virtual_stages = 2 : i64
module attributes {stp.plan = {mesh = {pipeline_stages = 2 : i64, micro_batches = 4 : i64, interleave = 2 : i64}}} {}

// -----

// expected-error @+1 {{interleaved 1F1B: the 6 micro-batches are not a multiple of the 4 pipeline stages}}
module attributes {stp.plan = {mesh = {pipeline_stages = 4 : i64, micro_batches = 6 : i64, interleave = 2 : i64}}} {}

// -----

// expected-error @+1 {{the module has no plan with pipeline_stages and micro_batches}}
module {}

// GPipe by option, on a module without a plan: all forwards, then all
// backwards; every rank holds all m micro-batches.
// RUN: echo 'module {}' | stpar-opt --stp-pipeline-schedule='kind=gpipe stages=2 micro-batches=3' \
// RUN:   | FileCheck %s --check-prefix=GPIPE
// GPIPE: bubble_slots = 1.000000e+00 : f64, in_flight = [3.000000e+00, 3.000000e+00], kind = "gpipe"
// GPIPE-SAME: ranks = {{\[}}["F0", "F1", "F2", "B0", "B1", "B2"], ["F0", "F1", "F2", "B0", "B1", "B2"]]

// RUN: echo 'module {}' | not stpar-opt --stp-pipeline-schedule='kind=zigzag stages=2 micro-batches=2' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=KIND
// KIND: error: -stp-pipeline-schedule: unknown kind 'zigzag' (gpipe, 1f1b or interleaved)
// RUN: echo 'module {}' | not stpar-opt --stp-pipeline-schedule='kind=1f1b stages=2 micro-batches=4 virtual-stages=2' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CHUNKS
// CHUNKS: error: -stp-pipeline-schedule: 1f1b has one model chunk per rank (v=1), got v=2
