//===- Contrib.cpp - ONNX Runtime contrib ops (com.microsoft) ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The fused ops ONNX Runtime's transformer optimizer emits, imported with
// their documented semantics (onnxruntime docs/ContribOperators.md):
// FastGelu, BiasGelu, SkipLayerNormalization, EmbedLayerNormalization and
// the simplified (RMS) layer norms; the attention ops are in
// ContribAttention.cpp. They are decomposed into the same ops as their
// unfused forms, with `stp.layer_norm` and `stp.rms_norm` as the units;
// unsupported variants (statistics outputs) are rejected with a diagnostic
// naming the input or attribute.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace stpar::onnximport;
namespace stp = stpar::stp;

namespace {

Type elemOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}
ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Checks that `y` broadcasts into `x`'s shape (so x + y keeps x's shape).
LogicalResult checkBroadcastInto(NodeContext &node, Value x, Value y,
                                 StringRef what) {
  auto merged = broadcastShapes(shapeOf(x), shapeOf(y));
  if (!merged || ArrayRef<int64_t>(*merged) != shapeOf(x))
    return node.error() << what << " " << y.getType()
                        << " does not broadcast to " << x.getType();
  return success();
}

Value layerNorm(NodeContext &node, Value x, Value gamma, Value beta,
                float epsilon) {
  OpBuilder &b = node.b();
  auto type = cast<RankedTensorType>(x.getType());
  return stp::LayerNormOp::create(b, node.loc(), type, x, gamma, beta,
                                  b.getI64IntegerAttr(type.getRank() - 1),
                                  b.getF32FloatAttr(epsilon));
}

LogicalResult importFastGelu(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  if (node.hasInput(1)) {
    Value bias = node.input(1);
    if (failed(checkBroadcastInto(node, x, bias, "bias")))
      return failure();
    x = buildAddF(node.b(), node.loc(), x, bias);
  }
  node.setOutput(0, buildElementwise(
                        node.b(), node.loc(), x, elemOf(x),
                        [](OpBuilder &b, Location loc, ValueRange a) {
                          return buildGeluValue(b, loc, a[0], /*tanh=*/true);
                        }));
  return success();
}

LogicalResult importSkipLayerNorm(NodeContext &node) {
  Value x = node.input(0), skip = node.input(1), gamma = node.input(2);
  if (!x || !skip || !gamma)
    return failure();
  for (size_t i : {1, 2})
    if (node.hasOutput(i))
      return node.error() << "output " << i
                          << " (normalization statistics) is not supported";
  if (failed(checkBroadcastInto(node, x, skip, "skip")))
    return failure();
  Value sum = buildAddF(node.b(), node.loc(), x, skip);
  if (node.hasInput(4)) {
    Value bias = node.input(4);
    if (failed(checkBroadcastInto(node, x, bias, "bias")))
      return failure();
    sum = buildAddF(node.b(), node.loc(), sum, bias);
  }
  Value beta = node.hasInput(3) ? node.input(3) : Value();
  Value out = layerNorm(node, sum, gamma, beta,
                        node.getFloat("epsilon", 1e-12f));
  if (failed(verify(out.getDefiningOp())))
    return failure();
  node.setOutput(0, out);
  node.setOutput(3, sum);
  return success();
}

/// RMS normalization over the last dims from `axis` (stp.rms_norm).
FailureOr<Value> rmsNorm(NodeContext &node, Value x, Value gamma, int64_t axis,
                         float epsilon) {
  OpBuilder &b = node.b();
  auto type = cast<RankedTensorType>(x.getType());
  auto normalized = node.normalizeAxis(axis, type.getRank());
  if (!normalized)
    return failure();
  if (elemOf(gamma) != elemOf(x))
    return node.error() << "scale has another element type than the input";
  Value out = stp::RMSNormOp::create(b, node.loc(), type, x, gamma,
                                     b.getI64IntegerAttr(*normalized),
                                     b.getF32FloatAttr(epsilon));
  if (failed(verify(out.getDefiningOp())))
    return failure();
  return out;
}

/// SimplifiedLayerNormalization (ONNX Runtime's RMSNorm, registered in the
/// default and com.microsoft domains): X / sqrt(mean(X^2) + eps) * scale.
LogicalResult importSimplifiedLayerNorm(NodeContext &node) {
  Value x = node.input(0), gamma = node.input(1);
  if (!x || !gamma)
    return failure();
  if (node.hasOutput(1))
    return node.error() << "output 1 (inv_std_var) is not supported";
  FailureOr<Value> out = rmsNorm(node, x, gamma, node.getInt("axis", -1),
                                 node.getFloat("epsilon", 1e-5f));
  if (failed(out))
    return failure();
  node.setOutput(0, *out);
  return success();
}

