//===- TrainingStep.cpp - cost of one training step -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The step breakdown's printers (table, JSON) and JSON reader; the cost
// itself is the search objective's (search::Instance::getBreakdown).
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/TrainingStep.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <optional>

using namespace llvm;

namespace stpar::cost {

const char *getRecomputeName(Recompute r) {
  switch (r) {
  case Recompute::None:
    return "none";
  case Recompute::Full:
    return "full";
  case Recompute::Selective:
    return "selective";
  }
  return "none";
}

PhaseTimes &PhaseTimes::operator+=(const PhaseTimes &o) {
  forward += o.forward;
  recompute += o.recompute;
  backwardInput += o.backwardInput;
  backwardWeight += o.backwardWeight;
  communication += o.communication;
  return *this;
}

static void row(raw_ostream &os, StringRef name, double seconds) {
  os << format("  %-34s %12.3f ms\n", name.str().c_str(), seconds * 1e3);
}

static void rowBytes(raw_ostream &os, StringRef name, double bytes) {
  os << format("  %-34s %12.3f GiB\n", name.str().c_str(),
               bytes / double(int64_t(1) << 30));
}

void printBreakdown(raw_ostream &os, const StepBreakdown &b) {
  os << "devices " << b.numDevices << ", pipeline stages " << b.pipelineStages
     << ", micro-batches " << b.microBatches << ", interleave " << b.interleave
     << "\n";
  if (b.boundStage)
    os << "per micro-batch, critical stage (layers/p of the layers, "
          "embedding and head in full):\n";
  else
    os << "per micro-batch, critical stage " << b.criticalStageIndex << ":\n";
  row(os, "forward", b.criticalStage.forward);
  row(os, "recompute", b.criticalStage.recompute);
  row(os, "backward (input gradient)", b.criticalStage.backwardInput);
  row(os, "backward (weight gradient)", b.criticalStage.backwardWeight);
  row(os, "tensor-parallel communication", b.criticalStage.communication);
  row(os, "pipeline sends", b.pipelineSend);
  row(os, "micro-batch total", b.microBatchTime);
  os << "per step:\n";
  row(os, "pipeline (m micro-batches)", b.pipelineTime - b.bubble);
  row(os, "pipeline bubble", b.bubble);
  row(os, "gradient sync (total)", b.gradSync);
  row(os, "gradient sync (exposed)", b.gradSyncExposed);
  row(os, "optimizer", b.optimizer);
  row(os, "step time", b.stepTime);
  os << "per layer kind (summed over stages, per step):\n";
  os << format("  %-14s %10s %10s %10s %10s %10s\n", "kind", "F ms",
               "recomp ms", "B ms", "G ms", "comm ms");
  for (const auto &[name, t] : b.perLayerKind)
    os << format("  %-14s %10.3f %10.3f %10.3f %10.3f %10.3f\n", name.c_str(),
                 t.forward * 1e3, t.recompute * 1e3, t.backwardInput * 1e3,
                 t.backwardWeight * 1e3, t.communication * 1e3);
  os << format("model FLOPs per step:               %.4e FLOP\n", b.modelFlops);
  os << format("model TFLOP/s per device:           %.1f TFLOP/s\n",
               b.modelFlopsPerDevice / 1e12);
  os << format("MFU:                                %.1f %%\n", b.mfu * 100);
  if (b.boundStage)
    os << "peak memory per device (critical stage):\n";
  else
    os << "peak memory per device (stage " << b.peakMemoryStage << "):\n";
  rowBytes(os, "parameters", b.peakMemory.parameters);
  rowBytes(os, "gradients", b.peakMemory.gradients);
  rowBytes(os, "optimizer states", b.peakMemory.optimizer);
  rowBytes(os, "activations", b.peakMemory.activations);
  rowBytes(os, "transient", b.peakMemory.transient);
  rowBytes(os, "total", b.peakMemory.getTotal());
  rowBytes(os, "device capacity", b.deviceCapacity);
  os << (b.fitsMemory ? "fits in device memory\n"
                      : "DOES NOT FIT in device memory (infeasible)\n");
}

static json::Object toJSON(const PhaseTimes &t) {
  return json::Object{{"forward_s", t.forward},
                      {"recompute_s", t.recompute},
                      {"backward_input_s", t.backwardInput},
                      {"backward_weight_s", t.backwardWeight},
                      {"communication_s", t.communication}};
}

json::Value toJSON(const StepBreakdown &b) {
  json::Object kinds;
  for (const auto &[name, t] : b.perLayerKind)
    kinds[name] = toJSON(t);
  const MemoryBreakdown &m = b.peakMemory;
  return json::Object{
      {"devices", b.numDevices},
      {"pipeline_stages", b.pipelineStages},
      {"micro_batches", b.microBatches},
      {"interleave", b.interleave},
      {"critical_stage",
       b.boundStage ? json::Value(nullptr) : json::Value(b.criticalStageIndex)},
      {"micro_batch", toJSON(b.criticalStage)},
      {"pipeline_send_s", b.pipelineSend},
      {"micro_batch_s", b.microBatchTime},
      {"pipeline_s", b.pipelineTime},
      {"bubble_s", b.bubble},
      {"grad_sync_s", b.gradSync},
      {"grad_sync_exposed_s", b.gradSyncExposed},
      {"optimizer_s", b.optimizer},
      {"step_s", b.stepTime},
      {"model_flops", b.modelFlops},
      {"hardware_flops", b.hardwareFlops},
      {"model_flops_per_device", b.modelFlopsPerDevice},
      {"mfu", b.mfu},
      {"per_layer_kind", std::move(kinds)},
      {"peak_memory",
       json::Object{{"stage", b.boundStage ? json::Value(nullptr)
                                           : json::Value(b.peakMemoryStage)},
                    {"parameters_bytes", m.parameters},
                    {"gradients_bytes", m.gradients},
                    {"optimizer_bytes", m.optimizer},
                    {"activations_bytes", m.activations},
                    {"transient_bytes", m.transient},
                    {"total_bytes", m.getTotal()},
                    {"capacity_bytes", b.deviceCapacity},
                    {"fits", b.fitsMemory}}}};
}

/// toJSON's PhaseTimes (also found by the std::map reader of
/// "per_layer_kind").
static bool fromJSON(const json::Value &v, PhaseTimes &t, json::Path path) {
  json::ObjectMapper o(v, path);
  return o && o.map("forward_s", t.forward) &&
         o.map("recompute_s", t.recompute) &&
         o.map("backward_input_s", t.backwardInput) &&
         o.map("backward_weight_s", t.backwardWeight) &&
         o.map("communication_s", t.communication);
}

bool fromJSON(const json::Value &v, StepBreakdown &b, json::Path path) {
  json::ObjectMapper o(v, path);
  std::optional<int64_t> criticalStage, memoryStage;
  std::map<std::string, PhaseTimes> kinds;
  const json::Value *memory =
      v.getAsObject() ? v.getAsObject()->get("peak_memory") : nullptr;
  json::Path memoryPath = path.field("peak_memory");
  if (!o || !o.map("devices", b.numDevices) ||
      !o.map("pipeline_stages", b.pipelineStages) ||
      !o.map("micro_batches", b.microBatches) ||
      !o.map("interleave", b.interleave) ||
      !o.map("micro_batch", b.criticalStage) ||
      !o.mapOptional("critical_stage", criticalStage) ||
      !o.map("pipeline_send_s", b.pipelineSend) ||
      !o.map("micro_batch_s", b.microBatchTime) ||
      !o.map("pipeline_s", b.pipelineTime) || !o.map("bubble_s", b.bubble) ||
      !o.map("grad_sync_s", b.gradSync) ||
      !o.map("grad_sync_exposed_s", b.gradSyncExposed) ||
      !o.map("optimizer_s", b.optimizer) || !o.map("step_s", b.stepTime) ||
      !o.map("model_flops", b.modelFlops) ||
      !o.map("hardware_flops", b.hardwareFlops) ||
      !o.map("model_flops_per_device", b.modelFlopsPerDevice) ||
      !o.map("mfu", b.mfu) || !o.mapOptional("per_layer_kind", kinds))
    return false;
  if (!memory) {
    memoryPath.report("missing value");
    return false;
  }
  json::ObjectMapper m(*memory, memoryPath);
  MemoryBreakdown &mem = b.peakMemory;
  if (!m || !m.map("parameters_bytes", mem.parameters) ||
      !m.map("gradients_bytes", mem.gradients) ||
      !m.map("optimizer_bytes", mem.optimizer) ||
      !m.map("activations_bytes", mem.activations) ||
      !m.map("transient_bytes", mem.transient) ||
      !m.map("capacity_bytes", b.deviceCapacity) ||
      !m.map("fits", b.fitsMemory) || !m.mapOptional("stage", memoryStage))
    return false;
  // A null stage: the breakdown is the search objective's bound.
  b.boundStage = !criticalStage;
  b.criticalStageIndex = unsigned(criticalStage.value_or(0));
  b.peakMemoryStage = unsigned(memoryStage.value_or(0));
  b.perLayerKind.assign(kinds.begin(), kinds.end());
  return true;
}

} // namespace stpar::cost
