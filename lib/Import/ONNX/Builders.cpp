//===- Builders.cpp - IR-building helpers of the ONNX importer --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Builds the upstream ops ONNX ops map to: elementwise and reduction
// `linalg.generic`s with numpy broadcasting, matmuls as generics with
// explicit batch/reduction loops (so later stages read their iteration
// space from the indexing maps), reshapes, slices, gathers and casts.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/ReshapeOpsUtils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace stpar::onnximport;

Type stpar::onnximport::convertDType(MLIRContext *ctx, int32_t dtype) {
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
    return Float32Type::get(ctx);
  case onnx::TensorProto::DOUBLE:
    return Float64Type::get(ctx);
  case onnx::TensorProto::FLOAT16:
    return Float16Type::get(ctx);
  case onnx::TensorProto::BFLOAT16:
    return BFloat16Type::get(ctx);
  // Unsigned integers are held signless (MLIR's arith is signless); their
  // values stay below 2^63 / 2^31 in every model this handles.
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return IntegerType::get(ctx, 64);
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return IntegerType::get(ctx, 32);
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return IntegerType::get(ctx, 16);
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
    return IntegerType::get(ctx, 8);
  case onnx::TensorProto::BOOL:
    return IntegerType::get(ctx, 1);
  default:
    return {};
  }
}

bool stpar::onnximport::isUnsignedDType(int32_t dtype) {
  return dtype == onnx::TensorProto::UINT8 ||
         dtype == onnx::TensorProto::UINT16 ||
         dtype == onnx::TensorProto::UINT32 ||
         dtype == onnx::TensorProto::UINT64;
}

int32_t stpar::onnximport::toDType(Type type) {
  if (type.isF32())
    return onnx::TensorProto::FLOAT;
  if (type.isF64())
    return onnx::TensorProto::DOUBLE;
  if (type.isF16())
    return onnx::TensorProto::FLOAT16;
  if (type.isBF16())
    return onnx::TensorProto::BFLOAT16;
  if (type.isInteger(64))
    return onnx::TensorProto::INT64;
  if (type.isInteger(32))
    return onnx::TensorProto::INT32;
  if (type.isInteger(16))
    return onnx::TensorProto::INT16;
  if (type.isInteger(8))
    return onnx::TensorProto::INT8;
  if (type.isInteger(1))
    return onnx::TensorProto::BOOL;
  return onnx::TensorProto::UNDEFINED;
}

std::optional<SmallVector<int64_t>>
stpar::onnximport::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value stpar::onnximport::scalarConstant(OpBuilder &b, Location loc, Type type,
                                        double value) {
  if (auto floatType = dyn_cast<FloatType>(type))
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(floatType, value));
  return arith::ConstantOp::create(
      b, loc, b.getIntegerAttr(type, saturatingToInt64(value)));
}

Value stpar::onnximport::materializeConstant(OpBuilder &b, Location loc,
                                             const ConstTensor &constant) {
  Type elem = convertDType(b.getContext(), constant.dtype);
  auto type = RankedTensorType::get(constant.shape, elem);
  DenseElementsAttr attr;
  if (auto floatType = dyn_cast<FloatType>(elem)) {
    SmallVector<APFloat> values;
    values.reserve(constant.numElements());
    for (double v : constant.floats) {
      APFloat f(v);
      bool lost = false;
      f.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      values.push_back(f);
    }
    attr = DenseElementsAttr::get(type, values);
  } else {
    unsigned width = elem.getIntOrFloatBitWidth();
    SmallVector<APInt> values;
    values.reserve(constant.numElements());
    for (int64_t v : constant.ints)
      values.push_back(width == 1 ? APInt(1, v != 0)
                                  : APInt(width, v, /*isSigned=*/true,
                                          /*implicitTrunc=*/true));
    attr = DenseElementsAttr::get(type, values);
  }
  return arith::ConstantOp::create(b, loc, attr);
}

