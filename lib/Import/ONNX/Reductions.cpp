//===- Reductions.cpp - ReduceMean/Sum/Max, Softmax -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

enum class ReduceKind { Sum, Mean, Max };

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

LogicalResult importReduce(NodeContext &node, ReduceKind kind,
                           int64_t inputSince) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  auto axes = reduceAxes(node, type.getRank(), inputSince);
  if (!axes)
    return failure();
  if (axes->empty()) {
    node.setOutput(0, x);
    return success();
  }
  bool keepDims = node.getInt("keepdims", 1);
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value r = buildReduce(b, loc, x, *axes, keepDims, kind == ReduceKind::Max);
  if (kind == ReduceKind::Mean) {
    int64_t count = 1;
    for (int64_t a : *axes)
      count *= type.getDimSize(a);
    Type elem = type.getElementType();
    if (!isa<FloatType>(elem))
      return node.error() << "ReduceMean of integers is not supported";
    r = buildElementwise(b, loc, r, elem,
                         [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                           return arith::DivFOp::create(
                               nb, l, a[0],
                               scalarConstant(nb, l, elem, double(count)));
                         });
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
  r.add("", "Softmax", 1, importSoftmax);
  r.add("", "CumSum", 11, importCumSum);
}
