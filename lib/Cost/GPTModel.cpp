//===- GPTModel.cpp - GPT-style transformers as operator lists --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The operators of a Megatron-partitioned GPT (Shoeybi et al., "Megatron-LM",
// 2019, Sec. 3: column-parallel QKV/fc1, row-parallel proj/fc2,
// vocab-parallel embedding and cross-entropy).
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/GPTModel.h"

#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace stpar::cost {

/// Splits "prefix:k=v,k=v" and calls `set(key, value)` for each pair.
static Error parseKeyValues(StringRef spec, StringRef prefix,
                            function_ref<Error(StringRef, int64_t)> set) {
  if (!spec.consume_front(prefix) || !spec.consume_front(":"))
    return createStringError(inconvertibleErrorCode(),
                             "expected '" + prefix + ":key=value,...'");
  SmallVector<StringRef> parts;
  spec.split(parts, ',', -1, false);
  SmallVector<StringRef> seen;
  for (StringRef part : parts) {
    auto [key, value] = part.split('=');
    key = key.trim();
    // `interleave` and `vp` name the same field.
    StringRef field = key == "vp" ? StringRef("interleave") : key;
    if (is_contained(seen, field))
      return createStringError(inconvertibleErrorCode(),
                               prefix + " key '" + key + "' given twice");
    seen.push_back(field);
    int64_t n = 0;
    StringRef text = value.trim();
    if (key == "recompute" && !text.empty() && !isDigit(text.front())) {
      // Activation recomputation by name (Recompute's values).
      std::optional<int64_t> r = StringSwitch<std::optional<int64_t>>(text)
                                     .Case("none", 0)
                                     .Case("full", 1)
                                     .Case("selective", 2)
                                     .Default(std::nullopt);
      if (!r)
        return createStringError(inconvertibleErrorCode(),
                                 prefix +
                                     " key 'recompute': expected none, "
                                     "selective or full, got '" +
                                     value + "'");
      n = *r;
    } else if (text.getAsInteger(10, n) || n < 0) {
      return createStringError(inconvertibleErrorCode(),
                               prefix + " key '" + key +
                                   "': expected a non-negative integer, got '" +
                                   value + "'");
    }
    if (Error e = set(key, n))
      return e;
  }
  return Error::success();
}

static Error unknownKey(StringRef prefix, StringRef key) {
  return createStringError(inconvertibleErrorCode(),
                           "unknown " + prefix + " key '" + key + "'");
}

Expected<GPTConfig> parseGPTSpec(StringRef spec) {
  GPTConfig c;
  Error e = parseKeyValues(spec, "gpt", [&](StringRef k, int64_t v) -> Error {
    int64_t *field = StringSwitch<int64_t *>(k)
                         .Case("layers", &c.layers)
                         .Case("hidden", &c.hidden)
                         .Case("heads", &c.heads)
                         .Case("ffn", &c.ffn)
                         .Case("vocab", &c.vocab)
                         .Case("seq", &c.seq)
                         .Case("batch", &c.batch)
                         .Default(nullptr);
    if (!field)
      return unknownKey("gpt", k);
    *field = v;
    return Error::success();
  });
  if (e)
    return std::move(e);
  if (c.ffn == 0)
    c.ffn = 4 * c.hidden;
  for (auto [v, name] : {std::pair<int64_t, StringRef>{c.layers, "layers"},
                         {c.hidden, "hidden"},
                         {c.heads, "heads"},
                         {c.vocab, "vocab"},
                         {c.seq, "seq"},
                         {c.batch, "batch"}})
    if (v < 1)
      return createStringError(inconvertibleErrorCode(),
                               "gpt key '" + name +
                                   "': missing or not positive");
  if (c.hidden % c.heads)
    return createStringError(inconvertibleErrorCode(),
                             "gpt: heads must divide hidden");
  return c;
}

Expected<MegatronStrategy> parseMegatronSpec(StringRef spec) {
  MegatronStrategy s;
  bool distopt = false, zeroGiven = false;
  Error e =
      parseKeyValues(spec, "megatron", [&](StringRef k, int64_t v) -> Error {
        if (k == "zero") {
          if (v > 3)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key 'zero': must be 0-3");
          s.zeroStage = int(v);
          zeroGiven = true;
          return Error::success();
        }
        if (k == "recompute") {
          if (v > 2)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key 'recompute': must be "
                                     "none, selective or full (or 0, 1)");
          s.recompute = Recompute(v);
          return Error::success();
        }
        if (k == "sp" || k == "distopt" || k == "overlap") {
          if (v > 1)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key '" + k +
                                         "': must be 0 or 1");
          (k == "sp"        ? s.sequenceParallel
           : k == "distopt" ? distopt
                            : s.overlapGradSync) = v != 0;
          return Error::success();
        }
        int64_t *field = StringSwitch<int64_t *>(k)
                             .Case("tp", &s.tp)
                             .Case("pp", &s.pp)
                             .Case("dp", &s.dp)
                             .Case("mb", &s.mb)
                             .Case("interleave", &s.interleave)
                             .Case("vp", &s.interleave)
                             .Default(nullptr);
        if (!field)
          return unknownKey("megatron", k);
        if (v < 1)
          return createStringError(inconvertibleErrorCode(),
                                   "megatron key '" + k + "': must be >= 1");
        *field = v;
        return Error::success();
      });
  if (e)
    return std::move(e);
  // Megatron-LM's distributed optimizer shards the optimizer states over the
  // data-parallel ranks: ZeRO stage 1.
  if (distopt) {
    if (zeroGiven && s.zeroStage != 1)
      return createStringError(inconvertibleErrorCode(),
                               "megatron: distopt=1 is ZeRO stage 1; it "
                               "contradicts zero=" +
                                   Twine(s.zeroStage));
    s.zeroStage = 1;
  }
  return s;
}

