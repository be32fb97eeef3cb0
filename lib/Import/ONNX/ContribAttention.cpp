//===- ContribAttention.cpp - ONNX Runtime's attention ops ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The attention ops of ONNX Runtime's com.microsoft domain, imported onto
// `stp.attention` with their documented semantics (onnxruntime
// docs/ContribOperators.md):
//
//  - Attention: one fused QKV projection, mask_index, a past [2, B, N, P, H].
//  - MultiHeadAttention: Q, K, V projected already (separate, packed QKV
//    [B, S, N, 3, H], packed KV [B, L, N, 2, H], or K/V in head layout
//    [B, N, L, H]), a projection bias, key_padding_mask, attention_bias,
//    past/present key and value caches.
//  - GroupQueryAttention: Hq query and Hkv key/value heads (separate or
//    packed QKV), caches, seqlens_k/total_sequence_length, rotary embedding
//    from cos/sin caches, local (sliding-window) attention, attention_bias.
//
// Variants whose meaning depends on runtime buffer management (shared
// past/present buffers, beam-search cache indirection, ragged seqlens_k) or
// that stp.attention cannot express (softcap, attention sinks, quantized
// caches, QK outputs) are rejected with a diagnostic naming the input or
// attribute; nothing is silently dropped.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <limits>

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

/// Adds `x` to an optional running bias.
Value accumulate(OpBuilder &b, Location loc, Value acc, Value x) {
  return acc ? buildAddF(b, loc, acc, x) : x;
}

/// Splits [B, S, N*D] into heads [B, N, S, D].
Value toHeads(OpBuilder &b, Location loc, Value x, int64_t heads) {
  ArrayRef<int64_t> s = shapeOf(x);
  Value r = buildReshape(b, loc, x, {s[0], s[1], heads, s[2] / heads});
  return buildTranspose(b, loc, r, {0, 2, 1, 3});
}

/// [B, N, S, D] back to [B, S, N*D].
Value fromHeads(OpBuilder &b, Location loc, Value x) {
  ArrayRef<int64_t> s = shapeOf(x);
  return buildReshape(b, loc, buildTranspose(b, loc, x, {0, 2, 1, 3}),
                      {s[0], s[2], s[1] * s[3]});
}

/// Slice [offset, offset + width) of the last dim of a [B, S, W] tensor.
Value lastDimSlice(OpBuilder &b, Location loc, Value x, int64_t offset,
                   int64_t width) {
  ArrayRef<int64_t> s = shapeOf(x);
  return buildSlice(b, loc, x, {0, 0, offset}, {s[0], s[1], width});
}

/// Member `index` of a packed [B, S, N, K, H] tensor, as [B, S, N*H].
Value unpack(OpBuilder &b, Location loc, Value packed, int64_t index) {
  ArrayRef<int64_t> s = shapeOf(packed);
  Value one = buildSlice(b, loc, packed, {0, 0, 0, index, 0},
                         {s[0], s[1], s[2], 1, s[4]});
  return buildReshape(b, loc, one, {s[0], s[1], s[2] * s[4]});
}

/// `cache` [B, N, P, H] (its keys come first) concatenated with `x`
/// [B, N, L, H] along the sequence; null after an error naming `what`.
Value withPast(NodeContext &node, Value cache, Value x, StringRef what) {
  ArrayRef<int64_t> c = shapeOf(cache), s = shapeOf(x);
  if (c.size() != 4 || c[0] != s[0] || c[1] != s[1] || c[3] != s[3] ||
      elemOf(cache) != elemOf(x)) {
    node.error() << what << " " << cache.getType() << " does not match "
                 << x.getType() << " ([batch, heads, past_len, head_size])";
    return {};
  }
  if (c[2] == 0)
    return x;
  return buildConcat(node.b(), node.loc(), {cache, x}, 2);
}

