//===- DataMovement.cpp - shape and layout ONNX ops -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Split, Concat,
// Gather and Expand. Their shape/axes/index operands must be constants once
// the symbolic dims are bound; with constant data they are evaluated on the
// host (this is what folds PyTorch's Shape -> Gather -> Concat -> Reshape
// chains).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace stpar::onnximport;

namespace {

using Shape = SmallVector<int64_t>;

Shape shapeOf(Value v) {
  auto s = cast<RankedTensorType>(v.getType()).getShape();
  return Shape(s.begin(), s.end());
}

/// A new host tensor of `shape` whose element at output coordinates `coords`
/// is `in`'s element at flat index `source(coords)`.
ConstTensor remap(const ConstTensor &in, ArrayRef<int64_t> shape,
                  llvm::function_ref<int64_t(ArrayRef<int64_t>)> source) {
  ConstTensor out;
  out.dtype = in.dtype;
  out.shape.assign(shape.begin(), shape.end());
  int64_t n = out.numElements();
  SmallVector<int64_t> coords(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t from = source(coords);
    if (in.isFloat())
      out.floats.push_back(in.floats[from]);
    else
      out.ints.push_back(in.ints[from]);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++coords[d] < shape[d])
        break;
      coords[d] = 0;
    }
  }
  return out;
}

int64_t flatIndex(ArrayRef<int64_t> shape, ArrayRef<int64_t> coords) {
  int64_t index = 0;
  for (auto [dim, c] : llvm::zip(shape, coords))
    index = index * dim + c;
  return index;
}

std::vector<ConstTensor> one(ConstTensor t) {
  std::vector<ConstTensor> v;
  v.push_back(std::move(t));
  return v;
}

// Reshape family ------------------------------------------------------------

/// Output shape of Reshape (0 copies the input dim unless allowzero, -1 is
/// inferred).
std::optional<Shape> reshapeTarget(NodeContext &node, ArrayRef<int64_t> in,
                                   ArrayRef<int64_t> target, bool allowZero) {
  Shape out;
  int64_t known = 1, inferAt = -1, total = 1;
  for (int64_t d : in)
    total *= d;
  for (auto [i, targetDim] : llvm::enumerate(target)) {
    int64_t d = targetDim;
    if (d == -1) {
      if (inferAt >= 0) {
        node.error() << "Reshape target has more than one -1";
        return std::nullopt;
      }
      inferAt = i;
      out.push_back(1);
      continue;
    }
    if (d == 0 && !allowZero) {
      if (i >= in.size()) {
        node.error() << "Reshape target copies dim " << i
                     << " that the input does not have";
        return std::nullopt;
      }
      d = in[i];
    }
    if (d < 0) {
      node.error() << "Reshape target has a negative dim " << d;
      return std::nullopt;
    }
    if (d > kMaxDimValue || (d > 0 && known > (int64_t(1) << 62) / d)) {
      node.error() << "Reshape target dim " << d << " is too large";
      return std::nullopt;
    }
    out.push_back(d);
    known *= d;
  }
  if (inferAt >= 0) {
    if (known == 0 || total % known != 0) {
      node.error() << "cannot infer the -1 of the Reshape target";
      return std::nullopt;
    }
    out[inferAt] = total / known;
    known *= out[inferAt];
  }
  if (known != total) {
    InFlightDiagnostic diag = node.error();
    diag << "Reshape target [";
    llvm::interleaveComma(out, diag);
    diag << "] has " << known << " elements, the input " << total;
    return std::nullopt;
  }
  return out;
}

