//===- Problem.cpp - the partition-search problem ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Verification, the line-based text format and layer flattening.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/Problem.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"

#include <cmath>

using namespace llvm;
using namespace stpar::cost;

namespace stpar::search {

StringRef getSectionName(Section section) {
  switch (section) {
  case Section::Pre:
    return "pre";
  case Section::Layer:
    return "layer";
  case Section::Post:
    return "post";
  }
  return "?";
}

static Error err(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

std::optional<unsigned> getCarryOp(const Problem &p) {
  for (const Edge &e : p.edges)
    if (e.nextLayer)
      return e.producer;
  return std::nullopt;
}

static std::vector<int64_t> getShape(const Operator &op, const Operand &o) {
  std::vector<int64_t> shape;
  for (unsigned d : o.dims)
    shape.push_back(op.loops[d].extent);
  return shape;
}

static Error checkEdgeShapes(const Problem &p, const Operator &prod,
                             const Operand &out, const Operator &cons,
                             const Operand &in) {
  (void)p;
  std::vector<int64_t> a = getShape(prod, out), b = getShape(cons, in);
  if (a.size() != b.size())
    return err("edge " + prod.name + "." + out.name + " -> " + cons.name +
               "." + in.name + ": ranks differ (" + Twine(a.size()) + " vs " +
               Twine(b.size()) + ")");
  for (unsigned i = 0; i < a.size(); ++i)
    if (b[i] > a[i])
      return err("edge " + prod.name + "." + out.name + " -> " + cons.name +
                 "." + in.name + ": dimension " + Twine(i) + " of the " +
                 "consumer (" + Twine(b[i]) + ") exceeds the producer's (" +
                 Twine(a[i]) + ")");
  return Error::success();
}

static Error checkEdgeViews(const Operator &prod, const Operand &out,
                            const Operator &cons, const Operand &in,
                            const EdgeViews &v) {
  std::string name =
      "edge " + prod.name + "." + out.name + " -> " + cons.name + "." + in.name;
  if (v.producerDimOf.size() != in.dims.size() ||
      v.sizes.size() != in.dims.size() || v.lostAt.size() != out.dims.size())
    return err(name + ": the view map does not match the operands' ranks");
  for (auto [c, d] : enumerate(v.producerDimOf)) {
    if (d < -1 || d >= int(out.dims.size()))
      return err(name + ": view map entry " + Twine(d) + " out of range");
    if (v.sizes[c].size() != v.count)
      return err(name + ": every consumer dim needs one size per view");
  }
  if (!v.gradientLostAt.empty() && v.gradientLostAt.size() != in.dims.size())
    return err(name + ": the gradient's view positions do not match the "
                      "consumer operand's rank");
  for (ArrayRef<int> positions :
       {ArrayRef(v.lostAt), ArrayRef(v.gradientLostAt)})
    for (int at : positions)
      if (at < -1 || at >= int(v.count))
        return err(name + ": view position " + Twine(at) + " out of range");
  return Error::success();
}

Error verifyProblem(const Problem &p) {
  if (p.devices < 1)
    return err("devices must be >= 1");
  if (p.ops.size() != p.sections.size())
    return err("every operator needs a section");
  if (p.ops.empty())
    return err("the problem has no operators");
  for (unsigned i = 1; i < p.ops.size(); ++i)
    if (p.sections[i] < p.sections[i - 1])
      return err("operator '" + p.ops[i].name +
                 "': sections must be ordered pre, layer, post");
  bool hasLayer = is_contained(p.sections, Section::Layer);
  if (hasLayer && p.layers < 1)
    return err("layers must be >= 1");
  for (const Operator &op : p.ops) {
    if (op.loops.empty())
      return err("operator '" + op.name + "' has no loops");
    for (const LoopDim &l : op.loops)
      if (l.extent < 1)
        return err("operator '" + op.name + "': loop '" + l.name +
                   "' has a non-positive extent");
    for (const Operand &o : op.operands)
      for (unsigned d : o.dims)
        if (d >= op.loops.size())
          return err("operator '" + op.name + "': operand '" + o.name +
                     "' indexes a missing loop");
    if (!p.batchLoop.empty() &&
        none_of(op.loops, [&](const LoopDim &l) { return l.name == p.batchLoop; }))
      return err("operator '" + op.name + "' has no batch loop '" +
                 p.batchLoop + "'");
    if ((op.kind == OpKind::MoE) != op.moe.has_value())
      return err("operator '" + op.name + "': " +
                 (op.moe ? "only an moe operator has an 'moe' line"
                         : "an moe operator needs an 'moe' line"));
    if (op.moe) {
      const MoESpec &m = *op.moe;
      unsigned n = unsigned(op.loops.size());
      if (m.expertLoop >= n || m.hiddenLoop >= n || m.ffnLoop >= n ||
          m.expertLoop == m.hiddenLoop || m.expertLoop == m.ffnLoop ||
          m.hiddenLoop == m.ffnLoop)
        return err("operator '" + op.name +
                   "': 'moe' needs three distinct loops (experts, hidden, "
                   "ffn)");
      int64_t experts = op.loops[m.expertLoop].extent;
      if (m.topK < 1 || m.topK > experts || m.ffnMatrices < 1)
        return err("operator '" + op.name +
                   "': 'moe' needs 1 <= top-k <= experts and matrices >= 1");
      if (!m.load.empty()) {
        double sum = 0;
        for (double x : m.load)
          sum += x;
        if (int64_t(m.load.size()) != experts ||
            any_of(m.load, [](double x) { return !(x >= 0); }) ||
            std::abs(sum - 1) > 1e-6)
          return err("operator '" + op.name + "': 'moe' load needs " +
                     Twine(experts) + " non-negative shares that sum to 1");
      }
      if (m.capacityFactor < 0)
        return err("operator '" + op.name +
                   "': 'moe' capacity must not be negative");
    }
  }
  std::optional<unsigned> carry = getCarryOp(p);
  std::optional<unsigned> carryOperand;
  for (const Edge &e : p.edges) {
    if (e.producer >= p.ops.size() || e.consumer >= p.ops.size() ||
        e.producerOperand >= p.ops[e.producer].operands.size() ||
        e.consumerOperand >= p.ops[e.consumer].operands.size())
      return err("edge out of range");
    const Operator &prod = p.ops[e.producer], &cons = p.ops[e.consumer];
    const Operand &out = prod.operands[e.producerOperand];
    const Operand &in = cons.operands[e.consumerOperand];
    if (out.role != OperandRole::Output)
      return err("edge from '" + prod.name + "." + out.name +
                 "': not an output");
    if (in.role != OperandRole::Input)
      return err("edge to '" + cons.name + "." + in.name + "': not an input");
    if (e.views) {
      if (Error e2 = checkEdgeViews(prod, out, cons, in, *e.views))
        return e2;
    } else if (Error e2 = checkEdgeShapes(p, prod, out, cons, in)) {
      return e2;
    }
    Section sp = p.sections[e.producer], sc = p.sections[e.consumer];
    if (e.nextLayer) {
      if (sp != Section::Layer || sc != Section::Layer)
        return err("edge " + prod.name + " -> " + cons.name +
                   ": 'next' edges join layer operators");
      if (e.producer != *carry ||
          (carryOperand && *carryOperand != e.producerOperand))
        return err("edge " + prod.name + " -> " + cons.name +
                   ": all 'next' edges must leave the same operand");
      carryOperand = e.producerOperand;
      continue;
    }
    if (e.producer >= e.consumer)
      return err("edge " + prod.name + " -> " + cons.name +
                 ": edges must go forward in operator order");
    if (sp == Section::Pre && sc != Section::Pre)
      return err("edge " + prod.name + " -> " + cons.name +
                 ": pre operators feed the layers only through the carry "
                 "('next' edges)");
    if (sp == Section::Layer && sc == Section::Post &&
        (!carry || e.producer != *carry))
      return err("edge " + prod.name + " -> " + cons.name +
                 ": the layers feed post operators only from the carry");
  }
  if (hasLayer && !carry)
    return err("a problem with layer operators needs 'next' edges (the "
               "carry between layers)");
  if (carry) {
    // Layer 0 reads the carry from the last pre operator's first output.
    unsigned lastPre = 0;
    bool anyPre = false;
    for (unsigned i = 0; i < p.ops.size(); ++i)
      if (p.sections[i] == Section::Pre) {
        lastPre = i;
        anyPre = true;
      }
    if (anyPre) {
      const Operator &pre = p.ops[lastPre];
      const Operand *out = nullptr;
      for (const Operand &o : pre.operands)
        if (o.role == OperandRole::Output) {
          out = &o;
          break;
        }
      if (!out)
        return err("operator '" + pre.name + "' (the last pre operator) has "
                   "no output to feed the first layer");
      for (const Edge &e : p.edges)
        if (e.nextLayer && !e.views)
          if (Error e2 = checkEdgeShapes(p, pre, *out, p.ops[e.consumer],
                                         p.ops[e.consumer]
                                             .operands[e.consumerOperand]))
            return e2;
    }
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

namespace {
class Parser {
public:
  Parser(StringRef fileName) : fileName(fileName) {}
  Expected<Problem> parse(StringRef text);

private:
  Error error(const Twine &message) {
    return err(fileName + ":" + Twine(line) + ": " + message);
  }
  Error parseLine(StringRef keyword, SmallVectorImpl<StringRef> &words);
  Expected<int64_t> integer(StringRef s, StringRef what) {
    int64_t v = 0;
    if (s.getAsInteger(10, v))
      return error("expected an integer for " + what + ", got '" + s + "'");
    return v;
  }
  Expected<double> real(StringRef s, StringRef what) {
    double v = 0;
    if (s.getAsDouble(v))
      return error("expected a number for " + what + ", got '" + s + "'");
    return v;
  }
  Operator *current() { return p.ops.empty() ? nullptr : &p.ops.back(); }
  std::optional<unsigned> findOp(StringRef name) {
    for (unsigned i = 0; i < p.ops.size(); ++i)
      if (p.ops[i].name == name)
        return i;
    return std::nullopt;
  }

  StringRef fileName;
  unsigned line = 0;
  Problem p;
};
} // namespace

Expected<Problem> Parser::parse(StringRef text) {
  SmallVector<StringRef> lines;
  text.split(lines, '\n');
  for (StringRef raw : lines) {
    ++line;
    StringRef l = raw.split('#').first.trim();
    if (l.empty())
      continue;
    SmallVector<StringRef> words;
    SplitString(l, words);
    StringRef keyword = words.front();
    words.erase(words.begin());
    if (Error e = parseLine(keyword, words))
      return std::move(e);
  }
  line = 0;
  if (Error e = verifyProblem(p))
    return err(fileName + ": " + toString(std::move(e)));
  return std::move(p);
}

Error Parser::parseLine(StringRef keyword, SmallVectorImpl<StringRef> &w) {
  auto need = [&](unsigned n) -> Error {
    if (w.size() < n)
      return error("'" + keyword + "' needs " + Twine(n) + " argument(s)");
    return Error::success();
  };
  if (keyword == "problem" || keyword == "cluster" || keyword == "batch-loop" ||
      keyword == "sequence-loop") {
    if (Error e = need(1))
      return e;
    std::string &field = keyword == "problem"   ? p.name
                         : keyword == "cluster" ? p.cluster
                         : keyword == "batch-loop" ? p.batchLoop
                                                   : p.sequenceLoop;
    field = w[0].str();
    return Error::success();
  }
  if (keyword == "devices" || keyword == "layers") {
    if (Error e = need(1))
      return e;
    Expected<int64_t> v = integer(w[0], keyword);
    if (!v)
      return v.takeError();
    (keyword == "devices" ? p.devices : p.layers) = *v;
    return Error::success();
  }
  if (keyword == "memory-limit") {
    if (Error e = need(1))
      return e;
    Expected<double> v = real(w[0], keyword);
    if (!v)
      return v.takeError();
    p.memoryLimit = *v;
    return Error::success();
  }
  if (keyword == "op") {
    if (Error e = need(2))
      return e;
    if (findOp(w[0]))
      return error("operator '" + w[0] + "' defined twice");
    std::optional<OpKind> kind = StringSwitch<std::optional<OpKind>>(w[1])
                                     .Case("matmul", OpKind::MatMul)
                                     .Case("elementwise", OpKind::Elementwise)
                                     .Case("softmax", OpKind::Softmax)
                                     .Case("norm", OpKind::Norm)
                                     .Case("embedding", OpKind::Embedding)
                                     .Case("moe", OpKind::MoE)
                                     .Default(std::nullopt);
    if (!kind)
      return error("unknown operator kind '" + w[1] + "'");
    Operator op;
    op.name = w[0].str();
    op.kind = *kind;
    Section section = Section::Pre;
    for (StringRef attr : ArrayRef(w).drop_front(2)) {
      auto [key, value] = attr.split('=');
      if (key == "section") {
        std::optional<Section> s = StringSwitch<std::optional<Section>>(value)
                                       .Case("pre", Section::Pre)
                                       .Case("layer", Section::Layer)
                                       .Case("post", Section::Post)
                                       .Default(std::nullopt);
        if (!s)
          return error("unknown section '" + value + "'");
        section = *s;
      } else if (key == "group") {
        op.layerKind = value.str();
      } else if (key == "flops") {
        Expected<double> v = real(value, "flops");
        if (!v)
          return v.takeError();
        op.flopsPerPoint = *v;
      } else if (key == "recomputable") {
        op.recomputable = true;
      } else if (key == "checkpoint") {
        op.checkpoint = true;
      } else {
        return error("unknown operator attribute '" + key + "'");
      }
    }
    p.ops.push_back(std::move(op));
    p.sections.push_back(section);
    return Error::success();
  }
  if (keyword == "loop") {
    Operator *op = current();
    if (!op)
      return error("'loop' before any 'op'");
    if (Error e = need(2))
      return e;
    Expected<int64_t> extent = integer(w[1], "the loop extent");
    if (!extent)
      return extent.takeError();
    LoopDim d;
    d.name = w[0].str();
    d.extent = *extent;
    for (StringRef attr : ArrayRef(w).drop_front(2)) {
      if (attr == "reduction")
        d.kind = LoopKind::Reduction;
      else if (attr == "fixed")
        d.splittable = false;
      else
        return error("expected 'reduction' or 'fixed', got '" + attr + "'");
    }
    for (const LoopDim &o : op->loops)
      if (o.name == d.name)
        return error("loop '" + d.name + "' defined twice");
    op->loops.push_back(std::move(d));
    return Error::success();
  }
  if (keyword == "moe") {
    Operator *op = current();
    if (!op)
      return error("'moe' before any 'op'");
    if (op->moe)
      return error("operator '" + op->name + "' has two 'moe' lines");
    MoESpec m;
    bool seen[3] = {false, false, false};
    for (StringRef attr : w) {
      auto [key, value] = attr.split('=');
      auto loopIndex = [&](unsigned &slot, int which) -> Error {
        auto it = find_if(op->loops,
                          [&](const LoopDim &l) { return l.name == value; });
        if (it == op->loops.end())
          return error("'moe' names unknown loop '" + value + "'");
        slot = unsigned(it - op->loops.begin());
        seen[which] = true;
        return Error::success();
      };
      if (key == "experts" || key == "hidden" || key == "ffn") {
        int which = key == "experts" ? 0 : key == "hidden" ? 1 : 2;
        unsigned &slot = which == 0   ? m.expertLoop
                         : which == 1 ? m.hiddenLoop
                                      : m.ffnLoop;
        if (Error e = loopIndex(slot, which))
          return e;
      } else if (key == "top-k" || key == "matrices") {
        Expected<int64_t> v = integer(value, key);
        if (!v)
          return v.takeError();
        (key == "top-k" ? m.topK : m.ffnMatrices) = *v;
      } else if (key == "capacity") {
        Expected<double> v = real(value, "capacity");
        if (!v)
          return v.takeError();
        m.capacityFactor = *v;
      } else if (key == "load") {
        SmallVector<StringRef> items;
        value.split(items, ',');
        for (StringRef item : items) {
          Expected<double> v = real(item, "a load share");
          if (!v)
            return v.takeError();
          m.load.push_back(*v);
        }
      } else if (attr == "no-shadowing") {
        m.shadowing = false;
      } else if (attr == "no-smart-schedule") {
        m.smartSchedule = false;
      } else if (attr == "flat") {
        m.hierarchical = false;
      } else if (attr == "static-buffers") {
        m.staticBuffers = true;
      } else {
        return error("unknown 'moe' attribute '" + attr + "'");
      }
    }
    if (!seen[0] || !seen[1] || !seen[2])
      return error("'moe' needs experts=, hidden= and ffn= loops");
    op->moe = std::move(m);
    return Error::success();
  }
  if (keyword == "input" || keyword == "param" || keyword == "output") {
    Operator *op = current();
    if (!op)
      return error("'" + keyword + "' before any 'op'");
    if (Error e = need(2))
      return e;
    Operand o;
    o.name = w[0].str();
    o.role = keyword == "input"   ? OperandRole::Input
             : keyword == "param" ? OperandRole::Parameter
                                  : OperandRole::Output;
    if (w[1] != "-") {
      SmallVector<StringRef> dims;
      w[1].split(dims, ',');
      for (StringRef d : dims) {
        auto it = find_if(op->loops,
                          [&](const LoopDim &l) { return l.name == d; });
        if (it == op->loops.end())
          return error("operand '" + o.name + "' indexes unknown loop '" + d +
                       "'");
        o.dims.push_back(unsigned(it - op->loops.begin()));
      }
    }
    for (StringRef attr : ArrayRef(w).drop_front(2)) {
      auto [key, value] = attr.split('=');
      if (key == "bytes") {
        Expected<int64_t> v = integer(value, "bytes");
        if (!v)
          return v.takeError();
        o.elementBytes = *v;
      } else if (key == "nograd") {
        o.needsGrad = false;
      } else if (key == "gathergrad") {
        o.gatherGradient = true;
      } else {
        return error("unknown operand attribute '" + key + "'");
      }
    }
    op->operands.push_back(std::move(o));
    return Error::success();
  }
  if (keyword == "edge") {
    if (Error e = need(3))
      return e;
    if (w[1] != "->")
      return error("expected 'edge OP.OPERAND -> OP.OPERAND [next]'");
    Edge edge;
    for (int side = 0; side < 2; ++side) {
      auto [opName, operandName] = w[side * 2].rsplit('.');
      std::optional<unsigned> op = findOp(opName);
      if (!op)
        return error("unknown operator '" + opName + "'");
      const std::vector<Operand> &operands = p.ops[*op].operands;
      auto it = find_if(operands,
                        [&](const Operand &o) { return o.name == operandName; });
      if (it == operands.end())
        return error("operator '" + opName + "' has no operand '" +
                     operandName + "'");
      (side ? edge.consumer : edge.producer) = *op;
      (side ? edge.consumerOperand : edge.producerOperand) =
          unsigned(it - operands.begin());
    }
    // [next] [views=N map=D,... sizes=S/S,... lost=P,... [gradlost=P,...]
    // [shared]]
    auto list = [&](StringRef value, StringRef what,
                    std::vector<int> &out) -> Error {
      SmallVector<StringRef> items;
      if (!value.empty())
        value.split(items, ',');
      for (StringRef item : items) {
        if (item == "-") {
          out.push_back(-1);
          continue;
        }
        Expected<int64_t> v = integer(item, what);
        if (!v)
          return v.takeError();
        out.push_back(int(*v));
      }
      return Error::success();
    };
    for (StringRef attr : ArrayRef(w).drop_front(3)) {
      auto [key, value] = attr.split('=');
      if (key == "next") {
        edge.nextLayer = true;
        continue;
      }
      if (key == "shared") {
        if (!edge.views)
          edge.views.emplace();
        edge.views->chargesGather = false;
        continue;
      }
      if (!edge.views)
        edge.views.emplace();
      EdgeViews &v = *edge.views;
      if (key == "views") {
        Expected<int64_t> n = integer(value, "views");
        if (!n)
          return n.takeError();
        v.count = unsigned(std::max<int64_t>(0, *n));
      } else if (key == "map") {
        if (Error e = list(value, "map", v.producerDimOf))
          return e;
      } else if (key == "lost") {
        if (Error e = list(value, "lost", v.lostAt))
          return e;
      } else if (key == "gradlost") {
        if (Error e = list(value, "gradlost", v.gradientLostAt))
          return e;
      } else if (key == "sizes") {
        SmallVector<StringRef> dims;
        if (!value.empty())
          value.split(dims, ',');
        for (StringRef dim : dims) {
          SmallVector<StringRef> items;
          dim.split(items, '/');
          v.sizes.emplace_back();
          for (StringRef item : items) {
            Expected<int64_t> n = integer(item, "sizes");
            if (!n)
              return n.takeError();
            v.sizes.back().push_back(*n);
          }
        }
      } else {
        return error("expected 'next', 'views=', 'map=', 'sizes=', 'lost=', "
                     "'gradlost=' or 'shared', got '" +
                     attr + "'");
      }
    }
    p.edges.push_back(edge);
    return Error::success();
  }
  return error("unknown keyword '" + keyword + "'");
}

Expected<Problem> parseProblem(StringRef text, StringRef fileName) {
  return Parser(fileName).parse(text);
}

void printProblem(raw_ostream &os, const Problem &p) {
  os << "problem " << (p.name.empty() ? "unnamed" : p.name) << "\n";
  if (!p.cluster.empty())
    os << "cluster " << p.cluster << "\n";
  os << "devices " << p.devices << "\n";
  if (p.memoryLimit)
    os << "memory-limit " << format("%.17g", *p.memoryLimit) << "\n";
  if (!p.batchLoop.empty())
    os << "batch-loop " << p.batchLoop << "\n";
  if (!p.sequenceLoop.empty())
    os << "sequence-loop " << p.sequenceLoop << "\n";
  os << "layers " << p.layers << "\n";
  for (unsigned i = 0; i < p.ops.size(); ++i) {
    const Operator &op = p.ops[i];
    os << "op " << op.name << " " << getOpKindName(op.kind)
       << " section=" << getSectionName(p.sections[i]);
    if (!op.layerKind.empty())
      os << " group=" << op.layerKind;
    os << " flops=" << format("%.17g", op.flopsPerPoint);
    if (op.recomputable)
      os << " recomputable";
    if (op.checkpoint)
      os << " checkpoint";
    os << "\n";
    for (const LoopDim &l : op.loops)
      os << "  loop " << l.name << " " << l.extent
         << (l.kind == LoopKind::Reduction ? " reduction" : "")
         << (l.splittable ? "" : " fixed") << "\n";
    for (const Operand &o : op.operands) {
      os << "  "
         << (o.role == OperandRole::Input       ? "input"
             : o.role == OperandRole::Parameter ? "param"
                                                : "output")
         << " " << o.name << " ";
      if (o.dims.empty())
        os << "-";
      for (unsigned j = 0; j < o.dims.size(); ++j)
        os << (j ? "," : "") << op.loops[o.dims[j]].name;
      os << " bytes=" << o.elementBytes;
      if (!o.needsGrad)
        os << " nograd";
      if (o.gatherGradient)
        os << " gathergrad";
      os << "\n";
    }
    if (op.moe) {
      const MoESpec &m = *op.moe;
      os << "  moe experts=" << op.loops[m.expertLoop].name
         << " hidden=" << op.loops[m.hiddenLoop].name
         << " ffn=" << op.loops[m.ffnLoop].name << " top-k=" << m.topK
         << " matrices=" << m.ffnMatrices;
      if (m.capacityFactor > 0)
        os << " capacity=" << format("%.17g", m.capacityFactor);
      if (!m.load.empty()) {
        os << " load=";
        for (auto [k, x] : enumerate(m.load))
          os << (k ? "," : "") << format("%.17g", x);
      }
      if (!m.shadowing)
        os << " no-shadowing";
      if (!m.smartSchedule)
        os << " no-smart-schedule";
      if (!m.hierarchical)
        os << " flat";
      if (m.staticBuffers)
        os << " static-buffers";
      os << "\n";
    }
  }
  for (const Edge &e : p.edges) {
    os << "edge " << p.ops[e.producer].name << "."
       << p.ops[e.producer].operands[e.producerOperand].name << " -> "
       << p.ops[e.consumer].name << "."
       << p.ops[e.consumer].operands[e.consumerOperand].name;
    if (e.nextLayer)
      os << " next";
    if (e.views) {
      const EdgeViews &v = *e.views;
      auto list = [&](ArrayRef<int> items) {
        for (auto [k, d] : enumerate(items)) {
          os << (k ? "," : "");
          if (d < 0)
            os << "-";
          else
            os << d;
        }
      };
      os << " views=" << v.count << " map=";
      list(v.producerDimOf);
      os << " sizes=";
      for (auto [k, sizes] : enumerate(v.sizes)) {
        os << (k ? "," : "");
        for (auto [j, n] : enumerate(sizes))
          os << (j ? "/" : "") << n;
      }
      os << " lost=";
      list(v.lostAt);
      if (!v.gradientLostAt.empty()) {
        os << " gradlost=";
        list(v.gradientLostAt);
      }
      if (!v.chargesGather)
        os << " shared";
    }
    os << "\n";
  }
}

//===----------------------------------------------------------------------===//
// Flattening
//===----------------------------------------------------------------------===//

FlatGraph flatten(const Problem &p) {
  FlatGraph g;
  std::vector<unsigned> pre, layer, post;
  for (unsigned i = 0; i < p.ops.size(); ++i)
    (p.sections[i] == Section::Pre     ? pre
     : p.sections[i] == Section::Layer ? layer
                                       : post)
        .push_back(i);
  int64_t copies = layer.empty() ? 0 : p.layers;
  // index[copy][original op] for layer ops; flat index for others.
  std::vector<int64_t> flatOf(p.ops.size(), -1);
  std::vector<std::vector<int64_t>> layerFlat(copies,
                                              std::vector<int64_t>(p.ops.size(), -1));
  auto add = [&](unsigned i, int64_t copy) {
    Operator op = p.ops[i];
    if (copy >= 0)
      op.name += "#" + std::to_string(copy);
    g.ops.push_back(std::move(op));
    g.sections.push_back(p.sections[i]);
    g.layerOf.push_back(copy);
    g.original.push_back(i);
    return int64_t(g.ops.size() - 1);
  };
  for (unsigned i : pre)
    flatOf[i] = add(i, -1);
  for (int64_t c = 0; c < copies; ++c)
    for (unsigned i : layer)
      layerFlat[c][i] = add(i, c);
  for (unsigned i : post)
    flatOf[i] = add(i, -1);
  auto flatIndex = [&](unsigned i, int64_t copy) -> int64_t {
    return p.sections[i] == Section::Layer ? layerFlat[copy][i] : flatOf[i];
  };
  for (const Edge &e : p.edges) {
    if (e.nextLayer) {
      for (int64_t c = 0; c < copies; ++c) {
        Edge f = e;
        f.nextLayer = false;
        f.consumer = unsigned(layerFlat[c][e.consumer]);
        if (c == 0) {
          if (pre.empty())
            continue; // layer 0 reads an external input
          f.producer = unsigned(flatOf[pre.back()]);
          const Operator &last = p.ops[pre.back()];
          for (unsigned j = 0; j < last.operands.size(); ++j)
            if (last.operands[j].role == OperandRole::Output) {
              f.producerOperand = j;
              break;
            }
        } else {
          f.producer = unsigned(layerFlat[c - 1][e.producer]);
        }
        g.edges.push_back(f);
      }
      continue;
    }
    Section sp = p.sections[e.producer], sc = p.sections[e.consumer];
    if (sp == Section::Layer && sc == Section::Layer) {
      for (int64_t c = 0; c < copies; ++c) {
        Edge f = e;
        f.producer = unsigned(layerFlat[c][e.producer]);
        f.consumer = unsigned(layerFlat[c][e.consumer]);
        g.edges.push_back(f);
      }
    } else {
      Edge f = e;
      f.producer = unsigned(flatIndex(e.producer, copies - 1));
      f.consumer = unsigned(flatIndex(e.consumer, 0));
      g.edges.push_back(f);
    }
  }
  return g;
}

} // namespace stpar::search
