//===- Sources.cpp - constants, shapes, ranges, masks, top-k ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Ops that create values from attributes or shapes (Constant,
// ConstantOfShape, Range, Shape, Size, Trilu) - folded on the host when
// small - and the routing ops of mixture-of-experts layers (TopK,
// ScatterElements), which become `stp` ops.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

std::vector<ConstTensor> one(ConstTensor t) {
  std::vector<ConstTensor> v;
  v.push_back(std::move(t));
  return v;
}

/// Reads a tensor attribute's values; reports an error when it cannot.
std::optional<ConstTensor> tensorAttr(NodeContext &node,
                                      const onnx::TensorProto &proto);

std::optional<ConstTensor> constantValue(NodeContext &node) {
  for (const onnx::AttributeProto &a : node.node.attribute()) {
    const std::string &name = a.name();
    if (name == "value")
      return tensorAttr(node, a.t());
    if (name == "value_float")
      return ConstTensor::ofFloats({a.f()}, {});
    if (name == "value_floats") {
      SmallVector<double> v(a.floats().begin(), a.floats().end());
      return ConstTensor::ofFloats(v, {static_cast<int64_t>(v.size())});
    }
    if (name == "value_int")
      return ConstTensor::ofInts({a.i()}, {});
    if (name == "value_ints") {
      SmallVector<int64_t> v(a.ints().begin(), a.ints().end());
      return ConstTensor::ofInts(v, {static_cast<int64_t>(v.size())});
    }
    if (name == "sparse_value" || name == "value_string" ||
        name == "value_strings") {
      node.error() << "Constant with '" << name << "' is not supported";
      return std::nullopt;
    }
  }
  node.error() << "Constant has no value attribute";
  return std::nullopt;
}

} // namespace

