//===- Rotary.cpp - RotaryEmbedding -----------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// ONNX RotaryEmbedding-23 and ONNX Runtime's com.microsoft RotaryEmbedding
// (rotary position embedding, Su et al. 2021, as in Llama): decomposed into
// gathers of the cos/sin caches, slices, elementwise multiply-adds and
// concatenations, following the operator's function body:
//
//   X' = [B, S, N, D]   (4-D input [B, N, S, D] transposed; 3-D input
//                        [B, S, N*D] reshaped with num_heads)
//   cos, sin = cache[position_ids] (or the caches themselves, [B, S, R/2]),
//              sliced to R/2 and unsqueezed to [B, S, 1, R/2]
//   x1, x2 = halves of X'[..., :R]  (interleaved: even / odd elements)
//   real = cos x1 - sin x2,  imag = sin x1 + cos x2
//   Y' = concat(real, imag) (interleaved: pairs (real_i, imag_i)),
//        then X'[..., R:] appended; Y = Y' back in the input's layout.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

} // namespace

FailureOr<Value> stpar::onnximport::buildRotary(NodeContext &node, Value x,
                                                Value cosCache, Value sinCache,
                                                Value positions, int64_t heads,
                                                bool interleaved,
                                                int64_t rotary) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  auto type = cast<RankedTensorType>(x.getType());
  Type elem = type.getElementType();
  int64_t rank = type.getRank();
  // X' = [B, S, N, D].
  Value xin;
  if (rank == 4) {
    xin = buildTranspose(b, loc, x, {0, 2, 1, 3});
  } else if (rank == 3) {
    if (heads <= 0 || type.getDimSize(2) % heads != 0)
      return node.error() << "a 3-D input needs 'num_heads' dividing its "
                             "hidden size "
                          << type.getDimSize(2);
    xin = buildReshape(b, loc, x,
                       {type.getDimSize(0), type.getDimSize(1), heads,
                        type.getDimSize(2) / heads});
  } else {
    return node.error() << "input must have rank 3 or 4, got " << x.getType();
  }
  SmallVector<int64_t> s(shapeOf(xin));
  int64_t batch = s[0], seq = s[1], n = s[2], headSize = s[3];
  if (rotary == 0)
    rotary = headSize;
  if (rotary < 0 || rotary > headSize || rotary % 2 != 0)
    return node.error() << "rotary_embedding_dim " << rotary
                        << " must be even and at most the head size "
                        << headSize;
  int64_t half = rotary / 2;
  // cos/sin: [B, S, R/2] -> [B, S, 1, R/2].
  auto prepare = [&](Value cache) -> Value {
    if (positions)
      cache = buildGather(b, loc, cache, positions, 0);
    ArrayRef<int64_t> cs = shapeOf(cache);
    if (cs.size() != 3 || cs[0] != batch || cs[1] != seq || cs[2] < half) {
      node.error() << "cos/sin cache " << cache.getType()
                   << " does not give [batch, seq, >= rotary_dim/2] = ["
                   << batch << ", " << seq << ", " << half << "]";
      return {};
    }
    cache = buildSlice(b, loc, cache, {0, 0, 0}, {batch, seq, half});
    return buildReshape(b, loc, cache, {batch, seq, 1, half});
  };
  if (positions && shapeOf(cosCache).size() != 2)
    return node.error() << "with position_ids the caches must be 2-D "
                           "[max_position, rotary_dim/2]";
  Value cos = prepare(cosCache), sin = prepare(sinCache);
  if (!cos || !sin)
    return failure();
  Value toRotate = buildSlice(b, loc, xin, {0, 0, 0, 0}, {batch, seq, n, rotary});
  Value x1, x2;
  if (interleaved) {
    x1 = buildSlice(b, loc, toRotate, {0, 0, 0, 0}, {batch, seq, n, half},
                    {1, 1, 1, 2});
    x2 = buildSlice(b, loc, toRotate, {0, 0, 0, 1}, {batch, seq, n, half},
                    {1, 1, 1, 2});
  } else {
    x1 = buildSlice(b, loc, toRotate, {0, 0, 0, 0}, {batch, seq, n, half});
    x2 = buildSlice(b, loc, toRotate, {0, 0, 0, half}, {batch, seq, n, half});
  }
  auto rotate = [&](bool imaginary) {
    return buildElementwise(
        b, loc, {cos, sin, x1, x2}, elem,
        [imaginary](OpBuilder &nb, Location l, ValueRange a) -> Value {
          if (!imaginary) {
            Value c = arith::MulFOp::create(nb, l, a[0], a[2]);
            Value d = arith::MulFOp::create(nb, l, a[1], a[3]);
            return arith::SubFOp::create(nb, l, c, d);
          }
          Value c = arith::MulFOp::create(nb, l, a[1], a[2]);
          Value d = arith::MulFOp::create(nb, l, a[0], a[3]);
          return arith::AddFOp::create(nb, l, c, d);
        });
  };
  Value real = rotate(false), imag = rotate(true);
  Value rotated;
  if (interleaved) {
    SmallVector<int64_t> pairShape = {batch, seq, n, half, 1};
    rotated = buildConcat(b, loc,
                          {buildReshape(b, loc, real, pairShape),
                           buildReshape(b, loc, imag, pairShape)},
                          4);
    rotated = buildReshape(b, loc, rotated, {batch, seq, n, rotary});
  } else {
    rotated = buildConcat(b, loc, {real, imag}, 3);
  }
  if (rotary < headSize)
    rotated = buildConcat(
        b, loc,
        {rotated, buildSlice(b, loc, xin, {0, 0, 0, rotary},
                             {batch, seq, n, headSize - rotary})},
        3);
  return rank == 4 ? buildTranspose(b, loc, rotated, {0, 2, 1, 3})
                   : buildReshape(b, loc, rotated, type.getShape());
}