/// SkipSimplifiedLayerNormalization (com.microsoft): s = input + skip
/// (+ bias), RMS-normalized over the last dim; output 3 is s.
LogicalResult importSkipSimplifiedLayerNorm(NodeContext &node) {
  Value x = node.input(0), skip = node.input(1), gamma = node.input(2);
  if (!x || !skip || !gamma)
    return failure();
  for (size_t i : {1, 2})
    if (node.hasOutput(i))
      return node.error() << "output " << i
                          << " (normalization statistics) is not supported";
  if (failed(checkBroadcastInto(node, x, skip, "skip")))
    return failure();
  Value sum = buildAddF(node.b(), node.loc(), x, skip);
  if (node.hasInput(3)) {
    Value bias = node.input(3);
    if (failed(checkBroadcastInto(node, x, bias, "bias")))
      return failure();
    sum = buildAddF(node.b(), node.loc(), sum, bias);
  }
  FailureOr<Value> out =
      rmsNorm(node, sum, gamma, -1, node.getFloat("epsilon", 1e-12f));
  if (failed(out))
    return failure();
  node.setOutput(0, *out);
  node.setOutput(3, sum);
  return success();
}

/// BiasGelu (com.microsoft): the exact (erf) GELU of A + B.
LogicalResult importBiasGelu(NodeContext &node) {
  Value x = node.input(0), bias = node.input(1);
  if (!x || !bias)
    return failure();
  if (failed(checkBroadcastInto(node, x, bias, "bias")))
    return failure();
  Value sum = buildAddF(node.b(), node.loc(), x, bias);
  node.setOutput(
      0, buildElementwise(node.b(), node.loc(), sum, elemOf(sum),
                          [](OpBuilder &b, Location loc, ValueRange a) {
                            return buildGeluValue(b, loc, a[0], /*tanh=*/false);
                          }));
  return success();
}

LogicalResult importEmbedLayerNorm(NodeContext &node) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value ids = node.input(0), word = node.input(2), pos = node.input(3),
        gamma = node.input(5), beta = node.input(6);
  if (!ids || !word || !pos || !gamma || !beta)
    return failure();
  if (shapeOf(ids).size() != 2)
    return node.error() << "input_ids must be [batch, seq], got "
                        << ids.getType();
  if (shapeOf(word).size() != 2 || shapeOf(pos).size() != 2)
    return node.error() << "word and position embeddings must be 2-D "
                           "[rows, hidden], got "
                        << word.getType() << " and " << pos.getType();
  int64_t batch = shapeOf(ids)[0], seq = shapeOf(ids)[1];
  int64_t hidden = shapeOf(word).back();
  Value sum = buildGather(b, loc, word, ids, 0); // [B, S, H]
  Value posEmb;
  if (node.hasInput(8)) {
    posEmb = buildGather(b, loc, pos, node.input(8), 0);
  } else {
    if (shapeOf(pos)[0] < seq)
      return node.error() << "position_embedding has fewer than " << seq
                          << " rows";
    posEmb = buildSlice(b, loc, pos, {0, 0}, {seq, hidden});
  }
  if (failed(checkBroadcastInto(node, sum, posEmb, "position embedding")))
    return failure();
  sum = buildAddF(b, loc, sum, posEmb);
  if (node.hasInput(1) && node.hasInput(4)) {
    Value seg = buildGather(b, loc, node.input(4), node.input(1), 0);
    sum = buildAddF(b, loc, sum, seg);
  }
  Value out = layerNorm(node, sum, gamma, beta, node.getFloat("epsilon", 1e-12f));
  if (failed(verify(out.getDefiningOp())))
    return failure();
  node.setOutput(0, out);
  node.setOutput(2, sum);
  if (node.hasOutput(1)) {
    // mask_index: the number of unmasked tokens per sequence (int32 [B]).
    Type i32 = b.getI32Type();
    Value maskIndex;
    if (node.hasInput(7)) {
      Value mask = convertElement(b, loc, node.input(7), i32);
      maskIndex = buildReduce(b, loc, mask, {1}, /*keepDims=*/false,
                              /*isMax=*/false);
    } else {
      maskIndex = buildFilled(b, loc, {batch}, i32, 0.0);
    }
    node.setOutput(1, maskIndex);
  }
  return success();
}

} // namespace

void stpar::onnximport::registerContribHandlers(HandlerRegistry &r) {
  r.add("com.microsoft", "FastGelu", 1, importFastGelu);
  r.add("com.microsoft", "SkipLayerNormalization", 1, importSkipLayerNorm);
  r.add("com.microsoft", "EmbedLayerNormalization", 1, importEmbedLayerNorm);
  r.add("com.microsoft", "BiasGelu", 1, importBiasGelu);
  r.add("com.microsoft", "SimplifiedLayerNormalization", 1,
        importSimplifiedLayerNorm);
  r.add("", "SimplifiedLayerNormalization", 1, importSimplifiedLayerNorm);
  r.add("com.microsoft", "SkipSimplifiedLayerNormalization", 1,
        importSkipSimplifiedLayerNorm);
}
