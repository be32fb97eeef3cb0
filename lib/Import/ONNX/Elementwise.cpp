//===- Elementwise.cpp - elementwise ONNX ops -------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Arithmetic, activation, comparison, selection and cast ops: each becomes
// one elementwise `linalg.generic` with numpy broadcasting (arith/math ops
// in its body), or is evaluated on the host when its inputs are constants.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace mlir;
using namespace stpar::onnximport;

namespace {

/// Index of element `flat` of `out` in an input of `inShape` broadcast to
/// `outShape`.
int64_t broadcastIndex(ArrayRef<int64_t> inShape, ArrayRef<int64_t> outShape,
                       int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 1; d >= 0; --d) {
    int64_t coord = flat % outShape[d];
    flat /= outShape[d];
    int64_t inDim = d - static_cast<int64_t>(outShape.size() - inShape.size());
    if (inDim < 0)
      continue;
    if (inShape[inDim] != 1)
      index += coord * stride;
    stride *= inShape[inDim];
  }
  return index;
}

/// Host evaluation of an elementwise op over constant inputs. `fn` gets the
/// input elements as doubles (exact for the integers shapes use) and
/// returns the result element; `resultDType` < 0 means "the first input's".
std::optional<std::vector<ConstTensor>>
foldElementwise(NodeContext &node, int32_t resultDType,
                llvm::function_ref<double(ArrayRef<double>)> fn) {
  SmallVector<const ConstTensor *> inputs;
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < node.numInputs(); ++i) {
    const ConstTensor *c = node.constInput(i);
    if (!c)
      return std::nullopt;
    inputs.push_back(c);
    auto merged = broadcastShapes(shape, c->shape);
    if (!merged)
      return std::nullopt;
    shape = *merged;
  }
  ConstTensor out;
  out.dtype = resultDType >= 0 ? resultDType : inputs[0]->dtype;
  out.shape = shape;
  int64_t n = out.numElements();
  SmallVector<double> args(inputs.size());
  for (int64_t i = 0; i < n; ++i) {
    for (auto [k, in] : llvm::enumerate(inputs))
      args[k] = in->getFloat(broadcastIndex(in->shape, shape, i));
    double v = fn(args);
    if (out.isFloat())
      out.floats.push_back(v);
    else
      out.ints.push_back(saturatingToInt64(v));
  }
  return std::vector<ConstTensor>{std::move(out)};
}

/// Builds an elementwise op after checking that the inputs broadcast.
LogicalResult elementwise(NodeContext &node, ArrayRef<Value> inputs,
                          Type resultElem, BodyFn body) {
  SmallVector<int64_t> shape;
  for (Value input : inputs) {
    if (!input)
      return failure();
    auto merged = broadcastShapes(
        shape, cast<RankedTensorType>(input.getType()).getShape());
    if (!merged) {
      InFlightDiagnostic diag = node.error();
      diag << "operand shapes do not broadcast:";
      for (Value v : inputs)
        diag << " " << v.getType();
      return failure();
    }
    shape = *merged;
  }
  node.setOutput(0, buildElementwise(node.b(), node.loc(), inputs, resultElem,
                                     body));
  return success();
}

/// Inputs 0..n-1 as values, converted to the element type of input 0 when
/// an input is a constant of another type (ONNX requires equal types; this
/// only matters for folded integer constants).
SmallVector<Value> sameTypeInputs(NodeContext &node, size_t n) {
  SmallVector<Value> values;
  for (size_t i = 0; i < n; ++i)
    values.push_back(node.input(i));
  return values;
}

bool isFloatValue(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}

Type elemOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

// Binary arithmetic ---------------------------------------------------------

enum class BinaryKind { Add, Sub, Mul, Div, Pow, Min, Max };

double applyBinary(BinaryKind kind, double a, double b, bool isFloat) {
  switch (kind) {
  case BinaryKind::Add:
    return a + b;
  case BinaryKind::Sub:
    return a - b;
  case BinaryKind::Mul:
    return a * b;
  case BinaryKind::Div:
    if (isFloat)
      return a / b;
    if (b == -1) // INT64_MIN / -1 traps.
      return -a;
    return b == 0 ? 0 : static_cast<double>(static_cast<int64_t>(a) /
                                            static_cast<int64_t>(b));
  case BinaryKind::Pow:
    return std::pow(a, b);
  case BinaryKind::Min:
    return std::min(a, b);
  case BinaryKind::Max:
    return std::max(a, b);
  }
  return 0;
}

