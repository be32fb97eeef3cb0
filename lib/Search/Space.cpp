//===- Space.cpp - meshes and per-operator partition spaces -----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/Space.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;
using namespace stpar::cost;

namespace stpar::search {

static void factorize(int64_t n, unsigned maxAxes, std::vector<int64_t> &cur,
                      std::vector<std::vector<int64_t>> &out) {
  if (n == 1) {
    out.push_back(cur);
    return;
  }
  if (cur.size() == maxAxes)
    return;
  for (int64_t f = 2; f <= n; ++f) {
    if (n % f)
      continue;
    cur.push_back(f);
    factorize(n / f, maxAxes, cur, out);
    cur.pop_back();
  }
}

std::vector<std::vector<int64_t>> enumerateMeshShapes(int64_t devices,
                                                      unsigned maxAxes) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> cur;
  if (devices >= 1)
    factorize(devices, maxAxes, cur, out);
  return out;
}

Mesh makeSearchMesh(int64_t stages, ArrayRef<int64_t> shape) {
  Mesh mesh;
  mesh.axes.push_back({"pp", stages});
  for (unsigned i = 0; i < shape.size(); ++i)
    mesh.axes.push_back({"x" + std::to_string(i), shape[i]});
  return mesh;
}

bool Partition::operator==(const Partition &o) const {
  if (loopAxes != o.loopAxes || temporal.has_value() != o.temporal.has_value())
    return false;
  if (!temporal)
    return true;
  const TemporalPrimitive &a = *temporal, &b = *o.temporal;
  return a.rowAxis == b.rowAxis && a.colAxis == b.colAxis &&
         a.mDim == b.mDim && a.nDim == b.nDim && a.kDim == b.kDim;
}

void applyPartition(Operator &op, const Partition &part) {
  for (unsigned d = 0; d < op.loops.size(); ++d)
    op.loops[d].axes = d < part.loopAxes.size() ? part.loopAxes[d]
                                                : std::vector<unsigned>{};
  op.temporal = part.temporal;
}

std::string describePartition(const Operator &op, const Partition &part,
                              const Mesh &mesh) {
  std::string s;
  for (unsigned d = 0; d < op.loops.size() && d < part.loopAxes.size(); ++d) {
    if (part.loopAxes[d].empty())
      continue;
    if (!s.empty())
      s += " ";
    s += op.loops[d].name + "{";
    for (unsigned i = 0; i < part.loopAxes[d].size(); ++i)
      s += (i ? "," : "") + mesh.axes[part.loopAxes[d][i]].name;
    s += "}";
  }
  if (part.temporal) {
    const TemporalPrimitive &t = *part.temporal;
    if (!s.empty())
      s += " ";
    s += "temporal(" + mesh.axes[t.rowAxis].name + "," +
         mesh.axes[t.colAxis].name + ": m=" + op.loops[t.mDim].name +
         " n=" + op.loops[t.nDim].name + " k=" + op.loops[t.kDim].name + ")";
  }
  return s.empty() ? "replicated" : s;
}

std::string describeLayout(const Operator &op, const Partition &part,
                           const Mesh &mesh, unsigned operand) {
  if (operand >= op.operands.size())
    return "[]";
  std::string s = "[";
  for (auto [k, d] : llvm::enumerate(op.operands[operand].dims)) {
    if (k)
      s += ", ";
    s += d < op.loops.size() ? op.loops[d].name : "?";
    if (d < part.loopAxes.size() && !part.loopAxes[d].empty()) {
      s += "/";
      for (auto [i, a] : llvm::enumerate(part.loopAxes[d]))
        s += (i ? "," : "") + mesh.axes[a].name;
    }
    if (const auto &t = part.temporal)
      if (d == t->mDim || d == t->nDim || d == t->kDim)
        s += "/t";
  }
  return s + "]";
}

static bool indexes(const Operand &o, unsigned d) {
  return is_contained(o.dims, d);
}

