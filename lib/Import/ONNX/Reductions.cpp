//===- Reductions.cpp - ReduceMean/Sum/Max, Softmax -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace stpar::onnximport;

namespace {

/// ONNX's Reduce* family: an optional map of each element, a combine over
/// the reduced axes, and an optional map of the result.
enum class ReduceKind {
  Sum,
  Mean,
  Max,
  Min,
  Prod,
  L1,
  L2,
  SumSquare,
  LogSum,
  LogSumExp
};

/// The reduced axes: from the `axes` attribute (before the version where it
/// became an input) or input 1; all axes when none are given unless
/// noop_with_empty_axes.
std::optional<SmallVector<int64_t>> reduceAxes(NodeContext &node, int64_t rank,
                                               int64_t inputSince) {
  std::optional<SmallVector<int64_t>> axes;
  if (node.opset >= inputSince) {
    if (node.hasInput(1)) {
      axes = node.requireInts(1, "axes");
      if (!axes)
        return std::nullopt;
    }
  } else {
    axes = node.getInts("axes");
  }
  SmallVector<int64_t> normalized;
  if (!axes || axes->empty()) {
    if (node.getInt("noop_with_empty_axes", 0))
      return normalized;
    for (int64_t d = 0; d < rank; ++d)
      normalized.push_back(d);
    return normalized;
  }
  for (int64_t a : *axes) {
    auto n = node.normalizeAxis(a, rank);
    if (!n)
      return std::nullopt;
    normalized.push_back(*n);
  }
  return normalized;
}

Value absValue(OpBuilder &b, Location l, Value x) {
  if (isa<FloatType>(x.getType()))
    return math::AbsFOp::create(b, l, x);
  Value zero = scalarConstant(b, l, x.getType(), 0);
  Value neg = arith::SubIOp::create(b, l, zero, x);
  Value isNeg = arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, x, zero);
  return arith::SelectOp::create(b, l, isNeg, neg, x);
}

Value squareValue(OpBuilder &b, Location l, Value x) {
  if (isa<FloatType>(x.getType()))
    return arith::MulFOp::create(b, l, x, x);
  return arith::MulIOp::create(b, l, x, x);
}

/// Applies `fn` to every element of `x`.
Value mapElements(OpBuilder &b, Location loc, Value x,
                  function_ref<Value(OpBuilder &, Location, Value)> fn) {
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  return buildElementwise(
      b, loc, x, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) { return fn(nb, l, a[0]); });
}

LogicalResult importReduce(NodeContext &node, ReduceKind kind,
                           int64_t inputSince) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  Type elem = type.getElementType();
  bool isFloat = isa<FloatType>(elem);
  if (!isFloat && elem.isInteger(1))
    return node.error() << "reduction of bool tensors is not supported";
  if (!isFloat && (kind == ReduceKind::Mean || kind == ReduceKind::L2 ||
                   kind == ReduceKind::LogSum || kind == ReduceKind::LogSumExp))
    return node.error() << "reduction of integers is not supported by this "
                           "op (its result is not an integer)";
  auto axes = reduceAxes(node, type.getRank(), inputSince);
  if (!axes)
    return failure();
  bool keepDims = node.getInt("keepdims", 1);
  OpBuilder &b = node.b();
  Location loc = node.loc();
  // Element map before the reduction.
  Value in = x;
  if (kind == ReduceKind::L1)
    in = mapElements(b, loc, x, absValue);
  else if (kind == ReduceKind::L2 || kind == ReduceKind::SumSquare)
    in = mapElements(b, loc, x, squareValue);
  Value maxKept;
  if (kind == ReduceKind::LogSumExp && !axes->empty()) {
    // log(sum(exp(x - m))) + m with m the max (no overflow of exp).
    maxKept = buildReduce(b, loc, x, *axes, /*keepDims=*/true, Combine::Max);
    in =
        buildElementwise(b, loc, ValueRange{x, maxKept}, elem,
                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return math::ExpOp::create(
                               nb, l, arith::SubFOp::create(nb, l, a[0], a[1]));
                         });
  } else if (kind == ReduceKind::LogSumExp) {
    in =
        mapElements(b, loc, x, [](OpBuilder &nb, Location l, Value v) -> Value {
          return math::ExpOp::create(nb, l, v);
        });
  }
  Combine combine = kind == ReduceKind::Max    ? Combine::Max
                    : kind == ReduceKind::Min  ? Combine::Min
                    : kind == ReduceKind::Prod ? Combine::Mul
                                               : Combine::Add;
  // An empty set of axes (noop_with_empty_axes): the maps alone.
  Value r = axes->empty() ? in
                          : buildReduce(b, loc, in, *axes,
                                        maxKept ? true : keepDims, combine);
  switch (kind) {
  case ReduceKind::Mean: {
    int64_t count = 1;
    for (int64_t a : *axes)
      count *= type.getDimSize(a);
    r = mapElements(b, loc, r,
                    [&](OpBuilder &nb, Location l, Value v) -> Value {
                      return arith::DivFOp::create(
                          nb, l, v, scalarConstant(nb, l, elem, double(count)));
                    });
    break;
  }
  case ReduceKind::L2:
    r = mapElements(b, loc, r, [](OpBuilder &nb, Location l, Value v) -> Value {
      return math::SqrtOp::create(nb, l, v);
    });
    break;
  case ReduceKind::LogSum:
  case ReduceKind::LogSumExp:
    r = mapElements(b, loc, r, [](OpBuilder &nb, Location l, Value v) -> Value {
      return math::LogOp::create(nb, l, v);
    });
    if (maxKept) {
      r = buildElementwise(
          b, loc, ValueRange{r, maxKept}, elem,
          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
            return arith::AddFOp::create(nb, l, a[0], a[1]);
          });
      if (!keepDims) {
        SmallVector<int64_t> shape;
        for (int64_t d = 0; d < type.getRank(); ++d)
          if (!llvm::is_contained(*axes, d))
            shape.push_back(type.getDimSize(d));
        r = buildReshape(b, loc, r, shape);
      }
    }
    break;
  default:
    break;
  }
  node.setOutput(0, r);
  return success();
}

