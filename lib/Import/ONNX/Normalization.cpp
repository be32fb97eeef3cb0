//===- Normalization.cpp - LayerNormalization, RMSNormalization -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The fused normalization ops become `stp.layer_norm` / `stp.rms_norm`, the
// units the cost model and partitioner reason about. Their optional
// statistics outputs (mean, inverse std-dev) are training-time extras that
// no exported inference graph reads; a graph that reads them is rejected.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

LogicalResult importNorm(NodeContext &node, bool rms) {
  Value x = node.input(0), scale = node.input(1);
  if (!x || !scale)
    return failure();
  for (size_t i = 1; i < node.numOutputs(); ++i)
    if (node.hasOutput(i))
      return node.error() << "output " << i
                          << " (normalization statistics) is not supported";
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
  return success();
}

} // namespace

void stpar::onnximport::registerNormalizationHandlers(HandlerRegistry &r) {
  r.add("", "LayerNormalization", 17,
        [](NodeContext &n) { return importNorm(n, /*rms=*/false); });
  r.add("", "RMSNormalization", 23,
        [](NodeContext &n) { return importNorm(n, /*rms=*/true); });
}
