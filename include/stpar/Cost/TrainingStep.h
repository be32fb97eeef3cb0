//===- TrainingStep.h - cost of one training step ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The entry point the driver and the search call: (operators, mesh, cluster,
// training config) -> StepBreakdown, with a table and a JSON printer.
// step = m' * t_stage + exposed gradient sync + optimizer, with
// m' = m + (p-1)/v micro-batch slots for 1F1B (Narayanan et al., SC'21,
// Sec. 2.2, bubble fraction (p-1)/(v m)); docs/cost-model.md.
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

/// How the step is run. Operators describe one micro-batch.
struct TrainingConfig {
  /// Micro-batches per step per pipeline (m).
  int64_t microBatches = 1;
  /// Pipeline stages (p); every Operator::stage is < p.
  int64_t pipelineStages = 1;
  /// Interleaved 1F1B: model chunks per device (v >= 1; 1 = plain 1F1B).
  int64_t interleave = 1;
  /// The mesh axis the stages lie along (splits no loop); placement of the
  /// stage-boundary sends.
  std::optional<unsigned> pipelineAxis;
  /// ZeRO stage 0-3 over each parameter's data-parallel axes.
  int zeroStage = 0;
  /// Activation recomputation (Recompute).
  Recompute recompute = Recompute::None;
  /// Each stage's gradient sync overlaps its backward of one micro-batch
  /// (exposed: max(0, sync - backward)); off: all of it is exposed.
  bool overlapGradSync = true;
};

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

/// Peak bytes per device (on the stage that peaks).
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
  /// Per micro-batch on the slowest stage.
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
  /// the part not hidden behind the last micro-batch's backward.
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

/// Costs one training step. Fails on malformed operators or a mesh larger
/// than the cluster.
llvm::Expected<StepBreakdown> evaluateTrainingStep(llvm::ArrayRef<Operator> ops,
                                                   const Mesh &mesh,
                                                   const Cluster &cluster,
                                                   const TrainingConfig &config,
                                                   const EfficiencyModel &eff);

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