double getGPTParameterCount(const GPTConfig &m) {
  double h = double(m.hidden), f = double(m.ffn);
  double perLayer = 4 * h * h + 2 * h * f + 9 * h + f; // weights, biases, LNs
  return double(m.layers) * perLayer + double(m.vocab) * h + double(m.seq) * h +
         2 * h;
}

namespace {
/// Builds operators on the ["pp", "dp", "tp"] mesh.
class Builder {
public:
  Builder(const GPTConfig &m, const MegatronStrategy &s) : m(m), s(s) {}

  LoopDim batch() const {
    return {"b", s.mb * s.dp, LoopKind::Parallel, {kDP}};
  }
  LoopDim loop(StringRef name, int64_t extent, bool tp = false,
               LoopKind kind = LoopKind::Parallel) const {
    LoopDim d{name.str(), extent, kind, {}};
    if (tp)
      d.axes.push_back(kTP);
    return d;
  }
  static Operand in(StringRef name, std::vector<unsigned> dims,
                    int64_t bytes = 2) {
    return {name.str(), OperandRole::Input, std::move(dims), bytes, true};
  }
  static Operand param(StringRef name, std::vector<unsigned> dims) {
    return {name.str(), OperandRole::Parameter, std::move(dims), 2, true};
  }
  static Operand out(StringRef name, std::vector<unsigned> dims,
                     int64_t bytes = 2) {
    return {name.str(), OperandRole::Output, std::move(dims), bytes, true};
  }

  Operator op(StringRef name, OpKind kind, StringRef layerKind, unsigned stage,
              std::vector<LoopDim> loops, std::vector<Operand> operands,
              double flopsPerPoint, bool recomputable) const {
    Operator o;
    o.name = name.str();
    o.kind = kind;
    o.layerKind = layerKind.str();
    o.stage = stage;
    o.loops = std::move(loops);
    o.operands = std::move(operands);
    o.flopsPerPoint = flopsPerPoint;
    o.recomputable = recomputable;
    return o;
  }

  /// One transformer layer's 12 operators.
  void addLayer(std::vector<Operator> &ops, int64_t l, unsigned stage) const {
    std::string p = "layer" + std::to_string(l) + ".";
    int64_t h = m.hidden, a = m.heads, d = m.hidden / m.heads, f = m.ffn,
            sq = m.seq;
    auto norm = [&](StringRef name, StringRef kind) {
      Operator o = op(p + name.str(), OpKind::Norm, kind, stage,
                      {batch(), loop("s", sq, s.sequenceParallel),
                       loop("h", h, false, LoopKind::Reduction)},
                      {in("x", {0, 1, 2}), param(p + name.str() + ".w", {2}),
                       out("y", {0, 1, 2})},
                      8, true);
      return o;
    };
    auto linear = [&](StringRef name, StringRef kind, int64_t n, int64_t k,
                      bool rowParallel) {
      return op(p + name.str(), OpKind::MatMul, kind, stage,
                {batch(), loop("s", sq), loop("k", k, !rowParallel),
                 loop("n", n, rowParallel, LoopKind::Reduction)},
                {in("x", {0, 1, 3}), param(p + name.str() + ".w", {3, 2}),
                 out("y", {0, 1, 2})},
                2, true);
    };
    auto elementwise = [&](StringRef name, StringRef kind, int64_t n, bool tp,
                           int inputs, double flops) {
      std::vector<Operand> operands;
      for (int i = 0; i < inputs; ++i)
        operands.push_back(in("x" + std::to_string(i), {0, 1, 2}));
      operands.push_back(out("y", {0, 1, 2}));
      return op(
          p + name.str(), OpKind::Elementwise, kind, stage,
          {batch(), loop("s", sq, !tp && s.sequenceParallel), loop("h", n, tp)},
          operands, flops, true);
    };
    Operator ln1 = norm("ln1", "attention");
    ln1.checkpoint = true;
    ops.push_back(std::move(ln1));
    ops.push_back(linear("qkv", "attention", h, 3 * h, false));
    // scores[b,a,q,k] = sum_d Q[b,a,q,d] K[b,a,k,d]
    ops.push_back(op(
        p + "scores", OpKind::MatMul, "attention", stage,
        {batch(), loop("a", a, true), loop("q", sq), loop("k", sq),
         loop("d", d, false, LoopKind::Reduction)},
        {in("q", {0, 1, 2, 4}), in("k", {0, 1, 3, 4}), out("s", {0, 1, 2, 3})},
        2, true));
    // scale + mask + softmax + dropout (fused); a 1-byte dropout mask.
    ops.push_back(op(p + "softmax", OpKind::Softmax, "attention", stage,
                     {batch(), loop("a", a, true), loop("q", sq),
                      loop("k", sq, false, LoopKind::Reduction)},
                     {in("s", {0, 1, 2, 3}), out("p", {0, 1, 2, 3}),
                      out("mask", {0, 1, 2, 3}, 1)},
                     8, true));
    // ctx[b,a,q,d] = sum_k P[b,a,q,k] V[b,a,k,d]
    ops.push_back(op(
        p + "context", OpKind::MatMul, "attention", stage,
        {batch(), loop("a", a, true), loop("q", sq), loop("d", d),
         loop("k", sq, false, LoopKind::Reduction)},
        {in("p", {0, 1, 2, 4}), in("v", {0, 1, 4, 3}), out("c", {0, 1, 2, 3})},
        2, true));
    ops.push_back(linear("proj", "attention", h, h, true));
    ops.push_back(elementwise("residual1", "attention", h, false, 2, 3));
    ops.push_back(norm("ln2", "mlp"));
    ops.push_back(linear("fc1", "mlp", h, f, false));
    ops.push_back(elementwise("gelu", "mlp", f, true, 1, 8));
    ops.push_back(linear("fc2", "mlp", f, h, true));
    ops.push_back(elementwise("residual2", "mlp", h, false, 2, 3));
    // Selective recomputation re-runs QK^T and the softmax and regenerates
    // the softmax output, the dropout mask and the context's probabilities.
    for (Operator &o : ops) {
      if (o.name == p + "scores")
        o.attentionCore = true;
      if (o.name == p + "softmax") {
        o.attentionCore = true;
        for (Operand &x : o.operands)
          x.selectiveRecomputed = x.role == OperandRole::Output;
      }
      if (o.name == p + "context")
        o.operands[0].selectiveRecomputed = true; // P
    }
  }

