//===- Normalization.cpp - LayerNormalization, RMSNormalization -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The fused normalization ops become `stp.layer_norm` / `stp.rms_norm`, the
// units the cost model and partitioner reason about. LayerNormalization's
// optional statistics outputs (mean, inverse std-dev) are built beside it
// from reductions when a graph reads them.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

/// LayerNormalization's optional outputs: Mean and InvStdDev over the
/// normalized dims `axis..rank-1`, shaped [d0, .., d(axis-1), 1, .., 1]
/// (ONNX LayerNormalization-17). They are computed separately from
/// stp.layer_norm (only when a graph reads them).
void buildNormStatistics(NodeContext &node, Value x, int64_t axis,
                         float epsilon) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  auto type = cast<RankedTensorType>(x.getType());
  Type elem = type.getElementType();
  SmallVector<int64_t> axes;
  double count = 1;
  for (int64_t d = axis; d < type.getRank(); ++d) {
    axes.push_back(d);
    count *= type.getDimSize(d);
  }
  auto divide = [&](Value v) {
    return buildElementwise(b, loc, v, elem,
                            [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                              return arith::DivFOp::create(
                                  nb, l, a[0], scalarConstant(nb, l, elem, count));
                            });
  };
  Value mean = divide(buildReduce(b, loc, x, axes, /*keepDims=*/true,
                                  /*isMax=*/false));
  node.setOutput(1, mean);
  if (!node.hasOutput(2))
    return;
  Value squared = buildElementwise(
      b, loc, {x, mean}, elem,
      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value d = arith::SubFOp::create(nb, l, a[0], a[1]);
        return arith::MulFOp::create(nb, l, d, d);
      });
  Value variance =
      divide(buildReduce(b, loc, squared, axes, /*keepDims=*/true, false));
  node.setOutput(2, buildElementwise(
                        b, loc, variance, elem,
                        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                          Value e = scalarConstant(nb, l, elem, epsilon);
                          Value s = math::SqrtOp::create(
                              nb, l, arith::AddFOp::create(nb, l, a[0], e));
                          return arith::DivFOp::create(
                              nb, l, scalarConstant(nb, l, elem, 1.0), s);
                        }));
}

LogicalResult importNorm(NodeContext &node, bool rms) {
  Value x = node.input(0), scale = node.input(1);
  if (!x || !scale)
    return failure();
  if (rms)
    for (size_t i = 1; i < node.numOutputs(); ++i)
      if (node.hasOutput(i))
        return node.error() << "RMSNormalization has no output " << i;
  auto type = cast<RankedTensorType>(x.getType());
  auto axis = node.normalizeAxis(node.getInt("axis", -1), type.getRank());
  if (!axis)
    return failure();
  if (node.getInt("stash_type", 1) != 1)
    return node.error() << "stash_type other than float32 is not supported";
  float epsilon = node.getFloat("epsilon", rms ? 1e-5f : 1e-5f);
  OpBuilder &b = node.b();
  if (cast<RankedTensorType>(scale.getType()).getElementType() !=
      type.getElementType())
    return node.error() << "scale has another element type than the input";
  Value result;
  if (rms) {
    result = stpar::stp::RMSNormOp::create(b, node.loc(), type, x, scale,
                                           b.getI64IntegerAttr(*axis),
                                           b.getF32FloatAttr(epsilon));
  } else {
    Value bias = node.hasInput(2) ? node.input(2) : Value();
    result = stpar::stp::LayerNormOp::create(b, node.loc(), type, x, scale,
                                             bias, b.getI64IntegerAttr(*axis),
                                             b.getF32FloatAttr(epsilon));
  }
  if (failed(verify(result.getDefiningOp())))
    return failure();
  node.setOutput(0, result);
  if (!rms && (node.hasOutput(1) || node.hasOutput(2)))
    buildNormStatistics(node, x, *axis, epsilon);
  return success();
}

} // namespace

void stpar::onnximport::registerNormalizationHandlers(HandlerRegistry &r) {
  r.add("", "LayerNormalization", 1,
        [](NodeContext &n) { return importNorm(n, /*rms=*/false); });
  r.add("", "RMSNormalization", 23,
        [](NodeContext &n) { return importNorm(n, /*rms=*/true); });
}