/// ONNX Runtime's key padding masks (contrib Attention's mask_index,
/// MultiHeadAttention's key_padding_mask) as an additive bias: key lengths
/// [B] (keys at or past the length are padding), end then start positions
/// [2B] (keys outside [start, end)), raw masks [B, T] or [B, S, T] (0 is
/// padding). Masked keys get `filter` (ORT's mask_filter_value), kept keys
/// 0. Returns [B, 1, 1, T] or [B, 1, S, T]; null after an error.
Value keyPaddingBias(NodeContext &node, Value m, int64_t batch, int64_t seq,
                     int64_t total, Type elem, float filter, StringRef what) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  ArrayRef<int64_t> ms = shapeOf(m);
  if (!isa<IntegerType>(elemOf(m))) {
    node.error() << what << " must be an integer tensor, got " << m.getType();
    return {};
  }
  SmallVector<int64_t> shape4;
  if (ms.size() == 1 && (ms[0] == batch || ms[0] == 2 * batch)) {
    // Lengths: the raw [B, T] mask is 1 where start <= j < end.
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
    Value init = buildFilled(b, loc, {batch, total}, elem, 0.0);
    m = linalg::GenericOp::create(
            b, loc, TypeRange{init.getType()}, ValueRange{ends, starts},
            ValueRange{init},
            SmallVector<AffineMap>{row, row,
                                   AffineMap::getMultiDimIdentityMap(2, ctx)},
            SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
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
    shape4 = {batch, 1, 1, total};
  } else if (ms.size() == 2 && ms[0] == batch && ms[1] == total) {
    shape4 = {batch, 1, 1, total};
  } else if (ms.size() == 3 && ms[0] == batch && ms[1] == seq &&
             ms[2] == total) {
    shape4 = {batch, 1, seq, total};
  } else {
    node.error() << what << " of shape " << m.getType()
                 << " is not supported (key lengths [batch] or [2 * batch], "
                    "raw [batch, total_len] or [batch, seq, total_len] "
                    "masks; here batch = "
                 << batch << ", seq = " << seq << ", total_len = " << total
                 << ")";
    return {};
  }
  Value mf = convertElement(b, loc, m, elem);
  mf = buildElementwise(b, loc, mf, elem,
                        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                          Value one = scalarConstant(nb, l, elem, 1.0);
                          Value inv = arith::SubFOp::create(nb, l, one, a[0]);
                          return arith::MulFOp::create(
                              nb, l, inv, scalarConstant(nb, l, elem, filter));
                        });
  return buildReshape(b, loc, mf, shape4);
}

/// An attention_bias input [B or 1, N or 1, S, T] of the query's type;
/// null after an error.
Value attentionBias(NodeContext &node, size_t index, int64_t batch,
                    int64_t heads, int64_t seq, int64_t total, Type elem) {
  Value bias = node.input(index);
  if (!bias)
    return {};
  ArrayRef<int64_t> s = shapeOf(bias);
  if (elemOf(bias) != elem || s.size() != 4 || (s[0] != batch && s[0] != 1) ||
      (s[1] != heads && s[1] != 1) || s[2] != seq || s[3] != total) {
    node.error() << "attention_bias " << bias.getType() << " is not [" << batch
                 << " or 1, " << heads << " or 1, " << seq << ", " << total
                 << "] of the query's element type";
    return {};
  }
  return bias;
}

