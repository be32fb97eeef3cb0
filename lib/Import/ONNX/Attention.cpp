//===- Attention.cpp - ONNX Attention-23/24 ---------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The standard `Attention` operator (ONNX opset 23, 24), decomposed into the
// importer's usual ops so every variant the operator allows keeps its exact
// semantics: 3-D inputs (split into heads by q_num_heads / kv_num_heads),
// past key/value caches (concatenated; present_key / present_value
// outputs), float or bool masks of rank 2-4 (padded to the total key length),
// is_causal (offset by the past length, or per batch by nonpad_kv_seqlen),
// grouped-query heads, scale, softcap (before the mask), softmax_precision,
// and the qk_matmul_output of each qk_matmul_output_mode. Rows whose keys
// are all masked give zero probabilities (and a zero output), as the ONNX
// reference does. The contractions are the importer's MatMul generics, so
// the search partitions them like any other.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace stpar::onnximport;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// [B, S, H*D] -> [B, H, S, D].
Value splitHeads(OpBuilder &b, Location loc, Value x, int64_t heads) {
  auto t = typeOf(x);
  int64_t bs = t.getDimSize(0), s = t.getDimSize(1),
          d = t.getDimSize(2) / heads;
  return buildTranspose(b, loc, buildReshape(b, loc, x, {bs, s, heads, d}),
                        {0, 2, 1, 3});
}

/// Softmax over the last dim in which a row whose maximum is -inf (every
/// key masked) gives zeros instead of NaN.
Value buildSafeSoftmax(OpBuilder &b, Location loc, Value x) {
  auto t = typeOf(x);
  Type elem = t.getElementType();
  int64_t last = t.getRank() - 1;
  Value m = buildReduce(b, loc, x, {last}, /*keepDims=*/true, Combine::Max);
  double inf = std::numeric_limits<double>::infinity();
  Value e = buildElementwise(
      b, loc, ValueRange{x, m}, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value masked =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[1],
                                  scalarConstant(nb, l, elem, -inf));
        Value p = math::ExpOp::create(nb, l,
                                      arith::SubFOp::create(nb, l, a[0], a[1]));
        return arith::SelectOp::create(nb, l, masked,
                                       scalarConstant(nb, l, elem, 0.0), p);
      });
  Value s = buildReduce(b, loc, e, {last}, /*keepDims=*/true, Combine::Add);
  return buildElementwise(
      b, loc, ValueRange{e, s}, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value zero = scalarConstant(nb, l, elem, 0.0);
        Value empty =
            arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a[1], zero);
        return arith::SelectOp::create(
            nb, l, empty, zero, arith::DivFOp::create(nb, l, a[0], a[1]));
      });
}

/// The additive causal bias [Sq, Skv]: 0 where key j <= query i + offset,
/// -inf elsewhere.
Value buildCausalBias(OpBuilder &b, Location loc, int64_t sq, int64_t skv,
                      int64_t offset, Type elem) {
  double inf = std::numeric_limits<double>::infinity();
  Value init =
      tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{sq, skv}, elem);
  MLIRContext *ctx = b.getContext();
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{}, ValueRange{init},
      SmallVector<AffineMap>{AffineMap::getMultiDimIdentityMap(2, ctx)},
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [&](OpBuilder &nb, Location l, ValueRange) {
        Type i64 = nb.getI64Type();
        Value i = arith::IndexCastOp::create(nb, l, i64,
                                             linalg::IndexOp::create(nb, l, 0));
        Value j = arith::IndexCastOp::create(nb, l, i64,
                                             linalg::IndexOp::create(nb, l, 1));
        Value limit = arith::AddIOp::create(
            nb, l, i, scalarConstant(nb, l, i64, double(offset)));
        Value allowed =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, j, limit);
        Value r = arith::SelectOp::create(nb, l, allowed,
                                          scalarConstant(nb, l, elem, 0.0),
                                          scalarConstant(nb, l, elem, -inf));
        linalg::YieldOp::create(nb, l, r);
      });
  return generic.getResult(0);
}