Value buildBinary(BinaryKind kind, OpBuilder &b, Location loc, Value x,
                  Value y) {
  bool isFloat = isa<FloatType>(x.getType());
  switch (kind) {
  case BinaryKind::Add:
    return isFloat ? arith::AddFOp::create(b, loc, x, y).getResult()
                   : arith::AddIOp::create(b, loc, x, y).getResult();
  case BinaryKind::Sub:
    return isFloat ? arith::SubFOp::create(b, loc, x, y).getResult()
                   : arith::SubIOp::create(b, loc, x, y).getResult();
  case BinaryKind::Mul:
    return isFloat ? arith::MulFOp::create(b, loc, x, y).getResult()
                   : arith::MulIOp::create(b, loc, x, y).getResult();
  case BinaryKind::Div:
    return isFloat ? arith::DivFOp::create(b, loc, x, y).getResult()
                   : arith::DivSIOp::create(b, loc, x, y).getResult();
  case BinaryKind::Pow:
    if (!isFloat)
      return math::IPowIOp::create(b, loc, x, y).getResult();
    return math::PowFOp::create(b, loc, x, y).getResult();
  case BinaryKind::Min:
    return isFloat ? arith::MinimumFOp::create(b, loc, x, y).getResult()
                   : arith::MinSIOp::create(b, loc, x, y).getResult();
  case BinaryKind::Max:
    return isFloat ? arith::MaximumFOp::create(b, loc, x, y).getResult()
                   : arith::MaxSIOp::create(b, loc, x, y).getResult();
  }
  llvm_unreachable("unknown binary kind");
}

void addBinary(HandlerRegistry &r, StringRef name, BinaryKind kind,
               int64_t since, bool variadic = false) {
  variadic |= kind == BinaryKind::Min || kind == BinaryKind::Max;
  r.add(
      "", name, since,
      [kind, variadic](NodeContext &node) -> LogicalResult {
        if (variadic ? node.numInputs() < 1 : node.numInputs() != 2)
          return node.error() << (variadic ? "expects at least one input"
                                           : "expects two inputs");
        SmallVector<Value> inputs = sameTypeInputs(node, node.numInputs());
        if (llvm::any_of(inputs, [](Value v) { return !v; }))
          return failure();
        Type elem = elemOf(inputs[0]);
        if (kind == BinaryKind::Pow && elemOf(inputs[1]) != elem) {
          // Pow allows a base of type T and an exponent of type T1; the
          // result has type T. A float base converts the exponent; an
          // integer base with a float exponent is computed in that float
          // type and truncated back (numpy's semantics).
          OpBuilder &b = node.b();
          Type expElem = elemOf(inputs[1]);
          if (isa<FloatType>(elem) || !isa<FloatType>(expElem)) {
            inputs[1] = convertElement(b, node.loc(), inputs[1], elem);
          } else {
            Value base = convertElement(b, node.loc(), inputs[0], expElem);
            SmallVector<Value> pair = {base, inputs[1]};
            auto merged = broadcastShapes(
                cast<RankedTensorType>(base.getType()).getShape(),
                cast<RankedTensorType>(inputs[1].getType()).getShape());
            if (!merged)
              return node.error() << "operand shapes do not broadcast";
            Value power = buildElementwise(
                b, node.loc(), pair, expElem,
                [](OpBuilder &nb, Location loc, ValueRange a) -> Value {
                  return math::PowFOp::create(nb, loc, a[0], a[1]);
                });
            node.setOutput(0, convertElement(b, node.loc(), power, elem));
            return success();
          }
        }
        for (Value &v : inputs)
          if (elemOf(v) != elem)
            return node.error() << "operands have different element types: "
                                << elem << " and " << elemOf(v);
        return elementwise(
            node, inputs, elem,
            [kind](OpBuilder &b, Location loc, ValueRange args) {
              Value acc = args[0];
              for (Value next : args.drop_front())
                acc = buildBinary(kind, b, loc, acc, next);
              return acc;
            });
      },
      [kind](NodeContext &node) {
        bool isFloat = node.constInput(0) && node.constInput(0)->isFloat();
        return foldElementwise(node, -1, [&](ArrayRef<double> a) {
          double acc = a[0];
          for (double v : a.drop_front())
            acc = applyBinary(kind, acc, v, isFloat);
          return acc;
        });
      });
}

// Unary ops -----------------------------------------------------------------

using UnaryBuild = Value (*)(OpBuilder &, Location, Value);

Value floatConst(OpBuilder &b, Location loc, Value like, double v) {
  return scalarConstant(b, loc, like.getType(), v);
}