/// `stp.attention` over heads [B, Hq, S, D], [B, Hkv, T, D], [B, Hkv, T, Dv]
/// with an optional additive bias; its result [B, Hq, S, Dv] becomes the
/// node's output 0 as [B, S, Hq * Dv].
LogicalResult attendInto(NodeContext &node, Value q, Value k, Value v,
                         Value bias, float scale, bool causal) {
  OpBuilder &b = node.b();
  ArrayRef<int64_t> qs = shapeOf(q), vs = shapeOf(v);
  if (scale == 0.0f)
    scale = 1.0f / std::sqrt(static_cast<float>(qs[3]));
  auto resultType =
      RankedTensorType::get({qs[0], qs[1], qs[2], vs[3]}, elemOf(q));
  auto op = stp::AttentionOp::create(b, node.loc(), resultType, q, k, v, bias,
                                     b.getF32FloatAttr(scale),
                                     causal ? b.getUnitAttr() : UnitAttr());
  if (failed(verify(op)))
    return failure();
  node.setOutput(0, fromHeads(b, node.loc(), op.getResult()));
  return success();
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
    if (!bias)
      return failure();
    auto merged = broadcastShapes(shapeOf(qkv), shapeOf(bias));
    if (!merged || ArrayRef<int64_t>(*merged) != shapeOf(qkv))
      return node.error() << "bias " << bias.getType()
                          << " does not broadcast to " << qkv.getType();
    qkv = buildAddF(b, loc, qkv, bias);
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
    parts[i] =
        toHeads(b, loc, lastDimSlice(b, loc, qkv, offset, sizes[i]), heads);
    offset += sizes[i];
  }
  Value q = parts[0], k = parts[1], v = parts[2];
  if (node.hasInput(4)) {
    // past: [2, B, N, P, D]; keys/values of earlier steps come first.
    Value past = node.input(4);
    if (!past)
      return failure();
    ArrayRef<int64_t> p = shapeOf(past);
    if (p.size() != 5 || p[0] != 2 || p[1] != batch || p[2] != heads ||
        p[4] != sizes[0] / heads)
      return node.error() << "past must be [2, batch, num_heads, past_len, "
                             "head_dim], got "
                          << past.getType();
    SmallVector<int64_t> one = {1, p[1], p[2], p[3], p[4]};
    SmallVector<int64_t> four = {p[1], p[2], p[3], p[4]};
    Value pastK = buildReshape(
        b, loc, buildSlice(b, loc, past, {0, 0, 0, 0, 0}, one), four);
    Value pastV = buildReshape(
        b, loc, buildSlice(b, loc, past, {1, 0, 0, 0, 0}, one), four);
    if (!(k = withPast(node, pastK, k, "past")) ||
        !(v = withPast(node, pastV, v, "past")))
      return failure();
  }
  ArrayRef<int64_t> kShape = shapeOf(k);
  int64_t totalLen = kShape[2];
  if (node.hasOutput(1)) {
    SmallVector<int64_t> one = {1, kShape[0], kShape[1], kShape[2], kShape[3]};
    Value present = buildConcat(
        b, loc, {buildReshape(b, loc, k, one), buildReshape(b, loc, v, one)},
        0);
    node.setOutput(1, present);
  }
  Type elem = elemOf(input);
  Value mask;
  if (node.hasInput(3)) {
    Value m = node.input(3);
    if (!m)
      return failure();
    mask = keyPaddingBias(node, m, batch, seq, totalLen, elem,
                          node.getFloat("mask_filter_value", -10000.0f),
                          "mask_index");
    if (!mask)
      return failure();
  }
  return attendInto(node, q, k, v, mask, node.getFloat("scale", 0),
                    node.getInt("unidirectional", 0));
}

