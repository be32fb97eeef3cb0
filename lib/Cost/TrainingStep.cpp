//===- TrainingStep.cpp - cost of one training step -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Sums per-operator costs into stages, the 1F1B pipeline, the data-parallel
// gradient synchronization, the optimizer and peak memory.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/TrainingStep.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>

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

static PhaseTimes scaled(PhaseTimes t, double k) {
  t.forward *= k;
  t.recompute *= k;
  t.backwardInput *= k;
  t.backwardWeight *= k;
  t.communication *= k;
  return t;
}

/// Bytes per parameter the Adam update reads and writes: fp16 grad (2) and
/// fp32 master, momentum, variance (12) read; the three fp32 states (12) and
/// the fp16 weight (2) written.
static constexpr double kAdamBytesPerParam = 28;

Expected<StepBreakdown> evaluateTrainingStep(ArrayRef<Operator> ops,
                                             const Mesh &mesh,
                                             const Cluster &cluster,
                                             const TrainingConfig &config,
                                             const EfficiencyModel &eff) {
  auto fail = [](const Twine &m) {
    return createStringError(inconvertibleErrorCode(), m);
  };
  if (mesh.getNumDevices() > cluster.getNumDevices())
    return fail("the mesh has " + Twine(mesh.getNumDevices()) +
                " devices but the cluster only " +
                Twine(cluster.getNumDevices()));
  int64_t m = config.microBatches, p = config.pipelineStages,
          v = config.interleave;
  if (m < 1 || p < 1 || v < 1)
    return fail("micro-batches, pipeline stages and interleave must be >= 1");
  if (config.zeroStage < 0 || config.zeroStage > 3)
    return fail("ZeRO stage must be 0, 1, 2 or 3");
  if (config.pipelineAxis && *config.pipelineAxis >= mesh.axes.size())
    return fail("pipeline axis out of range");

  struct Stage {
    PhaseTimes perMicroBatch;
    double backward = 0;
    double gradSync = 0;
    double optimizer = 0;
    double stash = 0, checkpointStash = 0, recomputeStash = 0, transient = 0;
    ModelStateBytes states;
    double boundaryBytes = -1;
    StringSet<> params;
  };
  std::vector<Stage> stages(p);
  std::map<std::string, PhaseTimes> kinds;
  StepBreakdown b;
  b.numDevices = mesh.getNumDevices();
  b.microBatches = m;
  b.pipelineStages = p;
  b.interleave = v;
  double modelFlopsMB = 0, recomputeFlopsMB = 0;
  for (const Operator &op : ops) {
    if (op.stage >= p)
      return fail("operator '" + op.name + "' is on stage " + Twine(op.stage) +
                  " of " + Twine(p));
    Expected<OperatorCost> c = costOperator(op, mesh, cluster, eff);
    if (!c)
      return c.takeError();
    Stage &s = stages[op.stage];
    bool recompute =
        op.recomputable &&
        (config.recompute == Recompute::Full ||
         (config.recompute == Recompute::Selective && op.attentionCore));
    PhaseTimes t;
    t.forward = c->forward;
    t.recompute = recompute ? c->forward : 0;
    t.backwardInput = c->backwardInput;
    t.backwardWeight = c->backwardWeight;
    t.communication = c->forwardComm * (recompute ? 2 : 1) + c->backwardComm;
    s.perMicroBatch += t;
    s.backward += c->backwardInput + c->backwardWeight + c->backwardComm;
    kinds[op.layerKind] += scaled(t, double(m));
    // FLOPs over the whole mesh: local FLOPs times the devices sharing the
    // work (a pipeline stage holds numDevices / p of them).
    double share = double(b.numDevices) / double(p);
    double local =
        c->forwardFlops + c->backwardInputFlops + c->backwardWeightFlops;
    modelFlopsMB += local * share;
    if (recompute)
      recomputeFlopsMB += c->forwardFlops * share;
    if (s.boundaryBytes < 0) {
      for (const Operand &operand : op.operands)
        if (operand.role == OperandRole::Input) {
          s.boundaryBytes = getLocalElements(op, operand, mesh) *
                            double(operand.elementBytes);
          break;
        }
    }
    // Memory.
    if (config.recompute == Recompute::Selective) {
      // The core's score-sized tensors are regenerated, the rest stashed.
      double dropped = 0;
      if (op.recomputable)
        for (const Operand &operand : op.operands)
          if (operand.selectiveRecomputed &&
              (op.kind == OpKind::Softmax ? operand.role == OperandRole::Output
                                          : operand.role == OperandRole::Input))
            dropped += getLocalElements(op, operand, mesh) *
                       double(operand.elementBytes);
      dropped = std::min(dropped, c->stashBytes);
      s.stash += c->stashBytes - dropped;
      s.recomputeStash += dropped;
    } else if (recompute) {
      s.recomputeStash += c->stashBytes;
      if (op.checkpoint && config.recompute == Recompute::Full)
        for (const Operand &operand : op.operands)
          if (operand.role == OperandRole::Input) {
            s.checkpointStash += getLocalElements(op, operand, mesh) *
                                 double(operand.elementBytes);
            break;
          }
    } else {
      s.stash += c->stashBytes;
    }
    s.transient = std::max(s.transient, c->transientBytes);
    for (const GradientSync &g :
         getGradientSyncs(op, mesh, config.pipelineAxis)) {
      if (!s.params.insert(g.parameter).second)
        continue; // tied weights count once per stage
      int64_t nd = 1;
      for (unsigned axis : g.axes)
        nd *= mesh.axes[axis].size;
      double psi = g.bytes / 2; // fp16 parameter elements
      ModelStateBytes st = getModelStateBytes(psi, nd, config.zeroStage);
      s.states.parameters += st.parameters;
      s.states.gradients += st.gradients;
      s.states.optimizer += st.optimizer;
      // ZeRO 0-2: reduce-scatter + all-gather = all-reduce volume (2 psi);
      // ZeRO-3 adds one more all-gather of the parameters (3 psi).
      double t = getMultiAxisCollectiveTime(Collective::AllReduce, g.bytes,
                                            g.axes, mesh, cluster);
      if (config.zeroStage == 3)
        t += getMultiAxisCollectiveTime(Collective::AllGather, g.bytes, g.axes,
                                        mesh, cluster);
      s.gradSync += t;
      double updated = config.zeroStage >= 1 ? psi / double(nd) : psi;
      s.optimizer += updated * kAdamBytesPerParam /
                     (cluster.device.hbmBandwidth * eff.hbmEfficiency);
    }
  }

  // Pipeline: the slowest stage sets the pace.
  AxisPlacement ppPlacement;
  if (config.pipelineAxis)
    ppPlacement =
        mesh.getPlacement(*config.pipelineAxis, cluster.devicesPerNode);
  double worst = -1;
  for (unsigned i = 0; i < p; ++i) {
    Stage &s = stages[i];
    double send = 0;
    if (p > 1 && s.boundaryBytes > 0) {
      double one =
          config.pipelineAxis
              ? getCollectiveTime(Collective::PointToPoint, s.boundaryBytes,
                                  ppPlacement, cluster)
              : cluster.interNode.latency +
                    s.boundaryBytes / cluster.interNode.bandwidth;
      send = 2 * one * double(v);
    }
    double t = s.perMicroBatch.getTotal() + send;
    if (t > worst) {
      worst = t;
      b.criticalStage = s.perMicroBatch;
      b.criticalStageIndex = i;
      b.pipelineSend = send;
      b.microBatchTime = t;
    }
    double exposed = config.overlapGradSync
                         ? std::max(0.0, s.gradSync - s.backward)
                         : s.gradSync;
    b.gradSync = std::max(b.gradSync, s.gradSync);
    b.gradSyncExposed = std::max(b.gradSyncExposed, exposed);
    b.optimizer = std::max(b.optimizer, s.optimizer);

    // 1F1B: stage i holds min(m, p - i) micro-batches in flight.
    double inFlight = double(std::min<int64_t>(m, p - i));
    MemoryBreakdown mem;
    mem.parameters = s.states.parameters;
    mem.gradients = s.states.gradients;
    mem.optimizer = s.states.optimizer;
    mem.activations = inFlight * (s.stash + s.checkpointStash);
    // Under recomputation one layer's worth of activations is rebuilt at a
    // time; charge the largest recomputed stash of one layer approximated
    // by the stage's recomputed stash divided by its layers (checkpoints).
    mem.transient = s.transient;
    if (s.recomputeStash > 0) {
      double checkpoints = 0;
      for (const Operator &op : ops)
        if (op.stage == i && op.checkpoint)
          checkpoints += 1;
      mem.activations += s.recomputeStash / std::max(1.0, checkpoints);
    }
    if (mem.getTotal() > b.peakMemory.getTotal()) {
      b.peakMemory = mem;
      b.peakMemoryStage = i;
    }
  }
  b.bubble = double(p - 1) / double(v) * b.microBatchTime;
  b.pipelineTime = double(m) * b.microBatchTime + b.bubble;
  b.stepTime = b.pipelineTime + b.gradSyncExposed + b.optimizer;
  b.modelFlops = modelFlopsMB * double(m);
  b.hardwareFlops = (modelFlopsMB + recomputeFlopsMB) * double(m);
  b.modelFlopsPerDevice = b.modelFlops / b.stepTime / double(b.numDevices);
  double peak = cluster.device.getPeak(eff.dtype);
  if (peak <= 0)
    peak = cluster.device.fp32;
  b.mfu = b.modelFlopsPerDevice / peak;
  b.deviceCapacity = double(cluster.device.hbmCapacity);
  b.fitsMemory = b.peakMemory.getTotal() <= b.deviceCapacity;
  for (auto &[name, t] : kinds)
    b.perLayerKind.emplace_back(name, t);
  return b;
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