  void addEmbedding(std::vector<Operator> &ops) const {
    Operand ids = in("ids", {0, 1}, 8);
    ids.needsGrad = false;
    ops.push_back(op("embedding", OpKind::Embedding, "embedding", 0,
                     {batch(), loop("s", m.seq), loop("h", m.hidden),
                      loop("v", m.vocab, true, LoopKind::Reduction)},
                     {ids, param("wte", {3, 2}), out("x", {0, 1, 2})}, 0,
                     false));
  }

  void addHead(std::vector<Operator> &ops, unsigned stage) const {
    ops.push_back(
        op("ln_f", OpKind::Norm, "head", stage,
           {batch(), loop("s", m.seq, s.sequenceParallel),
            loop("h", m.hidden, false, LoopKind::Reduction)},
           {in("x", {0, 1, 2}), param("ln_f.w", {2}), out("y", {0, 1, 2})}, 8,
           false));
    // logits[b,s,v] = sum_h x[b,s,h] wte[v,h] (tied to the embedding).
    ops.push_back(
        op("lm_head", OpKind::MatMul, "head", stage,
           {batch(), loop("s", m.seq), loop("v", m.vocab, true),
            loop("h", m.hidden, false, LoopKind::Reduction)},
           {in("x", {0, 1, 3}), param("wte", {2, 3}), out("logits", {0, 1, 2})},
           2, false));
    // Vocab-parallel cross-entropy in fp32.
    ops.push_back(op("loss", OpKind::Softmax, "head", stage,
                     {batch(), loop("s", m.seq),
                      loop("v", m.vocab, true, LoopKind::Reduction)},
                     {in("logits", {0, 1, 2}), out("probs", {0, 1, 2}, 4)}, 8,
                     false));
  }

  static constexpr unsigned kPP = 0, kDP = 1, kTP = 2;

private:
  const GPTConfig &m;
  const MegatronStrategy &s;
};
} // namespace

Expected<CostProblem> buildMegatronGPT(const GPTConfig &m,
                                       const MegatronStrategy &s) {
  auto fail = [](const Twine &msg) {
    return createStringError(inconvertibleErrorCode(), msg);
  };
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
    return fail("megatron: interleave=" + Twine(s.interleave) +
                " must divide the layers per stage");
  CostProblem problem;
  problem.mesh.axes = {{"pp", s.pp}, {"dp", s.dp}, {"tp", s.tp}};
  Builder b(m, s);
  b.addEmbedding(problem.ops);
  int64_t perStage = m.layers / s.pp;
  for (int64_t l = 0; l < m.layers; ++l)
    b.addLayer(problem.ops, l, unsigned(l / perStage));
  b.addHead(problem.ops, unsigned(s.pp - 1));
  TrainingConfig &c = problem.config;
  c.microBatches = m.batch / (s.mb * s.dp);
  c.pipelineStages = s.pp;
  c.interleave = s.interleave;
  c.pipelineAxis = Builder::kPP;
  c.zeroStage = s.zeroStage;
  c.recompute = s.recompute;
  c.overlapGradSync = s.overlapGradSync;
  return problem;
}

} // namespace stpar::cost