LogicalResult importMultiHeadAttention(NodeContext &node) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  int64_t heads = node.getInt("num_heads", 0);
  if (heads <= 0)
    return node.error() << "attribute 'num_heads' must be positive";
  if (node.hasInput(8))
    return node.error() << "input 'past_sequence_length' (past and present "
                           "sharing one buffer) is not supported";
  if (node.hasInput(9))
    return node.error() << "input 'cache_indirection' (beam search) is not "
                           "supported";
  if (node.hasOutput(3))
    return node.error() << "output 'qk' is not supported";
  Value query = node.input(0);
  if (!query)
    return failure();
  Type elem = elemOf(query);
  if (!isa<FloatType>(elem))
    return node.error() << "query must be a float tensor, got "
                        << query.getType();
  ArrayRef<int64_t> qs = shapeOf(query);
  // Q, K, V as [B, S, hidden] (q3/k3/v3), or K, V already in heads.
  Value q3, k3, v3, k, v;
  if (qs.size() == 5) {
    if (node.hasInput(1) || node.hasInput(2))
      return node.error() << "packed QKV query " << query.getType()
                          << " comes without key and value";
    if (qs[2] != heads || qs[3] != 3)
      return node.error() << "packed QKV must be [batch, seq, num_heads = "
                          << heads << ", 3, head_size], got "
                          << query.getType();
    q3 = unpack(b, loc, query, 0);
    k3 = unpack(b, loc, query, 1);
    v3 = unpack(b, loc, query, 2);
  } else if (qs.size() == 3) {
    if (!node.hasInput(1))
      return node.error() << "a [batch, seq, hidden] query needs a key";
    Value key = node.input(1);
    if (!key)
      return failure();
    ArrayRef<int64_t> ks = shapeOf(key);
    if (ks.size() == 5) {
      if (node.hasInput(2))
        return node.error()
               << "packed KV key " << key.getType() << " comes without value";
      if (ks[0] != qs[0] || ks[2] != heads || ks[3] != 2)
        return node.error()
               << "packed KV must be [batch, kv_seq, num_heads "
                  "= "
               << heads << ", 2, head_size], got " << key.getType();
      k3 = unpack(b, loc, key, 0);
      v3 = unpack(b, loc, key, 1);
    } else {
      if (!node.hasInput(2))
        return node.error() << "key " << key.getType() << " needs a value";
      Value value = node.input(2);
      if (!value)
        return failure();
      ArrayRef<int64_t> vs = shapeOf(value);
      if (ks.size() == 4 && vs.size() == 4) {
        k = key;
        v = value;
      } else if (ks.size() == 3 && vs.size() == 3) {
        k3 = key;
        v3 = value;
      } else {
        return node.error()
               << "key " << key.getType() << " and value " << value.getType()
               << " must both be [batch, kv_seq, hidden] or "
                  "both [batch, num_heads, kv_seq, head_size]";
      }
    }
    q3 = query;
  } else {
    return node.error() << "query must be [batch, seq, hidden] or packed QKV "
                           "[batch, seq, num_heads, 3, head_size], got "
                        << query.getType();
  }
  for (Value x : {k3, v3, k, v})
    if (x && elemOf(x) != elem)
      return node.error() << "key and value must have the query's element "
                             "type";
  if (node.hasInput(3)) {
    // The input projections' bias [Dq + Dk + Dv].
    if (!k3)
      return node.error() << "a bias with key and value in head layout "
                             "[batch, num_heads, kv_seq, head_size] is not "
                             "supported";
    Value bias = node.input(3);
    if (!bias)
      return failure();
    int64_t dq = shapeOf(q3)[2], dk = shapeOf(k3)[2], dv = shapeOf(v3)[2];
    if (shapeOf(bias) != ArrayRef<int64_t>{dq + dk + dv} ||
        elemOf(bias) != elem)
      return node.error() << "bias " << bias.getType() << " is not ["
                          << dq + dk + dv << "] (q, k and v widths)";
    q3 = buildAddF(b, loc, q3, buildSlice(b, loc, bias, {0}, {dq}));
    k3 = buildAddF(b, loc, k3, buildSlice(b, loc, bias, {dq}, {dk}));
    v3 = buildAddF(b, loc, v3, buildSlice(b, loc, bias, {dq + dk}, {dv}));
  }
  for (Value x : {q3, k3, v3})
    if (x && shapeOf(x)[2] % heads)
      return node.error() << "hidden size " << shapeOf(x)[2]
                          << " does not divide into num_heads = " << heads;
  Value q = toHeads(b, loc, q3, heads);
  if (k3) {
    k = toHeads(b, loc, k3, heads);
    v = toHeads(b, loc, v3, heads);
  }
  ArrayRef<int64_t> q4 = shapeOf(q), k4 = shapeOf(k), v4 = shapeOf(v);
  if (k4[0] != q4[0] || v4[0] != q4[0] || k4[1] != heads || v4[1] != heads ||
      k4[3] != q4[3] || v4[2] != k4[2])
    return node.error() << "query, key and value do not agree: heads "
                        << q.getType() << ", " << k.getType() << ", "
                        << v.getType();
  if (node.hasInput(6) != node.hasInput(7))
    return node.error() << "past_key and past_value come together";
  if (node.hasInput(6)) {
    Value pastK = node.input(6), pastV = node.input(7);
    if (!pastK || !pastV || !(k = withPast(node, pastK, k, "past_key")) ||
        !(v = withPast(node, pastV, v, "past_value")))
      return failure();
  }
  if (node.hasOutput(1))
    node.setOutput(1, k);
  if (node.hasOutput(2))
    node.setOutput(2, v);
  int64_t batch = q4[0], seq = q4[2], total = shapeOf(k)[2];
  Value bias;
  if (node.hasInput(4)) {
    Value m = node.input(4);
    if (!m)
      return failure();
    bias = keyPaddingBias(node, m, batch, seq, total, elem,
                          node.getFloat("mask_filter_value", -10000.0f),
                          "key_padding_mask");
    if (!bias)
      return failure();
  }
  if (node.hasInput(5)) {
    Value extra = attentionBias(node, 5, batch, heads, seq, total, elem);
    if (!extra)
      return failure();
    bias = accumulate(b, loc, bias, extra);
  }
  return attendInto(node, q, k, v, bias, node.getFloat("scale", 0),
                    node.getInt("unidirectional", 0));
}