Value buildSigmoid(OpBuilder &b, Location loc, Value x) {
  Value one = floatConst(b, loc, x, 1.0);
  Value negX = arith::NegFOp::create(b, loc, x);
  Value e = math::ExpOp::create(b, loc, negX);
  Value denom = arith::AddFOp::create(b, loc, one, e);
  return arith::DivFOp::create(b, loc, one, denom);
}

/// GELU: 0.5 x (1 + erf(x / sqrt 2)), or with the tanh approximation
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
Value buildGelu(OpBuilder &b, Location loc, Value x, bool tanhApprox) {
  Value half = floatConst(b, loc, x, 0.5);
  Value one = floatConst(b, loc, x, 1.0);
  Value inner;
  if (tanhApprox) {
    Value c = floatConst(b, loc, x, std::sqrt(2.0 / M_PI));
    Value k = floatConst(b, loc, x, 0.044715);
    Value x3 = arith::MulFOp::create(
        b, loc, x, arith::MulFOp::create(b, loc, x, x));
    Value sum = arith::AddFOp::create(b, loc, x,
                                      arith::MulFOp::create(b, loc, k, x3));
    inner = math::TanhOp::create(b, loc, arith::MulFOp::create(b, loc, c, sum));
  } else {
    Value invSqrt2 = floatConst(b, loc, x, M_SQRT1_2);
    inner = math::ErfOp::create(b, loc,
                                arith::MulFOp::create(b, loc, x, invSqrt2));
  }
  Value onePlus = arith::AddFOp::create(b, loc, one, inner);
  return arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, half, x),
                               onePlus);
}

void addUnary(HandlerRegistry &r, StringRef name, int64_t since,
              bool floatOnly, UnaryBuild build, double (*fold)(double)) {
  FoldFn folder = nullptr;
  if (fold)
    folder = [fold](NodeContext &node) {
      return foldElementwise(node, -1,
                             [&](ArrayRef<double> a) { return fold(a[0]); });
    };
  r.add(
      "", name, since,
      [build, floatOnly](NodeContext &node) -> LogicalResult {
        Value x = node.input(0);
        if (!x)
          return failure();
        if (floatOnly && !isFloatValue(x))
          return node.error() << "expects a float tensor, got " << x.getType();
        return elementwise(node, {x}, elemOf(x),
                           [build](OpBuilder &b, Location loc, ValueRange a) {
                             return build(b, loc, a[0]);
                           });
      },
      folder);
}

// Comparison / selection / cast ---------------------------------------------

void addCompare(HandlerRegistry &r, StringRef name, int64_t since,
                arith::CmpFPredicate fpred, arith::CmpIPredicate ipred,
                bool (*fold)(double, double)) {
  r.add(
      "", name, since,
      [fpred, ipred](NodeContext &node) -> LogicalResult {
        Value x = node.input(0), y = node.input(1);
        if (!x || !y)
          return failure();
        if (elemOf(x) != elemOf(y))
          return node.error() << "operands have different element types";
        return elementwise(
            node, {x, y}, node.b().getI1Type(),
            [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
              if (isa<FloatType>(a[0].getType()))
                return arith::CmpFOp::create(b, loc, fpred, a[0], a[1]);
              return arith::CmpIOp::create(b, loc, ipred, a[0], a[1]);
            });
      },
      [fold](NodeContext &node) {
        return foldElementwise(node, onnx::TensorProto::BOOL,
                               [&](ArrayRef<double> a) {
                                 return fold(a[0], a[1]) ? 1.0 : 0.0;
                               });
      });
}

LogicalResult importWhere(NodeContext &node) {
  Value cond = node.input(0), x = node.input(1), y = node.input(2);
  if (!cond || !x || !y)
    return failure();
  if (elemOf(x) != elemOf(y))
    return node.error() << "X and Y have different element types";
  cond = convertElement(node.b(), node.loc(), cond, node.b().getI1Type());
  return elementwise(node, {cond, x, y}, elemOf(x),
                     [](OpBuilder &b, Location loc, ValueRange a) -> Value {
                       return arith::SelectOp::create(b, loc, a[0], a[1], a[2]);
                     });
}

std::optional<std::vector<ConstTensor>> foldWhere(NodeContext &node) {
  const ConstTensor *x = node.constInput(1);
  if (!x)
    return std::nullopt;
  return foldElementwise(node, x->dtype, [](ArrayRef<double> a) {
    return a[0] != 0 ? a[1] : a[2];
  });
}

