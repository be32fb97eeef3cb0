//===- OperatorCost.cpp - per-operator compute/comm/memory ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Roofline compute, partition-implied collectives, the temporal primitive,
// re-layout and model-state memory. Formulas: OperatorCost.h and
// docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/OperatorCost.h"
#include "stpar/Cost/MoE.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cmath>

using namespace llvm;

namespace stpar::cost {

double EfficiencyModel::getMatMulEfficiency(double flops) const {
  if (flops <= 0)
    return matmulMax;
  return matmulMax * flops / (flops + matmulHalfFlops);
}

EfficiencyModel getDefaultEfficiency() {
  // Fitted by bench/calibration on the Megatron-LM SC'21 rows listed in
  // docs/cost-model.md; hbmEfficiency and kernelLaunch are fixed, not fitted.
  EfficiencyModel eff;
  return eff;
}

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bool isTemporalDim(const Operator &op, unsigned dim) {
  return op.temporal && (op.temporal->mDim == dim || op.temporal->nDim == dim ||
                         op.temporal->kDim == dim);
}

static int64_t getTemporalQ(const Operator &op, const Mesh &mesh) {
  return op.temporal ? mesh.axes[op.temporal->rowAxis].size : 1;
}

int64_t getLocalExtent(const Operator &op, unsigned dim, const Mesh &mesh) {
  const LoopDim &loop = op.loops[dim];
  int64_t split = 1;
  for (unsigned axis : loop.axes)
    split *= mesh.axes[axis].size;
  int64_t local = ceilDiv(loop.extent, split);
  if (isTemporalDim(op, dim))
    local = ceilDiv(local, getTemporalQ(op, mesh));
  return local;
}

double getLocalElements(const Operator &op, const Operand &operand,
                        const Mesh &mesh) {
  double n = 1;
  for (unsigned d : operand.dims)
    n *= double(getLocalExtent(op, d, mesh));
  return n;
}

double getRooflineTime(OpKind kind, double flops, double bytes,
                       const Cluster &cluster, const EfficiencyModel &eff) {
  double peak = cluster.device.getPeak(eff.dtype);
  if (peak <= 0)
    peak = cluster.device.fp32;
  double eta = kind == OpKind::MatMul ? eff.getMatMulEfficiency(flops) : 1.0;
  double computeTime = flops / (peak * eta);
  double memoryTime = bytes / (cluster.device.hbmBandwidth * eff.hbmEfficiency);
  return eff.kernelLaunch + std::max(computeTime, memoryTime);
}

double TemporalStepCost::getStepTime() const {
  return std::max(compute, transfer) + startup;
}

double getMultiAxisCollectiveTime(Collective kind, double bytes,
                                  const std::vector<unsigned> &axes,
                                  const Mesh &mesh, const Cluster &cluster) {
  double t = 0;
  for (unsigned axis : axes)
    t += getCollectiveTime(
        kind, bytes, mesh.getPlacement(axis, cluster.devicesPerNode), cluster);
  return t;
}

StringRef getPhaseName(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::InputGrad:
    return "input_grad";
  case Phase::WeightGrad:
    return "weight_grad";
  }
  return "";
}

double getSentBytes(const Communication &c, const Mesh &mesh) {
  int64_t group = 1;
  for (unsigned axis : c.axes)
    if (axis < mesh.axes.size())
      group *= mesh.axes[axis].size;
  double once = c.kind == Collective::PointToPoint
                    ? (group > 1 ? c.bytes : 0)
                    : getRingVolume(c.kind, c.bytes, group);
  return c.count * once;
}

static Error opError(const Operator &op, const Twine &message) {
  return createStringError(inconvertibleErrorCode(),
                           "operator '" + op.name + "': " + message);
}

static Error verifyOperator(const Operator &op, const Mesh &mesh) {
  for (const LoopDim &loop : op.loops) {
    if (loop.extent < 1)
      return opError(op, "loop '" + loop.name + "' has a non-positive extent");
    for (unsigned axis : loop.axes)
      if (axis >= mesh.axes.size())
        return opError(op, "loop '" + loop.name + "' names mesh axis " +
                               Twine(axis) + " of a mesh with " +
                               Twine(mesh.axes.size()) + " axes");
  }
  for (const Operand &operand : op.operands)
    for (unsigned d : operand.dims)
      if (d >= op.loops.size())
        return opError(op, "operand '" + operand.name + "' indexes loop " +
                               Twine(d) + " of " + Twine(op.loops.size()));
  if (op.temporal) {
    const TemporalPrimitive &t = *op.temporal;
    if (op.kind != OpKind::MatMul)
      return opError(op, "the temporal primitive applies to matmuls only");
    if (t.rowAxis >= mesh.axes.size() || t.colAxis >= mesh.axes.size() ||
        t.rowAxis == t.colAxis)
      return opError(op, "temporal primitive needs two distinct mesh axes");
    if (mesh.axes[t.rowAxis].size != mesh.axes[t.colAxis].size)
      return opError(op, "temporal primitive needs a square q x q sub-mesh");
    if (t.mDim >= op.loops.size() || t.nDim >= op.loops.size() ||
        t.kDim >= op.loops.size())
      return opError(op, "temporal primitive names a missing loop");
    if (op.loops[t.nDim].kind != LoopKind::Reduction ||
        op.loops[t.mDim].kind != LoopKind::Parallel ||
        op.loops[t.kDim].kind != LoopKind::Parallel)
      return opError(op, "temporal primitive needs parallel M, K and a "
                         "reduction N");
  }
  return Error::success();
}

