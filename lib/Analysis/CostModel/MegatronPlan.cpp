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

} // namespace stpar::analysis