LogicalResult importCast(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  int32_t to = node.getInt("to", 0);
  Type elem = convertDType(node.ctx(), to);
  if (!elem)
    return node.error() << "cast to unsupported dtype " << dtypeName(to);
  if (isUnsignedDType(to))
    return node.error() << "cast to " << dtypeName(to)
                        << ": unsigned integer tensors are not supported "
                           "(stpar computes integers as signed)";
  node.setOutput(0, convertElement(node.b(), node.loc(), x, elem));
  return success();
}

std::optional<std::vector<ConstTensor>> foldCast(NodeContext &node) {
  int32_t to = node.getInt("to", 0);
  if (!convertDType(node.ctx(), to))
    return std::nullopt;
  bool toBool = to == onnx::TensorProto::BOOL;
  bool toFloat = isFloatDType(to);
  return foldElementwise(node, to, [&](ArrayRef<double> a) {
    if (toBool)
      return a[0] != 0 ? 1.0 : 0.0;
    return toFloat ? a[0] : std::trunc(a[0]);
  });
}

/// A unary elementwise op whose body depends on the node's attributes:
/// `make` reads them and returns the scalar body.
using ScalarFn = std::function<Value(OpBuilder &, Location, Value)>;
void addUnaryWith(HandlerRegistry &r, StringRef name, int64_t since,
                  bool floatOnly,
                  std::function<FailureOr<ScalarFn>(NodeContext &)> make) {
  r.add("", name, since, [make, floatOnly](NodeContext &node) -> LogicalResult {
    Value x = node.input(0);
    if (!x)
      return failure();
    if (floatOnly && !isFloatValue(x))
      return node.error() << "expects a float tensor, got " << x.getType();
    FailureOr<ScalarFn> fn = make(node);
    if (failed(fn))
      return failure();
    return elementwise(node, {x}, elemOf(x),
                       [&](OpBuilder &b, Location l, ValueRange a) {
                         return (*fn)(b, l, a[0]);
                       });
  });
}

Value mulConst(OpBuilder &b, Location l, Value x, double c) {
  return arith::MulFOp::create(b, l, x, floatConst(b, l, x, c));
}

Value isNegative(OpBuilder &b, Location l, Value x) {
  if (isa<FloatType>(x.getType()))
    return arith::CmpFOp::create(b, l, arith::CmpFPredicate::OLT, x,
                                 floatConst(b, l, x, 0.0));
  return arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, x,
                               scalarConstant(b, l, x.getType(), 0));
}

/// exp(x) - 1 for the ELU family.
Value expMinusOne(OpBuilder &b, Location l, Value x) {
  return math::ExpM1Op::create(b, l, x);
}

/// Mod (ONNX Mod-10, -13): integer remainder with the divisor's sign
/// (Python's %) unless fmod=1; float operands need fmod=1 (C's fmod).
LogicalResult importMod(NodeContext &node) {
  Value x = node.input(0), y = node.input(1);
  if (!x || !y)
    return failure();
  if (elemOf(x) != elemOf(y))
    return node.error() << "operands have different element types: "
                        << elemOf(x) << " and " << elemOf(y);
  bool fmod = node.getInt("fmod", 0);
  bool isFloat = isFloatValue(x);
  if (isFloat && !fmod)
    return node.error() << "fmod=0 is not defined for float operands (the "
                           "ONNX spec requires fmod=1)";
  if (elemOf(x).isInteger(1))
    return node.error() << "Mod of bool tensors is not defined";
  return elementwise(
      node, {x, y}, elemOf(x),
      [=](OpBuilder &b, Location l, ValueRange a) -> Value {
        if (isFloat)
          return arith::RemFOp::create(b, l, a[0], a[1]);
        Value r = arith::RemSIOp::create(b, l, a[0], a[1]);
        if (fmod)
          return r;
        // Python: a non-zero remainder takes the divisor's sign.
        Value zero = scalarConstant(b, l, r.getType(), 0);
        Value nonZero =
            arith::CmpIOp::create(b, l, arith::CmpIPredicate::ne, r, zero);
        Value signsDiffer = arith::XOrIOp::create(b, l, isNegative(b, l, r),
                                                  isNegative(b, l, a[1]));
        Value fix = arith::AndIOp::create(b, l, nonZero, signsDiffer);
        return arith::SelectOp::create(b, l, fix,
                                       arith::AddIOp::create(b, l, r, a[1]), r);
      });
}

/// Mod over host constants (shape computations of expanded functions).
std::optional<std::vector<ConstTensor>> foldMod(NodeContext &node) {
  bool fmod = node.getInt("fmod", 0);
  const ConstTensor *x = node.constInput(0);
  if (!x || (x->isFloat() && !fmod))
    return std::nullopt;
  bool isFloat = x->isFloat();
  return foldElementwise(node, -1, [=](ArrayRef<double> a) {
    if (a[1] == 0)
      return isFloat ? std::nan("") : 0.0;
    double r = std::fmod(a[0], a[1]);
    if (!fmod && r != 0 && ((r < 0) != (a[1] < 0)))
      r += a[1];
    return r;
  });
}

