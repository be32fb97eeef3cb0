//===- TrainingStep.h - cost of one training step ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// What one training step costs, as `stpar cost` prints it: the
// breakdown (StepBreakdown) the search objective's cost splits into
// (search::Instance::getBreakdown, the one step composition; docs/search.md
// "Objective", docs/cost-model.md), with a table and a JSON printer and
// reader. step = (m + (p-1)/v) x micro-batch time + exposed gradient sync
// + optimizer (Narayanan et al., SC'21, Sec. 2.2: bubble fraction
// (p-1)/(v m)).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_TRAININGSTEP_H
#define STPAR_COST_TRAININGSTEP_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/Operator.h"
#include "stpar/Cost/OperatorCost.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace stpar::cost {

/// Activation recomputation. Full: every recomputable operator of a layer
/// re-runs its forward before the layer's backward, and only the layer's
/// input is stashed (the checkpoint). Selective (Korthikanti et al., MLSys
/// 2023, Sec. 5): only the attention core (Operator::attentionCore) re-runs
/// and is not stashed; the other operators stash as without
/// recomputation. The values are those of `recompute=` in Megatron
/// specifications (0 none, 1 full, 2 selective).
enum class Recompute { None = 0, Full = 1, Selective = 2 };

/// "none", "full" or "selective".
const char *getRecomputeName(Recompute r);

/// Seconds per phase.
struct PhaseTimes {
  double forward = 0, recompute = 0, backwardInput = 0, backwardWeight = 0;
  /// Collectives of tensor/sequence partitions (not overlapped).
  double communication = 0;
  double getTotal() const {
    return forward + recompute + backwardInput + backwardWeight + communication;
  }
  PhaseTimes &operator+=(const PhaseTimes &o);
};

/// Peak bytes per device (on the critical stage).
struct MemoryBreakdown {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0,
         transient = 0;
  double getTotal() const {
    return parameters + gradients + optimizer + activations + transient;
  }
};

/// Everything `stpar cost` prints. Seconds, bytes, FLOPs.
struct StepBreakdown {
  int64_t numDevices = 0;
  int64_t microBatches = 0, pipelineStages = 0, interleave = 1;
  /// Per micro-batch on the critical stage (with boundStage: the
  /// objective's bound, layers / p of the layers plus embedding and head).
  PhaseTimes criticalStage;
  unsigned criticalStageIndex = 0;
  /// The critical stage is the search objective's bound (Instance::
  /// getBreakdown): layers / p of the layers plus the embedding and the
  /// head in full, not one stage of the plan; criticalStageIndex and
  /// peakMemoryStage are then meaningless.
  bool boundStage = false;
  /// Stage-boundary sends per micro-batch on the critical stage (forward
  /// activation + backward gradient, times v).
  double pipelineSend = 0;
  /// criticalStage total + pipelineSend.
  double microBatchTime = 0;
  /// (m + (p-1)/v) * microBatchTime.
  double pipelineTime = 0;
  /// The idle part: (p-1)/v * microBatchTime.
  double bubble = 0;
  /// Gradient synchronization over the data-parallel axes: all of it, and
  /// the part not hidden (each operator's sync behind its own backward;
  /// all of it without overlap).
  double gradSync = 0, gradSyncExposed = 0;
  /// Mixed-precision Adam update (memory-bound).
  double optimizer = 0;
  double stepTime = 0;
  /// Per step, whole mesh: F + B + G (model) and with recomputation
  /// (hardware).
  double modelFlops = 0, hardwareFlops = 0;
  /// modelFlops / stepTime / numDevices, FLOP/s.
  double modelFlopsPerDevice = 0;
  /// Model FLOPs utilization: modelFlopsPerDevice / peak.
  double mfu = 0;
  MemoryBreakdown peakMemory;
  unsigned peakMemoryStage = 0;
  double deviceCapacity = 0;
  bool fitsMemory = true;
  /// Per layer kind: seconds per step (m micro-batches), summed over the
  /// operators of that kind on all stages.
  std::vector<std::pair<std::string, PhaseTimes>> perLayerKind;
};

/// A table of the breakdown (units in every row).
void printBreakdown(llvm::raw_ostream &os, const StepBreakdown &b);

/// The breakdown as JSON (seconds, bytes, FLOP/s; keys in
/// docs/cost-model.md).
llvm::json::Value toJSON(const StepBreakdown &b);

/// Reads toJSON's output back (a plan file's "step" entry); false with
/// `path` naming the bad key.
bool fromJSON(const llvm::json::Value &v, StepBreakdown &b,
              llvm::json::Path path);

} // namespace stpar::cost

#endif // STPAR_COST_TRAININGSTEP_H
