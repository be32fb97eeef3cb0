//===- NormalizeMatchers.cpp - IR views used by -stp-normalize -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Read-only matchers over the importer's IR form (see NormalizeMatchers.h).
// Every matcher checks shapes and indexing maps, not only op kinds, so that a
// pattern built on them fires only where the rewrite preserves semantics.
//
//===----------------------------------------------------------------------===//

#include "NormalizeMatchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
using namespace stpar::stp::normalize;

//===----------------------------------------------------------------------===//
// Constants and maps
//===----------------------------------------------------------------------===//

std::optional<double> stpar::stp::normalize::getConstantScalar(Value v) {
  auto constant = v.getDefiningOp<arith::ConstantOp>();
  if (!constant)
    return std::nullopt;
  if (auto f = dyn_cast<FloatAttr>(constant.getValue()))
    return f.getValueAsDouble();
  auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool stpar::stp::normalize::approxEqual(double a, double b, double rel) {
  if (std::isinf(a) || std::isinf(b))
    return a == b;
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-12;
}

/// Whether `map` reads an operand of `in` broadcast (numpy rules, aligned on
/// the right) into loops over `out`.
static bool isBroadcastMap(AffineMap map, ArrayRef<int64_t> in,
                           ArrayRef<int64_t> out) {
  if (map.getNumDims() != out.size() || map.getNumResults() != in.size() ||
      in.size() > out.size() || map.getNumSymbols() != 0)
    return false;
  size_t offset = out.size() - in.size();
  for (auto [i, expr] : llvm::enumerate(map.getResults())) {
    if (auto dim = dyn_cast<AffineDimExpr>(expr)) {
      if (dim.getPosition() != offset + i || in[i] != out[offset + i])
        return false;
      continue;
    }
    auto c = dyn_cast<AffineConstantExpr>(expr);
    if (!c || c.getValue() != 0 || in[i] != 1)
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Elementwise view
//===----------------------------------------------------------------------===//

RankedTensorType EwOp::type() const {
  return cast<RankedTensorType>(op->getResult(0).getType());
}

bool EwOp::isFull(unsigned i) const {
  if (operands[i].isConstant())
    return false;
  return operands[i].tensor.getType() == type();
}

static bool allParallel(linalg::GenericOp op) {
  return llvm::all_of(op.getIteratorTypesArray(), [](utils::IteratorType t) {
    return t == utils::IteratorType::parallel;
  });
}

std::optional<EwOp> stpar::stp::normalize::matchEw(Value v) {
  auto generic = v.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic->getNumResults() != 1 ||
      generic.getNumDpsInits() != 1 || !allParallel(generic))
    return std::nullopt;
  auto resultType = dyn_cast<RankedTensorType>(v.getType());
  if (!resultType || !resultType.hasStaticShape())
    return std::nullopt;
  ArrayRef<int64_t> outShape = resultType.getShape();
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  if (!maps.back().isIdentity())
    return std::nullopt;
  Block &body = generic.getRegion().front();
  Operation *compute = nullptr;
  for (Operation &op : body.without_terminator()) {
    if (isa<arith::ConstantOp>(op))
      continue;
    if (compute)
      return std::nullopt;
    compute = &op;
  }
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (!compute || compute->getNumResults() != 1 ||
      yield->getNumOperands() != 1 ||
      yield->getOperand(0) != compute->getResult(0) ||
      compute->getNumRegions() != 0)
    return std::nullopt;
  EwOp ew;
  ew.op = generic;
  ew.bodyOp = compute;
  ew.kind = compute->getName().getStringRef();
  unsigned numInputs = generic.getNumDpsInputs();
  for (Value operand : compute->getOperands()) {
    EwOperand entry;
    if (auto arg = dyn_cast<BlockArgument>(operand)) {
      if (arg.getOwner() != &body || arg.getArgNumber() >= numInputs)
        return std::nullopt;
      Value input = generic.getDpsInputs()[arg.getArgNumber()];
      entry.constant = getConstantScalar(input);
      if (!entry.constant) {
        auto inType = dyn_cast<RankedTensorType>(input.getType());
        if (!inType || !isBroadcastMap(maps[arg.getArgNumber()],
                                       inType.getShape(), outShape))
          return std::nullopt;
        entry.tensor = input;
      }
    } else if (operand.getParentBlock() == &body) {
      entry.constant = getConstantScalar(operand);
      if (!entry.constant)
        return std::nullopt;
    } else {
      return std::nullopt; // a value captured from outside the body
    }
    ew.operands.push_back(entry);
  }
  return ew;
}

std::optional<EwOp> stpar::stp::normalize::matchEw(Value v, StringRef kind) {
  std::optional<EwOp> ew = matchEw(v);
  if (!ew || ew->kind != kind)
    return std::nullopt;
  return ew;
}

//===----------------------------------------------------------------------===//
// Means and matmuls
//===----------------------------------------------------------------------===//

/// Whether `v` is a `linalg.fill` of the constant `value`.
static bool isFilledWith(Value v, double value) {
  auto fill = v.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return false;
  std::optional<double> c = getConstantScalar(fill.getInputs()[0]);
  return c && *c == value;
}

/// Whether `generic`'s body is `yield out + lhs * rhs` (any operand order)
/// or, for `numInputs == 1`, `yield in + out`.
static bool isSumBody(linalg::GenericOp generic, unsigned numInputs) {
  Block &body = generic.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (yield->getNumOperands() != 1)
    return false;
  auto add = yield->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || add->getBlock() != &body)
    return false;
  Value acc = body.getArgument(numInputs);
  Value other;
  if (add.getLhs() == acc)
    other = add.getRhs();
  else if (add.getRhs() == acc)
    other = add.getLhs();
  else
    return false;
  size_t numOps = std::distance(body.begin(), body.end());
  if (numInputs == 1)
    return other == body.getArgument(0) && numOps == 2;
  auto mul = other.getDefiningOp<arith::MulFOp>();
  if (!mul || mul->getBlock() != &body || numOps != 3)
    return false;
  Value a = body.getArgument(0), b = body.getArgument(1);
  return (mul.getLhs() == a && mul.getRhs() == b) ||
         (mul.getLhs() == b && mul.getRhs() == a);
}

std::optional<MeanInfo> stpar::stp::normalize::matchMean(Value v) {
  std::optional<EwOp> div = matchEw(v, arith::DivFOp::getOperationName());
  if (!div || !div->isFull(0) || !div->operands[1].isConstant())
    return std::nullopt;
  Value sum = div->operands[0].tensor;
  auto generic = sum.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic->getNumResults() != 1 ||
      generic.getNumDpsInputs() != 1 || generic.getNumDpsInits() != 1 ||
      !isFilledWith(generic.getDpsInits()[0], 0.0) || !isSumBody(generic, 1))
    return std::nullopt;
  Value input = generic.getDpsInputs()[0];
  auto inType = dyn_cast<RankedTensorType>(input.getType());
  if (!inType || !inType.hasStaticShape())
    return std::nullopt;
  int64_t rank = inType.getRank();
  SmallVector<utils::IteratorType> iterators = generic.getIteratorTypesArray();
  // The reduced dims are a non-empty trailing range [axis, rank).
  int64_t axis = rank;
  while (axis > 0 && iterators[axis - 1] == utils::IteratorType::reduction)
    --axis;
  if (axis == rank)
    return std::nullopt;
  for (int64_t d = 0; d < axis; ++d)
    if (iterators[d] != utils::IteratorType::parallel)
      return std::nullopt;
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  if (!maps[0].isIdentity())
    return std::nullopt;
  // Keep-dims output: (d0, .., d_{axis-1}, 0, .., 0).
  auto outType = cast<RankedTensorType>(sum.getType());
  if (outType.getRank() != rank || maps[1].getNumResults() != rank)
    return std::nullopt;
  int64_t count = 1;
  MLIRContext *ctx = v.getContext();
  for (int64_t d = 0; d < rank; ++d) {
    AffineExpr expr = maps[1].getResult(d);
    if (d < axis) {
      if (expr != getAffineDimExpr(d, ctx) ||
          outType.getDimSize(d) != inType.getDimSize(d))
        return std::nullopt;
    } else {
      if (expr != getAffineConstantExpr(0, ctx) || outType.getDimSize(d) != 1)
        return std::nullopt;
      count *= inType.getDimSize(d);
    }
  }
  if (!approxEqual(*div->operands[1].constant, static_cast<double>(count)))
    return std::nullopt;
  return MeanInfo{input, axis, div->op, generic};
}