/// Softmax along one axis (opset >= 13), or over all dims from `axis` on
/// (opset < 13: the input is coerced to 2-D at `axis`).
LogicalResult importSoftmax(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  int64_t dflt = node.opset >= 13 ? -1 : 1;
  auto axis = node.normalizeAxis(node.getInt("axis", dflt), rank);
  if (!axis)
    return failure();
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value input = x;
  int64_t dim = *axis;
  if (node.opset < 13 && *axis != rank - 1) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < *axis ? outer : inner) *= type.getDimSize(d);
    input = buildReshape(b, loc, x, {outer, inner});
    dim = 1;
  }
  auto inType = cast<RankedTensorType>(input.getType());
  Value init = tensor::EmptyOp::create(b, loc, inType.getShape(),
                                       inType.getElementType());
  Value result = linalg::SoftmaxOp::create(b, loc, inType, input, init, dim)
                     .getResult()[0];
  if (input != x)
    result = buildReshape(b, loc, result, type.getShape());
  node.setOutput(0, result);
  return success();
}

/// The index along `axis` of the first (or last) element of `x` equal to
/// `extreme` (x's extreme along `axis`, kept as a unit dim), as int64: one
/// linalg.generic reducing `axis` with min (max) over the matching indices.
Value buildArgIndex(OpBuilder &b, Location loc, Value x, Value extreme,
                    int64_t axis, bool keepDims, bool last) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  Type i64 = b.getI64Type();
  SmallVector<AffineExpr> keptExprs, outExprs;
  SmallVector<int64_t> outShape;
  SmallVector<utils::IteratorType> iterators;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = d == axis;
    iterators.push_back(reduced ? utils::IteratorType::reduction
                                : utils::IteratorType::parallel);
    keptExprs.push_back(reduced ? getAffineConstantExpr(0, ctx)
                                : getAffineDimExpr(d, ctx));
    if (!reduced || keepDims) {
      outShape.push_back(reduced ? 1 : type.getDimSize(d));
      outExprs.push_back(keptExprs.back());
    }
  }
  double sentinel = last ? double(std::numeric_limits<int64_t>::min())
                         : double(std::numeric_limits<int64_t>::max());
  Value init = buildFilled(b, loc, outShape, i64, sentinel);
  SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx),
                                 AffineMap::get(rank, 0, keptExprs, ctx),
                                 AffineMap::get(rank, 0, outExprs, ctx)};
  bool isFloat = isa<FloatType>(type.getElementType());
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{x, extreme},
      ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value hit =
            isFloat ? arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                            args[0], args[1])
                          .getResult()
                    : arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                            args[0], args[1])
                          .getResult();
        Value index = arith::IndexCastOp::create(
            nb, l, i64, linalg::IndexOp::create(nb, l, axis));
        Value candidate = arith::SelectOp::create(
            nb, l, hit, index, scalarConstant(nb, l, i64, sentinel));
        Value r =
            last
                ? arith::MaxSIOp::create(nb, l, args[2], candidate).getResult()
                : arith::MinSIOp::create(nb, l, args[2], candidate).getResult();
        linalg::YieldOp::create(nb, l, r);
      });
  return generic.getResult(0);
}

