//===- MegatronPlan.cpp - Megatron partition of an operator graph -*- C++ -*-=//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Assigns Megatron-LM's 3D partition (Shoeybi et al. 2019, Sec. 3;
// Narayanan et al. SC'21, Sec. 2) to an OperatorGraph by following splits
// through the graph: the batch from the graph inputs (dp), tensor-parallel
// splits from column-parallel linears to the row-parallel linear that
// consumes them (tp), and pipeline stages cut at layer boundaries (pp).
// No MLIR.
//
//===----------------------------------------------------------------------===//

#include "stpar/Analysis/OperatorGraph.h"
#include "stpar/Cost/MegatronRule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <limits>
#include <map>

using namespace llvm;
using namespace stpar::cost;

namespace stpar::analysis {

static Error fail(const Twine &msg) {
  return createStringError(inconvertibleErrorCode(), msg);
}

Expected<IRStrategy> parseIRStrategy(StringRef spec) {
  IRStrategy s;
  // Take `gb` out and note `mb`; the rest is GPTModel.h's grammar.
  StringRef body = spec;
  std::string rest;
  if (body.consume_front("megatron:")) {
    SmallVector<StringRef> parts;
    body.split(parts, ',', -1, false);
    for (StringRef part : parts) {
      auto [key, value] = part.split('=');
      key = key.trim();
      if (key == "gb") {
        int64_t n = 0;
        if (value.trim().getAsInteger(10, n) || n < 1)
          return fail("megatron key 'gb': expected a positive integer, got '" +
                      value + "'");
        s.globalBatch = n;
        continue;
      }
      if (key == "mb")
        s.microBatchGiven = true;
      rest += (rest.empty() ? "" : ",") + part.str();
    }
    rest = "megatron:" + rest;
  } else {
    rest = spec.str();
  }
  Expected<MegatronStrategy> m = parseMegatronSpec(rest);
  if (!m)
    return m.takeError();
  s.megatron = *m;
  return s;
}

namespace {
constexpr unsigned kPP = 0, kDP = 1, kTP = 2;

/// Follows one split (a tensor dim) per tensor through views and
/// operators; -1 is "not split".
class SplitState {
public:
  SplitState(const OperatorGraph &g) : g(g), dims(g.tensors.size(), -2) {}

  int get(unsigned t) { return g.resolveTrackedDim(dims, t); }
  void set(unsigned t, int d) { dims[t] = d; }

  /// The loop of operand `j` of `gop` its input split lies on (-1 none).
  int getLoop(const GraphOperator &gop, unsigned j) {
    int d = get(gop.tensors[j]);
    if (d < 0 || unsigned(d) >= gop.tensorDimLoops[j].size())
      return -1;
    return gop.tensorDimLoops[j][d];
  }