namespace {

LogicalResult setRotated(NodeContext &node, FailureOr<Value> y) {
  if (failed(y))
    return failure();
  node.setOutput(0, *y);
  return success();
}

LogicalResult importRotaryEmbedding(NodeContext &node) {
  Value x = node.input(0), cosCache = node.input(1), sinCache = node.input(2);
  if (!x || !cosCache || !sinCache)
    return failure();
  Value positions;
  if (node.hasInput(3) && !(positions = node.input(3)))
    return failure();
  return setRotated(node, buildRotary(node, x, cosCache, sinCache, positions,
                                      node.getInt("num_heads", 0),
                                      node.getInt("interleaved", 0),
                                      node.getInt("rotary_embedding_dim", 0)));
}

/// com.microsoft RotaryEmbedding (ONNX Runtime's contrib op): inputs
/// (input, position_ids, cos_cache, sin_cache); position_ids is [B, S] or
/// one offset [1] (positions offset + 0..S-1); with num_heads = 0 a 3-D
/// input's head size is the caches' width x 2.
LogicalResult importContribRotaryEmbedding(NodeContext &node) {
  Value x = node.input(0), cosCache = node.input(2), sinCache = node.input(3);
  if (!x || !cosCache || !sinCache)
    return failure();
  if (node.getInt("is_packed_batching", 0))
    return node.error() << "is_packed_batching=1 is not supported";
  if (node.getFloat("scale", 1.0f) != 1.0f)
    return node.error() << "scale other than 1 is not supported";
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getRank() != 3 && type.getRank() != 4)
    return node.error() << "input must have rank 3 or 4, got " << x.getType();
  int64_t seq = type.getDimSize(type.getRank() == 4 ? 2 : 1);
  int64_t batch = type.getDimSize(0);
  int64_t heads = node.getInt("num_heads", 0);
  int64_t rotary = node.getInt("rotary_embedding_dim", 0);
  if (type.getRank() == 3 && heads == 0) {
    ArrayRef<int64_t> cs = shapeOf(cosCache);
    int64_t headSize = rotary ? rotary : (cs.size() == 2 ? 2 * cs[1] : 0);
    if (headSize <= 0 || type.getDimSize(2) % headSize)
      return node.error() << "cannot infer the head count of " << x.getType()
                          << " from the caches " << cosCache.getType();
    heads = type.getDimSize(2) / headSize;
  }
  Value positions = node.input(1);
  if (!positions)
    return failure();
  ArrayRef<int64_t> ps = shapeOf(positions);
  if (ps.size() == 1 && ps[0] == 1) {
    const ConstTensor *offset = node.constInput(1);
    if (!offset)
      return node.error() << "a position offset [1] must be a constant";
    int64_t start = offset->getInt(0);
    std::vector<int64_t> ids;
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t si = 0; si < seq; ++si)
        ids.push_back(start + si);
    positions = materializeConstant(node.b(), node.loc(),
                                    ConstTensor::ofInts(ids, {batch, seq}));
  } else if (ps.size() != 2 || ps[0] != batch || ps[1] != seq) {
    return node.error() << "position_ids " << positions.getType()
                        << " is neither [batch, seq] nor one offset [1]";
  }
  return setRotated(node,
                    buildRotary(node, x, cosCache, sinCache, positions, heads,
                                node.getInt("interleaved", 0), rotary));
}

} // namespace

void stpar::onnximport::registerRotaryHandlers(HandlerRegistry &r) {
  r.add("", "RotaryEmbedding", 23, importRotaryEmbedding);
  r.add("com.microsoft", "RotaryEmbedding", 1, importContribRotaryEmbedding);
}