static bool indexes(const Operand &operand, unsigned dim) {
  return is_contained(operand.dims, dim);
}

/// Local bytes of `operand`.
static double localBytes(const Operator &op, const Operand &operand,
                         const Mesh &mesh) {
  return getLocalElements(op, operand, mesh) * double(operand.elementBytes);
}

/// Axes splitting the loops `operand` does not index (sorted, unique).
static std::vector<unsigned> axesOutside(const Operator &op,
                                         const Operand &operand,
                                         std::optional<unsigned> ignored) {
  std::vector<unsigned> axes, inside;
  for (unsigned d = 0; d < op.loops.size(); ++d)
    for (unsigned axis : op.loops[d].axes)
      if (axis != ignored)
        (indexes(operand, d) ? inside : axes).push_back(axis);
  // An axis splitting a loop the operand indexes splits the operand too
  // (an MoE operator's expert loop shares its axes with the token loops).
  llvm::erase_if(axes, [&](unsigned a) { return is_contained(inside, a); });
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

static const Operand *findOperand(const Operator &op, OperandRole role,
                                  ArrayRef<unsigned> dims) {
  for (const Operand &operand : op.operands)
    if (operand.role == role &&
        all_of(dims, [&](unsigned d) { return indexes(operand, d); }))
      return &operand;
  return nullptr;
}

/// Seconds of the temporal primitive for F, B and G: q steps of compute,
/// q - 1 of them overlapped with the transfer of the next step's operands
/// (max(step compute, step transfer) + start-up), plus the alignments;
/// `overhead` receives each phase's time beyond its compute.
static Expected<std::array<double, 3>>
costTemporal(const Operator &op, const Mesh &mesh, const Cluster &cluster,
             const EfficiencyModel &eff, double stepFlops, double stepBytes,
             double &doubleBuffers, std::array<RingOverhead, 3> &overhead,
             std::array<std::vector<Communication>, 3> &transfers) {
  const TemporalPrimitive &t = *op.temporal;
  const Operand *in = findOperand(op, OperandRole::Input, {t.mDim, t.nDim});
  const Operand *w = findOperand(op, OperandRole::Parameter, {t.nDim, t.kDim});
  const Operand *out = findOperand(op, OperandRole::Output, {t.mDim, t.kDim});
  if (!in || !w || !out)
    return opError(op, "temporal primitive needs an input indexing M and N, "
                       "a parameter indexing N and K and an output indexing "
                       "M and K");
  int64_t q = mesh.axes[t.rowAxis].size;
  AxisPlacement row = mesh.getPlacement(t.rowAxis, cluster.devicesPerNode);
  AxisPlacement col = mesh.getPlacement(t.colAxis, cluster.devicesPerNode);
  double inBytes = localBytes(op, *in, mesh);
  double wBytes = localBytes(op, *w, mesh);
  double outBytes = localBytes(op, *out, mesh);
  auto shift = [&](double bytes, const AxisPlacement &p) {
    return getCollectiveTime(Collective::RingShift, bytes, p, cluster);
  };
  // A diagonal neighbour is reached by one point-to-point send that crosses
  // the slower of the two axes' links.
  auto diagonal = [&](double bytes) {
    return std::max(shift(bytes, row), shift(bytes, col));
  };
  double startup = 0;
  for (const AxisPlacement *p : {&row, &col})
    startup = std::max(startup, p->crossesInterNode() || !p->regular
                                    ? cluster.interNode.latency
                                    : cluster.intraNode.latency);
  double compute =
      getRooflineTime(OpKind::MatMul, stepFlops, stepBytes, cluster, eff);
  // F: I moves left along the columns, W up along the rows.
  TemporalStepCost f{compute, shift(inBytes, col) + shift(wBytes, row),
                     startup};
  // B (dI = dO W^T): W comes from the diagonal neighbour, dO along columns.
  TemporalStepCost b{compute, diagonal(wBytes) + shift(outBytes, col), startup};
  // G (dW = I^T dO): I from the diagonal neighbour, dO along rows; dW needs
  // one re-layout at the last step.
  TemporalStepCost g{compute, diagonal(inBytes) + shift(outBytes, row),
                     startup};
  doubleBuffers = 2 * (inBytes + wBytes + outBytes);
  // What -stp-partition adds around the paper's steps (docs/partition.md,
  // "Temporal primitive"): operands live in the blocked layout between
  // ops, so F first permutes I inside its row and W inside its column into
  // step 0's skewed slices, B permutes dI back inside its row, and G
  // permutes dW from W's skewed home layout back inside its column. Not
  // overlapped with compute.
  double forwardAlign = shift(inBytes, col) + shift(wBytes, row);
  double inputGradAlign = shift(inBytes, col);
  double weightGradAlign = shift(wBytes, row);
  double qd = double(q);
  // The same transfers as communications (F, B, G): q - 1 ring steps
  // each (the last step computes on what the step before delivered), and
  // the alignments.
  std::vector<unsigned> rowAxes{t.rowAxis}, colAxes{t.colAxis},
      square{t.rowAxis, t.colAxis};
  auto item = [&](Collective kind, std::vector<unsigned> axes, double bytes,
                  double count, std::string what) {
    Communication c;
    c.elementBytes = in->elementBytes;
    c.kind = kind;
    c.axes = std::move(axes);
    c.bytes = bytes;
    c.count = count;
    c.what = std::move(what);
    return c;
  };
  transfers[0] = {
      item(Collective::RingShift, colAxes, inBytes, qd - 1, "ring shift of I"),
      item(Collective::RingShift, rowAxes, wBytes, qd - 1, "ring shift of W"),
      item(Collective::PointToPoint, colAxes, inBytes, 1,
           "alignment of I into step 0"),
      item(Collective::PointToPoint, rowAxes, wBytes, 1,
           "alignment of W into step 0")};
  transfers[1] = {item(Collective::PointToPoint, square, wBytes, qd - 1,
                       "diagonal transfer of W"),
                  item(Collective::RingShift, colAxes, outBytes, qd - 1,
                       "ring shift of dO"),
                  item(Collective::PointToPoint, colAxes, inBytes, 1,
                       "alignment of dI back")};
  transfers[2] = {item(Collective::PointToPoint, square, inBytes, qd - 1,
                       "diagonal transfer of I"),
                  item(Collective::RingShift, rowAxes, outBytes, qd - 1,
                       "ring shift of dO"),
                  item(Collective::PointToPoint, square, wBytes, 1,
                       "diagonal re-layout of dW"),
                  item(Collective::PointToPoint, rowAxes, wBytes, 1,
                       "alignment of dW back")};
  // W and dW are the same whatever the batch; I, dI and dO are a
  // micro-batch's (in the order of the lists above).
  const std::vector<bool> perMicroBatch[3] = {{true, false, true, false},
                                              {false, true, true},
                                              {true, true, false, false}};
  for (unsigned phase = 0; phase < 3; ++phase)
    for (auto [k, c] : llvm::enumerate(transfers[phase])) {
      c.phase = Phase(phase);
      c.perMicroBatch = perMicroBatch[phase][k];
    }
  const TemporalStepCost *steps[3] = {&f, &b, &g};
  double align[3] = {forwardAlign, inputGradAlign,
                     diagonal(wBytes) + weightGradAlign};
  std::array<double, 3> seconds;
  for (unsigned phase = 0; phase < 3; ++phase) {
    const TemporalStepCost &step = *steps[phase];
    // q steps of compute; the operands of steps 1..q-1 arrive by q - 1
    // transfers, each overlapped with the step before it.
    overhead[phase] = {(qd - 1) * std::max(0.0, step.transfer - step.compute),
                       (qd - 1) * step.startup, align[phase]};
    seconds[phase] =
        (qd - 1) * step.getStepTime() + step.compute + align[phase];
  }
  return seconds;
}

/// The placement of the group of devices spanned by `axes` together: as
/// many per node as the axes' intra-node parts multiply to.
static AxisPlacement getGroupPlacement(ArrayRef<unsigned> axes,
                                       const Mesh &mesh,
                                       const Cluster &cluster) {
  AxisPlacement group;
  for (unsigned axis : axes) {
    AxisPlacement p = mesh.getPlacement(axis, cluster.devicesPerNode);
    group.intraNodeSize *= p.intraNodeSize;
    group.interNodeSize *= p.interNodeSize;
    group.regular = group.regular && p.regular;
  }
  return group;
}

/// OpKind::MoE (costOperator's comment; FasterMoE's model in MoE.h).
static Expected<OperatorCost> costMoE(const Operator &op, const Mesh &mesh,
                                      const Cluster &cluster,
                                      const EfficiencyModel &eff) {
  if (!op.moe)
    return opError(op, "an MoE operator needs its MoE description");
  const MoESpec &spec = *op.moe;
  unsigned numLoops = unsigned(op.loops.size());
  if (spec.expertLoop >= numLoops || spec.hiddenLoop >= numLoops ||
      spec.ffnLoop >= numLoops)
    return opError(op, "the MoE description names a missing loop");
  if (!op.loops[spec.hiddenLoop].axes.empty())
    return opError(op, "the MoE loop '" + op.loops[spec.hiddenLoop].name +
                           "' (the model dim) is not split");
  double localTokens = 1;
  std::vector<unsigned> tokenAxes;
  for (unsigned d = 0; d < numLoops; ++d) {
    if (d == spec.expertLoop || d == spec.hiddenLoop || d == spec.ffnLoop)
      continue;
    localTokens *= double(getLocalExtent(op, d, mesh));
    llvm::append_range(tokenAxes, op.loops[d].axes);
  }
  const LoopDim &expertLoop = op.loops[spec.expertLoop];
  int64_t group = 1;
  for (unsigned axis : expertLoop.axes) {
    if (!is_contained(tokenAxes, axis))
      return opError(op, "the expert loop's mesh axis '" +
                             mesh.axes[axis].name +
                             "' does not split the tokens (expert "
                             "parallelism exchanges the tokens of its group)");
    group *= mesh.axes[axis].size;
  }
  const Operand *input = nullptr, *weight = nullptr, *output = nullptr;
  for (const Operand &o : op.operands) {
    const Operand *&slot = o.role == OperandRole::Input       ? input
                           : o.role == OperandRole::Parameter ? weight
                                                              : output;
    if (!slot)
      slot = &o;
  }
  if (!input || !weight || !output)
    return opError(op, "an MoE operator needs an input, expert weights and "
                       "an output");

  MoELayer layer;
  layer.experts = expertLoop.extent;
  layer.topK = spec.topK;
  layer.hidden = op.loops[spec.hiddenLoop].extent;
  // Tensor parallelism inside the experts: each device holds F / tp of
  // every expert's hidden dim.
  const std::vector<unsigned> &tpAxes = op.loops[spec.ffnLoop].axes;
  layer.ffnHidden = getLocalExtent(op, spec.ffnLoop, mesh);
  layer.ffnMatrices = spec.ffnMatrices;
  layer.tokens = int64_t(std::llround(localTokens)) * group;
  layer.activationBytes = double(input->elementBytes);
  layer.weightBytes = layer.gradientBytes = double(weight->elementBytes);
  ExpertLoad load = spec.load.empty() ? ExpertLoad::uniform(layer.experts)
                                      : ExpertLoad{spec.load};
  ExpertParallelism ep;
  ep.size = group;
  ep.placement = getGroupPlacement(expertLoop.axes, mesh, cluster);
  ep.capacityFactor = spec.capacityFactor;
  std::optional<MoECost> best;
  ExpertParallelism chosen;
  bool spans = ep.placement.regular && ep.placement.crossesIntraNode() &&
               ep.placement.crossesInterNode();
  for (bool hierarchical : {false, true}) {
    if (hierarchical && !(spec.hierarchical && spans))
      continue;
    ExpertParallelism trial = ep;
    trial.hierarchical = hierarchical;
    if (spec.shadowing && group > 1) {
      Expected<std::vector<bool>> s =
          chooseShadowedExperts(layer, load, trial, cluster, eff);
      if (!s)
        return opError(op, toString(s.takeError()));
      trial.shadowed = std::move(*s);
    }
    if (spec.smartSchedule && group > 1) {
      Expected<int64_t> g = chooseGroupSize(layer, load, trial, cluster, eff);
      if (!g)
        return opError(op, toString(g.takeError()));
      trial.groupSize = *g;
    }
    Expected<MoECost> c = getMoECost(layer, load, trial, cluster, eff);
    if (!c)
      return opError(op, toString(c.takeError()));
    if (!best || c->total < best->total) {
      best = std::move(*c);
      chosen = std::move(trial);
    }
  }

  OperatorCost cost;
  double routerFlops =
      2 * localTokens * double(layer.hidden) * double(layer.experts);
  double router =
      getRooflineTime(OpKind::MatMul, routerFlops,
                      (localTokens * double(layer.hidden + layer.experts) +
                       double(layer.hidden * layer.experts)) *
                          layer.activationBytes,
                      cluster, eff);
  double useful =
      localTokens * double(layer.topK) * layer.getFlopsPerToken() + routerFlops;
  cost.forwardFlops = cost.backwardInputFlops = cost.backwardWeightFlops =
      useful;
  cost.forward = best->computeForward + router + best->shadow;
  cost.backwardInput = cost.backwardWeight = best->computeForward + router;
  cost.forwardComm = std::max(0.0, best->forward - best->computeForward);
  cost.backwardComm = std::max(0.0, best->backward - 2 * best->computeForward);
  for (const Operand &o : op.operands)
    if (o.role == OperandRole::Parameter)
      cost.parameterBytes += localBytes(op, o, mesh);
  double tokenBytes = double(layer.hidden) * layer.activationBytes;
  // The copies of the shadowed experts' weights and gradients every
  // worker holds (transient).
  double shadowed = double(llvm::count(chosen.shadowed, true));
  double shadowCopies = shadowed * layer.getExpertParams() *
                        (layer.weightBytes + layer.gradientBytes);
  if (spec.staticBuffers && spec.capacityFactor <= 0) {
    // As stpar's program holds them (-stp-partition, docs/moe.md): every
    // buffer at the no-drop bound, C = the device's n tokens per (expert,
    // sending device). Kept for B: the returned outputs [E, n, D], and per
    // smart-schedule step the received rows [E/P, P n, D] and the
    // experts' A (and U) [E/P, P n, F]; the shadowed experts' own rows and
    // A (and U). Transient: the dispatch buffer and the experts' outputs.
    double rows = double(layer.experts) * localTokens;
    double steps =
        chosen.groupSize > 0 ? double(group / chosen.groupSize) : 1.0;
    double hiddenBytes = double(layer.ffnMatrices - 1) *
                         double(layer.ffnHidden) * layer.activationBytes;
    cost.stashBytes =
        localBytes(op, *input, mesh) + rows * tokenBytes +
        (steps * rows + shadowed * localTokens) * (tokenBytes + hiddenBytes);
    cost.transientBytes =
        2 * rows * tokenBytes + localBytes(op, *output, mesh) + shadowCopies;
  } else {
    // FasterMoE's expected rows. Stashed for B: the input, the dispatched
    // tokens and the experts' intermediate activations (one F-wide tensor
    // per weight matrix); transient: the dispatch and combine buffers and
    // the output.
    cost.stashBytes =
        localBytes(op, *input, mesh) +
        best->maxWorkerTokens *
            (tokenBytes + double(layer.ffnMatrices) * double(layer.ffnHidden) *
                              layer.activationBytes);
    cost.transientBytes = 2 * best->receiveBufferTokens * tokenBytes +
                          localBytes(op, *output, mesh) + shadowCopies;
  }
  if (!tpAxes.empty())
    for (Phase phase : {Phase::Forward, Phase::InputGrad}) {
      // Partial sums of the experts' output (F) and of the input's
      // gradient (B) over the axes splitting F, as for Megatron's
      // row- and column-parallel pair.
      Communication c;
      c.phase = phase;
      c.axes = tpAxes;
      c.bytes =
          localBytes(op, phase == Phase::Forward ? *output : *input, mesh);
      c.elementBytes = input->elementBytes;
      c.what = phase == Phase::Forward ? "partial sums of the experts' output"
                                       : "partial sums of the input gradient";
      double t = getMultiAxisCollectiveTime(Collective::AllReduce, c.bytes,
                                            c.axes, mesh, cluster);
      (phase == Phase::Forward ? cost.forwardComm : cost.backwardComm) += t;
      cost.communication.push_back(std::move(c));
    }
  if (group > 1)
    for (Phase phase : {Phase::Forward, Phase::InputGrad}) {
      Communication c;
      c.phase = phase;
      c.kind = Collective::AllToAll;
      c.axes = expertLoop.axes;
      c.bytes = localTokens * double(layer.topK) * tokenBytes;
      c.elementBytes = input->elementBytes;
      c.count = 2;
      c.what = phase == Phase::Forward
                   ? "dispatch and combine of the routed tokens"
                   : "the gradients of the dispatch and the combine";
      cost.communication.push_back(std::move(c));
    }
  // Shadowing (FasterMoE Sec. 4.1): the owners broadcast the shadowed
  // experts' weights in F and the gradients are reduced to them in G.
  if (shadowed > 0 && group > 1)
    for (Phase phase : {Phase::Forward, Phase::WeightGrad}) {
      Communication c;
      c.phase = phase;
      c.kind =
          phase == Phase::Forward ? Collective::Broadcast : Collective::Reduce;
      c.axes = expertLoop.axes;
      c.bytes =
          shadowed * layer.getExpertParams() *
          (phase == Phase::Forward ? layer.weightBytes : layer.gradientBytes);
      c.elementBytes = weight->elementBytes;
      c.what = phase == Phase::Forward
                   ? "the shadowed experts' weights from their owners"
                   : "the shadowed experts' gradients to their owners";
      cost.communication.push_back(std::move(c));
    }
  OperatorCost::MoEChoice m;
  m.expertParallel = group;
  m.hierarchical = chosen.hierarchical;
  m.groupSize = chosen.groupSize;
  for (auto [e, s] : llvm::enumerate(chosen.shadowed))
    if (s)
      m.shadowed.push_back(int64_t(e));
  m.maxWorkerTokens = best->maxWorkerTokens;
  m.droppedTokens = best->droppedTokens;
  m.intraNodeLinkBytes = best->intraNodeLinkBytes;
  m.interNodeLinkBytes = best->interNodeLinkBytes;
  m.expertTokens = best->expertTokens;
  cost.moe = std::move(m);
  return cost;
}

Expected<OperatorCost> costOperator(const Operator &op, const Mesh &mesh,
                                    const Cluster &cluster,
                                    const EfficiencyModel &eff) {
  if (Error e = verifyOperator(op, mesh))
    return std::move(e);
  if (op.kind == OpKind::MoE)
    return costMoE(op, mesh, cluster, eff);
  OperatorCost cost;
  double points = 1;
  for (unsigned d = 0; d < op.loops.size(); ++d)
    points *= double(getLocalExtent(op, d, mesh));
  double flops = op.flopsPerPoint * points;
  if (op.kind == OpKind::Embedding)
    flops = 0;

  double bytes = 0, outBytes = 0, inputStash = 0;
  int gradInputs = 0, params = 0;
  for (const Operand &operand : op.operands) {
    double b = localBytes(op, operand, mesh);
    bytes += b;
    switch (operand.role) {
    case OperandRole::Output:
      outBytes += b;
      break;
    case OperandRole::Parameter:
      ++params;
      cost.parameterBytes += b;
      break;
    case OperandRole::Input:
      inputStash += b;
      gradInputs += operand.needsGrad ? 1 : 0;
      break;
    }
  }
  if (op.kind == OpKind::Embedding)
    bytes = 2 * outBytes; // read the gathered rows, write the output

  int64_t q = getTemporalQ(op, mesh);
  if (op.temporal) {
    double doubleBuffers = 0;
    std::array<RingOverhead, 3> overhead;
    std::array<std::vector<Communication>, 3> transfers;
    Expected<std::array<double, 3>> t =
        costTemporal(op, mesh, cluster, eff, flops, bytes, doubleBuffers,
                     overhead, transfers);
    if (!t)
      return t.takeError();
    cost.communication = std::move(transfers[0]);
    for (unsigned phase = 1; phase < 3; ++phase)
      for (Communication &c : transfers[phase]) {
        c.count *= phase == 1 ? gradInputs : params;
        if (c.count > 0)
          cost.communication.push_back(std::move(c));
      }
    cost.forward = (*t)[0];
    cost.backwardInput = gradInputs ? (*t)[1] * gradInputs : 0;
    cost.backwardWeight = params ? (*t)[2] * params : 0;
    cost.forwardRing = overhead[0];
    cost.ring = overhead[0];
    cost.ring += overhead[1].scaled(gradInputs);
    cost.ring += overhead[2].scaled(params);
    cost.forwardFlops = flops * double(q);
    cost.backwardInputFlops = cost.forwardFlops * gradInputs;
    cost.backwardWeightFlops = cost.forwardFlops * params;
    cost.transientBytes = outBytes * double(q) + doubleBuffers;
    cost.stashBytes = inputStash;
    return cost;
  }

  cost.forwardFlops = flops;
  cost.forward = getRooflineTime(op.kind, flops, bytes, cluster, eff);
  if (op.kind == OpKind::MatMul) {
    cost.backwardInputFlops = flops * gradInputs;
    cost.backwardWeightFlops = flops * params;
    cost.backwardInput = gradInputs * cost.forward;
    cost.backwardWeight = params * cost.forward;
  } else if (op.kind == OpKind::Embedding) {
    // Scatter-add of the output gradient into the table's gradient.
    cost.backwardWeight =
        getRooflineTime(op.kind, 0, 2 * outBytes, cluster, eff);
  } else {
    // Memory-bound: each gradient re-reads the operands and the output
    // gradient.
    double t = getRooflineTime(op.kind, flops, bytes + outBytes, cluster, eff);
    cost.backwardInputFlops = flops * gradInputs;
    cost.backwardInput = gradInputs * t;
    cost.backwardWeightFlops = params ? flops : 0;
    cost.backwardWeight = params ? t : 0;
  }

  // Collectives implied by the partition: listed, then timed (one route for
  // the seconds and for what the program is checked against).
  std::vector<unsigned> partialAxes;
  for (unsigned d = 0; d < op.loops.size(); ++d) {
    const LoopDim &loop = op.loops[d];
    if (loop.kind != LoopKind::Reduction || loop.axes.empty())
      continue;
    if (op.kind == OpKind::MatMul || op.kind == OpKind::Embedding) {
      // Partial sums of the output: one all-reduce over every axis that
      // splits a reduction loop.
      partialAxes.insert(partialAxes.end(), loop.axes.begin(), loop.axes.end());
    } else {
      // Split non-decomposable reduction: all-reduce max and sum (fp32).
      double stats = 2 * 4 * outBytes /
                     double(std::max<int64_t>(1, getLocalExtent(op, d, mesh))) /
                     2;
      for (Phase phase : {Phase::Forward, Phase::InputGrad}) {
        Communication c;
        c.phase = phase;
        c.axes = loop.axes;
        c.bytes = stats;
        c.elementBytes = 4;
        c.what = "statistics of the split reduction loop '" + loop.name + "'";
        cost.communication.push_back(std::move(c));
      }
    }
  }
  if (!partialAxes.empty()) {
    Communication c;
    c.axes = std::move(partialAxes);
    c.bytes = outBytes;
    for (const Operand &o : op.operands)
      if (o.role == OperandRole::Output) {
        c.elementBytes = o.elementBytes;
        break;
      }
    c.what = "partial sums of the output";
    cost.communication.push_back(std::move(c));
  }
  // An input that a split loop does not index (a contraction's, or an
  // elementwise operator's broadcast input, e.g. the position embedding
  // added to every sequence of the batch) gets a partial gradient over the
  // axes splitting that loop.
  if (op.kind == OpKind::MatMul || op.kind == OpKind::Elementwise) {
    for (auto [j, operand] : llvm::enumerate(op.operands)) {
      if (operand.role != OperandRole::Input || !operand.needsGrad)
        continue;
      std::vector<unsigned> axes = axesOutside(op, operand, std::nullopt);
      if (axes.empty())
        continue;
      Communication c;
      c.phase = Phase::InputGrad;
      c.axes = std::move(axes);
      c.bytes = localBytes(op, operand, mesh);
      c.elementBytes = operand.elementBytes;
      c.what = "partial input gradient of operand " + std::to_string(j);
      c.operand = int(j);
      cost.communication.push_back(std::move(c));
    }
  }
  // An input from an unplanned (replicated) operator: its gradient is
  // gathered whole over the axes splitting it, for that operator's own
  // backward (-stp-partition re-lays the gradient out to its producer's
  // replicated layout).
  for (auto [j, operand] : llvm::enumerate(op.operands)) {
    if (operand.role != OperandRole::Input || !operand.needsGrad ||
        !operand.gatherGradient)
      continue;
    std::vector<unsigned> axes;
    double group = 1;
    for (unsigned d = 0; d < op.loops.size(); ++d)
      if (indexes(operand, d))
        for (unsigned axis : op.loops[d].axes)
          if (!is_contained(axes, axis)) {
            axes.push_back(axis);
            group *= double(mesh.axes[axis].size);
          }
    if (axes.empty())
      continue;
    llvm::sort(axes);
    Communication c;
    c.phase = Phase::InputGrad;
    c.kind = Collective::AllGather;
    c.axes = std::move(axes);
    c.bytes = localBytes(op, operand, mesh) * group;
    c.elementBytes = operand.elementBytes;
    c.what = "gradient of operand " + std::to_string(j) +
             " gathered for its unplanned producer";
    c.operand = int(j);
    cost.communication.push_back(std::move(c));
  }
  for (const Communication &c : cost.communication) {
    double t = c.count * getMultiAxisCollectiveTime(c.kind, c.bytes, c.axes,
                                                    mesh, cluster);
    (c.phase == Phase::Forward ? cost.forwardComm : cost.backwardComm) += t;
  }

  cost.stashBytes = op.kind == OpKind::Softmax ? outBytes : inputStash;
  cost.transientBytes = outBytes;
  return cost;
}

std::vector<GradientSync> getGradientSyncs(const Operator &op, const Mesh &mesh,
                                           std::optional<unsigned> ignored) {
  std::vector<GradientSync> syncs;
  for (const Operand &operand : op.operands) {
    if (operand.role != OperandRole::Parameter)
      continue;
    GradientSync sync;
    sync.parameter = operand.name;
    sync.bytes = localBytes(op, operand, mesh);
    sync.axes = axesOutside(op, operand, ignored);
    syncs.push_back(std::move(sync));
  }
  return syncs;
}

//===----------------------------------------------------------------------===//
// Re-layout
//===----------------------------------------------------------------------===//

static AxisUse getAxisUse(const TensorLayout &layout, unsigned axis) {
  if (is_contained(layout.partialAxes, axis))
    return {AxisUse::State::Partial, 0};
  for (unsigned d = 0; d < layout.dimAxes.size(); ++d)
    if (is_contained(layout.dimAxes[d], axis))
      return {AxisUse::State::Split, d};
  return {};
}

double getRelayoutSeconds(ArrayRef<AxisUse> from, ArrayRef<AxisUse> to,
                          double local, const Mesh &mesh,
                          ArrayRef<AxisPlacement> placements,
                          const Cluster &cluster, RelayoutCost *cost) {
  using State = AxisUse::State;
  double seconds = 0;
  auto emit = [&](Collective kind, unsigned axis, double bytes) {
    double t = getCollectiveTime(kind, bytes, placements[axis], cluster);
    seconds += t;
    if (!cost)
      return;
    int64_t n = mesh.axes[axis].size;
    // Bytes received: what the ring delivers to each device (all-reduce:
    // the reduced values once, (n-1)/n S).
    cost->receivedBytes += kind == Collective::AllReduce
                               ? getRingVolume(kind, bytes, n) / 2
                               : getRingVolume(kind, bytes, n);
    cost->steps.push_back(RelayoutStep{kind, axis, bytes, t});
  };
  // As -stp-partition re-lays a value out (Partition.cpp, relayout), the
  // axes of each dim listed major first (ascending axis index, as the
  // search assigns them): (1) partial sums reduce-scattered into a dim
  // whose wanted list is its current one with the partial axes appended,
  // else all-reduced; (2) per dim, the axes after the common prefix of the
  // current and wanted lists dropped: all-to-all into a dim that wants
  // exactly them appended, else gathered; (3) the axes still wanted added
  // by slicing (free).
  unsigned rank = 0;
  for (unsigned axis = 0; axis < from.size() && axis < to.size(); ++axis) {
    if (from[axis].state == State::Split)
      rank = std::max(rank, from[axis].dim + 1);
    if (to[axis].state == State::Split)
      rank = std::max(rank, to[axis].dim + 1);
  }
  using AxisList = SmallVector<unsigned, 2>;
  SmallVector<AxisList, 4> cur(rank), want(rank);
  AxisList partial;
  for (unsigned axis = 0; axis < from.size(); ++axis) {
    if (from[axis].state == State::Split)
      cur[from[axis].dim].push_back(axis);
    else if (from[axis].state == State::Partial)
      partial.push_back(axis);
    if (axis < to.size() && to[axis].state == State::Split)
      want[to[axis].dim].push_back(axis);
  }
  auto size = [&](unsigned axis) { return double(mesh.axes[axis].size); };
  auto appended = [](const AxisList &a, const AxisList &b) {
    AxisList r(a);
    r.append(b.begin(), b.end());
    return r;
  };
  if (!partial.empty()) {
    std::optional<unsigned> scatter;
    for (unsigned d = 0; d < rank && !scatter; ++d)
      if (appended(cur[d], partial) == want[d])
        scatter = d;
    for (unsigned axis : partial) {
      if (scatter) {
        emit(Collective::ReduceScatter, axis, local);
        local /= size(axis);
      } else {
        emit(Collective::AllReduce, axis, local);
      }
    }
    if (scatter)
      cur[*scatter] = want[*scatter];
  }
  for (unsigned d1 = 0; d1 < rank; ++d1) {
    unsigned common = 0;
    while (common < cur[d1].size() && common < want[d1].size() &&
           cur[d1][common] == want[d1][common])
      ++common;
    if (common == cur[d1].size())
      continue;
    AxisList drop(cur[d1].begin() + common, cur[d1].end());
    std::optional<unsigned> target;
    for (unsigned d2 = 0; d2 < rank && !target; ++d2)
      if (d2 != d1 && appended(cur[d2], drop) == want[d2])
        target = d2;
    for (unsigned axis : drop) {
      if (target) {
        emit(Collective::AllToAll, axis, local);
      } else {
        local *= size(axis);
        emit(Collective::AllGather, axis, local);
      }
    }
    if (target)
      cur[*target].append(drop.begin(), drop.end());
    cur[d1].resize(common);
  }
  if (cost)
    cost->seconds += seconds;
  return seconds;
}

Expected<RelayoutCost> getRelayoutCost(const TensorLayout &from,
                                       const TensorLayout &to, const Mesh &mesh,
                                       const Cluster &cluster) {
  if (!to.partialAxes.empty())
    return createStringError(inconvertibleErrorCode(),
                             "re-layout target cannot hold partial sums");
  if (from.shape != to.shape || from.dimAxes.size() != from.shape.size() ||
      to.dimAxes.size() != to.shape.size())
    return createStringError(inconvertibleErrorCode(),
                             "re-layout between layouts of different shapes");
  // Local bytes under `from`.
  double local = double(from.elementBytes);
  for (unsigned d = 0; d < from.shape.size(); ++d) {
    int64_t split = 1;
    for (unsigned axis : from.dimAxes[d])
      split *= mesh.axes[axis].size;
    local *= double(ceilDiv(from.shape[d], split));
  }
  SmallVector<AxisUse, 4> fromUse, toUse;
  SmallVector<AxisPlacement, 4> placements;
  for (unsigned axis = 0; axis < mesh.axes.size(); ++axis) {
    fromUse.push_back(getAxisUse(from, axis));
    toUse.push_back(getAxisUse(to, axis));
    placements.push_back(mesh.getPlacement(axis, cluster.devicesPerNode));
  }
  RelayoutCost cost;
  getRelayoutSeconds(fromUse, toUse, local, mesh, placements, cluster, &cost);
  return cost;
}

ModelStateBytes getModelStateBytes(double psi, int64_t nd, int zeroStage) {
  double n = double(std::max<int64_t>(1, nd));
  ModelStateBytes m;
  m.parameters = 2 * psi;
  m.gradients = 2 * psi;
  m.optimizer = 12 * psi;
  if (zeroStage >= 1)
    m.optimizer /= n;
  if (zeroStage >= 2)
    m.gradients /= n;
  if (zeroStage >= 3)
    m.parameters /= n;
  return m;
}

} // namespace stpar::cost

llvm::StringRef stpar::cost::getOpKindName(OpKind kind) {
  switch (kind) {
  case OpKind::MatMul:
    return "matmul";
  case OpKind::Elementwise:
    return "elementwise";
  case OpKind::Softmax:
    return "softmax";
  case OpKind::Norm:
    return "norm";
  case OpKind::Embedding:
    return "embedding";
  case OpKind::MoE:
    return "moe";
  }
  return "?";
}