/// Computes the output shape of the reshape-like node (Reshape, Flatten,
/// Squeeze, Unsqueeze) from its input shape.
std::optional<Shape> reshapeLikeShape(NodeContext &node, ArrayRef<int64_t> in) {
  StringRef op = node.node.op_type();
  int64_t rank = in.size();
  if (op == "Reshape" && node.opset < 5) {
    // Reshape-1 took the target shape as an attribute.
    auto target = node.getInts("shape");
    if (!target) {
      node.error() << "Reshape-1 needs the 'shape' attribute";
      return std::nullopt;
    }
    return reshapeTarget(node, in, *target, /*allowZero=*/false);
  }
  if (op == "Reshape") {
    auto target = node.requireInts(1, "the target shape");
    if (!target)
      return std::nullopt;
    return reshapeTarget(node, in, *target, node.getInt("allowzero", 0));
  }
  if (op == "Flatten") {
    int64_t axis = node.getInt("axis", 1);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis > rank) {
      node.error() << "axis out of range";
      return std::nullopt;
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? outer : inner) *= in[d];
    return Shape{outer, inner};
  }
  std::optional<SmallVector<int64_t>> axes;
  if (node.opset >= 13) {
    if (node.hasInput(1)) {
      axes = node.requireInts(1, "axes");
      if (!axes)
        return std::nullopt;
    }
  } else {
    axes = node.getInts("axes");
  }
  if (op == "Squeeze") {
    Shape out;
    SmallVector<int64_t> normalized;
    if (axes)
      for (int64_t a : *axes) {
        std::optional<int64_t> n = node.normalizeAxis(a, rank);
        if (!n)
          return std::nullopt;
        if (in[*n] != 1) {
          node.error() << "cannot squeeze dim " << *n << " of size " << in[*n];
          return std::nullopt;
        }
        normalized.push_back(*n);
      }
    for (int64_t d = 0; d < rank; ++d) {
      bool drop = axes ? llvm::is_contained(normalized, d) : in[d] == 1;
      if (!drop)
        out.push_back(in[d]);
    }
    return out;
  }
  // Unsqueeze.
  if (!axes) {
    node.error() << "Unsqueeze needs axes";
    return std::nullopt;
  }
  int64_t outRank = rank + axes->size();
  SmallVector<int64_t> normalized;
  for (int64_t a : *axes) {
    std::optional<int64_t> n = node.normalizeAxis(a, outRank);
    if (!n)
      return std::nullopt;
    if (llvm::is_contained(normalized, *n)) {
      node.error() << "Unsqueeze axis " << a << " is given twice";
      return std::nullopt;
    }
    normalized.push_back(*n);
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < outRank; ++d)
    out.push_back(llvm::is_contained(normalized, d) ? 1 : in[next++]);
  return out;
}

LogicalResult importReshapeLike(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  std::optional<Shape> shape = reshapeLikeShape(node, shapeOf(x));
  if (!shape)
    return failure();
  node.setOutput(0, buildReshape(node.b(), node.loc(), x, *shape));
  return success();
}

std::optional<std::vector<ConstTensor>> foldReshapeLike(NodeContext &node) {
  const ConstTensor *x = node.constInput(0);
  std::optional<Shape> shape = reshapeLikeShape(node, x->shape);
  if (!shape)
    return std::nullopt;
  ConstTensor out = *x;
  out.shape = *shape;
  return one(std::move(out));
}

// Transpose -----------------------------------------------------------------

std::optional<SmallVector<int64_t>> transposePerm(NodeContext &node,
                                                  int64_t rank) {
  SmallVector<int64_t> perm;
  if (auto p = node.getInts("perm"))
    perm = *p;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  for (int64_t i = 0; i < rank; ++i)
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[i] != i) {
      node.error() << "perm is not a permutation of the " << rank << " dims";
      return std::nullopt;
    }
  return perm;
}

LogicalResult importTranspose(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto perm = transposePerm(node, shapeOf(x).size());
  if (!perm)
    return failure();
  node.setOutput(0, buildTranspose(node.b(), node.loc(), x, *perm));
  return success();
}

std::optional<std::vector<ConstTensor>> foldTranspose(NodeContext &node) {
  const ConstTensor *x = node.constInput(0);
  auto perm = transposePerm(node, x->shape.size());
  if (!perm)
    return std::nullopt;
  Shape shape;
  for (int64_t p : *perm)
    shape.push_back(x->shape[p]);
  return one(remap(*x, shape, [&](ArrayRef<int64_t> c) {
    SmallVector<int64_t> in(c.size());
    for (auto [i, p] : llvm::enumerate(*perm))
      in[p] = c[i];
    return flatIndex(x->shape, in);
  }));
}

// Slice ---------------------------------------------------------------------

struct SliceSpec {
  SmallVector<int64_t> offsets, sizes, strides;
};