LogicalResult importAttention(NodeContext &node) {
  Value q = node.input(0), k = node.input(1), v = node.input(2);
  if (!q || !k || !v)
    return failure();
  OpBuilder &b = node.b();
  Location loc = node.loc();
  int64_t rank = typeOf(q).getRank();
  if (typeOf(k).getRank() != rank || typeOf(v).getRank() != rank ||
      (rank != 3 && rank != 4))
    return node.error() << "Q, K and V must all be 3-D or all 4-D, got "
                        << q.getType() << ", " << k.getType() << ", "
                        << v.getType();
  Type elem = typeOf(q).getElementType();
  if (!isa<FloatType>(elem) || typeOf(k).getElementType() != elem ||
      typeOf(v).getElementType() != elem)
    return node.error() << "Q, K and V must have one float element type";
  if (rank == 3) {
    int64_t hq = node.getInt("q_num_heads", 0);
    int64_t hkv = node.getInt("kv_num_heads", 0);
    if (hq < 1 || hkv < 1)
      return node.error() << "3-D inputs need q_num_heads and kv_num_heads";
    if (typeOf(q).getDimSize(2) % hq || typeOf(k).getDimSize(2) % hkv ||
        typeOf(v).getDimSize(2) % hkv)
      return node.error() << "the hidden sizes do not divide into " << hq
                          << " query / " << hkv << " key-value heads";
    q = splitHeads(b, loc, q, hq);
    k = splitHeads(b, loc, k, hkv);
    v = splitHeads(b, loc, v, hkv);
  }
  auto qt = typeOf(q), kt = typeOf(k), vt = typeOf(v);
  int64_t batch = qt.getDimSize(0), hq = qt.getDimSize(1),
          sq = qt.getDimSize(2), d = qt.getDimSize(3);
  int64_t hkv = kt.getDimSize(1);
  if (kt.getDimSize(0) != batch || vt.getDimSize(0) != batch ||
      kt.getDimSize(3) != d || vt.getDimSize(1) != hkv ||
      vt.getDimSize(2) != kt.getDimSize(2))
    return node.error() << "Q, K and V shapes do not agree: " << q.getType()
                        << ", " << k.getType() << ", " << v.getType();
  if (hq % hkv)
    return node.error() << hq << " query heads are not a multiple of " << hkv
                        << " key-value heads";
  if (rank == 4 && node.getInt("q_num_heads", hq) != hq)
    return node.error() << "q_num_heads does not match Q's head dim";

  // Caches: present = concat(past, new) along the sequence.
  int64_t past = 0;
  for (size_t i : {size_t(4), size_t(5)}) {
    if (!node.hasInput(i))
      continue;
    Value cache = node.input(i);
    if (!cache)
      return failure();
    Value &target = i == 4 ? k : v;
    auto ct = typeOf(cache), tt = typeOf(target);
    if (ct.getRank() != 4 || ct.getDimSize(0) != batch ||
        ct.getDimSize(1) != hkv || ct.getDimSize(3) != tt.getDimSize(3) ||
        ct.getElementType() != elem)
      return node.error() << (i == 4 ? "past_key" : "past_value") << " "
                          << cache.getType() << " does not match "
                          << target.getType();
    if (i == 4)
      past = ct.getDimSize(2);
    else if (ct.getDimSize(2) != past)
      return node.error() << "past_key and past_value lengths differ";
    target = buildConcat(b, loc, ValueRange{cache, target}, 2);
  }
  if (node.hasInput(4) != node.hasInput(5))
    return node.error() << "past_key and past_value come together";
  int64_t skv = typeOf(k).getDimSize(2), dv = typeOf(v).getDimSize(3);

  double inf = std::numeric_limits<double>::infinity();
  // The additive bias over [.., Sq, Skv].
  Value bias;
  if (node.hasInput(3)) {
    Value mask = node.input(3);
    if (!mask)
      return failure();
    auto mt = typeOf(mask);
    bool isBool = mt.getElementType().isInteger(1);
    if (!isBool && mt.getElementType() != elem)
      return node.error() << "attn_mask must be bool or Q's type, got "
                          << mask.getType();
    if (mt.getRank() < 2 || mt.getRank() > 4 ||
        mt.getDimSize(mt.getRank() - 1) > skv)
      return node.error() << "attn_mask " << mask.getType()
                          << " does not fit scores of key length " << skv;
    int64_t width = mt.getDimSize(mt.getRank() - 1);
    if (width < skv) {
      // Keys past the mask are masked out.
      SmallVector<int64_t> padShape(mt.getShape());
      padShape.back() = skv - width;
      Value pad = buildFilled(b, loc, padShape, mt.getElementType(),
                              isBool ? 0.0 : -inf);
      mask = buildConcat(b, loc, ValueRange{mask, pad}, mt.getRank() - 1);
    }
    if (isBool)
      mask = buildElementwise(
          b, loc, ValueRange{mask}, elem,
          [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
            return arith::SelectOp::create(nb, l, a[0],
                                           scalarConstant(nb, l, elem, 0.0),
                                           scalarConstant(nb, l, elem, -inf));
          });
    bias = mask;
  }
  bool causal = node.getInt("is_causal", 0);
  if (node.hasInput(6)) {
    // nonpad_kv_seqlen (opset 24): per batch, keys at or past the length
    // are padding; with is_causal and no past, query i of batch b sees keys
    // j <= i + length[b] - Sq. A host constant bias [B, 1, Sq, Skv].
    const ConstTensor *lengths = node.constInput(6);
    if (!lengths)
      return node.error() << "nonpad_kv_seqlen must be a constant";
    if (lengths->numElements() != batch)
      return node.error() << "nonpad_kv_seqlen has " << lengths->numElements()
                          << " values for a batch of " << batch;
    std::vector<double> values;
    values.reserve(batch * sq * skv);
    for (int64_t bi = 0; bi < batch; ++bi) {
      int64_t n = lengths->getInt(bi);
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < skv; ++j) {
          bool ok = j < n;
          if (causal)
            ok &= past ? j <= i + past : j <= i + n - sq;
          values.push_back(ok ? 0.0 : -inf);
        }
    }
    Value pad = materializeConstant(
        b, loc,
        ConstTensor::ofFloats(values, {batch, 1, sq, skv}, toDType(elem)));
    bias = bias ? buildAddF(b, loc, bias, pad) : pad;
  } else if (causal) {
    Value c = buildCausalBias(b, loc, sq, skv, past, elem);
    bias = bias ? buildAddF(b, loc, bias, c) : c;
  }

  // Scores [B, Hq, Sq, Skv]: query heads grouped over their key-value head
  // (head h reads key-value head h / (Hq / Hkv)).
  int64_t rep = hq / hkv;
  Value qg = buildReshape(b, loc, q, {batch, hkv, rep, sq, d});
  Value kT = buildReshape(b, loc, buildTranspose(b, loc, k, {0, 1, 3, 2}),
                          {batch, hkv, 1, d, skv});
  FailureOr<Value> qk = buildMatMul(node, qg, kT);
  if (failed(qk))
    return failure();
  Value scores = buildReshape(b, loc, *qk, {batch, hq, sq, skv});
  float scaleAttr = node.getFloat("scale", 0.0f);
  double scale =
      scaleAttr != 0.0f ? double(scaleAttr) : 1.0 / std::sqrt(double(d));
  scores =
      buildElementwise(b, loc, ValueRange{scores}, elem,
                       [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                         return arith::MulFOp::create(
                             nb, l, a[0], scalarConstant(nb, l, elem, scale));
                       });
  double softcap = node.getFloat("softcap", 0.0f);
  if (softcap > 0)
    scores = buildElementwise(
        b, loc, ValueRange{scores}, elem,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value c = scalarConstant(nb, l, elem, softcap);
          return arith::MulFOp::create(
              nb, l, c,
              math::TanhOp::create(nb, l,
                                   arith::DivFOp::create(nb, l, a[0], c)));
        });
  Value withBias = bias ? buildAddF(b, loc, scores, bias) : scores;
  int64_t mode = node.getInt("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return node.error() << "qk_matmul_output_mode " << mode
                        << " is not 0, 1, 2 or 3";
  // The softmax in softmax_precision when given (converted back after).
  Value logits = withBias;
  if (node.attr("softmax_precision")) {
    Type precision =
        convertDType(node.ctx(), node.getInt("softmax_precision", 1));
    if (!precision || !isa<FloatType>(precision))
      return node.error() << "softmax_precision must be a float type";
    logits = convertElement(b, loc, logits, precision);
  }
  Value probs = buildSafeSoftmax(b, loc, logits);
  probs = convertElement(b, loc, probs, elem);

  Value pg = buildReshape(b, loc, probs, {batch, hkv, rep, sq, skv});
  Value vg = buildReshape(b, loc, v, {batch, hkv, 1, skv, dv});
  FailureOr<Value> out = buildMatMul(node, pg, vg);
  if (failed(out))
    return failure();
  Value y = buildReshape(b, loc, *out, {batch, hq, sq, dv});
  if (rank == 3)
    y = buildReshape(b, loc, buildTranspose(b, loc, y, {0, 2, 1, 3}),
                     {batch, sq, hq * dv});
  node.setOutput(0, y);
  if (node.hasOutput(1))
    node.setOutput(1, k);
  if (node.hasOutput(2))
    node.setOutput(2, v);
  if (node.hasOutput(3)) {
    // As the ONNX reference computes it: 0 the scaled (and softcapped)
    // product, 1 the same, 2 with the mask added, 3 the softmax.
    Value qkOut = mode == 2 ? withBias : mode == 3 ? probs : scores;
    node.setOutput(3, qkOut);
  }
  return success();
}

} // namespace

void stpar::onnximport::registerAttentionHandlers(HandlerRegistry &r) {
  r.add("", "Attention", 23, importAttention);
}