/// Clip: min(max(x, lo), hi); the bounds are attributes before opset 11
/// and optional scalar inputs since.
LogicalResult importClip(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  Type elem = elemOf(x);
  OpBuilder &b = node.b();
  Location loc = node.loc();
  SmallVector<Value> inputs = {x};
  std::optional<double> lo, hi;
  bool loInput = false, hiInput = false;
  if (node.opset < 11) {
    lo = node.getFloat("min", -std::numeric_limits<float>::max());
    hi = node.getFloat("max", std::numeric_limits<float>::max());
  } else {
    for (size_t i : {size_t(1), size_t(2)}) {
      if (!node.hasInput(i))
        continue;
      Value v = node.input(i);
      if (!v)
        return failure();
      auto t = cast<RankedTensorType>(v.getType());
      if (t.getNumElements() != 1)
        return node.error()
               << (i == 1 ? "min" : "max") << " must be a scalar, got " << t;
      if (t.getElementType() != elem)
        return node.error() << (i == 1 ? "min" : "max")
                            << " has another element type than the input";
      inputs.push_back(buildReshape(b, loc, v, {}));
      (i == 1 ? loInput : hiInput) = true;
    }
  }
  bool isFloat = isa<FloatType>(elem);
  return elementwise(
      node, inputs, elem,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = a[0];
        unsigned next = 1;
        auto bound = [&](bool fromInput, std::optional<double> c) -> Value {
          if (fromInput)
            return a[next++];
          return c ? scalarConstant(nb, l, elem, *c) : Value();
        };
        Value low = bound(loInput, lo), high = bound(hiInput, hi);
        if (low)
          v = isFloat ? arith::MaximumFOp::create(nb, l, v, low).getResult()
                      : arith::MaxSIOp::create(nb, l, v, low).getResult();
        if (high)
          v = isFloat ? arith::MinimumFOp::create(nb, l, v, high).getResult()
                      : arith::MinSIOp::create(nb, l, v, high).getResult();
        return v;
      });
}

/// Dropout in inference: the identity (and an all-true mask). A
/// training_mode input that is true (random masks) is not supported.
LogicalResult importDropout(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  if (node.hasInput(2)) {
    const ConstTensor *mode = node.constInput(2);
    if (!mode)
      return node.error() << "training_mode must be a constant";
    if (mode->numElements() != 1 || mode->getFloat(0) != 0)
      return node.error() << "training_mode=true (random dropout masks) is "
                             "not supported";
  }
  if (node.opset < 7 && node.getInt("is_test", 0) == 0)
    return node.error() << "is_test=0 (random dropout masks) is not supported";
  node.setOutput(0, x);
  if (node.hasOutput(1)) {
    auto t = cast<RankedTensorType>(x.getType());
    node.setOutput(1, buildFilled(node.b(), node.loc(), t.getShape(),
                                  node.opset < 10 ? t.getElementType()
                                                  : node.b().getI1Type(),
                                  1.0));
  }
  return success();
}

/// CastLike: Cast to the element type of input 1.
LogicalResult importCastLike(NodeContext &node) {
  Value x = node.input(0), like = node.input(1);
  if (!x || !like)
    return failure();
  node.setOutput(0, convertElement(node.b(), node.loc(), x, elemOf(like)));
  return success();
}

/// PRelu: x < 0 ? slope * x : x, slope broadcast to x.
LogicalResult importPRelu(NodeContext &node) {
  Value x = node.input(0), slope = node.input(1);
  if (!x || !slope)
    return failure();
  if (!isFloatValue(x) || elemOf(slope) != elemOf(x))
    return node.error() << "expects float X and slope of the same type";
  return elementwise(node, {x, slope}, elemOf(x),
                     [](OpBuilder &b, Location l, ValueRange a) -> Value {
                       return arith::SelectOp::create(
                           b, l, isNegative(b, l, a[0]),
                           arith::MulFOp::create(b, l, a[0], a[1]), a[0]);
                     });
}

LogicalResult importGelu(NodeContext &node) {
  Value x = node.input(0);
  if (!x)
    return failure();
  std::string approx = node.getString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return node.error() << "unknown approximation '" << approx << "'";
  bool useTanh = approx == "tanh";
  return elementwise(node, {x}, elemOf(x),
                     [useTanh](OpBuilder &b, Location loc, ValueRange a) {
                       return buildGelu(b, loc, a[0], useTanh);
                     });
}

} // namespace