/// ArgMax / ArgMin (ONNX -1, -11, -12, -13): the index of the first (or,
/// with select_last_index, the last) extreme along `axis`, as int64.
LogicalResult importArgExtreme(NodeContext &node, bool isMax) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType().isInteger(1))
    return node.error() << "ArgMax/ArgMin of bool tensors is not supported";
  auto axis = node.normalizeAxis(node.getInt("axis", 0), type.getRank());
  if (!axis)
    return failure();
  bool keepDims = node.getInt("keepdims", 1);
  bool last = node.getInt("select_last_index", 0);
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value extreme = buildReduce(b, loc, x, {*axis}, /*keepDims=*/true,
                              isMax ? Combine::Max : Combine::Min);
  node.setOutput(0, buildArgIndex(b, loc, x, extreme, *axis, keepDims, last));
  return success();
}

/// The input of a softmax-like op as the op sees it: opset >= 13 works along
/// one axis (default -1); older opsets coerce the input to 2-D at `axis`
/// (default 1) and work along dim 1. Returns the value and its axis.
std::optional<std::pair<Value, int64_t>> softmaxInput(NodeContext &node,
                                                      Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  int64_t dflt = node.opset >= 13 ? -1 : 1;
  auto axis = node.normalizeAxis(node.getInt("axis", dflt), rank);
  if (!axis)
    return std::nullopt;
  if (node.opset >= 13 || *axis == rank - 1)
    return std::make_pair(x, *axis);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < *axis ? outer : inner) *= type.getDimSize(d);
  return std::make_pair(buildReshape(node.b(), node.loc(), x, {outer, inner}),
                        int64_t(1));
}

/// LogSoftmax: x - m - log(sum(exp(x - m))) along the axis, m the max.
LogicalResult importLogSoftmax(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  if (!isa<FloatType>(elem))
    return node.error() << "expects a float tensor, got " << x.getType();
  auto in = softmaxInput(node, x);
  if (!in)
    return failure();
  auto [input, axis] = *in;
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value m = buildReduce(b, loc, input, {axis}, true, Combine::Max);
  Value shifted =
      buildElementwise(b, loc, ValueRange{input, m}, elem,
                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::SubFOp::create(nb, l, a[0], a[1]);
                       });
  Value e = mapElements(b, loc, shifted,
                        [](OpBuilder &nb, Location l, Value v) -> Value {
                          return math::ExpOp::create(nb, l, v);
                        });
  Value sum = buildReduce(b, loc, e, {axis}, true, Combine::Add);
  Value r =
      buildElementwise(b, loc, ValueRange{shifted, sum}, elem,
                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::SubFOp::create(
                             nb, l, a[0], math::LogOp::create(nb, l, a[1]));
                       });
  if (r.getType() != x.getType())
    r = buildReshape(b, loc, r, cast<RankedTensorType>(x.getType()).getShape());
  node.setOutput(0, r);
  return success();
}

/// Hardmax: 1 at the first maximum along the axis, 0 elsewhere.
LogicalResult importHardmax(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto xType = cast<RankedTensorType>(x.getType());
  Type elem = xType.getElementType();
  if (!isa<FloatType>(elem))
    return node.error() << "expects a float tensor, got " << x.getType();
  auto in = softmaxInput(node, x);
  if (!in)
    return failure();
  auto [input, axis] = *in;
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value m = buildReduce(b, loc, input, {axis}, true, Combine::Max);
  Value index = buildArgIndex(b, loc, input, m, axis, /*keepDims=*/true,
                              /*last=*/false);
  auto inType = cast<RankedTensorType>(input.getType());
  int64_t ax = axis;
  Value r = buildElementwise(
      b, loc, ValueRange{index}, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value i = arith::IndexCastOp::create(
            nb, l, nb.getI64Type(), linalg::IndexOp::create(nb, l, ax));
        Value hit =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, i, a[0]);
        return arith::SelectOp::create(nb, l, hit,
                                       scalarConstant(nb, l, elem, 1.0),
                                       scalarConstant(nb, l, elem, 0.0));
      },
      inType.getShape());
  if (r.getType() != x.getType())
    r = buildReshape(b, loc, r, xType.getShape());
  node.setOutput(0, r);
  return success();
}

