//===- SearchBridge.cpp - operator graph -> search problem -----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Builds a search::Problem from an OperatorGraph (SearchBridge.h): follows
// the batch and sequence dims from the graph inputs, keeps the operators
// with a batch loop, finds residual cuts near the converter's layer starts,
// checks the layers between them are identical and folds them into one
// repeated block; edges through views carry the views' dim map.
//
//===----------------------------------------------------------------------===//

#include "stpar/Analysis/SearchBridge.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace stpar::analysis {

static Error fail(const Twine &msg) {
  return createStringError(inconvertibleErrorCode(), msg);
}

namespace {
/// Follows one marked tensor dim (the batch or the sequence) from the graph
/// inputs through views and operators.
class DimFollower {
public:
  DimFollower(const OperatorGraph &g, bool sequence)
      : g(g), dims(g.tensors.size(), -2), opLoop(g.ops.size(), -1) {
    for (auto [t, tensor] : enumerate(g.tensors)) {
      if (tensor.kind != TensorKind::GraphInput)
        continue;
      int d = -1;
      if (tensor.batchDim)
        d = sequence ? (*tensor.batchDim == 0 && tensor.shape.size() >= 2 ? 1
                                                                           : -1)
                     : int(*tensor.batchDim);
      dims[t] = d;
    }
    for (auto [i, gop] : enumerate(g.ops)) {
      int loop = -1;
      for (auto [j, operand] : enumerate(gop.op.operands)) {
        if (operand.role == OperandRole::Output)
          continue;
        int d = get(gop.tensors[j]);
        if (d >= 0 && unsigned(d) < gop.tensorDimLoops[j].size() &&
            gop.tensorDimLoops[j][d] >= 0 &&
            gop.op.loops[gop.tensorDimLoops[j][d]].kind ==
                LoopKind::Parallel) {
          loop = gop.tensorDimLoops[j][d];
          break;
        }
      }
      opLoop[i] = loop;
      OperatorGraph::trackOutputDims(dims, gop, loop);
    }
  }
  /// The loop of operator `i` holding the marked dim, or -1.
  int getLoop(unsigned i) const { return opLoop[i]; }

private:
  int get(unsigned t) { return g.resolveTrackedDim(dims, t); }

  const OperatorGraph &g;
  std::vector<int> dims;
  std::vector<int> opLoop;
};

/// A tensor an operand reads, traced back through views.
struct Root {
  /// Producer graph operator (-1: a graph input, parameter or buffer).
  int producer = -1;
  unsigned tensor = 0;
};

Root traceRoot(const OperatorGraph &g, unsigned t) {
  t = g.getViewRoot(t);
  return {g.tensors[t].producerOp, t};
}

/// A candidate edge between kept operators (kept indices).
struct RawEdge {
  unsigned producer, producerOperand, consumer, consumerOperand;
  unsigned tensor;
  std::optional<EdgeViews> views;
};

/// Operand dim position (cost::Operand::dims) of each tensor dim, -1 for
/// unit dims without a loop.
std::vector<int> getPositions(ArrayRef<int> tensorDimLoops) {
  std::vector<int> pos;
  int next = 0;
  for (int l : tensorDimLoops)
    pos.push_back(l >= 0 ? next++ : -1);
  return pos;
}

/// The views from producer output `prodDims` (tensor dim -> loop) to
/// consumer operand `consDims` through `chain` (GraphView indices, the one
/// reading the producer first), composed with each view's splitDimOf.
EdgeViews composeViews(const OperatorGraph &g, ArrayRef<unsigned> chain,
                       ArrayRef<int> prodDims, ArrayRef<int> consDims) {
  EdgeViews v;
  v.count = unsigned(chain.size());
  std::vector<int> prodPos = getPositions(prodDims),
                   consPos = getPositions(consDims);
  int prodRank = int(llvm::count_if(prodDims, [](int l) { return l >= 0; }));
  v.lostAt.assign(prodRank, -1);
  for (auto [td, pos] : enumerate(consPos)) {
    if (pos < 0)
      continue;
    std::vector<int64_t> sizes(chain.size(), 1);
    int d = int(td);
    if (chain.empty() && unsigned(d) >= prodPos.size())
      d = -1;
    int gradientLost = -1;
    for (int k = int(chain.size()) - 1; k >= 0 && d >= 0; --k) {
      const GraphView &view = g.views[chain[k]];
      const std::vector<int64_t> &shape = g.tensors[view.result].shape;
      sizes[k] = unsigned(d) < shape.size() ? shape[d] : 1;
      d = unsigned(d) < view.splitDimOf.size() ? view.splitDimOf[d] : -1;
      if (d < 0)
        gradientLost = k;
    }
    v.gradientLostAt.push_back(gradientLost);
    int p = d >= 0 && unsigned(d) < prodPos.size() ? prodPos[d] : -1;
    v.producerDimOf.push_back(p);
    v.sizes.push_back(std::move(sizes));
  }
  for (auto [td, pos] : enumerate(prodPos)) {
    if (pos < 0)
      continue;
    int d = int(td);
    for (auto [k, index] : enumerate(chain)) {
      const std::vector<int> &map = g.views[index].splitDimOf;
      auto it = llvm::find(map, d);
      if (it == map.end()) {
        v.lostAt[pos] = int(k);
        break;
      }
      d = int(it - map.begin());
    }
  }
  return v;
}

/// Structural signature of an operator (layers are identical when their
/// operators' signatures are).
std::string signature(const Operator &op) {
  std::string s = std::to_string(int(op.kind)) + "/" +
                  std::to_string(op.flopsPerPoint) + "/";
  for (const LoopDim &l : op.loops)
    s += l.name + "=" + std::to_string(l.extent) +
         (l.kind == LoopKind::Reduction ? "r" : "") + ",";
  for (const Operand &o : op.operands) {
    s += "|" + std::to_string(int(o.role)) + ":" +
         std::to_string(o.elementBytes) + (o.needsGrad ? "g" : "") +
         (o.gatherGradient ? "w" : "") + ":";
    for (unsigned d : o.dims)
      s += std::to_string(d) + ".";
  }
  return s;
}
} // namespace