namespace {

std::optional<ConstTensor> tensorAttr(NodeContext &node,
                                      const onnx::TensorProto &proto) {
  std::string error;
  std::optional<ConstTensor> t = readTensorForNode(proto, error);
  if (!t)
    node.error() << "tensor attribute " << error;
  return t;
}

LogicalResult importConstant(NodeContext &node) {
  // Reached only for constants too large to keep on the host: they become
  // dense constants in the IR (they are in the model file anyway).
  std::optional<ConstTensor> value = constantValue(node);
  if (!value)
    return failure();
  if (!convertDType(node.ctx(), value->dtype))
    return node.error() << "Constant of unsupported dtype "
                        << dtypeName(value->dtype);
  node.setOutput(0, materializeConstant(node.b(), node.loc(), *value));
  return success();
}

std::optional<std::vector<ConstTensor>> foldConstant(NodeContext &node) {
  std::optional<ConstTensor> value = constantValue(node);
  if (!value)
    return std::nullopt;
  return one(std::move(*value));
}

/// Shape of input 0 from its static type (or constant), sliced by the
/// opset-15 start/end attributes.
std::optional<std::vector<ConstTensor>> foldShape(NodeContext &node) {
  SmallVector<int64_t> shape;
  if (const ConstTensor *c = node.constInput(0)) {
    shape = c->shape;
  } else {
    Value v = node.input(0);
    if (!v)
      return std::nullopt;
    auto s = cast<RankedTensorType>(v.getType()).getShape();
    shape.assign(s.begin(), s.end());
  }
  if (node.node.op_type() == "Size") {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return one(ConstTensor::ofInts({n}, {}));
  }
  int64_t rank = shape.size();
  int64_t start = node.getInt("start", 0), end = node.getInt("end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  SmallVector<int64_t> dims(shape.begin() + start, shape.begin() + end);
  return one(ConstTensor::ofInts(dims, {static_cast<int64_t>(dims.size())}));
}

LogicalResult importShape(NodeContext &node) {
  // foldShape always succeeds for a statically shaped input; only a
  // failure to read the input leads here.
  return node.error() << "cannot compute the shape of the input";
}

std::optional<ConstTensor> fillValue(NodeContext &node) {
  if (const onnx::AttributeProto *a = node.attr("value")) {
    std::optional<ConstTensor> t = tensorAttr(node, a->t());
    if (!t)
      return std::nullopt;
    if (t->numElements() != 1) {
      node.error() << "value must have one element";
      return std::nullopt;
    }
    return t;
  }
  return ConstTensor::ofFloats({0.0}, {1});
}

std::optional<std::vector<ConstTensor>> foldConstantOfShape(NodeContext &node) {
  auto shape = node.requireInts(0, "the shape");
  if (!shape || !node.checkDims(*shape, "the shape"))
    return std::nullopt;
  std::optional<ConstTensor> value = fillValue(node);
  if (!value)
    return std::nullopt;
  ConstTensor out;
  out.dtype = value->dtype;
  out.shape = *shape;
  int64_t n = out.numElements();
  if (n > node.state.options->maxFoldElements)
    return std::nullopt;
  if (out.isFloat())
    out.floats.assign(n, value->floats[0]);
  else
    out.ints.assign(n, value->ints[0]);
  return one(std::move(out));
}

LogicalResult importConstantOfShape(NodeContext &node) {
  auto shape = node.requireInts(0, "the shape");
  if (!shape || !node.checkDims(*shape, "the shape"))
    return failure();
  std::optional<ConstTensor> value = fillValue(node);
  if (!value)
    return failure();
  Type elem = convertDType(node.ctx(), value->dtype);
  node.setOutput(0, buildFilled(node.b(), node.loc(), *shape, elem,
                                value->getFloat(0)));
  return success();
}

std::optional<std::vector<ConstTensor>> foldRange(NodeContext &node) {
  const ConstTensor *start = node.constInput(0), *limit = node.constInput(1),
                    *delta = node.constInput(2);
  for (const ConstTensor *c : {start, limit, delta})
    if (c->numElements() != 1)
      return std::nullopt;
  double s = start->getFloat(0), l = limit->getFloat(0), d = delta->getFloat(0);
  if (d == 0)
    return std::nullopt;
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
  if (n > node.state.options->maxFoldElements)
    return std::nullopt;
  ConstTensor out;
  out.dtype = start->dtype;
  out.shape = {n};
  for (int64_t i = 0; i < n; ++i) {
    if (out.isFloat())
      out.floats.push_back(s + i * d);
    else
      out.ints.push_back(static_cast<int64_t>(s) + i * static_cast<int64_t>(d));
  }
  return one(std::move(out));
}

LogicalResult importRange(NodeContext &node) {
  const ConstTensor *start = node.constInput(0), *limit = node.constInput(1),
                    *delta = node.constInput(2);
  if (!start || !limit || !delta || start->numElements() != 1 ||
      limit->numElements() != 1 || delta->numElements() != 1)
    return node.error() << "Range bounds must be one-element constants after "
                           "binding the symbolic dims";
  double s = start->getFloat(0), l = limit->getFloat(0), d = delta->getFloat(0);
  if (d == 0)
    return node.error() << "Range delta is 0";
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
  Type elem = convertDType(node.ctx(), start->dtype);
  OpBuilder &b = node.b();
  Value init = tensor::EmptyOp::create(b, node.loc(), {n}, elem);
  auto map = AffineMap::getMultiDimIdentityMap(1, node.ctx());
  auto generic = linalg::GenericOp::create(
      b, node.loc(), TypeRange{init.getType()}, ValueRange{}, ValueRange{init},
      ArrayRef<AffineMap>{map}, {utils::IteratorType::parallel},
      [&](OpBuilder &nb, Location loc, ValueRange) {
        Value i = linalg::IndexOp::create(nb, loc, 0);
        Value iv = arith::IndexCastOp::create(nb, loc, nb.getI64Type(), i);
        Value r;
        if (isa<FloatType>(elem)) {
          Value f = arith::SIToFPOp::create(nb, loc, elem, iv);
          r = arith::AddFOp::create(
              nb, loc, scalarConstant(nb, loc, elem, s),
              arith::MulFOp::create(nb, loc, f, scalarConstant(nb, loc, elem, d)));
        } else {
          Value c = elem.isInteger(64)
                        ? iv
                        : arith::TruncIOp::create(nb, loc, elem, iv).getResult();
          r = arith::AddIOp::create(
              nb, loc, scalarConstant(nb, loc, elem, s),
              arith::MulIOp::create(nb, loc, c, scalarConstant(nb, loc, elem, d)));
        }
        linalg::YieldOp::create(nb, loc, r);
      });
  node.setOutput(0, generic.getResult(0));
  return success();
}

/// Trilu keeps element (i, j) of the last two dims when j - i >= k (upper)
/// or j - i <= k (lower), and zeroes it otherwise.
bool triluKeeps(bool upper, int64_t k, int64_t i, int64_t j) {
  return upper ? j - i >= k : j - i <= k;
}

std::optional<int64_t> triluK(NodeContext &node) {
  if (!node.hasInput(1))
    return 0;
  auto k = node.requireInts(1, "k");
  if (!k)
    return std::nullopt;
  if (k->size() != 1) {
    node.error() << "k must have one element, got " << k->size();
    return std::nullopt;
  }
  return (*k)[0];
}

std::optional<std::vector<ConstTensor>> foldTrilu(NodeContext &node) {
  const ConstTensor *x = node.constInput(0);
  auto k = triluK(node);
  if (!k || x->shape.size() < 2)
    return std::nullopt;
  bool upper = node.getInt("upper", 1);
  ConstTensor out = *x;
  int64_t rows = x->shape[x->shape.size() - 2], cols = x->shape.back();
  for (int64_t e = 0; e < out.numElements(); ++e) {
    int64_t j = e % cols, i = (e / cols) % rows;
    if (!triluKeeps(upper, *k, i, j)) {
      if (out.isFloat())
        out.floats[e] = 0;
      else
        out.ints[e] = 0;
    }
  }
  return one(std::move(out));
}

LogicalResult importTrilu(NodeContext &node) {
  Value x = node.input(0);
  auto k = triluK(node);
  if (!x || !k)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getRank() < 2)
    return node.error() << "Trilu needs rank >= 2";
  bool upper = node.getInt("upper", 1);
  int64_t rank = type.getRank();
  Type elem = type.getElementType();
  int64_t kv = *k;
  node.setOutput(0, buildElementwise(
                        node.b(), node.loc(), x, elem,
                        [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
                          Value i = linalg::IndexOp::create(b, loc, rank - 2);
                          Value j = linalg::IndexOp::create(b, loc, rank - 1);
                          Value diff = arith::SubIOp::create(b, loc, j, i);
                          Value kc = arith::ConstantIndexOp::create(b, loc, kv);
                          Value keep = arith::CmpIOp::create(
                              b, loc,
                              upper ? arith::CmpIPredicate::sge
                                    : arith::CmpIPredicate::sle,
                              diff, kc);
                          Value zero = scalarConstant(b, loc, elem, 0.0);
                          return arith::SelectOp::create(b, loc, keep, a[0],
                                                         zero);
                        }));
  return success();
}

LogicalResult importTopK(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  auto axis = node.normalizeAxis(node.getInt("axis", -1), type.getRank());
  if (!axis)
    return failure();
  int64_t k;
  if (node.opset >= 10) {
    auto kv = node.requireInts(1, "K");
    if (!kv)
      return failure();
    if (kv->size() != 1)
      return node.error() << "K must have one element, got " << kv->size();
    k = (*kv)[0];
  } else {
    k = node.getInt("k", 0);
  }
  if (k < 0 || k > type.getDimSize(*axis))
    return node.error() << "K = " << k << " out of range for dim " << *axis
                        << " of size " << type.getDimSize(*axis);
  SmallVector<int64_t> shape(type.getShape());
  shape[*axis] = k;
  OpBuilder &b = node.b();
  auto op = stpar::stp::TopKOp::create(
      b, node.loc(), RankedTensorType::get(shape, type.getElementType()),
      RankedTensorType::get(shape, b.getI64Type()), x,
      b.getI64IntegerAttr(*axis), b.getI64IntegerAttr(k),
      b.getBoolAttr(node.getInt("largest", 1)),
      b.getBoolAttr(node.getInt("sorted", 1)));
  node.setOutput(0, op.getValues());
  node.setOutput(1, op.getIndices());
  return success();
}

LogicalResult importScatterElements(NodeContext &node) {
  Value data = node.input(0), indices = node.input(1),
        updates = node.input(2);
  if (!data || !indices || !updates)
    return failure();
  std::string reduction = node.getString("reduction", "none");
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction))
    return node.error() << "unknown reduction '" << reduction << "'";
  auto type = cast<RankedTensorType>(data.getType());
  auto axis = node.normalizeAxis(node.getInt("axis", 0), type.getRank());
  if (!axis)
    return failure();
  OpBuilder &b = node.b();
  indices = convertElement(b, node.loc(), indices, b.getI64Type());
  auto op = stpar::stp::ScatterElementsOp::create(
      b, node.loc(), type, data, indices, updates, b.getI64IntegerAttr(*axis),
      b.getStringAttr(reduction));
  if (failed(verify(op)))
    return failure();
  node.setOutput(0, op.getResult());
  return success();
}

} // namespace

void stpar::onnximport::registerSourceHandlers(HandlerRegistry &r) {
  r.add("", "Constant", 1, importConstant, foldConstant,
        /*foldsFromTypes=*/true);
  r.add("", "Shape", 1, importShape, foldShape, /*foldsFromTypes=*/true);
  r.add("", "Size", 1, importShape, foldShape, /*foldsFromTypes=*/true);
  r.add("", "ConstantOfShape", 9, importConstantOfShape, foldConstantOfShape);
  r.add("", "Range", 11, importRange, foldRange);
  r.add("", "Trilu", 14, importTrilu, foldTrilu);
  r.add("", "TopK", 1, importTopK);
  r.add("", "ScatterElements", 11, importScatterElements);
}