/// CumSum (ONNX CumSum-14): out[.., i, ..] = sum of x[.., j, ..] over
/// j <= i along `axis` (j < i when exclusive; j >= i / j > i when reverse).
/// One linalg.generic with an extra reduction loop j over the axis whose
/// body keeps x only where the condition holds (O(n^2) along the axis, which
/// is the sequence of an attention mask in the models that use it).
LogicalResult importCumSum(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto axisValues = node.requireInts(1, "axis");
  if (!axisValues)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  int64_t rank = type.getRank();
  if (axisValues->size() != 1)
    return node.error() << "axis must hold one value";
  auto axis = node.normalizeAxis((*axisValues)[0], rank);
  if (!axis)
    return failure();
  bool exclusive = node.getInt("exclusive", 0);
  bool reverse = node.getInt("reverse", 0);
  OpBuilder &b = node.b();
  Location loc = node.loc();
  MLIRContext *ctx = node.ctx();
  Type elem = type.getElementType();
  // Loops: the rank dims of the output, then j (reduction) at position rank.
  SmallVector<AffineExpr> inExprs, outExprs;
  for (int64_t d = 0; d < rank; ++d) {
    inExprs.push_back(getAffineDimExpr(d == *axis ? rank : d, ctx));
    outExprs.push_back(getAffineDimExpr(d, ctx));
  }
  SmallVector<AffineMap> maps = {AffineMap::get(rank + 1, 0, inExprs, ctx),
                                 AffineMap::get(rank + 1, 0, outExprs, ctx)};
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  Value init = buildFilled(b, loc, type.getShape(), elem, 0.0);
  bool isFloat = isa<FloatType>(elem);
  int64_t axisDim = *axis;
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{x}, ValueRange{init}, maps,
      iterators, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value i = linalg::IndexOp::create(nb, l, axisDim);
        Value j = linalg::IndexOp::create(nb, l, rank);
        arith::CmpIPredicate pred =
            reverse ? (exclusive ? arith::CmpIPredicate::ugt
                                 : arith::CmpIPredicate::uge)
                    : (exclusive ? arith::CmpIPredicate::ult
                                 : arith::CmpIPredicate::ule);
        Value keep = arith::CmpIOp::create(nb, l, pred, j, i);
        Value zero = scalarConstant(nb, l, elem, 0.0);
        Value term = arith::SelectOp::create(nb, l, keep, args[0], zero);
        Value sum =
            isFloat ? arith::AddFOp::create(nb, l, args[1], term).getResult()
                    : arith::AddIOp::create(nb, l, args[1], term).getResult();
        linalg::YieldOp::create(nb, l, sum);
      });
  node.setOutput(0, generic.getResult(0));
  return success();
}

} // namespace

void stpar::onnximport::registerReductionHandlers(HandlerRegistry &r) {
  r.add("", "ReduceSum", 1, [](NodeContext &n) {
    return importReduce(n, ReduceKind::Sum, 13);
  });
  r.add("", "ReduceMean", 1, [](NodeContext &n) {
    return importReduce(n, ReduceKind::Mean, 18);
  });
  r.add("", "ReduceMax", 1, [](NodeContext &n) {
    return importReduce(n, ReduceKind::Max, 18);
  });
  struct Named {
    const char *name;
    ReduceKind kind;
  };
  for (Named n :
       {Named{"ReduceMin", ReduceKind::Min},
        Named{"ReduceProd", ReduceKind::Prod},
        Named{"ReduceL1", ReduceKind::L1}, Named{"ReduceL2", ReduceKind::L2},
        Named{"ReduceSumSquare", ReduceKind::SumSquare},
        Named{"ReduceLogSum", ReduceKind::LogSum},
        Named{"ReduceLogSumExp", ReduceKind::LogSumExp}}) {
    ReduceKind kind = n.kind;
    r.add("", n.name, 1,
          [kind](NodeContext &node) { return importReduce(node, kind, 18); });
  }
  r.add("", "Softmax", 1, importSoftmax);
  r.add("", "LogSoftmax", 1, importLogSoftmax);
  r.add("", "Hardmax", 1, importHardmax);
  r.add("", "ArgMax", 1,
        [](NodeContext &n) { return importArgExtreme(n, /*isMax=*/true); });
  r.add("", "ArgMin", 1,
        [](NodeContext &n) { return importArgExtreme(n, /*isMax=*/false); });
  r.add("", "CumSum", 11, importCumSum);
}