/// (M, N, K) loop triples of a linear layer.
static std::vector<std::array<unsigned, 3>> getTemporalTriples(const Operator &op) {
  std::vector<std::array<unsigned, 3>> triples;
  if (op.kind != OpKind::MatMul)
    return triples;
  const Operand *in = nullptr, *w = nullptr, *out = nullptr;
  for (const Operand &o : op.operands) {
    if (o.role == OperandRole::Input && !in)
      in = &o;
    if (o.role == OperandRole::Parameter && !w)
      w = &o;
    if (o.role == OperandRole::Output && !out)
      out = &o;
  }
  if (!in || !w || !out)
    return triples;
  unsigned n = unsigned(op.loops.size());
  for (unsigned m = 0; m < n; ++m)
    for (unsigned r = 0; r < n; ++r)
      for (unsigned k = 0; k < n; ++k) {
        if (m == r || r == k || m == k)
          continue;
        if (op.loops[m].kind != LoopKind::Parallel ||
            op.loops[k].kind != LoopKind::Parallel ||
            op.loops[r].kind != LoopKind::Reduction)
          continue;
        if (indexes(*in, m) && indexes(*in, r) && !indexes(*in, k) &&
            indexes(*w, r) && indexes(*w, k) && !indexes(*w, m) &&
            indexes(*out, m) && indexes(*out, k) && !indexes(*out, r))
          triples.push_back({m, r, k});
      }
  return triples;
}

/// An MoE operator's model and expert loops: never split like other loops
/// (the expert loop only by addExpertParallel). Its expert-hidden loop is
/// split like any other (tensor parallelism inside the experts).
static bool isMoEInner(const Operator &op, unsigned d) {
  return op.moe && (d == op.moe->expertLoop || d == op.moe->hiddenLoop);
}

/// An MoE operator's token loops: all but the model, expert and
/// expert-hidden loops.
static bool isMoEToken(const Operator &op, unsigned d) {
  return !isMoEInner(op, d) && d != op.moe->ffnLoop;
}

/// Expert parallelism: for each partition of an MoE operator's token loops,
/// every non-empty subset of the axes splitting them (in axis order) whose
/// sizes multiply to a divisor of the expert count also splits the experts.
static void addExpertParallel(const Operator &op, const Mesh &mesh,
                              std::vector<Partition> &result) {
  unsigned e = op.moe->expertLoop;
  int64_t experts = op.loops[e].extent;
  size_t base = result.size();
  for (size_t i = 0; i < base; ++i) {
    std::vector<unsigned> tokenAxes;
    for (unsigned d = 0; d < op.loops.size(); ++d)
      if (isMoEToken(op, d))
        llvm::append_range(tokenAxes, result[i].loopAxes[d]);
    llvm::sort(tokenAxes);
    for (uint64_t mask = 1; mask < (uint64_t(1) << tokenAxes.size()); ++mask) {
      Partition p = result[i];
      int64_t group = 1;
      for (unsigned j = 0; j < tokenAxes.size(); ++j)
        if (mask & (uint64_t(1) << j)) {
          p.loopAxes[e].push_back(tokenAxes[j]);
          group *= mesh.axes[tokenAxes[j]].size;
        }
      if (experts % group == 0)
        result.push_back(std::move(p));
    }
  }
}