std::optional<SliceSpec> sliceSpec(NodeContext &node, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> starts, ends, axes, steps;
  if (node.opset < 10) {
    starts = node.getInts("starts").value_or(SmallVector<int64_t>());
    ends = node.getInts("ends").value_or(SmallVector<int64_t>());
    if (auto a = node.getInts("axes"))
      axes = *a;
  } else {
    auto s = node.requireInts(1, "starts");
    auto e = node.requireInts(2, "ends");
    if (!s || !e)
      return std::nullopt;
    starts = *s;
    ends = *e;
    if (node.hasInput(3)) {
      auto a = node.requireInts(3, "axes");
      if (!a)
        return std::nullopt;
      axes = *a;
    }
    if (node.hasInput(4)) {
      auto st = node.requireInts(4, "steps");
      if (!st)
        return std::nullopt;
      steps = *st;
    }
  }
  int64_t rank = shape.size();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || starts.size() != axes.size() ||
      starts.size() != steps.size()) {
    node.error() << "starts, ends, axes and steps differ in length";
    return std::nullopt;
  }
  SliceSpec spec;
  spec.offsets.assign(rank, 0);
  spec.sizes.assign(shape.begin(), shape.end());
  spec.strides.assign(rank, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    std::optional<int64_t> axis = node.normalizeAxis(axes[i], rank);
    if (!axis)
      return std::nullopt;
    int64_t dim = shape[*axis], step = steps[i];
    // A step longer than the dim selects at most one element; clamping it
    // keeps -step and the size arithmetic in range (e.g. INT64_MIN).
    if (step > dim + 1)
      step = dim + 1;
    if (step < -(dim + 1))
      step = -(dim + 1);
    if (step == 0) {
      node.error() << "slice step 0";
      return std::nullopt;
    }
    auto clamp = [](int64_t v, int64_t lo, int64_t hi) {
      return std::max(lo, std::min(v, hi));
    };
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (step > 0) {
      start = clamp(start, 0, dim);
      end = clamp(end, 0, dim);
      spec.sizes[*axis] = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = clamp(start, 0, dim - 1);
      end = clamp(end, -1, dim - 1);
      spec.sizes[*axis] = start > end ? (start - end - step - 1) / (-step) : 0;
    }
    spec.offsets[*axis] = start;
    spec.strides[*axis] = step;
  }
  return spec;
}

LogicalResult importSlice(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto spec = sliceSpec(node, shapeOf(x));
  if (!spec)
    return failure();
  if (llvm::any_of(spec->strides, [](int64_t s) { return s < 0; }) &&
      !llvm::is_contained(spec->sizes, 0)) {
    // tensor.extract_slice has no negative strides: read element
    // offset + i * step of each dim in a generic.
    OpBuilder &b = node.b();
    auto type = cast<RankedTensorType>(x.getType());
    SliceSpec sp = *spec;
    node.setOutput(
        0, buildElementwise(
               b, node.loc(), ValueRange{}, type.getElementType(),
               [&](OpBuilder &nb, Location loc, ValueRange) -> Value {
                 SmallVector<Value> coords;
                 for (size_t d = 0; d < sp.sizes.size(); ++d) {
                   Value i = linalg::IndexOp::create(nb, loc, d);
                   Value step =
                       arith::ConstantIndexOp::create(nb, loc, sp.strides[d]);
                   Value offset =
                       arith::ConstantIndexOp::create(nb, loc, sp.offsets[d]);
                   coords.push_back(arith::AddIOp::create(
                       nb, loc, offset, arith::MulIOp::create(nb, loc, i, step)));
                 }
                 return tensor::ExtractOp::create(nb, loc, x, coords);
               },
               ArrayRef<int64_t>(sp.sizes)));
    return success();
  }
  node.setOutput(0, buildSlice(node.b(), node.loc(), x, spec->offsets,
                               spec->sizes, spec->strides));
  return success();
}

std::optional<std::vector<ConstTensor>> foldSlice(NodeContext &node) {
  const ConstTensor *x = node.constInput(0);
  auto spec = sliceSpec(node, x->shape);
  if (!spec)
    return std::nullopt;
  return one(remap(*x, spec->sizes, [&](ArrayRef<int64_t> c) {
    SmallVector<int64_t> in;
    for (auto [i, v] : llvm::enumerate(c))
      in.push_back(spec->offsets[i] + v * spec->strides[i]);
    return flatIndex(x->shape, in);
  }));
}

// Split, Concat ---------------------------------------------------------------

