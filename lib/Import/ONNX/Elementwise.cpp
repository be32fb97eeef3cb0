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
               int64_t since) {
  r.add(
      "", name, since,
      [kind](NodeContext &node) -> LogicalResult {
        if (node.numInputs() < 2 && kind != BinaryKind::Min &&
            kind != BinaryKind::Max)
          return node.error() << "expects two inputs";
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
}