/// Indexing map reading an input of `inShape` broadcast into a loop nest
/// over `outShape` (numpy rules: aligned on the right, size-1 dims read
/// element 0).
static AffineMap broadcastMap(MLIRContext *ctx, ArrayRef<int64_t> inShape,
                              ArrayRef<int64_t> outShape) {
  SmallVector<AffineExpr> exprs;
  size_t offset = outShape.size() - inShape.size();
  for (auto [i, dim] : llvm::enumerate(inShape)) {
    if (dim == 1 && outShape[offset + i] != 1)
      exprs.push_back(getAffineConstantExpr(0, ctx));
    else
      exprs.push_back(getAffineDimExpr(offset + i, ctx));
  }
  return AffineMap::get(outShape.size(), 0, exprs, ctx);
}

Value stpar::onnximport::buildElementwise(
    OpBuilder &b, Location loc, ValueRange inputs, Type resultElem,
    BodyFn body, std::optional<ArrayRef<int64_t>> outShape) {
  SmallVector<int64_t> shape;
  if (outShape) {
    shape.assign(outShape->begin(), outShape->end());
  } else {
    for (Value input : inputs) {
      auto inShape = cast<RankedTensorType>(input.getType()).getShape();
      std::optional<SmallVector<int64_t>> merged =
          broadcastShapes(shape, inShape);
      assert(merged && "callers check broadcast compatibility");
      shape = *merged;
    }
  }
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps;
  for (Value input : inputs)
    maps.push_back(broadcastMap(
        ctx, cast<RankedTensorType>(input.getType()).getShape(), shape));
  maps.push_back(AffineMap::getMultiDimIdentityMap(shape.size(), ctx));
  Value init = tensor::EmptyOp::create(b, loc, shape, resultElem);
  SmallVector<utils::IteratorType> iterators(shape.size(),
                                             utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, inputs, ValueRange{init}, maps,
      iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value result = body(nb, nloc, args.take_front(inputs.size()));
        linalg::YieldOp::create(nb, nloc, result);
      });
  return generic.getResult(0);
}

Value stpar::onnximport::buildAddF(OpBuilder &b, Location loc, Value x,
                                   Value y) {
  return buildElementwise(b, loc, ValueRange{x, y},
                          cast<RankedTensorType>(x.getType()).getElementType(),
                          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                            return arith::AddFOp::create(nb, l, a[0], a[1]);
                          });
}

Value stpar::onnximport::buildFilled(OpBuilder &b, Location loc,
                                     ArrayRef<int64_t> shape, Type elem,
                                     double value) {
  Value init = tensor::EmptyOp::create(b, loc, shape, elem);
  Value scalar = scalarConstant(b, loc, elem, value);
  return linalg::FillOp::create(b, loc, ValueRange{scalar}, ValueRange{init})
      .getResult(0);
}

Value stpar::onnximport::buildReshape(OpBuilder &b, Location loc, Value value,
                                      ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(value.getType());
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  if (type.getShape() == shape)
    return value;
  bool hasZero = llvm::is_contained(shape, 0) ||
                 llvm::is_contained(type.getShape(), 0);
  if (!hasZero && shape.size() < static_cast<size_t>(type.getRank())) {
    if (auto reassociation =
            getReassociationIndicesForCollapse(type.getShape(), shape))
      return tensor::CollapseShapeOp::create(b, loc, resultType, value,
                                             *reassociation);
  } else if (!hasZero && shape.size() > static_cast<size_t>(type.getRank())) {
    if (auto reassociation =
            getReassociationIndicesForCollapse(shape, type.getShape()))
      return tensor::ExpandShapeOp::create(b, loc, resultType, value,
                                           *reassociation);
  }
  ConstTensor shapeConst = ConstTensor::ofInts(
      shape, {static_cast<int64_t>(shape.size())});
  Value shapeValue = materializeConstant(b, loc, shapeConst);
  return tensor::ReshapeOp::create(b, loc, resultType, value, shapeValue);
}

