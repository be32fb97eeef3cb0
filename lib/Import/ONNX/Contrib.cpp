//===- Contrib.cpp - ONNX Runtime contrib ops (com.microsoft) ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The fused ops ONNX Runtime's transformer optimizer emits, imported with
// their documented semantics (onnxruntime docs/ContribOperators.md):
// FastGelu, SkipLayerNormalization, EmbedLayerNormalization and Attention.
// They are decomposed into the same ops as their unfused forms, with
// `stp.layer_norm` and `stp.attention` as the units; unsupported variants
// (other mask formats, rotary, relative position bias, statistics outputs)
// are rejected with a diagnostic naming the input or attribute.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

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

Value add(OpBuilder &b, Location loc, Value x, Value y) {
  return buildElementwise(b, loc, {x, y}, elemOf(x),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::AddFOp::create(nb, l, a[0], a[1]);
                          });
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
    x = add(node.b(), node.loc(), x, bias);
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
  Value sum = add(node.b(), node.loc(), x, skip);
  if (node.hasInput(4)) {
    Value bias = node.input(4);
    if (failed(checkBroadcastInto(node, x, bias, "bias")))
      return failure();
    sum = add(node.b(), node.loc(), sum, bias);
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
  Value sum = add(node.b(), node.loc(), x, skip);
  if (node.hasInput(3)) {
    Value bias = node.input(3);
    if (failed(checkBroadcastInto(node, x, bias, "bias")))
      return failure();
    sum = add(node.b(), node.loc(), sum, bias);
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
  Value sum = add(node.b(), node.loc(), x, bias);
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
  sum = add(b, loc, sum, posEmb);
  if (node.hasInput(1) && node.hasInput(4)) {
    Value seg = buildGather(b, loc, node.input(4), node.input(1), 0);
    sum = add(b, loc, sum, seg);
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

/// Splits [B, S, N*D] into heads [B, N, S, D].
Value toHeads(OpBuilder &b, Location loc, Value x, int64_t heads) {
  ArrayRef<int64_t> s = shapeOf(x);
  Value r = buildReshape(b, loc, x, {s[0], s[1], heads, s[2] / heads});
  return buildTranspose(b, loc, r, {0, 2, 1, 3});
}

LogicalResult importAttention(NodeContext &node) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  Value input = node.input(0), weights = node.input(1);
  if (!input || !weights)
    return failure();
  for (size_t i : {5, 6, 7, 8})
    if (node.hasInput(i))
      return node.error() << "input " << i
                          << " (relative position bias / past sequence "
                             "length / rotary extras) is not supported";
  if (node.getInt("do_rotary", 0))
    return node.error() << "attribute 'do_rotary' is not supported";
  if (node.getInt("past_present_share_buffer", 0))
    return node.error() << "attribute 'past_present_share_buffer' is not "
                           "supported";
  int64_t heads = node.getInt("num_heads", 0);
  if (heads <= 0)
    return node.error() << "attribute 'num_heads' must be positive";
  if (shapeOf(input).size() != 3)
    return node.error() << "input must be [batch, seq, hidden], got "
                        << input.getType();
  FailureOr<Value> qkvOr = buildMatMul(node, input, weights);
  if (failed(qkvOr))
    return failure();
  Value qkv = *qkvOr;
  if (node.hasInput(2)) {
    Value bias = node.input(2);
    if (failed(checkBroadcastInto(node, qkv, bias, "bias")))
      return failure();
    qkv = add(b, loc, qkv, bias);
  }
  ArrayRef<int64_t> qkvShape = shapeOf(qkv);
  int64_t batch = qkvShape[0], seq = qkvShape[1], total = qkvShape[2];
  SmallVector<int64_t> sizes;
  if (auto hs = node.getInts("qkv_hidden_sizes"); hs && !hs->empty())
    sizes = *hs;
  else
    sizes.assign(3, total / 3);
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != total ||
      sizes[0] != sizes[1] || sizes[0] % heads || sizes[2] % heads)
    return node.error() << "the fused QKV width " << total
                        << " does not split into q, k, v of num_heads = "
                        << heads;
  Value parts[3];
  int64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    parts[i] = buildSlice(b, loc, qkv, {0, 0, offset}, {batch, seq, sizes[i]});
    parts[i] = toHeads(b, loc, parts[i], heads);
    offset += sizes[i];
  }
  Value q = parts[0], k = parts[1], v = parts[2];
  if (node.hasInput(4)) {
    // past: [2, B, N, P, D]; keys/values of earlier steps come first.
    Value past = node.input(4);
    ArrayRef<int64_t> p = shapeOf(past);
    if (p.size() != 5 || p[0] != 2 || p[1] != batch || p[2] != heads ||
        p[4] != sizes[0] / heads)
      return node.error() << "past must be [2, batch, num_heads, past_len, "
                             "head_dim], got "
                          << past.getType();
    if (p[3] > 0) {
      Value pastK = buildReshape(
          b, loc, buildSlice(b, loc, past, {0, 0, 0, 0, 0}, {1, p[1], p[2], p[3], p[4]}),
          {p[1], p[2], p[3], p[4]});
      Value pastV = buildReshape(
          b, loc, buildSlice(b, loc, past, {1, 0, 0, 0, 0}, {1, p[1], p[2], p[3], p[4]}),
          {p[1], p[2], p[3], p[4]});
      k = buildConcat(b, loc, {pastK, k}, 2);
      v = buildConcat(b, loc, {pastV, v}, 2);
    }
  }
  ArrayRef<int64_t> kShape = shapeOf(k);
  int64_t totalLen = kShape[2];
  if (node.hasOutput(1)) {
    SmallVector<int64_t> one = {1, kShape[0], kShape[1], kShape[2], kShape[3]};
    Value present = buildConcat(
        b, loc, {buildReshape(b, loc, k, one), buildReshape(b, loc, v, one)}, 0);
    node.setOutput(1, present);
  }
  Value mask;
  Type elem = elemOf(input);
  if (node.hasInput(3)) {
    Value m = node.input(3);
    ArrayRef<int64_t> ms = shapeOf(m);
    float filter = node.getFloat("mask_filter_value", -10000.0f);
    // Raw attention masks: 1 keeps a key position, 0 masks it; additive
    // mask = (1 - m) * mask_filter_value.
    SmallVector<int64_t> shape4;
    if (ms.size() == 1 && (ms[0] == batch || ms[0] == 2 * batch)) {
      // Key lengths: [batch] end positions (right padding), or [2 * batch]
      // end positions then start positions; keys outside [start, end) are
      // masked. Becomes the raw [batch, total_len] mask.
      Type i64 = b.getI64Type();
      Value ends =
          convertElement(b, loc, buildSlice(b, loc, m, {0}, {batch}), i64);
      Value starts =
          ms[0] == batch
              ? buildFilled(b, loc, {batch}, i64, 0.0)
              : convertElement(b, loc, buildSlice(b, loc, m, {batch}, {batch}),
                               i64);
      MLIRContext *ctx = b.getContext();
      AffineMap row = AffineMap::get(2, 0, {getAffineDimExpr(0, ctx)}, ctx);
      Value init = buildFilled(b, loc, {batch, totalLen}, elem, 0.0);
      m = linalg::GenericOp::create(
              b, loc, TypeRange{init.getType()}, ValueRange{ends, starts},
              ValueRange{init},
              SmallVector<AffineMap>{row, row,
                                     AffineMap::getMultiDimIdentityMap(2, ctx)},
              SmallVector<utils::IteratorType>(2,
                                               utils::IteratorType::parallel),
              [&](OpBuilder &nb, Location l, ValueRange a) {
                Value j = arith::IndexCastOp::create(
                    nb, l, nb.getI64Type(), linalg::IndexOp::create(nb, l, 1));
                Value before = arith::CmpIOp::create(
                    nb, l, arith::CmpIPredicate::slt, j, a[0]);
                Value after = arith::CmpIOp::create(
                    nb, l, arith::CmpIPredicate::sge, j, a[1]);
                Value keep = arith::AndIOp::create(nb, l, before, after);
                linalg::YieldOp::create(
                    nb, l,
                    Value(arith::SelectOp::create(
                        nb, l, keep, scalarConstant(nb, l, elem, 1.0),
                        scalarConstant(nb, l, elem, 0.0))));
              })
              .getResult(0);
      shape4 = {batch, 1, 1, totalLen};
    } else if (ms.size() == 2 && ms[0] == batch && ms[1] == totalLen)
      shape4 = {batch, 1, 1, totalLen};
    else if (ms.size() == 3 && ms[0] == batch && ms[1] == seq &&
             ms[2] == totalLen)
      shape4 = {batch, 1, seq, totalLen};
    else
      return node.error() << "mask_index of shape " << m.getType()
                          << " is not supported (key lengths [batch] or "
                             "[2 * batch], raw [batch, total_len] or "
                             "[batch, seq, total_len] masks)";
    Value mf = convertElement(b, loc, m, elem);
    mf = buildElementwise(b, loc, mf, elem,
                          [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            Value one = scalarConstant(nb, l, elem, 1.0);
                            Value inv = arith::SubFOp::create(nb, l, one, a[0]);
                            return arith::MulFOp::create(
                                nb, l, inv, scalarConstant(nb, l, elem, filter));
                          });
    mask = buildReshape(b, loc, mf, shape4);
  }
  float scale = node.getFloat("scale", 0.0f);
  if (scale == 0.0f)
    scale = 1.0f / std::sqrt(static_cast<float>(sizes[0] / heads));
  auto resultType = RankedTensorType::get(
      {batch, heads, seq, sizes[2] / heads}, elem);
  auto attention = stp::AttentionOp::create(
      b, loc, resultType, q, k, v, mask, b.getF32FloatAttr(scale),
      node.getInt("unidirectional", 0) ? b.getUnitAttr() : UnitAttr());
  if (failed(verify(attention)))
    return failure();
  Value out = buildTranspose(b, loc, attention.getResult(), {0, 2, 1, 3});
  node.setOutput(0, buildReshape(b, loc, out, {batch, seq, sizes[2]}));
  return success();
}

} // namespace

void stpar::onnximport::registerContribHandlers(HandlerRegistry &r) {
  r.add("com.microsoft", "FastGelu", 1, importFastGelu);
  r.add("com.microsoft", "SkipLayerNormalization", 1, importSkipLayerNorm);
  r.add("com.microsoft", "EmbedLayerNormalization", 1, importEmbedLayerNorm);
  r.add("com.microsoft", "Attention", 1, importAttention);
  r.add("com.microsoft", "BiasGelu", 1, importBiasGelu);
  r.add("com.microsoft", "SimplifiedLayerNormalization", 1,
        importSimplifiedLayerNorm);
  r.add("", "SimplifiedLayerNormalization", 1, importSimplifiedLayerNorm);
  r.add("com.microsoft", "SkipSimplifiedLayerNormalization", 1,
        importSkipSimplifiedLayerNorm);
}