  /// Records the outputs of `gop` split along loop `loop` (or not).
  void setOutputs(const GraphOperator &gop, int loop) {
    OperatorGraph::trackOutputDims(dims, gop, loop);
  }

private:
  const OperatorGraph &g;
  std::vector<int> dims;
};
} // namespace

/// Splits the layers into `pp` contiguous stages minimizing the largest
/// stage's forward FLOPs (linear partition by dynamic programming); returns
/// the first layer of each stage.
static std::vector<unsigned> cutStages(ArrayRef<double> layerFlops,
                                       unsigned pp) {
  unsigned n = unsigned(layerFlops.size());
  std::vector<double> prefix(n + 1, 0);
  for (unsigned i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + layerFlops[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: first i layers in s stages; from[s][i]: start of the last.
  std::vector<std::vector<double>> best(pp + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<unsigned>> from(pp + 1,
                                          std::vector<unsigned>(n + 1, 0));
  best[0][0] = 0;
  for (unsigned s = 1; s <= pp; ++s)
    for (unsigned i = s; i <= n; ++i)
      for (unsigned k = s - 1; k < i; ++k) {
        double v = std::max(best[s - 1][k], prefix[i] - prefix[k]);
        if (v < best[s][i]) {
          best[s][i] = v;
          from[s][i] = k;
        }
      }
  std::vector<unsigned> starts(pp);
  unsigned i = n;
  for (unsigned s = pp; s >= 1; --s) {
    starts[s - 1] = from[s][i];
    i = from[s][i];
  }
  return starts;
}

Expected<MegatronLoops> chooseMegatronLoops(const OperatorGraph &graph,
                                            int64_t tp, bool sequenceParallel) {
  MegatronLoops out;
  out.batchLoop.assign(graph.ops.size(), -1);
  out.tpLoop.assign(graph.ops.size(), -1);
  for (auto [l, layer] : enumerate(graph.layers))
    if (layer.heads > 0 && layer.heads % tp)
      return fail("megatron: tp=" + Twine(tp) + " does not divide the " +
                  Twine(layer.heads) + " attention heads of layer " + Twine(l));

  // The vocabulary-parallel table: the embedding table with most rows.
  std::string vocabTable;
  int64_t vocabRows = 0;
  for (const GraphOperator &gop : graph.ops) {
    if (gop.op.kind != OpKind::Embedding)
      continue;
    for (auto [j, operand] : enumerate(gop.op.operands))
      if (operand.role == OperandRole::Parameter) {
        const GraphTensor &t = graph.tensors[gop.tensors[j]];
        if (!t.shape.empty() && t.shape[0] > vocabRows) {
          vocabRows = t.shape[0];
          vocabTable = operand.name;
        }
      }
  }

  // The batch (dp) and the sequence (the dim after the batch of a graph
  // input whose batch is dim 0) are followed from the graph inputs.
  SplitState split(graph), batch(graph), seq(graph);
  for (auto [i, t] : enumerate(graph.tensors))
    if (t.kind == TensorKind::GraphInput) {
      batch.set(unsigned(i), t.batchDim ? int(*t.batchDim) : -1);
      seq.set(unsigned(i),
              t.batchDim && *t.batchDim == 0 && t.shape.size() >= 2 ? 1 : -1);
    }
  std::map<std::string, std::vector<std::string>> replicated;
  auto followed = [&](SplitState &state, const GraphOperator &gop) {
    int loop = -1;
    for (auto [j, operand] : enumerate(gop.op.operands)) {
      if (operand.role != OperandRole::Input)
        continue;
      int l = state.getLoop(gop, unsigned(j));
      if (l >= 0 && gop.op.loops[l].kind == LoopKind::Parallel) {
        loop = l;
        break;
      }
    }
    state.setOutputs(gop, loop);
    return loop;
  };

  for (auto [i, gop] : enumerate(graph.ops)) {
    const Operator &op = gop.op;
    int batchLoop = followed(batch, gop);
    int seqLoop = followed(seq, gop);
    std::vector<int> inputLoops;
    bool lost = false;
    for (auto [j, operand] : enumerate(op.operands)) {
      if (operand.role != OperandRole::Input)
        continue;
      int d = split.get(gop.tensors[j]);
      int l = split.getLoop(gop, unsigned(j));
      if (d >= 0 && l < 0)
        lost = true;
      if (l >= 0 && !is_contained(inputLoops, l))
        inputLoops.push_back(l);
    }
    MegatronInputs in;
    in.inputLoops = inputLoops;
    in.lost = lost;
    in.sequenceLoop = sequenceParallel && seqLoop != batchLoop ? seqLoop : -1;
    if (op.kind == OpKind::Embedding)
      for (auto [j, operand] : enumerate(op.operands))
        if (operand.role == OperandRole::Parameter &&
            operand.name == vocabTable && !gop.tensorDimLoops[j].empty())
          in.vocabLoop = gop.tensorDimLoops[j][0];
    MegatronChoice choice = chooseMegatronLoop(op, in, tp);
    // A split reaching a dim tp does not divide (grouped-query attention's
    // key/value heads below tp) is no Megatron configuration: Megatron-LM
    // requires tp to divide the heads and the query groups.
    if (choice.indivisible)
      return fail("megatron: tp=" + Twine(tp) + " does not divide the extent " +
                  Twine(op.loops[inputLoops[0]].extent) +
                  " of the dim its split reaches at '" + op.name +
                  "' (e.g. the key/value heads of grouped-query attention; "
                  "Megatron-LM requires tp to divide them)");
    if (!choice.replicated.empty())
      replicated[choice.replicated].push_back(op.name);
    // A replicated op whose input was split reads it gathered: its split
    // ends here (the all-gather is costed by the search's edges; the cost
    // route warns).
    int tpLoop = choice.loop;
    split.setOutputs(
        gop, tpLoop >= 0 && op.loops[tpLoop].kind == LoopKind::Parallel ? tpLoop
                                                                        : -1);
    out.tpLoop[i] = tpLoop;
    out.batchLoop[i] = batchLoop;
  }

  for (auto &[why, names] : replicated) {
    std::string list;
    for (unsigned k = 0; k < names.size() && k < 3; ++k)
      list += (k ? ", '" : "'") + names[k] + "'";
    if (names.size() > 3)
      list += ", ...";
    out.warnings.push_back(Twine(names.size())
                               .concat(" operator(s) replicated across tp (")
                               .concat(why)
                               .concat("): ")
                               .concat(list)
                               .str());
  }
  return out;
}

Expected<MegatronPlan> assignMegatron(const OperatorGraph &graph,
                                      const IRStrategy &strategy,
                                      int64_t microBatch) {
  const MegatronStrategy &s = strategy.megatron;
  unsigned numLayers = unsigned(graph.layers.size());
  if (strategy.microBatchGiven && s.mb != microBatch)
    return fail("megatron: mb=" + Twine(s.mb) +
                " but the model's batch dim is bound to " + Twine(microBatch) +
                "; the bound batch dim is the micro-batch size (drop mb= or "
                "make them equal)");
  int64_t perStep = microBatch * s.dp;
  int64_t globalBatch = strategy.globalBatch.value_or(perStep);
  if (globalBatch % perStep)
    return fail("megatron: gb=" + Twine(globalBatch) +
                " must be a multiple of mb*dp=" + Twine(perStep));
  if (s.pp > 1 && s.pp * s.interleave > int64_t(numLayers))
    return fail(
        "megatron: pp=" + Twine(s.pp) +
        (s.interleave > 1 ? " x interleave=" + Twine(s.interleave) : Twine()) +
        " exceeds the " + Twine(numLayers) +
        " transformer layers found in the model");

  MegatronPlan plan;
  CostProblem &problem = plan.problem;
  problem.mesh.axes = {{"pp", s.pp}, {"dp", s.dp}, {"tp", s.tp}};
  TrainingConfig &c = problem.config;
  c.microBatches = globalBatch / perStep;
  c.pipelineStages = s.pp;
  c.interleave = s.interleave;
  c.pipelineAxis = kPP;
  c.zeroStage = s.zeroStage;
  c.recompute = s.recompute;
  c.overlapGradSync = s.overlapGradSync;

  Expected<MegatronLoops> loops =
      chooseMegatronLoops(graph, s.tp, s.sequenceParallel);
  if (!loops)
    return loops.takeError();
  plan.warnings = std::move(loops->warnings);
  for (auto [i, gop] : enumerate(graph.ops)) {
    Operator op = gop.op;
    int tpLoop = loops->tpLoop[i], batchLoop = loops->batchLoop[i];
    if (tpLoop >= 0)
      op.loops[tpLoop].axes.push_back(kTP);
    if (batchLoop >= 0 && batchLoop != tpLoop) {
      op.loops[batchLoop].extent *= s.dp;
      op.loops[batchLoop].axes.insert(op.loops[batchLoop].axes.begin(), kDP);
    }
    problem.ops.push_back(std::move(op));
  }

  // pp: stages cut at layer starts.
  if (s.pp > 1) {
    std::vector<double> unitFlops(numLayers, 0);
    std::vector<unsigned> unitOf(graph.ops.size(), 0);
    for (unsigned i = 0; i < graph.ops.size(); ++i) {
      unsigned u = 0;
      for (unsigned l = 1; l < numLayers; ++l)
        if (i >= graph.layers[l].begin)
          u = l;
      unitOf[i] = u;
      unitFlops[u] += graph.getForwardFlops(i);
    }
    std::vector<unsigned> starts = cutStages(unitFlops, unsigned(s.pp));
    for (unsigned i = 0; i < graph.ops.size(); ++i) {
      unsigned stage = 0;
      for (unsigned k = 0; k < starts.size(); ++k)
        if (unitOf[i] >= starts[k])
          stage = k;
      problem.ops[i].stage = stage;
    }
  }

  return plan;
}

} // namespace stpar::analysis