Value stpar::onnximport::convertElement(OpBuilder &b, Location loc, Value value,
                                        Type elem) {
  auto type = cast<RankedTensorType>(value.getType());
  Type from = type.getElementType();
  if (from == elem)
    return value;
  return buildElementwise(
      b, loc, value, elem, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value x = args[0];
        auto fromFloat = dyn_cast<FloatType>(from);
        auto toFloat = dyn_cast<FloatType>(elem);
        if (fromFloat && toFloat) {
          if (toFloat.getWidth() > fromFloat.getWidth())
            return arith::ExtFOp::create(nb, nloc, elem, x).getResult();
          return arith::TruncFOp::create(nb, nloc, elem, x).getResult();
        }
        if (fromFloat) {
          if (elem.isInteger(1)) {
            Value zero = scalarConstant(nb, nloc, from, 0.0);
            return arith::CmpFOp::create(nb, nloc, arith::CmpFPredicate::UNE,
                                         x, zero)
                .getResult();
          }
          return arith::FPToSIOp::create(nb, nloc, elem, x).getResult();
        }
        if (toFloat) {
          if (from.isInteger(1))
            return arith::UIToFPOp::create(nb, nloc, elem, x).getResult();
          return arith::SIToFPOp::create(nb, nloc, elem, x).getResult();
        }
        unsigned fromWidth = from.getIntOrFloatBitWidth();
        unsigned toWidth = elem.getIntOrFloatBitWidth();
        if (toWidth == 1) {
          Value zero = scalarConstant(nb, nloc, from, 0.0);
          return arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::ne, x,
                                       zero)
              .getResult();
        }
        if (toWidth > fromWidth) {
          if (fromWidth == 1)
            return arith::ExtUIOp::create(nb, nloc, elem, x).getResult();
          return arith::ExtSIOp::create(nb, nloc, elem, x).getResult();
        }
        return arith::TruncIOp::create(nb, nloc, elem, x).getResult();
      });
}

FailureOr<Value> stpar::onnximport::buildMatMul(NodeContext &node, Value a,
                                                Value bv) {
  OpBuilder &b = node.b();
  Location loc = node.loc();
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(bv.getType());
  if (aType.getRank() < 1 || bType.getRank() < 1)
    return node.error() << "MatMul operands must have rank >= 1, got "
                        << aType << " and " << bType;
  // Promote 1-D operands as numpy does; the added dims are removed again.
  SmallVector<int64_t> aShape(aType.getShape()), bShape(bType.getShape());
  bool aVector = aShape.size() == 1, bVector = bShape.size() == 1;
  if (aVector) {
    aShape.insert(aShape.begin(), 1);
    a = buildReshape(b, loc, a, aShape);
  }
  if (bVector) {
    bShape.push_back(1);
    bv = buildReshape(b, loc, bv, bShape);
  }
  int64_t m = aShape[aShape.size() - 2], k = aShape.back();
  int64_t kb = bShape[bShape.size() - 2], n = bShape.back();
  if (k != kb)
    return node.error() << "MatMul contraction dims differ: " << aType
                        << " x " << bType;
  ArrayRef<int64_t> aBatch = ArrayRef<int64_t>(aShape).drop_back(2);
  ArrayRef<int64_t> bBatch = ArrayRef<int64_t>(bShape).drop_back(2);
  std::optional<SmallVector<int64_t>> batch = broadcastShapes(aBatch, bBatch);
  if (!batch)
    return node.error() << "MatMul batch dims do not broadcast: " << aType
                        << " x " << bType;
  MLIRContext *ctx = b.getContext();
  size_t nb = batch->size();
  // Loops: batch..., m, n, k (reduction).
  auto dim = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  auto operandMap = [&](ArrayRef<int64_t> opBatch, AffineExpr row,
                        AffineExpr col) {
    SmallVector<AffineExpr> exprs;
    size_t offset = nb - opBatch.size();
    for (auto [i, size] : llvm::enumerate(opBatch))
      exprs.push_back(size == 1 && (*batch)[offset + i] != 1
                          ? getAffineConstantExpr(0, ctx)
                          : dim(offset + i));
    exprs.push_back(row);
    exprs.push_back(col);
    return AffineMap::get(nb + 3, 0, exprs, ctx);
  };
  SmallVector<AffineMap> maps = {
      operandMap(aBatch, dim(nb), dim(nb + 2)),
      operandMap(bBatch, dim(nb + 2), dim(nb + 1)),
      operandMap(*batch, dim(nb), dim(nb + 1))};
  SmallVector<int64_t> outShape(*batch);
  outShape.push_back(m);
  outShape.push_back(n);
  Type elem = aType.getElementType();
  Value init = buildFilled(b, loc, outShape, elem, 0.0);
  SmallVector<utils::IteratorType> iterators(nb + 2,
                                             utils::IteratorType::parallel);
  iterators.push_back(utils::IteratorType::reduction);
  bool isFloat = isa<FloatType>(elem);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{a, bv}, ValueRange{init},
      maps, iterators, [&](OpBuilder &nb2, Location nloc, ValueRange args) {
        Value product, sum;
        if (isFloat) {
          product = arith::MulFOp::create(nb2, nloc, args[0], args[1]);
          sum = arith::AddFOp::create(nb2, nloc, args[2], product);
        } else {
          product = arith::MulIOp::create(nb2, nloc, args[0], args[1]);
          sum = arith::AddIOp::create(nb2, nloc, args[2], product);
        }
        linalg::YieldOp::create(nb2, nloc, sum);
      });
  Value result = generic.getResult(0);
  if (aVector || bVector) {
    SmallVector<int64_t> finalShape(*batch);
    if (!aVector)
      finalShape.push_back(m);
    if (!bVector)
      finalShape.push_back(n);
    result = buildReshape(b, loc, result, finalShape);
  }
  return result;
}

