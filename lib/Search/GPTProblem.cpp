//===- GPTProblem.cpp - transformer search problems -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/GPTProblem.h"

#include <limits>

using namespace llvm;
using namespace stpar::cost;

namespace stpar::search {

namespace {
struct Builder {
  Problem &p;
  unsigned add(StringRef name, OpKind kind, Section section, StringRef group,
               double flops,
               std::vector<std::tuple<const char *, int64_t, bool>> loops) {
    Operator op;
    op.name = name.str();
    op.kind = kind;
    op.layerKind = group.str();
    op.flopsPerPoint = flops;
    for (auto [n, e, red] : loops)
      op.loops.push_back(
          {n, e, red ? LoopKind::Reduction : LoopKind::Parallel, {}});
    p.ops.push_back(std::move(op));
    p.sections.push_back(section);
    return unsigned(p.ops.size() - 1);
  }
  unsigned operand(unsigned op, StringRef name, OperandRole role,
                   std::vector<const char *> dims, int64_t bytes = 2) {
    Operator &o = p.ops[op];
    Operand x;
    x.name = name.str();
    x.role = role;
    x.elementBytes = bytes;
    for (const char *d : dims)
      for (unsigned i = 0; i < o.loops.size(); ++i)
        if (o.loops[i].name == d)
          x.dims.push_back(i);
    o.operands.push_back(std::move(x));
    return unsigned(o.operands.size() - 1);
  }
  void edge(unsigned from, unsigned fromOperand, unsigned to,
            unsigned toOperand, bool next = false) {
    p.edges.push_back({from, fromOperand, to, toOperand, next});
  }
};
} // namespace

Problem buildTransformerProblem(const TransformerShape &shape,
                                StringRef cluster, int64_t devices) {
  const GPTConfig &m = shape.model;
  Problem p;
  p.name = "transformer";
  p.cluster = cluster.str();
  p.devices = devices;
  p.batchLoop = "b";
  p.sequenceLoop = "s";
  p.layers = m.layers;
  Builder b{p};
  int64_t B = m.batch, S = m.seq, H = m.hidden, A = m.heads, D = H / A,
          F = m.ffn, V = m.vocab;
  int64_t kv = shape.kvHeads ? shape.kvHeads : A;
  // Per-head width of the fused QKV output: D for Q plus the K and V share.
  int64_t E = D + 2 * D * kv / A;
  const auto In = OperandRole::Input, W = OperandRole::Parameter,
             Out = OperandRole::Output;
  const Section pre = Section::Pre, L = Section::Layer, post = Section::Post;

  unsigned emb = b.add("embedding", OpKind::Embedding, pre, "embedding", 0,
                       {{"b", B, false}, {"s", S, false}, {"h", H, false},
                        {"v", V, true}});
  b.operand(emb, "ids", In, {"b", "s"}, 8);
  p.ops[emb].operands.back().needsGrad = false;
  b.operand(emb, "wte", W, {"v", "h"});
  b.operand(emb, "y", Out, {"b", "s", "h"});

  auto norm = [&](StringRef name, Section sec, StringRef group) {
    unsigned o = b.add(name, OpKind::Norm, sec, group, 8,
                       {{"b", B, false}, {"s", S, false}, {"h", H, true}});
    b.operand(o, "x", In, {"b", "s", "h"});
    b.operand(o, "w", W, {"h"});
    b.operand(o, "y", Out, {"b", "s", "h"});
    return o;
  };
  auto linear = [&](StringRef name, Section sec, StringRef group, int64_t n,
                    int64_t k) {
    unsigned o = b.add(name, OpKind::MatMul, sec, group, 2,
                       {{"b", B, false}, {"s", S, false}, {"k", k, false},
                        {"n", n, true}});
    b.operand(o, "x", In, {"b", "s", "n"});
    b.operand(o, "w", W, {"n", "k"});
    b.operand(o, "y", Out, {"b", "s", "k"});
    return o;
  };
  auto elementwise = [&](StringRef name, StringRef group, int64_t n,
                         int inputs, double flops) {
    unsigned o = b.add(name, OpKind::Elementwise, L, group, flops,
                       {{"b", B, false}, {"s", S, false}, {"h", n, false}});
    for (int i = 0; i < inputs; ++i)
      b.operand(o, "x" + std::to_string(i), In, {"b", "s", "h"});
    b.operand(o, "y", Out, {"b", "s", "h"});
    return o;
  };

  unsigned ln1 = norm("ln1", L, "attention");
  unsigned qkv = b.add("qkv", OpKind::MatMul, L, "attention", 2,
                       {{"b", B, false}, {"s", S, false}, {"a", A, false},
                        {"e", E, false}, {"n", H, true}});
  b.operand(qkv, "x", In, {"b", "s", "n"});
  b.operand(qkv, "w", W, {"n", "a", "e"});
  b.operand(qkv, "y", Out, {"b", "s", "a", "e"});
  unsigned scores = b.add("scores", OpKind::MatMul, L, "attention", 2,
                          {{"b", B, false}, {"a", A, false}, {"q", S, false},
                           {"k", S, false}, {"d", D, true}});
  b.operand(scores, "q", In, {"b", "q", "a", "d"});
  b.operand(scores, "k", In, {"b", "k", "a", "d"});
  b.operand(scores, "s", Out, {"b", "a", "q", "k"});
  unsigned softmax = b.add("softmax", OpKind::Softmax, L, "attention", 8,
                           {{"b", B, false}, {"a", A, false}, {"q", S, false},
                            {"k", S, true}});
  b.operand(softmax, "s", In, {"b", "a", "q", "k"});
  b.operand(softmax, "p", Out, {"b", "a", "q", "k"});
  unsigned context = b.add("context", OpKind::MatMul, L, "attention", 2,
                           {{"b", B, false}, {"a", A, false}, {"q", S, false},
                            {"d", D, false}, {"k", S, true}});
  b.operand(context, "p", In, {"b", "a", "q", "k"});
  b.operand(context, "v", In, {"b", "k", "a", "d"});
  b.operand(context, "c", Out, {"b", "q", "a", "d"});
  unsigned proj = b.add("proj", OpKind::MatMul, L, "attention", 2,
                        {{"b", B, false}, {"s", S, false}, {"k", H, false},
                         {"a", A, true}, {"d", D, true}});
  b.operand(proj, "x", In, {"b", "s", "a", "d"});
  b.operand(proj, "w", W, {"a", "d", "k"});
  b.operand(proj, "y", Out, {"b", "s", "k"});
  unsigned res1 = elementwise("residual1", "attention", H, 2, 3);
  unsigned ln2 = norm("ln2", L, "mlp");
  int64_t F1 = shape.gatedFFN ? 2 * F : F;
  unsigned fc1 = 0, act = 0, fc2 = 0, moe = 0;
  if (shape.moe) {
    const TransformerShape::MoE &x = *shape.moe;
    moe = b.add("moe", OpKind::MoE, L, "mlp", 2,
                {{"b", B, false},
                 {"s", S, false},
                 {"h", H, false},
                 {"e", x.experts, false},
                 {"f", F, false}});
    // H and E are never split like other loops (E only as expert
    // parallelism, Space.cpp); F may be (tensor parallelism in experts).
    for (unsigned d = 2; d < 4; ++d)
      p.ops[moe].loops[d].splittable = false;
    b.operand(moe, "x", In, {"b", "s", "h"});
    b.operand(moe, "w1", W, {"e", "h", "f"});
    if (shape.gatedFFN)
      b.operand(moe, "w3", W, {"e", "h", "f"});
    b.operand(moe, "w2", W, {"e", "h", "f"});
    b.operand(moe, "y", Out, {"b", "s", "h"});
    MoESpec spec;
    spec.expertLoop = 3;
    spec.hiddenLoop = 2;
    spec.ffnLoop = 4;
    spec.topK = x.topK;
    spec.ffnMatrices = shape.gatedFFN ? 3 : 2;
    spec.load = x.load;
    spec.capacityFactor = x.capacityFactor;
    spec.shadowing = x.shadowing;
    spec.smartSchedule = x.smartSchedule;
    spec.hierarchical = x.hierarchical;
    p.ops[moe].moe = std::move(spec);
  } else {
    fc1 = linear("fc1", L, "mlp", H, F1);
    act = elementwise("act", "mlp", F, 1, 8);
    fc2 = linear("fc2", L, "mlp", F, H);
  }
  unsigned res2 = elementwise("residual2", "mlp", H, 2, 3);
  unsigned lnf = norm("ln_f", post, "head");
  unsigned head = linear("lm_head", post, "head", H, V);
  unsigned loss = b.add("loss", OpKind::Softmax, post, "head", 8,
                        {{"b", B, false}, {"s", S, false}, {"v", V, true}});
  b.operand(loss, "logits", In, {"b", "s", "v"});
  b.operand(loss, "probs", Out, {"b", "s", "v"}, 4);

  // Layer operators re-run under full recomputation; selective
  // recomputation re-runs QK^T and the softmax and regenerates the softmax
  // output and the context's probabilities (cost::Operator::attentionCore).
  for (unsigned i = 0; i < p.ops.size(); ++i)
    p.ops[i].recomputable = p.sections[i] == Section::Layer;
  p.ops[scores].attentionCore = true;
  p.ops[softmax].attentionCore = true;
  p.ops[softmax].operands[1].selectiveRecomputed = true;
  p.ops[context].operands[0].selectiveRecomputed = true;

  // Operand indices: norm x0 w1 y2; linear x0 w1 y2; qkv x0 w1 y2;
  // scores q0 k1 s2; softmax s0 p1; context p0 v1 c2; proj x0 w1 y2;
  // elementwise x0 [x1] y.
  b.edge(res2, 2, ln1, 0, true);
  b.edge(res2, 2, res1, 0, true);
  b.edge(ln1, 2, qkv, 0);
  b.edge(qkv, 2, scores, 0);
  b.edge(qkv, 2, scores, 1);
  b.edge(scores, 2, softmax, 0);
  b.edge(softmax, 1, context, 0);
  b.edge(qkv, 2, context, 1);
  b.edge(context, 2, proj, 0);
  b.edge(proj, 2, res1, 1);
  b.edge(res1, 2, ln2, 0);
  b.edge(res1, 2, res2, 0);
  if (shape.moe) {
    b.edge(ln2, 2, moe, 0);
    b.edge(moe, unsigned(p.ops[moe].operands.size() - 1), res2, 1);
  } else {
    b.edge(ln2, 2, fc1, 0);
    b.edge(fc1, 2, act, 0);
    b.edge(act, 1, fc2, 0);
    b.edge(fc2, 2, res2, 1);
  }
  b.edge(res2, 2, lnf, 0);
  b.edge(lnf, 2, head, 0);
  b.edge(head, 2, loss, 0);
  return p;
}

Expected<CostedPlan> costMegatronGPT(const GPTConfig &m,
                                     const MegatronStrategy &s,
                                     const Cluster &cluster,
                                     const EfficiencyModel &eff) {
  auto fail = [](const Twine &msg) {
    return createStringError(inconvertibleErrorCode(), msg);
  };
  if (s.tp < 1 || s.pp < 1 || s.dp < 1 || s.mb < 1 || s.interleave < 1)
    return fail("megatron: tp, pp, dp, mb and vp must be >= 1");
  if (m.heads % s.tp || m.hidden % s.tp || m.ffn % s.tp || m.vocab % s.tp)
    return fail("megatron: tp=" + Twine(s.tp) +
                " must divide heads, hidden, ffn and vocab");
  if (s.sequenceParallel && m.seq % s.tp)
    return fail("megatron: sp=1 needs tp=" + Twine(s.tp) +
                " to divide seq=" + Twine(m.seq));
  if (m.layers % s.pp)
    return fail("megatron: pp=" + Twine(s.pp) +
                " must divide layers=" + Twine(m.layers));
  if (m.batch % (s.mb * s.dp))
    return fail("megatron: mb*dp=" + Twine(s.mb * s.dp) +
                " must divide batch=" + Twine(m.batch));
  if ((m.layers / s.pp) % s.interleave)
    return fail("megatron: vp=" + Twine(s.interleave) +
                " must divide the layers per stage");
  if (s.interleave > 1 && s.pp < 2)
    return fail("megatron: vp=" + Twine(s.interleave) +
                " needs pipeline stages (pp >= 2)");
  if (s.interleave > 1 && (m.batch / (s.mb * s.dp)) % s.pp)
    return fail("megatron: vp=" + Twine(s.interleave) + " needs the " +
                Twine(m.batch / (s.mb * s.dp)) +
                " micro-batches (batch / (mb * dp)) to be a multiple of pp=" +
                Twine(s.pp));
  int64_t devices = s.tp * s.pp * s.dp;
  if (devices > cluster.getNumDevices())
    return fail("the mesh has " + Twine(devices) +
                " devices but the cluster only " +
                Twine(cluster.getNumDevices()));
  TransformerShape shape;
  shape.model = m;
  Problem problem = buildTransformerProblem(shape, cluster.name, devices);
  problem.memoryLimit = std::numeric_limits<double>::infinity();
  SearchOptions opts;
  opts.megatron.tp = s.tp;
  opts.megatron.pp = s.pp;
  opts.megatron.dp = s.dp;
  opts.megatron.microBatches = m.batch / (s.mb * s.dp);
  opts.megatron.zeroStage = s.zeroStage;
  opts.megatron.interleave = s.interleave;
  opts.megatron.overlapGradSync = s.overlapGradSync;
  opts.megatron.gpipe = s.gpipe;
  opts.recompute = {s.recompute};
  Expected<SearchResult> r =
      searchMegatron(problem, cluster, eff, s.sequenceParallel, opts);
  if (!r)
    return r.takeError();
  if (!r->best)
    return fail("megatron: the configuration tp=" + Twine(s.tp) +
                ", pp=" + Twine(s.pp) + ", dp=" + Twine(s.dp) +
                " does not apply to this model");
  Expected<std::unique_ptr<Instance>> inst =
      Instance::create(problem, cluster, r->best->config, eff, {});
  if (!inst)
    return inst.takeError();
  Expected<StepBreakdown> step = (*inst)->getBreakdown(r->best->partitions);
  if (!step)
    return step.takeError();
  step->deviceCapacity = double(cluster.device.hbmCapacity);
  step->fitsMemory = step->peakMemory.getTotal() <= step->deviceCapacity;
  return CostedPlan{std::move(*r->best), std::move(*step)};
}

} // namespace stpar::search