std::vector<Partition> enumeratePartitions(const Operator &op, const Mesh &mesh,
                                           const SpaceOptions &options) {
  std::vector<Partition> result;
  unsigned numAxes = unsigned(mesh.axes.size());
  unsigned numLoops = unsigned(op.loops.size());
  std::vector<std::array<unsigned, 3>> triples;
  if (options.temporal)
    triples = getTemporalTriples(op);
  // choice[a] = loop index, or numLoops for "unused".
  std::vector<unsigned> choice(numAxes, numLoops);
  std::vector<int64_t> split(numLoops, 1);
  std::function<void(unsigned)> rec = [&](unsigned a) {
    if (a == numAxes) {
      Partition p;
      p.loopAxes.assign(numLoops, {});
      std::vector<unsigned> unused;
      for (unsigned x = options.firstAxis; x < numAxes; ++x) {
        if (choice[x] < numLoops)
          p.loopAxes[choice[x]].push_back(x);
        else if (mesh.axes[x].size > 1)
          unused.push_back(x);
      }
      result.push_back(p);
      for (unsigned r : unused)
        for (unsigned c : unused) {
          if (r == c || mesh.axes[r].size != mesh.axes[c].size)
            continue;
          int64_t q = mesh.axes[r].size;
          for (const auto &t : triples) {
            if (any_of(t, [&](unsigned d) {
                  return (op.loops[d].extent / split[d]) % q != 0;
                }))
              continue;
            Partition tp = p;
            tp.temporal = TemporalPrimitive{r, c, t[0], t[1], t[2]};
            result.push_back(tp);
          }
        }
      return;
    }
    if (a < options.firstAxis || mesh.axes[a].size == 1) {
      choice[a] = numLoops;
      rec(a + 1);
      return;
    }
    choice[a] = numLoops;
    rec(a + 1);
    for (unsigned d = 0; d < numLoops; ++d) {
      if (!op.loops[d].splittable || isMoEInner(op, d))
        continue;
      int64_t s = split[d] * mesh.axes[a].size;
      if (op.loops[d].extent % s)
        continue; // non-divisible splits are excluded
      split[d] = s;
      choice[a] = d;
      rec(a + 1);
      split[d] = s / mesh.axes[a].size;
    }
    choice[a] = numLoops;
  };
  rec(0);
  if (op.moe)
    addExpertParallel(op, mesh, result);
  for (const auto &[name, spec] : options.fixed)
    if (name == op.name)
      llvm::erase_if(result, [&](const Partition &p) {
        return describePartition(op, p, mesh) != spec;
      });
  if (options.onlyTemporal &&
      any_of(result, [](const Partition &p) { return p.temporal.has_value(); }))
    llvm::erase_if(result,
                   [](const Partition &p) { return !p.temporal.has_value(); });
  return result;
}

LayoutCode getOperandLayout(const Operator &op, unsigned operandIndex,
                            const Partition &part, unsigned numAxes) {
  const Operand &o = op.operands[operandIndex];
  LayoutCode code(numAxes, kReplicated);
  auto position = [&](unsigned loop) -> int {
    for (unsigned j = 0; j < o.dims.size(); ++j)
      if (o.dims[j] == loop)
        return int(j);
    return -1;
  };
  bool leavesPartials =
      o.role == OperandRole::Output &&
      (op.kind == OpKind::MatMul || op.kind == OpKind::Embedding);
  bool partialGradient =
      o.role == OperandRole::Input && o.needsGrad &&
      (op.kind == OpKind::MatMul || op.kind == OpKind::Elementwise) &&
      !part.temporal;
  for (unsigned d = 0; d < part.loopAxes.size(); ++d)
    for (unsigned axis : part.loopAxes[d]) {
      int pos = position(d);
      if (pos >= 0)
        code[axis] = int8_t(pos);
      else if (leavesPartials && op.loops[d].kind == LoopKind::Reduction)
        code[axis] = kPartial;
      else if (partialGradient)
        code[axis] = kPartialGradient;
    }
  if (part.temporal) {
    const TemporalPrimitive &t = *part.temporal;
    unsigned rowLoop = t.mDim;
    unsigned colLoop = o.role == OperandRole::Output ? t.kDim : t.nDim;
    if (o.role == OperandRole::Parameter) {
      rowLoop = t.nDim;
      colLoop = t.kDim;
    }
    int r = position(rowLoop), c = position(colLoop);
    if (r >= 0)
      code[t.rowAxis] = int8_t(r);
    if (c >= 0)
      code[t.colAxis] = int8_t(c);
  }
  return code;
}

} // namespace stpar::search