Value stpar::onnximport::buildTranspose(OpBuilder &b, Location loc,
                                        Value value, ArrayRef<int64_t> perm) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(type.getDimSize(p));
  Value init = tensor::EmptyOp::create(b, loc, shape, type.getElementType());
  return linalg::TransposeOp::create(b, loc, value, init, perm).getResult()[0];
}

Value stpar::onnximport::buildSlice(OpBuilder &b, Location loc, Value value,
                                    ArrayRef<int64_t> offsets,
                                    ArrayRef<int64_t> sizes,
                                    ArrayRef<int64_t> strides) {
  // An empty slice (e.g. of an empty past key/value cache) has no data to
  // read; tensor.extract_slice rejects offsets into zero-sized dims.
  if (llvm::is_contained(sizes, 0))
    return tensor::EmptyOp::create(
        b, loc, sizes, cast<RankedTensorType>(value.getType()).getElementType());
  SmallVector<int64_t> unit(offsets.size(), 1);
  if (strides.empty())
    strides = unit;
  MLIRContext *ctx = b.getContext();
  return tensor::ExtractSliceOp::create(
      b, loc, value, getAsIndexOpFoldResult(ctx, offsets),
      getAsIndexOpFoldResult(ctx, sizes), getAsIndexOpFoldResult(ctx, strides));
}

Value stpar::onnximport::buildConcat(OpBuilder &b, Location loc,
                                     ValueRange values, int64_t axis) {
  if (values.size() == 1)
    return values.front();
  return tensor::ConcatOp::create(b, loc, axis, values);
}

Value stpar::onnximport::buildGather(OpBuilder &b, Location loc, Value data,
                                     Value indices, int64_t axis) {
  auto dataType = cast<RankedTensorType>(data.getType());
  auto indexType = cast<RankedTensorType>(indices.getType());
  int64_t ri = indexType.getRank();
  SmallVector<int64_t> shape(dataType.getShape().take_front(axis));
  llvm::append_range(shape, indexType.getShape());
  llvm::append_range(shape, dataType.getShape().drop_front(axis + 1));
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineExpr> indexExprs;
  for (int64_t i = 0; i < ri; ++i)
    indexExprs.push_back(getAffineDimExpr(axis + i, ctx));
  SmallVector<AffineMap> maps = {
      AffineMap::get(shape.size(), 0, indexExprs, ctx),
      AffineMap::getMultiDimIdentityMap(shape.size(), ctx)};
  Value init = tensor::EmptyOp::create(b, loc, shape, dataType.getElementType());
  SmallVector<utils::IteratorType> iterators(shape.size(),
                                             utils::IteratorType::parallel);
  int64_t axisSize = dataType.getDimSize(axis);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{indices}, ValueRange{init},
      maps, iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value idx = arith::IndexCastOp::create(nb, nloc, nb.getIndexType(),
                                               args[0]);
        Value zero = arith::ConstantIndexOp::create(nb, nloc, 0);
        Value size = arith::ConstantIndexOp::create(nb, nloc, axisSize);
        Value negative = arith::CmpIOp::create(
            nb, nloc, arith::CmpIPredicate::slt, idx, zero);
        Value wrapped = arith::AddIOp::create(nb, nloc, idx, size);
        idx = arith::SelectOp::create(nb, nloc, negative, wrapped, idx);
        SmallVector<Value> coords;
        for (int64_t d = 0; d < dataType.getRank(); ++d) {
          if (d < axis)
            coords.push_back(linalg::IndexOp::create(nb, nloc, d));
          else if (d == axis)
            coords.push_back(idx);
          else
            coords.push_back(linalg::IndexOp::create(nb, nloc, d - 1 + ri));
        }
        Value element = tensor::ExtractOp::create(nb, nloc, data, coords);
        linalg::YieldOp::create(nb, nloc, element);
      });
  return generic.getResult(0);
}