Expected<BridgedProblem> buildSearchProblem(const OperatorGraph &graph,
                                            StringRef name, StringRef cluster,
                                            int64_t devices) {
  BridgedProblem out;
  Problem &p = out.problem;
  p.name = name.str();
  p.cluster = cluster.str();
  p.devices = devices;

  // Batch and sequence loops; keep the operators with a batch loop. When no
  // operator has one (a static model whose first input's dim 0 is reduced
  // or absent), every operator is planned over its own loops without a
  // batch loop.
  DimFollower batch(graph, false), seq(graph, true);
  bool noBatch = true;
  for (unsigned i = 0; i < graph.ops.size(); ++i)
    noBatch &= batch.getLoop(i) < 0;
  std::vector<unsigned> kept;
  std::vector<int> keptOf(graph.ops.size(), -1);
  std::vector<Operator> ops;
  bool anySeq = false;
  for (auto [i, gop] : enumerate(graph.ops)) {
    int b = batch.getLoop(i);
    if (b < 0 && !noBatch) {
      out.unplanned.push_back(unsigned(i));
      continue;
    }
    keptOf[i] = int(kept.size());
    kept.push_back(unsigned(i));
    Operator op = gop.op;
    if (noBatch) {
      for (LoopDim &l : op.loops)
        l.axes.clear();
      op.temporal.reset();
      op.stage = 0;
      ops.push_back(std::move(op));
      continue;
    }
    op.loops[b].name = "b";
    int s = seq.getLoop(i);
    if (s >= 0 && s != b) {
      op.loops[s].name = "s";
      anySeq = true;
    }
    for (LoopDim &l : op.loops)
      l.axes.clear();
    op.temporal.reset();
    op.stage = 0;
    ops.push_back(std::move(op));
  }
  if (kept.empty())
    return fail("the model has no operator to plan (every value folds to a "
                "constant)");
  if (noBatch)
    out.notes.push_back("no operator has a batch loop: operators are planned "
                        "over their own loops (bind the batch dim with --dim; "
                        "graph inputs' dim 0 of that extent is the batch)");
  else if (!out.unplanned.empty())
    out.notes.push_back(std::to_string(out.unplanned.size()) +
                        " operator(s) without a batch loop are not planned "
                        "(e.g. '" +
                        graph.ops[out.unplanned.front()].op.name + "')");
  p.batchLoop = noBatch ? "" : "b";
  if (anySeq)
    p.sequenceLoop = "s";
  unsigned n = unsigned(kept.size());

  // Candidate edges and gradient-carrying tensors (kept indices).
  std::vector<RawEdge> edges;
  unsigned dropped = 0;
  // Root tensor -> (producer, last consumer) for crossing counts.
  std::map<unsigned, std::pair<unsigned, unsigned>> spans;
  for (unsigned c = 0; c < n; ++c) {
    const GraphOperator &gop = graph.ops[kept[c]];
    for (auto [j, operand] : enumerate(gop.op.operands)) {
      if (operand.role != OperandRole::Input)
        continue;
      Root r = traceRoot(graph, gop.tensors[j]);
      if (r.producer < 0)
        continue;
      int pk = keptOf[r.producer];
      if (pk < 0) {
        ++dropped;
        // Replicated in F; its gradient is gathered whole in B.
        if (graph.tensors[r.tensor].requiresGrad)
          ops[c].operands[j].gatherGradient = true;
        continue;
      }
      if (graph.tensors[r.tensor].requiresGrad) {
        auto [it, inserted] =
            spans.try_emplace(r.tensor, unsigned(pk), c);
        if (!inserted)
          it->second.second = std::max(it->second.second, c);
      }
      const GraphOperator &prod = graph.ops[r.producer];
      std::optional<unsigned> po;
      for (auto [k, o] : enumerate(prod.op.operands))
        if (o.role == OperandRole::Output && prod.tensors[k] == r.tensor)
          po = unsigned(k);
      if (!po) {
        ++dropped;
        continue;
      }
      std::vector<unsigned> chain = graph.getViewChain(gop.tensors[j]);
      if (!chain.empty()) {
        // Through views: the composed dim map (the partitioned program
        // re-lays the producer's output out before the first view that
        // drops a split, and the consumer's operand after the last).
        edges.push_back({unsigned(pk), *po, c, unsigned(j), r.tensor,
                         composeViews(graph, chain, prod.tensorDimLoops[*po],
                                      gop.tensorDimLoops[j])});
        continue;
      }
      // One tensor: both sides index its dims, but where one side indexes
      // a dim by no loop (a broadcast unit dim) or the consumer by a larger
      // loop (grouped-query key/value heads read by the query-head loop),
      // operand dim positions or extents differ: joined by tensor dim.
      auto largerInConsumer = [&] {
        for (auto [a, b] : zip(gop.tensorDimLoops[j], prod.tensorDimLoops[*po]))
          if (a >= 0 && b >= 0 &&
              ops[c].loops[a].extent > ops[pk].loops[b].extent)
            return true;
        return false;
      };
      if (is_contained(gop.tensorDimLoops[j], -1) ||
          is_contained(prod.tensorDimLoops[*po], -1) || largerInConsumer()) {
        edges.push_back({unsigned(pk), *po, c, unsigned(j), r.tensor,
                         composeViews(graph, {}, prod.tensorDimLoops[*po],
                                      gop.tensorDimLoops[j])});
        continue;
      }
      edges.push_back({unsigned(pk), *po, c, unsigned(j), r.tensor, {}});
    }
  }
  // The program re-lays a producer's output out before the views once per
  // target layout: among view edges leaving the same output with the same
  // lost splits, the first pays.
  {
    std::set<std::tuple<unsigned, unsigned, std::vector<int>>> paid;
    for (RawEdge &e : edges)
      if (e.views && e.views->count)
        e.views->chargesGather =
            paid.insert({e.producer, e.producerOperand, e.views->lostAt})
                .second;
  }
  if (dropped)
    out.notes.push_back(std::to_string(dropped) +
                        " tensor edge(s) from unplanned operators carry no "
                        "forward re-layout cost");

  // Residual cuts: positions c (between kept ops c-1 and c) crossed by
  // exactly one gradient-carrying tensor.
  std::vector<int> crossing(n + 1, 0);
  std::vector<int> crossTensor(n + 1, -1);
  for (auto &[t, span] : spans)
    for (unsigned c = span.first + 1; c <= span.second; ++c) {
      ++crossing[c];
      crossTensor[c] = int(t);
    }
  auto isClean = [&](unsigned c) {
    return c >= 1 && c < n && crossing[c] == 1;
  };
  auto keptIndexAtOrAfter = [&](unsigned graphIndex) {
    for (unsigned k = 0; k < n; ++k)
      if (kept[k] >= graphIndex)
        return k;
    return n;
  };

  // Try to fold the layers.
  std::string why;
  std::vector<unsigned> cuts;
  unsigned numLayers = unsigned(graph.layers.size());
  if (numLayers == 0)
    why = "no transformer layers found";
  for (unsigned l = 0; l < numLayers && why.empty(); ++l) {
    unsigned begin = keptIndexAtOrAfter(graph.layers[l].begin);
    unsigned lo = cuts.empty() ? 1 : cuts.back() + 1;
    unsigned hi = l + 1 < numLayers
                      ? keptIndexAtOrAfter(graph.layers[l + 1].begin)
                      : keptIndexAtOrAfter(graph.layers[l].end);
    std::optional<unsigned> best;
    for (unsigned c = lo; c < hi && c < n; ++c)
      if (isClean(c) &&
          (!best || (c > begin ? c - begin : begin - c) <
                        (*best > begin ? *best - begin : begin - *best)))
        best = c;
    if (!best)
      why = "no residual cut found near layer " + std::to_string(l);
    else
      cuts.push_back(*best);
  }
  if (why.empty()) {
    // The end of the last layer: a clean cut near the converter's end, or
    // the end of the graph.
    unsigned end = keptIndexAtOrAfter(graph.layers.back().end);
    std::optional<unsigned> best;
    for (unsigned c = cuts.back() + 1; c <= n; ++c)
      if ((isClean(c) || c == n) &&
          (!best || (c > end ? c - end : end - c) <
                        (*best > end ? *best - end : end - *best)))
        best = c;
    cuts.push_back(*best);
  }
  unsigned len = 0;
  if (why.empty()) {
    len = cuts[1] - cuts[0];
    for (unsigned l = 0; l < numLayers; ++l)
      if (cuts[l + 1] - cuts[l] != len)
        why = "layer " + std::to_string(l) + " has " +
              std::to_string(cuts[l + 1] - cuts[l]) + " operators, layer 0 " +
              std::to_string(len);
  }
  for (unsigned l = 1; l < numLayers && why.empty(); ++l)
    for (unsigned k = 0; k < len && why.empty(); ++k)
      if (signature(ops[cuts[l] + k]) != signature(ops[cuts[0] + k]))
        why = "operator " + ops[cuts[l] + k].name + " of layer " +
              std::to_string(l) + " differs from layer 0's";
  // The carry: the tensor leaving each layer, produced at the same offset.
  std::optional<unsigned> carryOffset;
  if (why.empty()) {
    for (unsigned l = 0; l < numLayers && why.empty(); ++l) {
      unsigned c = cuts[l + 1];
      if (c == n) {
        if (l + 1 < numLayers)
          why = "layer " + std::to_string(l) + " ends the graph";
        continue;
      }
      unsigned producer = spans[unsigned(crossTensor[c])].first;
      if (producer < cuts[l] || producer >= c)
        why = "the residual stream leaving layer " + std::to_string(l) +
              " is not produced in it";
      else if (carryOffset && *carryOffset != producer - cuts[l])
        why = "the residual stream leaves layers at different operators";
      else
        carryOffset = producer - cuts[l];
    }
    if (why.empty() && !carryOffset)
      why = "no tensor leaves the last layer";
  }
  // Edges grouped by layer (offsets) must agree.
  auto sectionOf = [&](unsigned k) -> int {
    if (!why.empty())
      return -1;
    if (k < cuts.front())
      return -1; // pre
    if (k >= cuts.back())
      return int(numLayers); // post
    return int(std::upper_bound(cuts.begin(), cuts.end(), k) - cuts.begin()) -
           1;
  };
  std::vector<std::set<std::tuple<unsigned, unsigned, unsigned, unsigned>>>
      layerEdges(numLayers);
  std::vector<std::set<std::pair<unsigned, unsigned>>> entryEdges(numLayers);
  // Layer 0's entry edges through views: (offset, operand) -> views.
  std::map<std::pair<unsigned, unsigned>, EdgeViews> entryViews;
  if (why.empty())
    for (const RawEdge &e : edges) {
      int sp = sectionOf(e.producer), sc = sectionOf(e.consumer);
      if (sc >= 0 && sc < int(numLayers)) {
        if (sp == sc)
          layerEdges[sc].insert({e.producer - cuts[sc], e.producerOperand,
                                 e.consumer - cuts[sc], e.consumerOperand});
        else if (int(e.tensor) == crossTensor[cuts[sc]]) {
          entryEdges[sc].insert({e.consumer - cuts[sc], e.consumerOperand});
          if (sc == 0 && e.views)
            entryViews[{e.consumer - cuts[sc], e.consumerOperand}] = *e.views;
        }
      }
    }
  for (unsigned l = 1; l < numLayers && why.empty(); ++l)
    if (layerEdges[l] != layerEdges[0] || entryEdges[l] != entryEdges[0])
      why = "the tensors inside layer " + std::to_string(l) +
            " flow differently from layer 0";
  if (why.empty() && entryEdges[0].empty())
    why = "the residual stream entering layer 0 could not be followed";
  // The tensor entering layer 0 must be the last pre operator's first
  // output: move its producer last when nothing after it reads it.
  std::vector<unsigned> preOrder;
  // Pre operators computing only from graph inputs, parameters and
  // constants for the layers' other inputs (attention masks, position
  // tables): their outputs are read across sections, where no edge carries
  // a re-layout, so they are left unplanned; the program computes them
  // replicated and every layer slices what it needs without communication.
  std::vector<bool> side(n, false);
  unsigned numSide = 0;
  if (why.empty()) {
    unsigned entry = spans[unsigned(crossTensor[cuts[0]])].first;
    for (unsigned k = 0; k < cuts[0]; ++k) {
      if (k == entry)
        continue;
      const GraphOperator &gop = graph.ops[kept[k]];
      bool fromInputs = true;
      for (auto [j, operand] : enumerate(gop.op.operands)) {
        if (operand.role != OperandRole::Input)
          continue;
        Root r = traceRoot(graph, gop.tensors[j]);
        if (r.producer >= 0 && keptOf[r.producer] >= 0 &&
            !side[keptOf[r.producer]])
          fromInputs = false;
      }
      side[k] = fromInputs;
    }
    for (unsigned k = cuts[0]; k-- > 0;)
      if (side[k])
        for (const RawEdge &e : edges)
          if (e.producer == k && e.consumer < cuts[0] && !side[e.consumer])
            side[k] = false;
    std::optional<unsigned> firstSide;
    for (unsigned k = 0; k < cuts[0]; ++k) {
      if (side[k]) {
        out.unplanned.push_back(kept[k]);
        ++numSide;
        if (!firstSide)
          firstSide = k;
      } else if (k != entry) {
        preOrder.push_back(k);
      }
    }
    if (firstSide)
      out.notes.push_back(
          std::to_string(numSide) +
          " operator(s) before the layers computing only from graph inputs "
          "for the layers' other inputs (masks, position tables) are not "
          "planned: they run replicated (e.g. '" +
          ops[*firstSide].name + "')");
    preOrder.push_back(entry);
    for (const RawEdge &e : edges)
      if (e.producer == entry && e.consumer < cuts[0])
        why = "the embedding output is also read before the layers";
    const Operator &eop = ops[entry];
    for (const Operand &o : eop.operands) {
      if (o.role != OperandRole::Output)
        continue;
      if (graph.ops[kept[entry]].tensors[&o - eop.operands.data()] !=
          unsigned(crossTensor[cuts[0]]))
        why = "the residual stream is not the embedding's first output";
      break;
    }
  }

  StringSet<> names;
  auto uniqueName = [&](Operator &op) {
    std::string base = op.name;
    for (unsigned i = 1; !names.insert(op.name).second; ++i)
      op.name = base + "." + std::to_string(i);
  };

  if (!why.empty()) {
    out.notes.push_back("layers not folded (" + why +
                        "): every operator planned on its own, no pipelining");
    for (unsigned k = 0; k < n; ++k) {
      uniqueName(ops[k]);
      p.ops.push_back(ops[k]);
      p.sections.push_back(Section::Pre);
      out.graphOpOfFlat.push_back(kept[k]);
    }
    p.layers = 1;
    for (const RawEdge &e : edges)
      p.edges.push_back({e.producer, e.producerOperand, e.consumer,
                         e.consumerOperand, false, e.views});
    if (Error e = verifyProblem(p))
      return fail("internal: the bridged problem is invalid: " +
                  toString(std::move(e)));
    return out;
  }

  // Problem operators: pre (reordered), layer 0 as the template, post.
  std::vector<int> probOf(n, -1);
  auto add = [&](unsigned k, Section s) {
    probOf[k] = int(p.ops.size());
    Operator op = ops[k];
    uniqueName(op);
    p.ops.push_back(std::move(op));
    p.sections.push_back(s);
  };
  for (unsigned k : preOrder)
    add(k, Section::Pre);
  for (unsigned k = cuts[0]; k < cuts[1]; ++k)
    add(k, Section::Layer);
  for (unsigned k = cuts.back(); k < n; ++k)
    add(k, Section::Post);
  p.layers = numLayers;
  for (unsigned k : preOrder)
    out.graphOpOfFlat.push_back(kept[k]);
  for (unsigned l = 0; l < numLayers; ++l)
    for (unsigned k = cuts[l]; k < cuts[l + 1]; ++k)
      out.graphOpOfFlat.push_back(kept[k]);
  for (unsigned k = cuts.back(); k < n; ++k)
    out.graphOpOfFlat.push_back(kept[k]);

  unsigned carry = cuts[0] + *carryOffset;
  unsigned lastCarry = cuts[numLayers - 1] + *carryOffset;
  unsigned carryOperand = 0;
  unsigned skipped = 0;
  for (const RawEdge &e : edges) {
    int sp = sectionOf(e.producer), sc = sectionOf(e.consumer);
    if (side[e.producer] || side[e.consumer]) {
      // Replicated: read by slicing.
    } else if (sp == sc && sp < 0) {
      p.edges.push_back({unsigned(probOf[e.producer]), e.producerOperand,
                         unsigned(probOf[e.consumer]), e.consumerOperand, false,
                         e.views});
    } else if (sp == sc && sp == int(numLayers)) {
      p.edges.push_back({unsigned(probOf[e.producer]), e.producerOperand,
                         unsigned(probOf[e.consumer]), e.consumerOperand, false,
                         e.views});
    } else if (sp == sc && sp == 0) {
      p.edges.push_back({unsigned(probOf[e.producer]), e.producerOperand,
                         unsigned(probOf[e.consumer]), e.consumerOperand, false,
                         e.views});
    } else if (sp == int(numLayers) - 1 && sc == int(numLayers) &&
               e.producer == lastCarry) {
      carryOperand = e.producerOperand;
      p.edges.push_back({unsigned(probOf[carry]), e.producerOperand,
                         unsigned(probOf[e.consumer]), e.consumerOperand, false,
                         e.views});
    } else if (sp == sc) {
      // Inside layers 1.. : the template's edges stand for them.
    } else if (sc >= 0 && sc < int(numLayers) &&
               int(e.tensor) == crossTensor[cuts[sc]]) {
      // The residual stream entering a layer: 'next' edges from the carry.
    } else {
      ++skipped;
    }
  }
  // 'next' edges from the carry to each consumer of the entering stream.
  {
    const GraphOperator &cg = graph.ops[kept[carry]];
    for (auto [k, o] : enumerate(cg.op.operands))
      if (o.role == OperandRole::Output &&
          int(cg.tensors[k]) == crossTensor[cuts[1]])
        carryOperand = unsigned(k);
  }
  for (auto [offset, operand] : entryEdges[0]) {
    std::optional<EdgeViews> views;
    if (auto it = entryViews.find({offset, operand}); it != entryViews.end())
      views = it->second;
    p.edges.push_back({unsigned(probOf[carry]), carryOperand,
                       unsigned(probOf[cuts[0] + offset]), operand, true,
                       views});
  }
  if (skipped)
    out.notes.push_back(std::to_string(skipped) +
                        " tensor edge(s) reaching across sections (masks, "
                        "position tables) carry no re-layout cost");
  if (Error e = verifyProblem(p))
    return fail("internal: the bridged problem is invalid: " +
                toString(std::move(e)));
  return out;
}

} // namespace stpar::analysis