namespace stpar::onnximport {
Value buildGeluValue(OpBuilder &b, Location loc, Value x, bool tanhApprox) {
  return buildGelu(b, loc, x, tanhApprox);
}
} // namespace stpar::onnximport

void stpar::onnximport::registerElementwiseHandlers(HandlerRegistry &r) {
  addBinary(r, "Add", BinaryKind::Add, 7);
  addBinary(r, "Sub", BinaryKind::Sub, 7);
  addBinary(r, "Mul", BinaryKind::Mul, 7);
  addBinary(r, "Div", BinaryKind::Div, 7);
  addBinary(r, "Pow", BinaryKind::Pow, 7);
  addBinary(r, "Min", BinaryKind::Min, 8);
  addBinary(r, "Max", BinaryKind::Max, 8);

  addUnary(r, "Sqrt", 6, true,
           [](OpBuilder &b, Location l, Value x) -> Value {
             return math::SqrtOp::create(b, l, x);
           },
           [](double x) { return std::sqrt(x); });
  addUnary(r, "Reciprocal", 6, true,
           [](OpBuilder &b, Location l, Value x) -> Value {
             return arith::DivFOp::create(b, l, floatConst(b, l, x, 1.0), x);
           },
           [](double x) { return 1.0 / x; });
  addUnary(r, "Neg", 6, false,
           [](OpBuilder &b, Location l, Value x) -> Value {
             if (isa<FloatType>(x.getType()))
               return arith::NegFOp::create(b, l, x);
             return arith::SubIOp::create(b, l, scalarConstant(b, l, x.getType(), 0), x);
           },
           [](double x) { return -x; });
  addUnary(r, "Exp", 6, true,
           [](OpBuilder &b, Location l, Value x) -> Value {
             return math::ExpOp::create(b, l, x);
           },
           [](double x) { return std::exp(x); });
  addUnary(r, "Erf", 9, true,
           [](OpBuilder &b, Location l, Value x) -> Value {
             return math::ErfOp::create(b, l, x);
           },
           [](double x) { return std::erf(x); });
  addUnary(r, "Tanh", 6, true,
           [](OpBuilder &b, Location l, Value x) -> Value {
             return math::TanhOp::create(b, l, x);
           },
           [](double x) { return std::tanh(x); });
  addUnary(r, "Sigmoid", 6, true, buildSigmoid,
           [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  addUnary(r, "Relu", 6, false,
           [](OpBuilder &b, Location l, Value x) -> Value {
             Value zero = scalarConstant(b, l, x.getType(), 0.0);
             if (isa<FloatType>(x.getType()))
               return arith::MaximumFOp::create(b, l, x, zero);
             return arith::MaxSIOp::create(b, l, x, zero);
           },
           [](double x) { return x > 0 ? x : 0.0; });
  r.add("", "Identity", 1, [](NodeContext &node) -> LogicalResult {
    Value x = node.input(0);
    if (!x)
      return failure();
    node.setOutput(0, x);
    return success();
  }, [](NodeContext &node) -> std::optional<std::vector<ConstTensor>> {
    return std::vector<ConstTensor>{*node.constInput(0)};
  });
  r.add("", "Not", 1, [](NodeContext &node) -> LogicalResult {
    Value x = node.input(0);
    if (!x)
      return failure();
    return elementwise(node, {x}, elemOf(x),
                       [](OpBuilder &b, Location l, ValueRange a) -> Value {
                         Value one = scalarConstant(b, l, a[0].getType(), 1);
                         return arith::XOrIOp::create(b, l, a[0], one);
                       });
  }, [](NodeContext &node) {
    return foldElementwise(node, onnx::TensorProto::BOOL,
                           [](ArrayRef<double> a) { return a[0] != 0 ? 0.0 : 1.0; });
  });

  // Boolean logic (masks).
  struct Logical {
    StringRef name;
    int kind; // 0 and, 1 or, 2 xor
  };
  for (Logical op : {Logical{"And", 0}, Logical{"Or", 1}, Logical{"Xor", 2}}) {
    int kind = op.kind;
    r.add(
        "", op.name, 7,
        [kind](NodeContext &node) -> LogicalResult {
          Value x = node.input(0), y = node.input(1);
          if (!x || !y)
            return failure();
          if (!elemOf(x).isInteger(1) || !elemOf(y).isInteger(1))
            return node.error() << "expects bool tensors";
          return elementwise(
              node, {x, y}, elemOf(x),
              [kind](OpBuilder &b, Location l, ValueRange a) -> Value {
                if (kind == 0)
                  return arith::AndIOp::create(b, l, a[0], a[1]);
                if (kind == 1)
                  return arith::OrIOp::create(b, l, a[0], a[1]);
                return arith::XOrIOp::create(b, l, a[0], a[1]);
              });
        },
        [kind](NodeContext &node) {
          return foldElementwise(
              node, onnx::TensorProto::BOOL, [kind](ArrayRef<double> a) {
                bool x = a[0] != 0, y = a[1] != 0;
                bool r = kind == 0 ? (x && y) : kind == 1 ? (x || y) : (x != y);
                return r ? 1.0 : 0.0;
              });
        });
  }

  r.add("", "Gelu", 20, importGelu);
  addCompare(r, "Equal", 7, arith::CmpFPredicate::OEQ,
             arith::CmpIPredicate::eq,
             [](double a, double b) { return a == b; });
  addCompare(r, "Less", 7, arith::CmpFPredicate::OLT,
             arith::CmpIPredicate::slt,
             [](double a, double b) { return a < b; });
  addCompare(r, "Greater", 7, arith::CmpFPredicate::OGT,
             arith::CmpIPredicate::sgt,
             [](double a, double b) { return a > b; });
  r.add("", "Where", 9, importWhere, foldWhere);
  r.add("", "Cast", 6, importCast, foldCast);
  addBinary(r, "Sum", BinaryKind::Add, 8, /*variadic=*/true);
  r.add("", "Mod", 10, importMod, foldMod);
  r.add("", "Clip", 6, importClip);
  r.add("", "Dropout", 1, importDropout);
  r.add("", "CastLike", 15, importCastLike);
  r.add("", "PRelu", 9, importPRelu);
  addCompare(r, "GreaterOrEqual", 12, arith::CmpFPredicate::OGE,
             arith::CmpIPredicate::sge,
             [](double a, double b) { return a >= b; });
  addCompare(r, "LessOrEqual", 12, arith::CmpFPredicate::OLE,
             arith::CmpIPredicate::sle,
             [](double a, double b) { return a <= b; });
  addUnary(
      r, "Log", 6, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::LogOp::create(b, l, x);
      },
      [](double x) { return std::log(x); });
  addUnary(
      r, "Sin", 7, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::SinOp::create(b, l, x);
      },
      [](double x) { return std::sin(x); });
  addUnary(
      r, "Cos", 7, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::CosOp::create(b, l, x);
      },
      [](double x) { return std::cos(x); });
  addUnary(
      r, "Tan", 7, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::TanOp::create(b, l, x);
      },
      [](double x) { return std::tan(x); });
  addUnary(
      r, "Atan", 7, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::AtanOp::create(b, l, x);
      },
      [](double x) { return std::atan(x); });
  addUnary(
      r, "Floor", 6, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::FloorOp::create(b, l, x);
      },
      [](double x) { return std::floor(x); });
  addUnary(
      r, "Ceil", 6, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        return math::CeilOp::create(b, l, x);
      },
      [](double x) { return std::ceil(x); });
  addUnary(
      r, "Abs", 6, false,
      [](OpBuilder &b, Location l, Value x) -> Value {
        if (isa<FloatType>(x.getType()))
          return math::AbsFOp::create(b, l, x);
        Value neg = arith::SubIOp::create(
            b, l, scalarConstant(b, l, x.getType(), 0), x);
        return arith::SelectOp::create(b, l, isNegative(b, l, x), neg, x);
      },
      [](double x) { return std::fabs(x); });
  addUnary(
      r, "Sign", 9, false,
      [](OpBuilder &b, Location l, Value x) -> Value {
        Type t = x.getType();
        Value zero = scalarConstant(b, l, t, 0.0);
        Value pos = isa<FloatType>(t)
                        ? arith::CmpFOp::create(b, l, arith::CmpFPredicate::OGT,
                                                x, zero)
                              .getResult()
                        : arith::CmpIOp::create(b, l, arith::CmpIPredicate::sgt,
                                                x, zero)
                              .getResult();
        Value neg = isNegative(b, l, x);
        return arith::SelectOp::create(
            b, l, pos, scalarConstant(b, l, t, 1.0),
            arith::SelectOp::create(b, l, neg, scalarConstant(b, l, t, -1.0),
                                    zero));
      },
      [](double x) { return double((x > 0) - (x < 0)); });
  addUnary(
      r, "Softplus", 1, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        // log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)).
        Value zero = floatConst(b, l, x, 0.0);
        Value relu = arith::MaximumFOp::create(b, l, x, zero);
        Value negAbs =
            arith::NegFOp::create(b, l, math::AbsFOp::create(b, l, x));
        return arith::AddFOp::create(
            b, l, relu,
            math::Log1pOp::create(b, l, math::ExpOp::create(b, l, negAbs)));
      },
      nullptr);
  addUnary(
      r, "Softsign", 1, true,
      [](OpBuilder &b, Location l, Value x) -> Value {
        Value one = floatConst(b, l, x, 1.0);
        return arith::DivFOp::create(
            b, l, x,
            arith::AddFOp::create(b, l, one, math::AbsFOp::create(b, l, x)));
      },
      nullptr);
  addUnaryWith(r, "LeakyRelu", 6, true,
               [](NodeContext &node) -> FailureOr<ScalarFn> {
                 double alpha = node.getFloat("alpha", 0.01f);
                 return ScalarFn([alpha](OpBuilder &b, Location l, Value x) {
                   return arith::SelectOp::create(b, l, isNegative(b, l, x),
                                                  mulConst(b, l, x, alpha), x)
                       .getResult();
                 });
               });
  addUnaryWith(r, "Elu", 6, true, [](NodeContext &node) -> FailureOr<ScalarFn> {
    double alpha = node.getFloat("alpha", 1.0f);
    return ScalarFn([alpha](OpBuilder &b, Location l, Value x) {
      return arith::SelectOp::create(
                 b, l, isNegative(b, l, x),
                 mulConst(b, l, expMinusOne(b, l, x), alpha), x)
          .getResult();
    });
  });
  addUnaryWith(
      r, "Selu", 6, true, [](NodeContext &node) -> FailureOr<ScalarFn> {
        double alpha = node.getFloat("alpha", 1.67326319217681884765625f);
        double gamma = node.getFloat("gamma", 1.05070102214813232421875f);
        return ScalarFn([=](OpBuilder &b, Location l, Value x) {
          Value neg = mulConst(b, l, expMinusOne(b, l, x), alpha);
          Value v = arith::SelectOp::create(b, l, isNegative(b, l, x), neg, x);
          return mulConst(b, l, v, gamma);
        });
      });
  addUnaryWith(
      r, "Celu", 12, true, [](NodeContext &node) -> FailureOr<ScalarFn> {
        double alpha = node.getFloat("alpha", 1.0f);
        if (alpha == 0)
          return node.error() << "alpha must not be 0";
        return ScalarFn([=](OpBuilder &b, Location l, Value x) {
          Value neg = mulConst(
              b, l, expMinusOne(b, l, mulConst(b, l, x, 1.0 / alpha)), alpha);
          return arith::SelectOp::create(b, l, isNegative(b, l, x), neg, x)
              .getResult();
        });
      });
  addUnaryWith(r, "ThresholdedRelu", 10, true,
               [](NodeContext &node) -> FailureOr<ScalarFn> {
                 double alpha = node.getFloat("alpha", 1.0f);
                 return ScalarFn([=](OpBuilder &b, Location l, Value x) {
                   Value above =
                       arith::CmpFOp::create(b, l, arith::CmpFPredicate::OGT, x,
                                             floatConst(b, l, x, alpha));
                   return arith::SelectOp::create(b, l, above, x,
                                                  floatConst(b, l, x, 0.0))
                       .getResult();
                 });
               });
  addUnaryWith(
      r, "HardSigmoid", 6, true, [](NodeContext &node) -> FailureOr<ScalarFn> {
        double alpha = node.getFloat("alpha", 0.2f);
        double beta = node.getFloat("beta", 0.5f);
        return ScalarFn([=](OpBuilder &b, Location l, Value x) {
          Value v = arith::AddFOp::create(b, l, mulConst(b, l, x, alpha),
                                          floatConst(b, l, x, beta));
          v = arith::MaximumFOp::create(b, l, v, floatConst(b, l, x, 0));
          return arith::MinimumFOp::create(b, l, v, floatConst(b, l, x, 1))
              .getResult();
        });
      });
  addUnaryWith(
      r, "HardSwish", 14, true, [](NodeContext &) -> FailureOr<ScalarFn> {
        return ScalarFn([](OpBuilder &b, Location l, Value x) {
          Value v = arith::AddFOp::create(b, l, mulConst(b, l, x, 1.0 / 6),
                                          floatConst(b, l, x, 0.5));
          v = arith::MaximumFOp::create(b, l, v, floatConst(b, l, x, 0));
          v = arith::MinimumFOp::create(b, l, v, floatConst(b, l, x, 1));
          return arith::MulFOp::create(b, l, x, v).getResult();
        });
      });
}