Value stpar::onnximport::buildReduce(OpBuilder &b, Location loc, Value value,
                                     ArrayRef<int64_t> axes, bool keepDims,
                                     Combine combine) {
  auto type = cast<RankedTensorType>(value.getType());
  Type elem = type.getElementType();
  MLIRContext *ctx = b.getContext();
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> outExprs;
  SmallVector<utils::IteratorType> iterators;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool reduced = llvm::is_contained(axes, d);
    iterators.push_back(reduced ? utils::IteratorType::reduction
                                : utils::IteratorType::parallel);
    if (!reduced) {
      outShape.push_back(type.getDimSize(d));
      outExprs.push_back(getAffineDimExpr(d, ctx));
    } else if (keepDims) {
      outShape.push_back(1);
      outExprs.push_back(getAffineConstantExpr(0, ctx));
    }
  }
  bool isFloat = isa<FloatType>(elem);
  double inf = std::numeric_limits<double>::infinity();
  double initValue = 0.0;
  if (combine == Combine::Mul)
    initValue = 1.0;
  else if (combine == Combine::Max)
    initValue = isFloat
                    ? -inf
                    : static_cast<double>(std::numeric_limits<int64_t>::min());
  else if (combine == Combine::Min)
    initValue = isFloat
                    ? inf
                    : static_cast<double>(std::numeric_limits<int64_t>::max());
  if (!isFloat && combine != Combine::Add && combine != Combine::Mul &&
      elem.getIntOrFloatBitWidth() < 64) {
    // The extreme of the narrower integer type.
    unsigned w = elem.getIntOrFloatBitWidth();
    double big = w == 1 ? 1.0 : std::ldexp(1.0, int(w) - 1);
    initValue = combine == Combine::Max ? (w == 1 ? 0.0 : -big)
                                        : (w == 1 ? 1.0 : big - 1);
  }
  Value init = buildFilled(b, loc, outShape, elem, initValue);
  SmallVector<AffineMap> maps = {
      AffineMap::getMultiDimIdentityMap(type.getRank(), ctx),
      AffineMap::get(type.getRank(), 0, outExprs, ctx)};
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{value}, ValueRange{init},
      maps, iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value x = args[0], acc = args[1], r;
        switch (combine) {
        case Combine::Add:
          r = isFloat ? arith::AddFOp::create(nb, nloc, x, acc).getResult()
                      : arith::AddIOp::create(nb, nloc, x, acc).getResult();
          break;
        case Combine::Mul:
          r = isFloat ? arith::MulFOp::create(nb, nloc, x, acc).getResult()
                      : arith::MulIOp::create(nb, nloc, x, acc).getResult();
          break;
        case Combine::Max:
          r = isFloat ? arith::MaximumFOp::create(nb, nloc, x, acc).getResult()
                      : arith::MaxSIOp::create(nb, nloc, x, acc).getResult();
          break;
        case Combine::Min:
          r = isFloat ? arith::MinimumFOp::create(nb, nloc, x, acc).getResult()
                      : arith::MinSIOp::create(nb, nloc, x, acc).getResult();
          break;
        }
        linalg::YieldOp::create(nb, nloc, r);
      });
  return generic.getResult(0);
}
