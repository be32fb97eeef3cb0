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

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>

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

static bool readNumber(const json::Object &o, StringRef key, double &out,
                       json::Path path) {
  std::optional<double> v = o.getNumber(key);
  if (!v) {
    path.field(key).report("expected a number");
    return false;
  }
  out = *v;
  return true;
}

static bool readInteger(const json::Object &o, StringRef key, int64_t &out,
                        json::Path path) {
  std::optional<int64_t> v = o.getInteger(key);
  if (!v) {
    path.field(key).report("expected an integer");
    return false;
  }
  out = *v;
  return true;
}

static bool fromJSON(const json::Value &v, PhaseTimes &t, json::Path path) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    path.report("expected an object");
    return false;
  }
  return readNumber(*o, "forward_s", t.forward, path) &&
         readNumber(*o, "recompute_s", t.recompute, path) &&
         readNumber(*o, "backward_input_s", t.backwardInput, path) &&
         readNumber(*o, "backward_weight_s", t.backwardWeight, path) &&
         readNumber(*o, "communication_s", t.communication, path);
}

bool fromJSON(const json::Value &v, StepBreakdown &b, json::Path path) {
  const json::Object *o = v.getAsObject();
  if (!o) {
    path.report("expected an object");
    return false;
  }
  int64_t stage = 0;
  if (!readInteger(*o, "devices", b.numDevices, path) ||
      !readInteger(*o, "pipeline_stages", b.pipelineStages, path) ||
      !readInteger(*o, "micro_batches", b.microBatches, path) ||
      !readInteger(*o, "interleave", b.interleave, path) ||
      !readNumber(*o, "pipeline_send_s", b.pipelineSend, path) ||
      !readNumber(*o, "micro_batch_s", b.microBatchTime, path) ||
      !readNumber(*o, "pipeline_s", b.pipelineTime, path) ||
      !readNumber(*o, "bubble_s", b.bubble, path) ||
      !readNumber(*o, "grad_sync_s", b.gradSync, path) ||
      !readNumber(*o, "grad_sync_exposed_s", b.gradSyncExposed, path) ||
      !readNumber(*o, "optimizer_s", b.optimizer, path) ||
      !readNumber(*o, "step_s", b.stepTime, path) ||
      !readNumber(*o, "model_flops", b.modelFlops, path) ||
      !readNumber(*o, "hardware_flops", b.hardwareFlops, path) ||
      !readNumber(*o, "model_flops_per_device", b.modelFlopsPerDevice, path) ||
      !readNumber(*o, "mfu", b.mfu, path))
    return false;
  const json::Value *mb = o->get("micro_batch");
  if (!mb || !fromJSON(*mb, b.criticalStage, path.field("micro_batch")))
    return false;
  const json::Value *critical = o->get("critical_stage");
  b.boundStage = !critical || critical->kind() == json::Value::Null;
  if (!b.boundStage) {
    if (!readInteger(*o, "critical_stage", stage, path))
      return false;
    b.criticalStageIndex = unsigned(stage);
  }
  b.perLayerKind.clear();
  if (const json::Object *kinds = o->getObject("per_layer_kind")) {
    for (const auto &[name, value] : *kinds) {
      PhaseTimes t;
      if (!fromJSON(value, t, path.field("per_layer_kind").field(name)))
        return false;
      b.perLayerKind.emplace_back(name.str(), t);
    }
    llvm::sort(b.perLayerKind,
               [](const auto &x, const auto &y) { return x.first < y.first; });
  }
  const json::Object *m = o->getObject("peak_memory");
  json::Path mp = path.field("peak_memory");
  if (!m) {
    mp.report("expected an object");
    return false;
  }
  MemoryBreakdown &mem = b.peakMemory;
  if (!readNumber(*m, "parameters_bytes", mem.parameters, mp) ||
      !readNumber(*m, "gradients_bytes", mem.gradients, mp) ||
      !readNumber(*m, "optimizer_bytes", mem.optimizer, mp) ||
      !readNumber(*m, "activations_bytes", mem.activations, mp) ||
      !readNumber(*m, "transient_bytes", mem.transient, mp) ||
      !readNumber(*m, "capacity_bytes", b.deviceCapacity, mp))
    return false;
  if (!b.boundStage && readInteger(*m, "stage", stage, mp))
    b.peakMemoryStage = unsigned(stage);
  std::optional<bool> fits = m->getBoolean("fits");
  if (!fits) {
    mp.field("fits").report("expected a boolean");
    return false;
  }
  b.fitsMemory = *fits;
  return true;
}

} // namespace stpar::cost