std::optional<BatchMatmul> stpar::stp::normalize::matchBatchMatmul(Value v) {
  auto generic = v.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic->getNumResults() != 1 ||
      generic.getNumDpsInputs() != 2 || generic.getNumDpsInits() != 1 ||
      !isFilledWith(generic.getDpsInits()[0], 0.0) || !isSumBody(generic, 2))
    return std::nullopt;
  MLIRContext *ctx = v.getContext();
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  SmallVector<AffineMap> expected = {
      AffineMap::get(5, 0, {d(0), d(1), d(2), d(4)}, ctx),
      AffineMap::get(5, 0, {d(0), d(1), d(4), d(3)}, ctx),
      AffineMap::get(5, 0, {d(0), d(1), d(2), d(3)}, ctx)};
  if (generic.getIndexingMapsArray() != expected)
    return std::nullopt;
  SmallVector<utils::IteratorType> iterators = generic.getIteratorTypesArray();
  for (unsigned i = 0; i < 5; ++i)
    if (iterators[i] != (i == 4 ? utils::IteratorType::reduction
                                : utils::IteratorType::parallel))
      return std::nullopt;
  return BatchMatmul{generic, generic.getDpsInputs()[0],
                     generic.getDpsInputs()[1]};
}

bool stpar::stp::normalize::isClosed(const SmallPtrSetImpl<Operation *> &ops,
                                     Operation *root) {
  for (Operation *op : ops) {
    if (op == root)
      continue;
    for (Operation *user : op->getUsers())
      if (!ops.contains(user))
        return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Polynomials
//===----------------------------------------------------------------------===//

static constexpr int kMaxDegree = 8;
static constexpr int kMaxDepth = 16;

static Poly constPoly(double c) { return Poly{{{0, 0}, c}}; }

static Poly addPoly(const Poly &a, const Poly &b, double sign) {
  Poly r = a;
  for (auto [k, c] : b)
    r[k] += sign * c;
  return r;
}

static std::optional<Poly> mulPoly(const Poly &a, const Poly &b) {
  Poly r;
  for (auto [ka, ca] : a)
    for (auto [kb, cb] : b) {
      std::pair<int, int> k = {ka.first + kb.first, ka.second + kb.second};
      if (k.first > kMaxDegree || k.second > kMaxDegree)
        return std::nullopt;
      r[k] += ca * cb;
    }
  return r;
}

bool stpar::stp::normalize::polyEqual(const Poly &a, const Poly &b) {
  auto coeff = [](const Poly &p, std::pair<int, int> k) {
    auto it = p.find(k);
    return it == p.end() ? 0.0 : it->second;
  };
  for (const Poly *p : {&a, &b})
    for (auto [k, c] : *p) {
      (void)c;
      double ca = coeff(a, k), cb = coeff(b, k);
      // Terms absent on one side must vanish; others agree within 1e-4
      // (exports store these constants as float32).
      if (std::fabs(ca - cb) >
          1e-4 * std::max(std::fabs(ca), std::fabs(cb)) + 1e-7)
        return false;
    }
  return true;
}

std::optional<Poly>
stpar::stp::normalize::evalPoly(Value v, Value x, Value t, NodeFn node,
                                SmallPtrSetImpl<Operation *> &visited,
                                int depth) {
  if (v == x)
    return Poly{{{1, 0}, 1.0}};
  if (t && v == t)
    return Poly{{{0, 1}, 1.0}};
  if (depth > kMaxDepth)
    return std::nullopt;
  std::optional<ExprNode> n = node(v);
  if (!n)
    return std::nullopt;
  SmallVector<Poly, 2> args;
  for (const EwOperand &arg : n->args) {
    if (arg.isConstant()) {
      args.push_back(constPoly(*arg.constant));
      continue;
    }
    std::optional<Poly> p =
        evalPoly(arg.tensor, x, t, node, visited, depth + 1);
    if (!p)
      return std::nullopt;
    args.push_back(*p);
  }
  std::optional<Poly> result;
  StringRef kind = n->kind;
  if (kind == arith::AddFOp::getOperationName() && args.size() == 2) {
    result = addPoly(args[0], args[1], 1.0);
  } else if (kind == arith::SubFOp::getOperationName() && args.size() == 2) {
    result = addPoly(args[0], args[1], -1.0);
  } else if (kind == arith::NegFOp::getOperationName() && args.size() == 1) {
    result = addPoly(Poly{}, args[0], -1.0);
  } else if (kind == arith::MulFOp::getOperationName() && args.size() == 2) {
    result = mulPoly(args[0], args[1]);
  } else if (kind == arith::DivFOp::getOperationName() && args.size() == 2 &&
             n->args[1].isConstant() && *n->args[1].constant != 0.0) {
    result = mulPoly(args[0], constPoly(1.0 / *n->args[1].constant));
  } else if (kind == math::PowFOp::getOperationName() && args.size() == 2 &&
             n->args[1].isConstant()) {
    double e = *n->args[1].constant;
    if (e < 0 || e > 4 || e != std::floor(e))
      return std::nullopt;
    result = constPoly(1.0);
    for (int i = 0; i < static_cast<int>(e) && result; ++i)
      result = mulPoly(*result, args[0]);
  }
  if (result)
    visited.insert(n->op);
  return result;
}

void stpar::stp::normalize::collectValues(Value v, NodeFn node,
                                          SmallVectorImpl<Value> &values,
                                          unsigned limit) {
  static const StringRef kinds[] = {
      arith::AddFOp::getOperationName(), arith::SubFOp::getOperationName(),
      arith::MulFOp::getOperationName(), arith::DivFOp::getOperationName(),
      arith::NegFOp::getOperationName(), math::PowFOp::getOperationName()};
  values.push_back(v);
  for (size_t i = 0; i < values.size() && values.size() < limit; ++i) {
    std::optional<ExprNode> n = node(values[i]);
    if (!n || !llvm::is_contained(kinds, n->kind))
      continue;
    for (const EwOperand &arg : n->args)
      if (!arg.isConstant() && !llvm::is_contained(values, arg.tensor) &&
          values.size() < limit)
        values.push_back(arg.tensor);
  }
}

bool stpar::stp::normalize::isGeluArgument(const Poly &arg, bool isTanh) {
  if (!isTanh)
    return polyEqual(arg, Poly{{{1, 0}, M_SQRT1_2}});
  double c = std::sqrt(2.0 / M_PI);
  return polyEqual(arg, Poly{{{1, 0}, c}, {{3, 0}, c * 0.044715}});
}

bool stpar::stp::normalize::isGeluOuter(const Poly &outer) {
  return polyEqual(outer, Poly{{{1, 0}, 0.5}, {{1, 1}, 0.5}});
}