std::optional<SmallVector<int64_t>> splitSizes(NodeContext &node,
                                               ArrayRef<int64_t> shape,
                                               int64_t axis) {
  SmallVector<int64_t> sizes;
  if (node.opset >= 13 && node.hasInput(1)) {
    auto s = node.requireInts(1, "split");
    if (!s)
      return std::nullopt;
    sizes = *s;
  } else if (auto s = node.getInts("split")) {
    sizes = *s;
  } else {
    int64_t parts = node.opset >= 18 ? node.getInt("num_outputs",
                                                   node.numOutputs())
                                     : node.numOutputs();
    int64_t dim = shape[axis];
    int64_t chunk = parts > 0 ? (dim + parts - 1) / parts : 0;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  if (!node.checkDims(sizes, "the split"))
    return std::nullopt;
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (total != shape[axis] || sizes.size() != node.numOutputs()) {
    node.error() << "split sizes do not add up to dim " << axis << " ("
                 << shape[axis] << ") or do not match the " << node.numOutputs()
                 << " outputs";
    return std::nullopt;
  }
  return sizes;
}

LogicalResult importSplit(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  Shape shape = shapeOf(x);
  auto axis = node.normalizeAxis(node.getInt("axis", 0), shape.size());
  if (!axis)
    return failure();
  auto sizes = splitSizes(node, shape, *axis);
  if (!sizes)
    return failure();
  int64_t offset = 0;
  for (auto [i, size] : llvm::enumerate(*sizes)) {
    SmallVector<int64_t> offsets(shape.size(), 0), extents(shape);
    offsets[*axis] = offset;
    extents[*axis] = size;
    node.setOutput(i, buildSlice(node.b(), node.loc(), x, offsets, extents));
    offset += size;
  }
  return success();
}

LogicalResult importConcat(NodeContext &node) {
  SmallVector<Value> values;
  for (size_t i = 0; i < node.numInputs(); ++i) {
    Value v = node.input(i);
    if (!v)
      return failure();
    values.push_back(v);
  }
  Shape first = shapeOf(values[0]);
  auto axis = node.normalizeAxis(node.getInt("axis", 0), first.size());
  if (!axis)
    return failure();
  for (Value v : values) {
    Shape s = shapeOf(v);
    bool ok = s.size() == first.size();
    for (size_t d = 0; ok && d < s.size(); ++d)
      ok = d == static_cast<size_t>(*axis) || s[d] == first[d];
    if (!ok)
      return node.error() << "operands " << values[0].getType() << " and "
                          << v.getType() << " cannot be concatenated on axis "
                          << *axis;
  }
  // Zero-sized operands (an empty past cache) contribute nothing.
  SmallVector<Value> nonEmpty;
  for (Value v : values)
    if (shapeOf(v)[*axis] != 0)
      nonEmpty.push_back(v);
  if (nonEmpty.empty())
    nonEmpty.push_back(values[0]);
  node.setOutput(0, buildConcat(node.b(), node.loc(), nonEmpty, *axis));
  return success();
}

std::optional<std::vector<ConstTensor>> foldConcat(NodeContext &node) {
  SmallVector<const ConstTensor *> inputs;
  for (size_t i = 0; i < node.numInputs(); ++i)
    inputs.push_back(node.constInput(i));
  int64_t rank = inputs[0]->shape.size();
  int64_t axis = node.getInt("axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  ConstTensor out;
  out.dtype = inputs[0]->dtype;
  out.shape = inputs[0]->shape;
  out.shape[axis] = 0;
  for (const ConstTensor *in : inputs) {
    if (static_cast<int64_t>(in->shape.size()) != rank ||
        in->isFloat() != inputs[0]->isFloat())
      return std::nullopt;
    out.shape[axis] += in->shape[axis];
  }
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *in : inputs) {
      int64_t chunk = in->numElements() / std::max<int64_t>(outer, 1);
      for (int64_t i = 0; i < chunk; ++i) {
        if (in->isFloat())
          out.floats.push_back(in->floats[o * chunk + i]);
        else
          out.ints.push_back(in->ints[o * chunk + i]);
      }
    }
  return one(std::move(out));
}

// Gather, Expand --------------------------------------------------------------

LogicalResult importGather(NodeContext &node) {
  Value data = node.input(0);
  if (!data)
    return failure();
  Shape shape = shapeOf(data);
  auto axis = node.normalizeAxis(node.getInt("axis", 0), shape.size());
  if (!axis)
    return failure();
  // A constant scalar index is a slice: keep it visible as one.
  if (const ConstTensor *idx = node.constInput(1);
      idx && idx->shape.empty()) {
    int64_t i = idx->getInt(0);
    if (i < 0)
      i += shape[*axis];
    if (i < 0 || i >= shape[*axis])
      return node.error() << "index " << idx->getInt(0)
                          << " out of range for dim " << *axis << " of size "
                          << shape[*axis];
    SmallVector<int64_t> offsets(shape.size(), 0), sizes(shape);
    offsets[*axis] = i;
    sizes[*axis] = 1;
    Value slice = buildSlice(node.b(), node.loc(), data, offsets, sizes);
    Shape out(shape);
    out.erase(out.begin() + *axis);
    node.setOutput(0, buildReshape(node.b(), node.loc(), slice, out));
    return success();
  }
  Value indices = node.input(1);
  if (!indices)
    return failure();
  if (!isa<IntegerType>(
          cast<RankedTensorType>(indices.getType()).getElementType()))
    return node.error() << "indices must be integers";
  node.setOutput(0, buildGather(node.b(), node.loc(), data, indices, *axis));
  return success();
}

std::optional<std::vector<ConstTensor>> foldGather(NodeContext &node) {
  const ConstTensor *data = node.constInput(0);
  const ConstTensor *idx = node.constInput(1);
  int64_t rank = data->shape.size();
  int64_t axis = node.getInt("axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  Shape shape(data->shape.begin(), data->shape.begin() + axis);
  shape.append(idx->shape.begin(), idx->shape.end());
  shape.append(data->shape.begin() + axis + 1, data->shape.end());
  int64_t ri = idx->shape.size();
  int64_t dim = data->shape[axis];
  for (int64_t i = 0; i < idx->numElements(); ++i) {
    int64_t v = idx->getInt(i);
    if (v < -dim || v >= dim)
      return std::nullopt;
  }
  return one(remap(*data, shape, [&](ArrayRef<int64_t> c) {
    SmallVector<int64_t> in(c.begin(), c.begin() + axis);
    int64_t v = idx->getInt(flatIndex(idx->shape, c.slice(axis, ri)));
    in.push_back(v < 0 ? v + dim : v);
    in.append(c.begin() + axis + ri, c.end());
    return flatIndex(data->shape, in);
  }));
}

std::optional<Shape> expandShape(NodeContext &node, ArrayRef<int64_t> in) {
  auto target = node.requireInts(1, "the target shape");
  if (!target || !node.checkDims(*target, "the Expand target"))
    return std::nullopt;
  auto shape = broadcastShapes(in, *target);
  if (!shape) {
    node.error() << "input does not broadcast to the Expand target";
    return std::nullopt;
  }
  return shape;
}

LogicalResult importExpand(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto shape = expandShape(node, shapeOf(x));
  if (!shape)
    return failure();
  if (*shape == shapeOf(x)) {
    node.setOutput(0, x);
    return success();
  }
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  node.setOutput(0, buildElementwise(
                        node.b(), node.loc(), x, elem,
                        [](OpBuilder &, Location, ValueRange a) { return a[0]; },
                        ArrayRef<int64_t>(*shape)));
  return success();
}

std::optional<std::vector<ConstTensor>> foldExpand(NodeContext &node) {
  const ConstTensor *x = node.constInput(0);
  auto shape = expandShape(node, x->shape);
  if (!shape)
    return std::nullopt;
  int64_t offset = shape->size() - x->shape.size();
  return one(remap(*x, *shape, [&](ArrayRef<int64_t> c) {
    SmallVector<int64_t> in;
    for (size_t d = 0; d < x->shape.size(); ++d)
      in.push_back(x->shape[d] == 1 ? 0 : c[offset + d]);
    return flatIndex(x->shape, in);
  }));
}

} // namespace

namespace {
/// Tile (ONNX Tile-6, -13): `repeats[d]` copies of the input along each dim
/// d, as concatenations (tensor.concat) of the input with itself.
LogicalResult importTile(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  auto repeats = node.requireInts(1, "repeats");
  if (!repeats)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  if (int64_t(repeats->size()) != type.getRank())
    return node.error() << "repeats has " << repeats->size()
                        << " values for an input of rank " << type.getRank();
  SmallVector<int64_t> shape(type.getShape());
  for (auto [d, n] : llvm::enumerate(*repeats)) {
    if (n < 1)
      return node.error() << "repeats[" << d << "] = " << n
                          << " (zero-size results are not supported)";
    if (n > 1 << 20 || shape[d] * n > (int64_t(1) << 40))
      return node.error() << "repeats[" << d << "] = " << n << " is too large";
    shape[d] *= n;
  }
  if (!node.checkDims(shape, "result"))
    return failure();
  Value v = x;
  for (auto [d, n] : llvm::enumerate(*repeats))
    if (n > 1)
      v = buildConcat(node.b(), node.loc(), SmallVector<Value>(n, v), d);
  node.setOutput(0, v);
  return success();
}
} // namespace

void stpar::onnximport::registerDataMovementHandlers(HandlerRegistry &r) {
  for (StringRef op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    r.add("", op, 1, importReshapeLike, foldReshapeLike);
  r.add("", "Transpose", 1, importTranspose, foldTranspose);
  r.add("", "Slice", 1, importSlice, foldSlice);
  r.add("", "Split", 2, importSplit);
  r.add("", "Concat", 4, importConcat, foldConcat);
  r.add("", "Gather", 1, importGather, foldGather);
  r.add("", "Expand", 8, importExpand, foldExpand);
  r.add("", "Tile", 6, importTile);
}