LogicalResult importGroupQueryAttention(NodeContext &node) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  int64_t hq = node.getInt("num_heads", 0),
          hkv = node.getInt("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv)
    return node.error() << "num_heads (" << hq
                        << ") must be a positive multiple of kv_num_heads ("
                        << hkv << ")";
  static const std::pair<size_t, const char *> unsupportedInputs[] = {
      {11, "head_sink"},
      {12, "k_scale"},
      {13, "v_scale"},
      {14, "q_norm_weight"},
      {15, "k_norm_weight"}};
  for (auto [index, name] : unsupportedInputs)
    if (node.hasInput(index))
      return node.error() << "input '" << name << "' is not supported";
  for (const char *name :
       {"smooth_softmax", "qk_output", "sliding_window_cache"})
    if (node.getInt(name, 0) != 0)
      return node.error() << "attribute '" << name << "' is not supported";
  if (node.getFloat("softcap", 0.0f) != 0.0f)
    return node.error() << "attribute 'softcap' is not supported";
  for (const char *name : {"k_quant_type", "v_quant_type"})
    if (node.getString(name, "NONE") != "NONE")
      return node.error() << "attribute '" << name
                          << "' (a quantized KV cache) is not supported";
  if (node.hasOutput(3))
    return node.error() << "output 'output_qk' is not supported";
  Value query = node.input(0);
  if (!query)
    return failure();
  Type elem = elemOf(query);
  ArrayRef<int64_t> qs = shapeOf(query);
  if (!isa<FloatType>(elem) || qs.size() != 3)
    return node.error() << "query must be a float [batch, seq, hidden], got "
                        << query.getType();
  if (hq > qs[2])
    return node.error() << "num_heads " << hq << " exceeds the hidden size "
                        << qs[2];
  int64_t batch = qs[0], seq = qs[1];
  Value q3, k3, v3;
  int64_t d;
  if (!node.hasInput(1) && !node.hasInput(2)) {
    // Packed [Q | K | V] of widths Hq*D, Hkv*D, Hkv*D.
    if (qs[2] % (hq + 2 * hkv))
      return node.error() << "packed QKV width " << qs[2]
                          << " is not (num_heads + 2 * kv_num_heads) * "
                             "head_size";
    d = qs[2] / (hq + 2 * hkv);
    q3 = lastDimSlice(b, loc, query, 0, hq * d);
    k3 = lastDimSlice(b, loc, query, hq * d, hkv * d);
    v3 = lastDimSlice(b, loc, query, (hq + hkv) * d, hkv * d);
  } else {
    if (!node.hasInput(1) || !node.hasInput(2))
      return node.error() << "key and value come together";
    q3 = query;
    k3 = node.input(1);
    v3 = node.input(2);
    if (!k3 || !v3)
      return failure();
    if (qs[2] % hq)
      return node.error() << "hidden size " << qs[2]
                          << " does not divide into num_heads = " << hq;
    d = qs[2] / hq;
    for (Value x : {k3, v3})
      if (shapeOf(x) != ArrayRef<int64_t>{batch, seq, hkv * d} ||
          elemOf(x) != elem)
        return node.error() << "key and value must be [" << batch << ", " << seq
                            << ", kv_num_heads * head_size = " << hkv * d
                            << "] of the query's type, got " << x.getType();
  }
  // Caches and lengths: only the uniform case, in which the new keys follow
  // a full past of P = total - S positions in every batch entry.
  if (node.hasInput(3) != node.hasInput(4))
    return node.error() << "past_key and past_value come together";
  int64_t past = 0;
  if (node.hasInput(3)) {
    ArrayRef<int64_t> ps = node.inputType(3).getShape();
    past = ps.size() == 4 ? ps[2] : 0;
  }
  const ConstTensor *seqlens = node.constInput(5);
  const ConstTensor *totalLen = node.constInput(6);
  if (!seqlens || !totalLen || totalLen->numElements() != 1)
    return node.error() << "seqlens_k and total_sequence_length must be "
                           "constants";
  int64_t total = totalLen->getInt(0);
  if (total != past + seq)
    return node.error() << "total_sequence_length " << total << " is not past ("
                        << past << ") + new (" << seq
                        << "): past and present sharing one buffer is not "
                           "supported";
  if (seqlens->numElements() != batch)
    return node.error() << "seqlens_k has " << seqlens->numElements()
                        << " values for a batch of " << batch;
  for (int64_t i = 0; i < batch; ++i)
    if (seqlens->getInt(i) != total - 1)
      return node.error() << "seqlens_k[" << i << "] = " << seqlens->getInt(i)
                          << " differs from total_sequence_length - 1 = "
                          << total - 1 << ": ragged batches are not supported";
  if (node.getInt("do_rotary", 0)) {
    if (!node.hasInput(7) || !node.hasInput(8))
      return node.error() << "do_rotary needs cos_cache and sin_cache";
    Value cosCache = node.input(7), sinCache = node.input(8);
    if (!cosCache || !sinCache)
      return failure();
    ArrayRef<int64_t> cs = shapeOf(cosCache);
    if (cs.size() != 2 || 2 * cs[1] > d)
      return node.error() << "cos_cache " << cosCache.getType()
                          << " is not [max_position, rotary_dim / 2] with "
                             "rotary_dim <= head_size = "
                          << d;
    Value positions;
    if (node.hasInput(9)) {
      if (!(positions = node.input(9)))
        return failure();
      if (shapeOf(positions) != ArrayRef<int64_t>{batch, seq})
        return node.error() << "position_ids " << positions.getType()
                            << " is not [batch, seq]";
    } else {
      // Positions continue after the past.
      std::vector<int64_t> ids;
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t si = 0; si < seq; ++si)
          ids.push_back(past + si);
      positions =
          materializeConstant(b, loc, ConstTensor::ofInts(ids, {batch, seq}));
    }
    bool interleaved = node.getInt("rotary_interleaved", 0);
    FailureOr<Value> rq = buildRotary(node, q3, cosCache, sinCache, positions,
                                      hq, interleaved, 2 * cs[1]);
    if (failed(rq))
      return failure();
    FailureOr<Value> rk = buildRotary(node, k3, cosCache, sinCache, positions,
                                      hkv, interleaved, 2 * cs[1]);
    if (failed(rk))
      return failure();
    q3 = *rq;
    k3 = *rk;
  }
  Value q = toHeads(b, loc, q3, hq), k = toHeads(b, loc, k3, hkv),
        v = toHeads(b, loc, v3, hkv);
  if (node.hasInput(3)) {
    Value pastK = node.input(3), pastV = node.input(4);
    if (!pastK || !pastV || !(k = withPast(node, pastK, k, "past_key")) ||
        !(v = withPast(node, pastV, v, "past_value")))
      return failure();
  }
  if (node.hasOutput(1))
    node.setOutput(1, k);
  if (node.hasOutput(2))
    node.setOutput(2, v);
  bool causal = node.getInt("causal", 1);
  int64_t window = node.getInt("local_window_size", -1);
  Value bias;
  if (window == 0 || window < -1)
    return node.error() << "local_window_size " << window
                        << " must be positive, or -1 for none";
  if (window > 0) {
    if (!causal)
      return node.error() << "local_window_size needs causal = 1";
    // Query i (at absolute position past + i) sees the `window` keys up to
    // and including its own: past + i - window < j (and j <= past + i from
    // causal), as ONNX Runtime 1.30 computes it (releases before counted
    // window + 1 keys).
    double inf = std::numeric_limits<double>::infinity();
    std::vector<double> values;
    values.reserve(seq * total);
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < total; ++j)
        values.push_back(j > past + i - window ? 0.0 : -inf);
    bias = materializeConstant(
        b, loc,
        ConstTensor::ofFloats(values, {1, 1, seq, total}, toDType(elem)));
  }
  if (node.hasInput(10)) {
    Value extra = attentionBias(node, 10, batch, hq, seq, total, elem);
    if (!extra)
      return failure();
    bias = accumulate(b, loc, bias, extra);
  }
  return attendInto(node, q, k, v, bias, node.getFloat("scale", 0), causal);
}

} // namespace

void stpar::onnximport::registerContribAttentionHandlers(HandlerRegistry &r) {
  r.add("com.microsoft", "Attention", 1, importAttention);
  r.add("com.microsoft", "MultiHeadAttention", 1, importMultiHeadAttention);
  r.add("com.microsoft", "GroupQueryAttention", 1, importGroupQueryAttention);
}
