//===- PipelineSchedule.h - Pipeline schedules and their costs --*- C++ -*-===//
//
// The schedules of pipeline parallelism as explicit lists of slots per
// pipeline rank (GPipe, 1F1B, interleaved 1F1B with virtual stages), a
// simulator that runs such lists with their data dependencies, and the
// closed forms the cost model charges (the bubble and the micro-batches a
// stage keeps in flight). The -stp-pipeline-schedule pass writes the lists
// into the IR; tests check the closed forms against the simulation.
//
// Sources: GPipe (Huang et al., NeurIPS 2019, Sec. 2.2: all forwards, then
// all backwards); 1F1B (PipeDream-Flush, Narayanan et al., ICML 2021,
// Sec. 3; Megatron-LM, Narayanan et al., SC'21, Sec. 2.2.1, Fig. 4 top);
// interleaved 1F1B (SC'21, Sec. 2.2.2, Fig. 4 bottom: model chunk c of rank
// r is virtual stage c * p + r; micro-batches go in groups of p).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_PIPELINESCHEDULE_H
#define STPAR_COST_PIPELINESCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::cost {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

/// "gpipe", "1f1b", "interleaved".
llvm::StringRef getScheduleName(ScheduleKind kind);
std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);

/// One slot of a rank's list: the forward (F) or backward (B, input and
/// weight gradients) of one micro-batch through one model chunk of the rank
/// (chunk 0 unless interleaved).
struct ScheduleSlot {
  bool forward = true;
  int64_t microBatch = 0;
  int64_t chunk = 0;
  /// "F3", "B0"; with virtual stages "F3.1" (chunk 1).
  std::string str(bool chunks) const;
  bool operator==(const ScheduleSlot &o) const {
    return forward == o.forward && microBatch == o.microBatch &&
           chunk == o.chunk;
  }
};

/// The shape of a schedule: p pipeline ranks, m micro-batches, v model
/// chunks (virtual stages) per rank.
struct ScheduleShape {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int64_t stages = 1, microBatches = 1, virtualStages = 1;
};

/// Each rank's slots in program order (every (micro-batch, chunk) once
/// forward and once backward). Errors: p, m or v < 1; v > 1 for GPipe or
/// 1F1B; interleaved with v < 2, p < 2 or m not a multiple of p (the
/// micro-batches go in groups of p, as Megatron-LM requires).
llvm::Expected<std::vector<std::vector<ScheduleSlot>>>
buildSchedule(const ScheduleShape &shape);

/// What running the lists takes when a forward of one micro-batch through
/// a whole stage (all v chunks) costs `forward` and its backward
/// `backward` (units of the caller's choice; a chunk costs 1/v of them).
/// A slot starts when its rank has finished the slot before it and its
/// inputs exist: F of virtual stage s after F of s - 1 (same micro-batch),
/// B of s after B of s + 1 and after F of s.
struct ScheduleRun {
  double makespan = 0;
  /// Per rank: makespan minus the rank's own work (m (F + B)).
  std::vector<double> idle;
  /// Per rank: the most micro-batches whose activations the rank holds at
  /// once (forwards done, backwards not), in whole-stage units (a chunk
  /// counts 1/v).
  std::vector<double> peakInFlight;
};

/// Errors: lists that deadlock (a slot waits on one its own rank runs
/// later), or that miss or repeat a slot.
llvm::Expected<ScheduleRun>
simulateSchedule(const ScheduleShape &shape,
                 const std::vector<std::vector<ScheduleSlot>> &ranks,
                 double forward, double backward);

/// The bubble the cost model charges, in micro-batch slots of one stage
/// (F + B each): p - 1 for GPipe and 1F1B, (p - 1) / v interleaved
/// (SC'21, Eq. 1 and Sec. 2.2.2). A step takes m + bubble slots.
double getBubbleSlots(const ScheduleShape &shape);

/// The micro-batches rank `stage` keeps in flight (whole-stage units): m
/// for GPipe; min(p - stage, m) for 1F1B; interleaved, rank r holds
/// min((p - r - 1) * 2 + (v - 1) * p + 1, m v) chunks (Megatron-LM's
/// warm-up count plus the one in steady state), i.e. for r = 0 and m >= p
/// p (1 + (p - 1) / (p v)) stages (Korthikanti et al., MLSys 2023,
/// Sec. 4.2.3).
double getInFlight(const ScheduleShape &shape, int64_t stage);

} // namespace stpar::cost

#endif // STPAR_COST_PIPELINESCHEDULE_H
