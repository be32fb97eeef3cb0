//===- CppEmitter.cpp - print the per-rank program as C++ -----------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// One printer for both targets. Tensors are `stpar_rt::Tensor<T>` values
// (reference-counted buffers); every op that makes a tensor allocates its
// result, except reshapes, which alias. linalg.generic becomes a function
// (cpu: nested loops) or a kernel (cuda: one thread per point of the
// parallel dims) whose body is the generic's payload printed as scalar C++;
// on cuda, contractions go to cuBLAS. Collectives are printed as MPI calls
// through the runtime (cpu) or as NCCL calls on the communication stream
// with events to and from the compute stream (cuda).
//
//===----------------------------------------------------------------------===//

#include "stpar/Target/Emit.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"
#include "stpar/Dialect/STP/Transforms/Collectives.h"
#include "stpar/Dialect/STP/Transforms/Passes.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <set>
#include <vector>

using namespace mlir;

namespace stpar::target {

std::optional<EmitTarget> parseEmitTarget(llvm::StringRef name) {
  if (name == "cpu")
    return EmitTarget::Cpu;
  if (name == "cuda")
    return EmitTarget::Cuda;
  return std::nullopt;
}

llvm::StringRef getEmitTargetName(EmitTarget target) {
  return target == EmitTarget::Cpu ? "cpu" : "cuda";
}

namespace {

//===----------------------------------------------------------------------===//
// Types and literals
//===----------------------------------------------------------------------===//

struct ElementInfo {
  const char *storage; ///< C++ type of a buffer element
  const char *scalar;  ///< C++ type of a scalar value
  int dtype;           ///< io.json type code (-1: not a tensor element type)
  const char *dtypeName;
};

std::optional<ElementInfo> getElementInfo(Type type) {
  if (type.isF32())
    return ElementInfo{"float", "float", 0, "float32"};
  if (type.isF64())
    return ElementInfo{"double", "double", 1, "float64"};
  if (type.isIndex())
    return ElementInfo{"int64_t", "int64_t", -1, "index"};
  if (type.isInteger(64))
    return ElementInfo{"int64_t", "int64_t", 2, "int64"};
  if (type.isInteger(32))
    return ElementInfo{"int32_t", "int32_t", 3, "int32"};
  if (type.isInteger(8))
    return ElementInfo{"int8_t", "int8_t", 4, "int8"};
  if (type.isInteger(1))
    return ElementInfo{"uint8_t", "bool", 5, "bool"};
  // 16-bit floats: 2-byte storage (stpar_scalar.h), arithmetic in float;
  // each store rounds to nearest even.
  if (type.isF16())
    return ElementInfo{"stpar_rt::f16", "float", 6, "float16"};
  if (type.isBF16())
    return ElementInfo{"stpar_rt::bf16", "float", 7, "bfloat16"};
  if (type.isInteger(16))
    return ElementInfo{"int16_t", "int16_t", 8, "int16"};
  return std::nullopt;
}

/// Float types whose scalars are `float` in emitted code (f32, f16, bf16).
bool isFloatScalar(Type type) {
  return type.isF32() || type.isF16() || type.isBF16();
}

std::string floatLiteral(const APFloat &value, Type type) {
  bool losesInfo = false;
  APFloat wide = value;
  wide.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &losesInfo);
  double v = wide.convertToDouble();
  // f16/bf16 scalars are floats in emitted code.
  bool f32 = !type.isF64();
  if (std::isnan(v))
    return f32 ? "NAN" : "double(NAN)";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") + (f32 ? "INFINITY" : "double(INFINITY)");
  std::string s;
  llvm::raw_string_ostream os(s);
  if (f32)
    os << llvm::format("%.9g", v);
  else
    os << llvm::format("%.17g", v);
  if (s.find_first_of(".eE") == std::string::npos)
    s += ".0";
  if (f32)
    s += "f";
  return s;
}

std::string intLiteral(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min())
    return "(-INT64_C(9223372036854775807) - 1)";
  return "INT64_C(" + std::to_string(v) + ")";
}

/// `loc` as text for a comment, with each file named by its base name
/// only: the emitted source is then the same wherever the model lies, so
/// a compiler cache (ccache) reuses its object across checkouts.
std::string locString(Location loc) {
  Attribute relative = LocationAttr(loc).replace([](FileLineColLoc file) {
    return FileLineColLoc::get(
        StringAttr::get(file.getContext(),
                        llvm::sys::path::filename(file.getFilename())),
        file.getLine(), file.getColumn());
  });
  std::string s;
  llvm::raw_string_ostream os(s);
  cast<LocationAttr>(relative).print(os);
  // Keep comments on one line and free of "*/".
  for (char &c : s)
    if (c == '\n')
      c = ' ';
  return s;
}

RankedTensorType tensorType(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// A null `const stpar_rt::Tensor<T> *` for an absent optional operand.
std::string typedNull(RankedTensorType like) {
  return std::string("static_cast<const stpar_rt::Tensor<") +
         getElementInfo(like.getElementType())->storage + "> *>(nullptr)";
}

/// A null `stpar_rt::Tensor<T> *` for an absent optional result.
std::string typedNullResult(RankedTensorType like) {
  return std::string("static_cast<stpar_rt::Tensor<") +
         getElementInfo(like.getElementType())->storage + "> *>(nullptr)";
}

/// The runtimes' code of an MoE expert activation (moeActivation in
/// runtime/common/stpar_scalar.h).
int getMoEActivationCode(StringRef activation) {
  return llvm::StringSwitch<int>(activation)
      .Case("silu", 0)
      .Case("gelu", 1)
      .Case("gelu_tanh", 2)
      .Default(3);
}

/// The block indices of a dim split over grid axes (stp.split).
using SplitAxes = SmallVector<SmallVector<int64_t>>;

FailureOr<SplitAxes> getSplit(DictionaryAttr attrs, int64_t rank,
                              Location loc) {
  SplitAxes split(rank);
  if (!attrs)
    return split;
  Attribute a = attrs.get("stp.split");
  if (!a)
    return split;
  auto dims = dyn_cast<ArrayAttr>(a);
  if (!dims || static_cast<int64_t>(dims.size()) != rank)
    return emitError(loc) << "stp.split must have one entry per tensor dim",
           failure();
  for (auto [i, d] : llvm::enumerate(dims)) {
    auto axes = dyn_cast<ArrayAttr>(d);
    if (!axes)
      return emitError(loc) << "stp.split entries must be arrays", failure();
    for (Attribute ax : axes) {
      auto ia = dyn_cast<IntegerAttr>(ax);
      if (!ia)
        return emitError(loc) << "stp.split axes must be integers", failure();
      split[i].push_back(ia.getInt());
    }
  }
  return split;
}

//===----------------------------------------------------------------------===//
// The printer
//===----------------------------------------------------------------------===//

class Printer {
public:
  Printer(ModuleOp module, EmitTarget target)
      : module(module), cuda(target == EmitTarget::Cuda), target(target) {}

  FailureOr<EmittedProgram> run();

private:
  // Output.
  llvm::raw_ostream &line() {
    for (int i = 0; i < indent; ++i)
      bodyOs << "  ";
    return bodyOs;
  }

  // Names.
  std::string define(Value v) {
    std::string n = "v" + std::to_string(nextId++);
    names[v] = n;
    return n;
  }
  std::string name(Value v) {
    auto it = names.find(v);
    if (it != names.end())
      return it->second;
    return "<?>";
  }
  std::string ofr(OpFoldResult r) {
    if (auto a = dyn_cast<Attribute>(r))
      return intLiteral(cast<IntegerAttr>(a).getInt());
    return name(cast<Value>(r));
  }
  std::string ofrList(ArrayRef<OpFoldResult> rs) {
    std::string s = "stpar_rt::Shape{";
    for (auto [i, r] : llvm::enumerate(rs))
      s += (i ? ", " : "") + ofr(r);
    return s + "}";
  }

  LogicalResult emitFunction();
  LogicalResult emitBlock(Block &block, bool profile = false);
  LogicalResult emitOp(Operation *op);
  LogicalResult emitScalar(Operation *op,
                           llvm::function_ref<std::string(Value)> nameOf,
                           std::string &expr);
  LogicalResult emitGeneric(linalg::GenericOp op);
  LogicalResult emitCall(emitc::CallOpaqueOp call);
  LogicalResult emitFor(scf::ForOp op);
  LogicalResult emitSwitch(scf::IndexSwitchOp op);
  /// The variables an scf.index_switch's cases assign its results to.
  DenseMap<Operation *, SmallVector<std::string>> switchResults;
  std::string newTensor(Value v, StringRef init = "");
  std::string arenaOffset(Value v);
  std::string blockOffsets(RankedTensorType local, const SplitAxes &split);

  ModuleOp module;
  bool cuda;
  EmitTarget target;
  func::FuncOp func;
  SmallVector<int64_t> gridShape;

  std::string constants, kernels, body;
  llvm::raw_string_ostream constOs{constants}, kernelOs{kernels},
      bodyOs{body};
  int indent = 1;
  DenseMap<Value, std::string> names;
  int nextId = 0, nextKernel = 0, nextConst = 0;
  int64_t numEvents = 0;
  std::string loopParity;
  std::string ioInputs, ioOutputs, ioParams;
  /// The first value without a buffer of the memory plan (an error).
  Value unplanned;
  /// The grid-axes groups of stp.streams: their communicators are created
  /// (collectively) before the body runs.
  std::vector<std::string> communicators;
};

/// The arena offset -stp-plan-memory gave `v` (a C++ expression: a
/// loop-carried value alternates between its even- and odd-step buffers).
std::string Printer::arenaOffset(Value v) {
  auto result = dyn_cast<OpResult>(v);
  DenseI64ArrayAttr even, odd;
  if (result) {
    even = result.getOwner()->getAttrOfType<DenseI64ArrayAttr>(
        stp::STPDialect::kBuffersAttrName);
    odd = result.getOwner()->getAttrOfType<DenseI64ArrayAttr>(
        stp::STPDialect::kOddBuffersAttrName);
  }
  unsigned i = result ? result.getResultNumber() : 0;
  if (!even || i >= even.size() || even[i] < 0) {
    if (!unplanned)
      unplanned = v;
    return "0ULL";
  }
  std::string e = std::to_string(even[i]) + "ULL";
  if (odd && i < odd.size() && odd[i] >= 0 && !loopParity.empty())
    return "(" + loopParity + " ? " + std::to_string(odd[i]) + "ULL : " + e +
           ")";
  return e;
}

std::string Printer::newTensor(Value v, StringRef init) {
  auto type = tensorType(v);
  auto info = getElementInfo(type.getElementType());
  std::string offset = arenaOffset(v);
  std::string n = define(v);
  if (!init.empty())
    line() << "auto " << n << " = stpar_rt::cloneAt(ctx, " << offset << ", "
           << init << ");\n";
  else
    line() << "auto " << n << " = stpar_rt::at<" << info->storage
           << ">(ctx, " << offset << ", " << type.getNumElements() << ");\n";
  return n;
}

std::string Printer::blockOffsets(RankedTensorType local,
                                  const SplitAxes &split) {
  std::string s = "stpar_rt::Shape{";
  for (int64_t d = 0; d < local.getRank(); ++d) {
    if (d)
      s += ", ";
    if (split[d].empty()) {
      s += "0";
      continue;
    }
    s += "ctx.groupIndex(stpar_rt::Shape{";
    for (auto [i, a] : llvm::enumerate(split[d]))
      s += (i ? ", " : "") + std::to_string(a);
    s += "}) * " + std::to_string(local.getDimSize(d));
  }
  return s + "}";
}

//===----------------------------------------------------------------------===//
// Scalar ops (generic payloads and index math)
//===----------------------------------------------------------------------===//

const char *mathName(Operation *op) {
  return llvm::TypeSwitch<Operation *, const char *>(op)
      .Case<math::ExpOp>([](auto) { return "exp"; })
      .Case<math::Exp2Op>([](auto) { return "exp2"; })
      .Case<math::ExpM1Op>([](auto) { return "expm1"; })
      .Case<math::LogOp>([](auto) { return "log"; })
      .Case<math::Log2Op>([](auto) { return "log2"; })
      .Case<math::Log1pOp>([](auto) { return "log1p"; })
      .Case<math::SqrtOp>([](auto) { return "sqrt"; })
      .Case<math::TanhOp>([](auto) { return "tanh"; })
      .Case<math::ErfOp>([](auto) { return "erf"; })
      .Case<math::SinOp>([](auto) { return "sin"; })
      .Case<math::CosOp>([](auto) { return "cos"; })
      .Case<math::TanOp>([](auto) { return "tan"; })
      .Case<math::AtanOp>([](auto) { return "atan"; })
      .Case<math::AbsFOp>([](auto) { return "fabs"; })
      .Case<math::FloorOp>([](auto) { return "floor"; })
      .Case<math::CeilOp>([](auto) { return "ceil"; })
      .Case<math::RoundOp>([](auto) { return "round"; })
      .Case<math::PowFOp>([](auto) { return "pow"; })
      .Case<math::Atan2Op>([](auto) { return "atan2"; })
      .Default([](auto) { return nullptr; });
}

LogicalResult
Printer::emitScalar(Operation *op,
                    llvm::function_ref<std::string(Value)> nameOf,
                    std::string &expr) {
  auto a = [&](unsigned i) { return nameOf(op->getOperand(i)); };
  auto bin = [&](StringRef o) {
    expr = "(" + a(0) + " " + o.str() + " " + a(1) + ")";
    return success();
  };
  auto call = [&](StringRef f) {
    expr = f.str() + "(";
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      expr += (i ? ", " : "") + a(i);
    expr += ")";
    return success();
  };
  Type resultType = op->getNumResults() ? op->getResult(0).getType() : Type();
  auto cast = [&]() {
    auto info = getElementInfo(resultType);
    if (!info)
      return failure();
    expr = std::string("static_cast<") + info->scalar + ">(" + a(0) + ")";
    // A conversion to f16/bf16 rounds, although the scalar stays a float.
    if (resultType.isF16() || resultType.isBF16())
      expr = std::string("static_cast<float>(") + info->storage +
             "(static_cast<float>(" + a(0) + ")))";
    return success();
  };
  if (const char *m = mathName(op)) {
    std::string f = m;
    if (isFloatScalar(resultType))
      f += "f";
    else if (!resultType.isF64())
      return failure();
    return call(f);
  }
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        if (auto f = dyn_cast<FloatAttr>(c.getValue())) {
          if (!isFloatScalar(f.getType()) && !f.getType().isF64())
            return failure();
          expr = floatLiteral(f.getValue(), f.getType());
          return success();
        }
        if (auto i = dyn_cast<IntegerAttr>(c.getValue())) {
          if (i.getType().isInteger(1))
            expr = i.getValue().isZero() ? "false" : "true";
          else
            expr = intLiteral(i.getValue().getSExtValue());
          return success();
        }
        return failure();
      })
      .Case<arith::AddFOp, arith::AddIOp>([&](auto) { return bin("+"); })
      .Case<arith::SubFOp, arith::SubIOp>([&](auto) { return bin("-"); })
      .Case<arith::MulFOp, arith::MulIOp>([&](auto) { return bin("*"); })
      .Case<arith::DivFOp, arith::DivSIOp>([&](auto) { return bin("/"); })
      .Case<arith::RemSIOp>([&](auto) { return bin("%"); })
      .Case<arith::AndIOp>([&](auto) { return bin("&"); })
      .Case<arith::OrIOp>([&](auto) { return bin("|"); })
      .Case<arith::XOrIOp>([&](auto) { return bin("^"); })
      .Case<arith::ShLIOp>([&](auto) { return bin("<<"); })
      .Case<arith::ShRSIOp>([&](auto) { return bin(">>"); })
      .Case([&](arith::RemFOp) {
        return call(isFloatScalar(resultType) ? "fmodf" : "fmod");
      })
      .Case([&](arith::NegFOp) {
        expr = "(-" + a(0) + ")";
        return success();
      })
      .Case([&](math::RsqrtOp) {
        expr = std::string("(1 / ") +
               (isFloatScalar(resultType) ? "sqrtf(" : "sqrt(") + a(0) + "))";
        return success();
      })
      .Case([&](math::FmaOp) {
        return call(isFloatScalar(resultType) ? "fmaf" : "fma");
      })
      .Case([&](arith::MaximumFOp) { return call("stpar_rt::maximumf"); })
      .Case([&](arith::MinimumFOp) { return call("stpar_rt::minimumf"); })
      .Case([&](arith::MaxNumFOp) { return call("stpar_rt::maxnumf"); })
      .Case([&](arith::MinNumFOp) { return call("stpar_rt::minnumf"); })
      .Case([&](arith::MaxSIOp) { return call("stpar_rt::maxsi"); })
      .Case([&](arith::MinSIOp) { return call("stpar_rt::minsi"); })
      .Case([&](arith::FloorDivSIOp) { return call("stpar_rt::floordivsi"); })
      .Case([&](arith::CeilDivSIOp) { return call("stpar_rt::ceildivsi"); })
      .Case([&](arith::SelectOp) {
        expr = "(" + a(0) + " ? " + a(1) + " : " + a(2) + ")";
        return success();
      })
      .Case([&](arith::CmpFOp c) -> LogicalResult {
        std::string x = a(0), y = a(1);
        auto ord = [&](StringRef o) {
          return "(" + x + " " + o.str() + " " + y + ")";
        };
        auto unord = [&](StringRef negated) {
          return "!(" + x + " " + negated.str() + " " + y + ")";
        };
        using P = arith::CmpFPredicate;
        switch (c.getPredicate()) {
        case P::OEQ:
          expr = ord("==");
          break;
        case P::OGT:
          expr = ord(">");
          break;
        case P::OGE:
          expr = ord(">=");
          break;
        case P::OLT:
          expr = ord("<");
          break;
        case P::OLE:
          expr = ord("<=");
          break;
        case P::ONE:
          expr = "(" + ord("<") + " || " + ord(">") + ")";
          break;
        case P::UEQ:
          expr = "!(" + ord("<") + " || " + ord(">") + ")";
          break;
        case P::UGT:
          expr = unord("<=");
          break;
        case P::UGE:
          expr = unord("<");
          break;
        case P::ULT:
          expr = unord(">=");
          break;
        case P::ULE:
          expr = unord(">");
          break;
        case P::UNE:
          expr = ord("!=");
          break;
        case P::ORD:
          expr = "(" + ord("==") + " && " + "(" + y + " == " + y + "))";
          expr = "((" + x + " == " + x + ") && (" + y + " == " + y + "))";
          break;
        case P::UNO:
          expr = "((" + x + " != " + x + ") || (" + y + " != " + y + "))";
          break;
        case P::AlwaysTrue:
          expr = "true";
          break;
        case P::AlwaysFalse:
          expr = "false";
          break;
        }
        return success();
      })
      .Case([&](arith::CmpIOp c) -> LogicalResult {
        using P = arith::CmpIPredicate;
        switch (c.getPredicate()) {
        case P::eq:
          return bin("==");
        case P::ne:
          return bin("!=");
        case P::slt:
          return bin("<");
        case P::sle:
          return bin("<=");
        case P::sgt:
          return bin(">");
        case P::sge:
          return bin(">=");
        case P::ult:
        case P::ule:
        case P::ugt:
        case P::uge: {
          const char *o = c.getPredicate() == P::ult   ? "<"
                          : c.getPredicate() == P::ule ? "<="
                          : c.getPredicate() == P::ugt ? ">"
                                                       : ">=";
          expr = "(static_cast<uint64_t>(" + a(0) + ") " + o +
                 " static_cast<uint64_t>(" + a(1) + "))";
          return success();
        }
        }
        return failure();
      })
      .Case<arith::IndexCastOp, arith::IndexCastUIOp, arith::SIToFPOp,
            arith::FPToSIOp, arith::ExtFOp, arith::TruncFOp, arith::ExtSIOp,
            arith::FPToUIOp>([&](auto) { return cast(); })
      .Case<arith::UIToFPOp, arith::ExtUIOp>([&](auto) -> LogicalResult {
        // Unsigned source: go through the unsigned type of its width.
        Type src = op->getOperand(0).getType();
        if (src.isInteger(1)) {
          if (failed(cast()))
            return failure();
          return success();
        }
        auto info = getElementInfo(resultType);
        unsigned width = src.getIntOrFloatBitWidth();
        expr = std::string("static_cast<") + info->scalar + ">(static_cast<uint" +
               std::to_string(width) + "_t>(" + a(0) + "))";
        return success();
      })
      .Case([&](arith::TruncIOp) -> LogicalResult {
        if (resultType.isInteger(1)) {
          expr = "((" + a(0) + " & 1) != 0)";
          return success();
        }
        return cast();
      })
      .Default([&](Operation *) { return failure(); });
}

//===----------------------------------------------------------------------===//
// linalg.generic
//===----------------------------------------------------------------------===//

/// Row-major strides of a static shape.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

std::string affineString(AffineExpr e, ArrayRef<std::string> dims) {
  switch (e.getKind()) {
  case AffineExprKind::DimId:
    return dims[cast<AffineDimExpr>(e).getPosition()];
  case AffineExprKind::Constant:
    return std::to_string(cast<AffineConstantExpr>(e).getValue());
  case AffineExprKind::SymbolId:
    return "<symbol>";
  default:
    break;
  }
  auto b = cast<AffineBinaryOpExpr>(e);
  std::string l = affineString(b.getLHS(), dims),
              r = affineString(b.getRHS(), dims);
  switch (e.getKind()) {
  case AffineExprKind::Add:
    return "(" + l + " + " + r + ")";
  case AffineExprKind::Mul:
    return "(" + l + " * " + r + ")";
  case AffineExprKind::FloorDiv:
    return "stpar_rt::floordivsi<int64_t>(" + l + ", " + r + ")";
  case AffineExprKind::CeilDiv:
    return "stpar_rt::ceildivsi<int64_t>(" + l + ", " + r + ")";
  case AffineExprKind::Mod:
    return "stpar_rt::affine_mod<int64_t>(" + l + ", " + r + ")";
  default:
    return "<?>";
  }
}

/// Linear element index of an operand of shape `shape` at `map(dims)`.
std::string linearIndex(AffineMap map, ArrayRef<int64_t> shape,
                        ArrayRef<std::string> dims) {
  SmallVector<int64_t> strides = stridesOf(shape);
  std::string s;
  for (unsigned i = 0; i < map.getNumResults(); ++i) {
    AffineExpr e = map.getResult(i);
    if (auto c = dyn_cast<AffineConstantExpr>(e); c && c.getValue() == 0)
      continue;
    if (!s.empty())
      s += " + ";
    s += affineString(e, dims);
    if (strides[i] != 1)
      s += " * " + std::to_string(strides[i]);
  }
  return s.empty() ? "0" : s;
}

LogicalResult Printer::emitGeneric(linalg::GenericOp op) {
  Block &payload = op.getRegion().front();
  SmallVector<int64_t> sizes = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  unsigned numLoops = sizes.size();
  bool hasReduction = llvm::any_of(
      iters, [](auto t) { return t == utils::IteratorType::reduction; });
  for (int64_t s : sizes)
    if (ShapedType::isDynamic(s))
      return op.emitError("cannot emit a linalg.generic with dynamic loop "
                          "ranges");
  auto maps = op.getIndexingMapsArray();
  unsigned numIn = op.getNumDpsInputs(), numOut = op.getNumDpsInits();
  // Outputs may only be indexed by parallel dims (one thread per point).
  for (unsigned o = 0; o < numOut; ++o)
    for (AffineExpr e : maps[numIn + o].getResults())
      if (auto d = dyn_cast<AffineDimExpr>(e);
          d ? iters[d.getPosition()] != utils::IteratorType::parallel
            : !isa<AffineConstantExpr>(e))
        return op.emitError("cannot emit a linalg.generic whose outputs are "
                            "not indexed by parallel dims alone");

  // Results.
  SmallVector<std::string> results;
  SmallVector<bool> needInit;
  for (unsigned o = 0; o < numOut; ++o) {
    bool init = hasReduction ||
                !payload.getArgument(numIn + o).use_empty();
    needInit.push_back(init);
    results.push_back(newTensor(op.getResult(o),
                                init ? name(op.getDpsInitOperand(o)->get())
                                     : ""));
  }

  // Captured values.
  llvm::SetVector<Value> captures;
  op.getRegion().walk([&](Operation *inner) {
    for (Value v : inner->getOperands())
      if (!op->isAncestor(v.getParentBlock()->getParentOp()) ||
          v.getParentBlock()->getParentOp() == op.getOperation()
              ? !op.getRegion().isAncestor(v.getParentRegion())
              : false)
        captures.insert(v);
  });

  std::string fn = "generic" + std::to_string(nextKernel++);
  std::string params, args;
  auto addParam = [&](StringRef decl, StringRef arg) {
    if (!params.empty()) {
      params += ", ";
      args += ", ";
    }
    params += decl.str();
    args += arg.str();
  };
  const char *restrict_ = cuda ? "__restrict__" : "__restrict";
  for (unsigned i = 0; i < numIn; ++i) {
    Value v = op.getDpsInputOperand(i)->get();
    if (auto t = tensorType(v)) {
      auto info = getElementInfo(t.getElementType());
      addParam(std::string("const ") + info->storage + " *" + restrict_ +
                   " in" + std::to_string(i),
               name(v) + ".data()");
    } else {
      auto info = getElementInfo(v.getType());
      addParam(std::string(info->scalar) + " in" + std::to_string(i), name(v));
    }
  }
  for (unsigned o = 0; o < numOut; ++o) {
    auto info = getElementInfo(tensorType(op.getResult(o)).getElementType());
    addParam(std::string(info->storage) + " *" + restrict_ + " out" +
                 std::to_string(o),
             results[o] + ".data()");
  }
  DenseMap<Value, std::string> local;
  for (auto [i, v] : llvm::enumerate(captures)) {
    std::string c = "cap" + std::to_string(i);
    local[v] = c;
    if (auto t = tensorType(v)) {
      auto info = getElementInfo(t.getElementType());
      addParam(std::string("const ") + info->storage + " *" + c, name(v) + ".data()");
    } else {
      auto info = getElementInfo(v.getType());
      if (!info)
        return op.emitError("cannot emit a captured value of type ")
               << v.getType();
      addParam(std::string(info->scalar) + " " + c, name(v));
    }
  }

  // The function / kernel.
  std::string text;
  llvm::raw_string_ostream k(text);
  k << "// " << locString(op.getLoc()) << "\n";
  k << (cuda ? "__global__ void " : "static void ") << fn << "(" << params
    << ") {\n";
  SmallVector<std::string> dims;
  for (unsigned d = 0; d < numLoops; ++d)
    dims.push_back("d" + std::to_string(d));
  int depth = 1;
  auto ind = [&]() -> llvm::raw_ostream & {
    for (int i = 0; i < depth; ++i)
      k << "  ";
    return k;
  };
  int64_t parallelPoints = 1;
  for (unsigned d = 0; d < numLoops; ++d)
    if (iters[d] == utils::IteratorType::parallel)
      parallelPoints *= sizes[d];
  if (cuda) {
    ind() << "int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + "
             "threadIdx.x;\n";
    ind() << "if (tid >= " << parallelPoints << ") return;\n";
    for (unsigned d = numLoops; d-- > 0;) {
      if (iters[d] != utils::IteratorType::parallel)
        continue;
      ind() << "const int64_t d" << d << " = tid % " << sizes[d]
            << "; tid /= " << sizes[d] << ";\n";
    }
  } else {
    for (unsigned d = 0; d < numLoops; ++d) {
      if (iters[d] != utils::IteratorType::parallel)
        continue;
      ind() << "for (int64_t d" << d << " = 0; d" << d << " < " << sizes[d]
            << "; ++d" << d << ") {\n";
      ++depth;
    }
  }
  // Accumulators.
  for (unsigned o = 0; o < numOut; ++o) {
    auto t = tensorType(op.getResult(o));
    auto info = getElementInfo(t.getElementType());
    std::string idx = linearIndex(maps[numIn + o], t.getShape(), dims);
    local[payload.getArgument(numIn + o)] = "acc" + std::to_string(o);
    ind() << info->scalar << " acc" << o << " = "
          << (needInit[o] ? "out" + std::to_string(o) + "[" + idx + "]"
                          : std::string(info->scalar) + "()")
          << ";\n";
  }
  int parallelDepth = depth;
  for (unsigned d = 0; d < numLoops; ++d) {
    if (iters[d] != utils::IteratorType::reduction)
      continue;
    ind() << "for (int64_t d" << d << " = 0; d" << d << " < " << sizes[d]
          << "; ++d" << d << ") {\n";
    ++depth;
  }
  for (unsigned i = 0; i < numIn; ++i) {
    BlockArgument arg = payload.getArgument(i);
    if (arg.use_empty())
      continue;
    Value v = op.getDpsInputOperand(i)->get();
    auto info = getElementInfo(arg.getType());
    std::string a = "a" + std::to_string(i);
    local[arg] = a;
    if (auto t = tensorType(v))
      ind() << "const " << info->scalar << " " << a << " = in" << i << "["
            << linearIndex(maps[i], t.getShape(), dims) << "];\n";
    else
      ind() << "const " << info->scalar << " " << a << " = in" << i << ";\n";
  }
  int tmp = 0;
  auto nameOf = [&](Value v) -> std::string {
    auto it = local.find(v);
    return it != local.end() ? it->second : "<?>";
  };
  for (Operation &inner : payload) {
    if (auto yield = dyn_cast<linalg::YieldOp>(inner)) {
      for (auto [o, v] : llvm::enumerate(yield.getOperands()))
        ind() << "acc" << o << " = " << nameOf(v) << ";\n";
      continue;
    }
    if (inner.getNumResults() != 1)
      return inner.emitError("cannot emit '")
             << inner.getName() << "' in a linalg.generic body";
    auto info = getElementInfo(inner.getResult(0).getType());
    if (!info)
      return inner.emitError("cannot emit a value of type ")
             << inner.getResult(0).getType();
    std::string expr;
    if (auto index = dyn_cast<linalg::IndexOp>(inner)) {
      expr = dims[index.getDim()];
    } else if (auto extract = dyn_cast<tensor::ExtractOp>(inner)) {
      auto t = extract.getTensor().getType();
      SmallVector<int64_t> strides = stridesOf(t.getShape());
      std::string idx;
      for (auto [i, v] : llvm::enumerate(extract.getIndices()))
        idx += (i ? " + " : "") + nameOf(v) + " * " + std::to_string(strides[i]);
      expr = nameOf(extract.getTensor()) + "[" + (idx.empty() ? "0" : idx) + "]";
    } else if (failed(emitScalar(&inner, nameOf, expr))) {
      return inner.emitError("cannot emit '")
             << inner.getName() << "' in a linalg.generic body for the "
             << getEmitTargetName(target) << " target";
    }
    std::string n = "s" + std::to_string(tmp++);
    local[inner.getResult(0)] = n;
    ind() << "const " << info->scalar << " " << n << " = " << expr << ";\n";
  }
  while (depth > parallelDepth) {
    --depth;
    ind() << "}\n";
  }
  for (unsigned o = 0; o < numOut; ++o) {
    auto t = tensorType(op.getResult(o));
    auto info = getElementInfo(t.getElementType());
    ind() << "out" << o << "[" << linearIndex(maps[numIn + o], t.getShape(), dims)
          << "] = static_cast<" << info->storage << ">(acc" << o << ");\n";
  }
  while (depth > 1) {
    --depth;
    ind() << "}\n";
  }
  k << "}\n\n";
  kernelOs << text;
  if (cuda)
    line() << fn << "<<<" << (parallelPoints + 255) / 256
           << ", 256, 0, ctx.compute>>>(" << args << ");\n"
           << std::string(indent * 2, ' ') << "STP_CUDA(cudaGetLastError());\n";
  else
    line() << fn << "(" << args << ");\n";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// A runtime call (-stp-lower-collectives, -stp-lower-contractions):
/// `callee(args..., results...)`;
/// an `index` argument names that operand's buffer, an opaque or integer
/// argument is printed as it is, and each tensor result's planned buffer is
/// passed after the arguments.
LogicalResult Printer::emitCall(emitc::CallOpaqueOp call) {
  if (call.getTemplateArgs())
    return call.emitError("cannot emit a call with template arguments");
  if (auto step = call->getAttrOfType<StringAttr>("stp.plan_step"))
    line() << "// stp.plan_step: " << step.getValue() << "\n";
  std::string text = call.getCallee().str() + "(";
  bool first = true;
  auto append = [&](const std::string &arg) {
    text += (first ? "" : ", ") + arg;
    first = false;
  };
  if (ArrayAttr args = call.getArgsAttr()) {
    for (Attribute arg : args) {
      if (auto i = dyn_cast<IntegerAttr>(arg)) {
        if (i.getType().isIndex()) {
          uint64_t n = i.getValue().getZExtValue();
          if (n >= call->getNumOperands())
            return call.emitError("call argument refers to operand #")
                   << n << " of " << call->getNumOperands();
          append(name(call->getOperand(n)));
        } else if (i.getType().isInteger(1)) {
          append(i.getValue().isZero() ? "false" : "true");
        } else {
          append(std::to_string(i.getValue().getSExtValue()));
        }
      } else if (auto o = dyn_cast<emitc::OpaqueAttr>(arg)) {
        append(o.getValue().str());
      } else {
        return call.emitError("cannot emit call argument ") << arg;
      }
    }
  } else {
    for (Value v : call->getOperands())
      append(name(v));
  }
  // A result that accumulates (stp.accumulate) starts as that operand.
  std::string init;
  if (auto acc = call->getAttrOfType<IntegerAttr>(
          stp::STPDialect::kAccumulateAttrName))
    init = name(call->getOperand(acc.getInt()));
  for (Value result : call->getResults()) {
    if (!tensorType(result))
      return call.emitError("cannot emit a call with a non-tensor result");
    append(newTensor(result, init));
  }
  line() << text << ");\n";
  return success();
}

//===----------------------------------------------------------------------===//
// Blocks, loops and the other ops
//===----------------------------------------------------------------------===//

LogicalResult Printer::emitBlock(Block &block, bool profile) {
  // In the order -stp-schedule-collectives chose; its waits are calls
  // (-stp-lower-collectives).
  for (Operation &op : block) {
    // With STPAR_PROFILE set, the runtime times the span from each op of
    // the function body to the next (docs/emitted-code.md, "Profile"),
    // labelled by ONNX node and training-step phase.
    if (profile &&
        !isa<arith::ConstantOp, tensor::EmptyOp, tensor::ExpandShapeOp,
             tensor::CollapseShapeOp, tensor::CastOp>(op)) {
      std::string label = stp::getNodeName(op.getLoc());
      if (label.empty())
        label = op.getName().getStringRef().str();
      auto phase =
          op.getAttrOfType<StringAttr>(stp::STPDialect::kPhaseAttrName);
      auto call = dyn_cast<emitc::CallOpaqueOp>(op);
      // Collectives and waits for them: communication (whatever phase
      // needed them; the plan step names it).
      bool comm = op.hasAttr(stp::STPDialect::kCollectiveAttrName) ||
                  isa<shard::ShardDialect>(op.getDialect()) ||
                  (call && call.getCallee() == "stpar_rt::waitTransfer");
      label +=
          isa<func::ReturnOp>(op) ? std::string(" [end]")
          : comm                  ? std::string(" [comm]")
                 : " [" + (phase ? phase.str() : std::string("forward")) + "]";
      std::string quoted = "\"";
      for (char ch : label)
        if (ch == '"' || ch == '\\')
          quoted += std::string("\\") + ch;
        else if (ch >= ' ' && ch < 127)
          quoted += ch;
      quoted += "\"";
      line() << "stpar_rt::profile(ctx, " << quoted << ");\n";
    }
    if (failed(emitOp(&op)))
      return failure();
  }
  return success();
}

LogicalResult Printer::emitFor(scf::ForOp op) {
  // Iteration arguments become variables assigned at the yield.
  SmallVector<std::string> iters;
  for (auto [init, arg] :
       llvm::zip(op.getInitArgs(), op.getRegionIterArgs())) {
    std::string n = define(arg);
    iters.push_back(n);
    line() << "auto " << n << " = " << name(init) << ";\n";
  }
  std::string iv = define(op.getInductionVar());
  std::string step = "step" + std::to_string(nextId++);
  // The memory plan gives carried values (the temporal primitive's double
  // buffers among them) an even- and an odd-step buffer.
  std::string savedParity = loopParity;
  loopParity = step + " & 1";
  line() << "int64_t " << step << " = 0;\n";
  line() << "for (int64_t " << iv << " = " << name(op.getLowerBound()) << "; "
         << iv << " < " << name(op.getUpperBound()) << "; " << iv
         << " += " << name(op.getStep()) << ", ++" << step << ") {\n";
  ++indent;
  if (failed(emitBlock(*op.getBody())))
    return failure();
  --indent;
  line() << "}\n";
  loopParity = savedParity;
  for (auto [res, it] : llvm::zip(op.getResults(), iters)) {
    std::string n = define(res);
    line() << "auto " << n << " = " << it << ";\n";
  }
  return success();
}

LogicalResult Printer::emitSwitch(scf::IndexSwitchOp op) {
  // The pipeline ranks' programs (-stp-pipeline-stages): a C++ switch on
  // the rank's pp index; each case assigns the results it yields.
  SmallVector<std::string> results;
  for (Value r : op.getResults()) {
    auto type = dyn_cast<RankedTensorType>(r.getType());
    std::optional<ElementInfo> info =
        type ? getElementInfo(type.getElementType()) : std::nullopt;
    if (!info)
      return op.emitError("cannot emit an scf.index_switch result of type ")
             << r.getType();
    std::string n = "sw" + std::to_string(nextId++);
    line() << "stpar_rt::Tensor<" << info->storage << "> " << n << ";\n";
    results.push_back(n);
  }
  switchResults[op] = results;
  line() << "switch (" << name(op.getArg()) << ") {\n";
  auto emitCase = [&](Region &region) -> LogicalResult {
    ++indent;
    if (failed(emitBlock(region.front())))
      return failure();
    line() << "break;\n";
    --indent;
    line() << "}\n";
    return success();
  };
  for (auto [value, region] : llvm::zip(op.getCases(), op.getCaseRegions())) {
    line() << "case " << value << ": {\n";
    if (failed(emitCase(region)))
      return failure();
  }
  line() << "default: {\n";
  if (failed(emitCase(op.getDefaultRegion())))
    return failure();
  line() << "}\n";
  for (auto [r, n] : llvm::zip(op.getResults(), results))
    names[r] = n;
  return success();
}

LogicalResult Printer::emitOp(Operation *op) {
  // A runtime call is labelled with the collective it performs, or its
  // callee.
  std::string what = op->getName().getStringRef().str();
  if (auto kind = op->getAttrOfType<StringAttr>(
          stp::STPDialect::kCollectiveAttrName))
    what = kind.getValue().str();
  else if (auto call = dyn_cast<emitc::CallOpaqueOp>(op))
    what = call.getCallee().str();
  line() << "// " << what << " " << locString(op->getLoc()) << "\n";
  auto unsupported = [&]() {
    return op->emitError("cannot emit '")
           << op->getName() << "' for the " << getEmitTargetName(target)
           << " target (unsupported op)";
  };
  for (Type t : op->getResultTypes()) {
    Type e = getElementTypeOrSelf(t);
    if (!getElementInfo(e))
      return op->emitError("cannot emit '")
             << op->getName() << "': element type " << e
             << " is not supported by the " << getEmitTargetName(target)
             << " target";
    if (auto rt = dyn_cast<RankedTensorType>(t); rt && !rt.hasStaticShape())
      return op->emitError("cannot emit '")
             << op->getName() << "': dynamic shapes are not supported";
  }
  if (auto call = dyn_cast<emitc::CallOpaqueOp>(op))
    return emitCall(call);
  if (stp::isCollective(op))
    return op->emitError("cannot emit '")
           << op->getName()
           << "': collectives are printed as the runtime calls "
              "-stp-lower-collectives makes of them";

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        if (auto t = tensorType(c.getResult())) {
          auto info = getElementInfo(t.getElementType());
          auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
          if (!dense)
            return unsupported();
          std::string n = define(c.getResult());
          auto lit = [&](Attribute a) {
            if (auto f = dyn_cast<FloatAttr>(a))
              return floatLiteral(f.getValue(), t.getElementType());
            auto i = cast<IntegerAttr>(a);
            if (t.getElementType().isInteger(1))
              return std::string(i.getValue().isZero() ? "0" : "1");
            return intLiteral(i.getValue().getSExtValue());
          };
          if (dense.isSplat()) {
            line() << "auto " << n << " = stpar_rt::fullAt<" << info->storage
                   << ">(ctx, " << arenaOffset(c.getResult()) << ", "
                   << t.getNumElements() << ", "
                   << lit(dense.getSplatValue<Attribute>()) << ");\n";
            return success();
          }
          std::string k = "kConst" + std::to_string(nextConst++);
          constOs << "static const " << info->storage << " " << k << "[] = {";
          int col = 0;
          for (Attribute a : dense.getValues<Attribute>()) {
            constOs << (col ? ", " : "") << lit(a);
            if (++col % 8 == 0)
              constOs << "\n    ";
          }
          constOs << "};\n";
          line() << "auto " << n << " = stpar_rt::fromHostAt<"
                 << info->storage << ">(ctx, " << arenaOffset(c.getResult())
                 << ", " << k << ", " << t.getNumElements() << ");\n";
          return success();
        }
        std::string expr;
        if (failed(emitScalar(op, [&](Value v) { return name(v); }, expr)))
          return unsupported();
        auto info = getElementInfo(c.getType());
        line() << "const " << info->scalar << " " << define(c.getResult())
               << " = " << expr << ";\n";
        return success();
      })
      .Case([&](tensor::EmptyOp e) {
        newTensor(e.getResult());
        return success();
      })
      .Case<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
            tensor::ReshapeOp>([&](Operation *r) {
        line() << "auto " << define(r->getResult(0)) << " = "
               << name(r->getOperand(0)) << "; // same buffer\n";
        return success();
      })
      .Case([&](tensor::ExtractSliceOp s) {
        std::string out = newTensor(s.getResult());
        line() << "stpar_rt::extractSlice(ctx, " << name(s.getSource()) << ", "
               << stp::getRuntimeShapeLiteral(s.getSourceType().getShape())
               << ", " << out << ", " << ofrList(s.getMixedOffsets()) << ", "
               << ofrList(s.getMixedSizes()) << ", "
               << ofrList(s.getMixedStrides()) << ");\n";
        return success();
      })
      .Case([&](tensor::InsertSliceOp s) {
        std::string out = newTensor(s.getResult(), name(s.getDest()));
        line() << "stpar_rt::insertSlice(ctx, " << name(s.getSource()) << ", "
               << out << ", "
               << stp::getRuntimeShapeLiteral(s.getDestType().getShape())
               << ", " << ofrList(s.getMixedOffsets()) << ", "
               << ofrList(s.getMixedSizes()) << ", "
               << ofrList(s.getMixedStrides()) << ");\n";
        return success();
      })
      .Case([&](tensor::ExtractOp e) {
        auto t = e.getTensor().getType();
        SmallVector<int64_t> strides = stridesOf(t.getShape());
        std::string idx;
        for (auto [i, v] : llvm::enumerate(e.getIndices()))
          idx += (i ? " + " : "") + name(v) + " * " + std::to_string(strides[i]);
        auto info = getElementInfo(e.getType());
        line() << "const " << info->scalar << " " << define(e.getResult())
               << " = stpar_rt::readScalar(ctx, " << name(e.getTensor()) << ", "
               << (idx.empty() ? "0" : idx) << ");\n";
        return success();
      })
      .Case([&](tensor::ConcatOp c) {
        auto info = getElementInfo(c.getType().getElementType());
        std::string out = newTensor(c.getResult());
        std::string parts, shapes;
        for (auto [i, v] : llvm::enumerate(c.getInputs())) {
          parts += (i ? ", " : "") + name(v);
          shapes += (i ? ", " : "") +
                    stp::getRuntimeShapeLiteral(tensorType(v).getShape());
        }
        line() << "stpar_rt::concat(ctx, std::vector<stpar_rt::Tensor<"
               << info->storage << ">>{" << parts
               << "}, std::vector<stpar_rt::Shape>{" << shapes << "}, " << out
               << ", " << c.getDim() << ");\n";
        return success();
      })
      .Case([&](linalg::FillOp f) -> LogicalResult {
        auto t = tensorType(f.getResult(0));
        if (!t)
          return unsupported();
        auto info = getElementInfo(t.getElementType());
        std::string offset = arenaOffset(f.getResult(0));
        line() << "auto " << define(f.getResult(0)) << " = stpar_rt::fullAt<"
               << info->storage << ">(ctx, " << offset << ", "
               << t.getNumElements() << ", "
               << "static_cast<" << info->storage << ">("
               << name(f.getInputs()[0]) << "));\n";
        return success();
      })
      .Case([&](linalg::TransposeOp tr) {
        std::string out = newTensor(tr.getResult()[0]);
        line() << "stpar_rt::transpose(ctx, " << name(tr.getInput()) << ", "
               << out << ", "
               << stp::getRuntimeShapeLiteral(
                      tr.getInput().getType().getShape())
               << ", " << stp::getRuntimeShapeLiteral(tr.getPermutation())
               << ");\n";
        return success();
      })
      .Case([&](linalg::SoftmaxOp s) {
        std::string out = newTensor(s.getResult()[0]);
        line() << "stpar_rt::softmax(ctx, " << name(s.getInput()) << ", " << out
               << ", "
               << stp::getRuntimeShapeLiteral(
                      s.getInputOperandType().getShape())
               << ", " << s.getDimension() << ");\n";
        return success();
      })
      .Case([&](linalg::GenericOp g) { return emitGeneric(g); })
      .Case([&](stp::LayerNormOp ln) {
        std::string out = newTensor(ln.getResult());
        std::string bias =
            ln.getBias() ? "&" + name(ln.getBias())
                         : typedNull(tensorType(ln.getInput()));
        line()
            << "stpar_rt::layerNorm(ctx, " << name(ln.getInput()) << ", "
            << name(ln.getScale()) << ", "
            << stp::getRuntimeShapeLiteral(tensorType(ln.getScale()).getShape())
            << ", " << bias << ", "
            << stp::getRuntimeShapeLiteral(
                   ln.getBias() ? tensorType(ln.getBias()).getShape()
                                : ArrayRef<int64_t>())
            << ", " << out << ", "
            << stp::getRuntimeShapeLiteral(tensorType(ln.getInput()).getShape())
            << ", " << ln.getAxis() << ", "
            << floatLiteral(ln.getEpsilonAttr().getValue(),
                            Float32Type::get(op->getContext()))
            << ");\n";
        return success();
      })
      .Case([&](stp::RMSNormOp rn) {
        std::string out = newTensor(rn.getResult());
        line()
            << "stpar_rt::rmsNorm(ctx, " << name(rn.getInput()) << ", "
            << name(rn.getScale()) << ", "
            << stp::getRuntimeShapeLiteral(tensorType(rn.getScale()).getShape())
            << ", " << out << ", "
            << stp::getRuntimeShapeLiteral(tensorType(rn.getInput()).getShape())
            << ", " << rn.getAxis() << ", "
            << floatLiteral(rn.getEpsilonAttr().getValue(),
                            Float32Type::get(op->getContext()))
            << ");\n";
        return success();
      })
      .Case([&](stp::AttentionOp at) {
        auto q = tensorType(at.getQuery()).getShape();
        auto k = tensorType(at.getKey()).getShape();
        auto v = tensorType(at.getValue()).getShape();
        std::string out = newTensor(at.getResult());
        std::string mask = at.getMask()
                               ? "&" + name(at.getMask())
                               : typedNull(tensorType(at.getQuery()));
        line() << "stpar_rt::attention(ctx, " << name(at.getQuery()) << ", "
               << name(at.getKey()) << ", " << name(at.getValue()) << ", "
               << mask << ", "
               << stp::getRuntimeShapeLiteral(
                      at.getMask() ? tensorType(at.getMask()).getShape()
                                   : ArrayRef<int64_t>())
               << ", " << out << ", " << q[0] << ", " << q[1] << ", " << q[2]
               << ", " << q[3] << ", " << k[1] << ", " << k[2] << ", " << v[3]
               << ", "
               << floatLiteral(at.getScaleAttr().getValue(),
                               Float32Type::get(op->getContext()))
               << ", " << (at.getCausal() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::MoERouteOp r) {
        auto t = tensorType(r.getTokens()).getShape();
        std::string gates = newTensor(r.getGates());
        std::string experts = newTensor(r.getExperts());
        line() << "stpar_rt::moeRoute(ctx, " << name(r.getTokens()) << ", "
               << name(r.getRouter()) << ", " << gates << ", " << experts
               << ", " << t[0] << ", " << t[1] << ", "
               << tensorType(r.getRouter()).getDimSize(1) << ", " << r.getTopK()
               << ", " << (r.getNormalize() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::MoEDispatchOp dp) {
        auto t = tensorType(dp.getTokens()).getShape();
        auto b = tensorType(dp.getBuffer()).getShape();
        std::string buffer = newTensor(dp.getBuffer());
        std::string counts = newTensor(dp.getCounts());
        std::string slots = newTensor(dp.getSlots());
        std::string weights = dp.getWeights()
                                  ? "&" + name(dp.getWeights())
                                  : typedNull(tensorType(dp.getTokens()));
        line() << "stpar_rt::moeDispatch(ctx, " << name(dp.getTokens()) << ", "
               << name(dp.getExperts()) << ", " << weights << ", " << buffer
               << ", " << counts << ", " << slots << ", " << t[0] << ", "
               << t[1] << ", " << tensorType(dp.getExperts()).getDimSize(1)
               << ", " << b[0] << ", " << b[1] << ");\n";
        return success();
      })
      .Case([&](stp::MoEExpertsOp ex) {
        auto b = tensorType(ex.getBuffer()).getShape();
        int activation = getMoEActivationCode(ex.getActivation());
        std::string mul = ex.getWMul() ? "&" + name(ex.getWMul())
                                       : typedNull(tensorType(ex.getWIn()));
        std::string out = newTensor(ex.getResult());
        // The kept A and U (training), else null.
        std::string kept[2];
        for (unsigned i = 0; i < 2; ++i)
          kept[i] = i < ex.getHidden().size()
                        ? "&" + newTensor(ex.getHidden()[i])
                        : typedNullResult(tensorType(ex.getWIn()));
        line() << "stpar_rt::moeExperts(ctx, " << name(ex.getBuffer()) << ", "
               << name(ex.getCounts()) << ", " << name(ex.getWIn()) << ", "
               << mul << ", " << name(ex.getWOut()) << ", " << out << ", "
               << kept[0] << ", " << kept[1] << ", " << b[0] << ", " << b[1]
               << ", " << tensorType(ex.getCounts()).getDimSize(1) << ", "
               << b[2] << ", " << tensorType(ex.getWIn()).getDimSize(2) << ", "
               << activation << ", "
               << (ex.getBf16Operands() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::MoEExpertsGradOp ex) {
        auto b = tensorType(ex.getBuffer()).getShape();
        std::string mul = ex.getWMul() ? "&" + name(ex.getWMul())
                                       : typedNull(tensorType(ex.getWIn()));
        std::string dRows = newTensor(ex.getDRows());
        std::string dWIn = newTensor(ex.getDWIn());
        std::string dWMul = ex.getDWMul()
                                ? "&" + newTensor(ex.getDWMul())
                                : typedNullResult(tensorType(ex.getWIn()));
        std::string dWOut = newTensor(ex.getDWOut());
        // A and U as the forward kept them, else null (recomputed).
        std::string kept[2];
        for (unsigned i = 0; i < 2; ++i)
          kept[i] = i < ex.getHidden().size()
                        ? "&" + name(ex.getHidden()[i])
                        : typedNull(tensorType(ex.getWIn()));
        line() << "stpar_rt::moeExpertsGrad(ctx, " << name(ex.getBuffer())
               << ", " << name(ex.getDOut()) << ", " << name(ex.getCounts())
               << ", " << name(ex.getWIn()) << ", " << mul << ", "
               << name(ex.getWOut()) << ", " << kept[0] << ", " << kept[1]
               << ", " << dRows << ", " << dWIn << ", " << dWMul << ", "
               << dWOut << ", " << b[0] << ", " << b[1] << ", "
               << tensorType(ex.getCounts()).getDimSize(1) << ", " << b[2]
               << ", " << tensorType(ex.getWIn()).getDimSize(2) << ", "
               << getMoEActivationCode(ex.getActivation()) << ", "
               << (ex.getBf16Operands() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::MoEGateGradOp gg) {
        auto o = tensorType(gg.getOutputs()).getShape();
        auto sl = tensorType(gg.getSlots()).getShape();
        std::string out = newTensor(gg.getResult());
        line() << "stpar_rt::moeGateGrad(ctx, " << name(gg.getOutputs()) << ", "
               << name(gg.getSlots()) << ", " << name(gg.getExperts()) << ", "
               << name(gg.getDy()) << ", " << out << ", " << sl[0] << ", "
               << sl[1] << ", " << o[1] << ", " << o[2] << ");\n";
        return success();
      })
      .Case([&](stp::MoERouteGradOp rg) {
        auto t = tensorType(rg.getTokens()).getShape();
        std::string dTokens = newTensor(rg.getDTokens());
        std::string dRouter = newTensor(rg.getDRouter());
        line() << "stpar_rt::moeRouteGrad(ctx, " << name(rg.getTokens()) << ", "
               << name(rg.getRouter()) << ", " << name(rg.getExperts()) << ", "
               << name(rg.getDGates()) << ", " << dTokens << ", " << dRouter
               << ", " << t[0] << ", " << t[1] << ", "
               << tensorType(rg.getRouter()).getDimSize(1) << ", "
               << tensorType(rg.getExperts()).getDimSize(1) << ", "
               << (rg.getNormalize() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::MoECombineOp cb) {
        auto o = tensorType(cb.getOutputs()).getShape();
        auto g = tensorType(cb.getGates()).getShape();
        std::string out = newTensor(cb.getResult());
        line() << "stpar_rt::moeCombine(ctx, " << name(cb.getOutputs()) << ", "
               << name(cb.getSlots()) << ", " << name(cb.getExperts()) << ", "
               << name(cb.getGates()) << ", " << out << ", " << g[0] << ", "
               << g[1] << ", " << o[1] << ", " << o[2] << ");\n";
        return success();
      })
      .Case([&](stp::TopKOp tk) {
        std::string values = newTensor(tk.getValues());
        std::string indices = newTensor(tk.getIndices());
        line() << "stpar_rt::topk(ctx, " << name(tk.getInput()) << ", "
               << values << ", " << indices << ", "
               << stp::getRuntimeShapeLiteral(
                      tensorType(tk.getInput()).getShape())
               << ", " << tk.getAxis() << ", " << tk.getK() << ", "
               << (tk.getLargest() ? "true" : "false") << ");\n";
        return success();
      })
      .Case([&](stp::ScatterElementsOp sc) -> LogicalResult {
        int reduction = llvm::StringSwitch<int>(sc.getReduction())
                            .Case("none", 0)
                            .Case("add", 1)
                            .Case("mul", 2)
                            .Case("max", 3)
                            .Case("min", 4)
                            .Default(-1);
        if (reduction < 0)
          return unsupported();
        std::string out = newTensor(sc.getResult(), name(sc.getData()));
        line() << "stpar_rt::scatterElements(ctx, " << out << ", "
               << stp::getRuntimeShapeLiteral(
                      tensorType(sc.getData()).getShape())
               << ", " << name(sc.getIndices()) << ", " << name(sc.getUpdates())
               << ", "
               << stp::getRuntimeShapeLiteral(
                      tensorType(sc.getIndices()).getShape())
               << ", " << sc.getAxis() << ", " << reduction << ");\n";
        return success();
      })
      .Case([&](shard::ProcessMultiIndexOp p) {
        SmallVector<int64_t> axes(p.getAxes().begin(), p.getAxes().end());
        if (axes.empty())
          for (size_t a = 0; a < gridShape.size(); ++a)
            axes.push_back(a);
        for (auto [r, a] : llvm::zip(p.getResult(), axes))
          line() << "const int64_t " << define(r) << " = ctx.coords[" << a
                 << "];\n";
        return success();
      })
      .Case([&](shard::ProcessLinearIndexOp p) {
        line() << "const int64_t " << define(p.getResult())
               << " = ctx.rank;\n";
        return success();
      })
      .Case([&](shard::GridShapeOp p) {
        SmallVector<int64_t> axes(p.getAxes().begin(), p.getAxes().end());
        if (axes.empty())
          for (size_t a = 0; a < gridShape.size(); ++a)
            axes.push_back(a);
        for (auto [r, a] : llvm::zip(p.getResult(), axes))
          line() << "const int64_t " << define(r) << " = " << gridShape[a]
                 << ";\n";
        return success();
      })
      .Case([&](scf::ForOp f) { return emitFor(f); })
      .Case([&](scf::IndexSwitchOp sw) { return emitSwitch(sw); })
      .Case([&](scf::YieldOp y) -> LogicalResult {
        if (auto sw = dyn_cast<scf::IndexSwitchOp>(y->getParentOp())) {
          for (auto [n, v] : llvm::zip(switchResults[sw], y.getOperands()))
            line() << n << " = " << name(v) << ";\n";
          return success();
        }
        auto forOp = dyn_cast<scf::ForOp>(y->getParentOp());
        if (!forOp)
          return unsupported();
        // Read all yielded values before assigning (they may permute).
        SmallVector<std::string> tmps;
        for (Value v : y.getOperands()) {
          std::string t = "next" + std::to_string(nextId++);
          line() << "auto " << t << " = " << name(v) << ";\n";
          tmps.push_back(t);
        }
        for (auto [arg, t] : llvm::zip(forOp.getRegionIterArgs(), tmps))
          line() << name(arg) << " = " << t << ";\n";
        return success();
      })
      .Case([&](func::ReturnOp r) -> LogicalResult {
        // A pipelined program's result comes from the first rank of the
        // pipeline rank that computes it (stp.pipeline_rank), else rank 0.
        auto func = r->getParentOfType<func::FuncOp>();
        auto pipeline = func->getAttrOfType<DictionaryAttr>(
            stp::STPDialect::kPipelineAttrName);
        int64_t stride = 1;
        if (pipeline)
          if (auto axis = pipeline.getAs<IntegerAttr>("grid_axis"))
            for (size_t a = axis.getInt() + 1; a < gridShape.size(); ++a)
              stride *= gridShape[a];
        for (auto [i, v] : llvm::enumerate(r.getOperands())) {
          auto owner = func.getResultAttrOfType<IntegerAttr>(
              i, stp::STPDialect::kPipelineRankAttrName);
          llvm::raw_ostream &out = line();
          out << "stpar_rt::storeOutput(ctx, " << i << ", " << name(v);
          if (owner)
            out << ", " << owner.getInt() * stride;
          out << ");\n";
        }
        return success();
      })
      .Default([&](Operation *) -> LogicalResult {
        if (op->getNumResults() == 1 && op->getNumRegions() == 0 &&
            !isa<RankedTensorType>(op->getResult(0).getType())) {
          std::string expr;
          if (succeeded(
                  emitScalar(op, [&](Value v) { return name(v); }, expr))) {
            auto info = getElementInfo(op->getResult(0).getType());
            line() << "const " << info->scalar << " "
                   << define(op->getResult(0)) << " = " << expr << ";\n";
            return success();
          }
        }
        return unsupported();
      });
}

//===----------------------------------------------------------------------===//
// The function, io.json, CMakeLists.txt
//===----------------------------------------------------------------------===//

/// An unpartitioned module (one rank) must not hold shard ops besides
/// the grid.
LogicalResult checkNoShardOps(ModuleOp module) {
  Operation *shardOp = nullptr;
  module.walk([&](Operation *op) {
    if (!shardOp && !isa<shard::GridOp>(op) &&
        isa<shard::ShardDialect>(op->getDialect()))
      shardOp = op;
  });
  if (!shardOp)
    return success();
  return shardOp->emitError("cannot emit '")
         << shardOp->getName()
         << "': the module is not partitioned (no stp.partitioned "
            "attribute) but holds shard ops";
}

std::string jsonString(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += llvm::formatv("\\u{0:x4}", int(c)).str();
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string jsonEntry(StringRef name, StringRef file, StringRef dtype,
                      ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "{\"name\": " << jsonString(name) << ", \"file\": \"" << file
     << "\", \"dtype\": \"" << dtype << "\", \"shape\": [";
  llvm::interleaveComma(shape, os);
  os << "]}";
  return s;
}

LogicalResult Printer::emitFunction() {
  // The arena of the memory plan (-stp-plan-memory): the rank's one
  // allocation.
  auto arena = func->getAttrOfType<DictionaryAttr>(
      stp::STPDialect::kArenaAttrName);
  auto argBuffers = func->getAttrOfType<DenseI64ArrayAttr>(
      stp::STPDialect::kArgBuffersAttrName);
  if (!arena || !argBuffers ||
      argBuffers.size() != static_cast<int64_t>(func.getNumArguments()))
    return func.emitError("cannot emit: the function has no memory plan "
                          "(run -stp-plan-memory)");
  auto total = [&](StringRef key) {
    auto v = arena.getAs<IntegerAttr>(key);
    return std::to_string(v ? v.getInt() : 0) + "ULL";
  };
  line() << "// Memory plan: arena " << total("arena") << " bytes, arguments "
         << total("arguments") << ", intermediates' live peak "
         << total("live_peak") << ".\n";
  line() << "ctx.reserveArena(" << total("arena") << ", " << total("arguments")
         << ", " << total("live_peak") << ");\n";
  auto argOffset = [&](BlockArgument arg) {
    return std::to_string(argBuffers[arg.getArgNumber()]) + "ULL";
  };
  int inputIndex = 0;
  for (BlockArgument arg : func.getArguments()) {
    auto local = tensorType(arg);
    if (!local || !local.hasStaticShape())
      return func.emitError("cannot emit argument #")
             << arg.getArgNumber() << ": it is not a statically shaped tensor";
    auto info = getElementInfo(local.getElementType());
    if (!info || info->dtype < 0)
      return func.emitError("cannot emit argument #")
             << arg.getArgNumber() << ": element type "
             << local.getElementType() << " is not supported";
    DictionaryAttr attrs = func.getArgAttrDict(arg.getArgNumber());
    FailureOr<SplitAxes> split = getSplit(attrs, local.getRank(), func.getLoc());
    if (failed(split))
      return failure();
    SmallVector<int64_t> global(local.getShape());
    for (int64_t d = 0; d < local.getRank(); ++d)
      for (int64_t a : (*split)[d]) {
        if (a < 0 || a >= static_cast<int64_t>(gridShape.size()))
          return func.emitError("stp.split of argument #")
                 << arg.getArgNumber() << " names grid axis " << a
                 << ", which the grid does not have";
        global[d] *= gridShape[a];
      }
    std::string n = define(arg);
    if (auto param = func.getArgAttrOfType<stp::ParamAttr>(arg.getArgNumber(),
                                                      "stp.param")) {
      line() << "// %arg" << arg.getArgNumber() << ": stp.param "
             << param.getName().getValue() << "\n";
      // Read in place at run time from the file #stp.param records (the
      // model's external data, or the .onnx file for embedded raw data).
      StringRef file = param.getFile() ? param.getFile().getValue() : "";
      line() << "auto " << n << " = stpar_rt::loadParam<" << info->storage
             << ">(ctx, " << argOffset(arg) << ", "
             << jsonString(param.getName().getValue()) << ", "
             << jsonString(file) << ", " << param.getOffset() << "ULL, "
             << stp::getRuntimeShapeLiteral(global) << ", "
             << stp::getRuntimeShapeLiteral(local.getShape()) << ", "
             << blockOffsets(local, *split) << ");\n";
      // io.json lists where each parameter's values are (tools that feed
      // updated weights to the next training step patch them there).
      std::string entry =
          jsonEntry(param.getName().getValue(), file, info->dtypeName, global);
      entry.insert(entry.size() - 1,
                   ", \"offset\": " + std::to_string(param.getOffset()));
      if (!ioParams.empty())
        ioParams += ",\n    ";
      ioParams += entry;
      continue;
    }
    StringRef onnxName;
    if (auto s = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   "stp.name"))
      onnxName = s.getValue();
    line() << "// %arg" << arg.getArgNumber() << ": input " << inputIndex
           << " " << onnxName << "\n";
    line() << "auto " << n << " = stpar_rt::loadInput<" << info->storage
           << ">(ctx, " << argOffset(arg) << ", " << inputIndex << ", "
           << stp::getRuntimeShapeLiteral(global) << ", "
           << stp::getRuntimeShapeLiteral(local.getShape()) << ", "
           << blockOffsets(local, *split) << ");\n";
    if (!ioInputs.empty())
      ioInputs += ",\n    ";
    ioInputs += jsonEntry(onnxName, "input_" + std::to_string(inputIndex) + ".bin",
                          info->dtypeName, global);
    ++inputIndex;
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto t = dyn_cast<RankedTensorType>(func.getResultTypes()[i]);
    if (!t || !t.hasStaticShape())
      return func.emitError("cannot emit result #")
             << i << ": it is not a statically shaped tensor";
    auto info = getElementInfo(t.getElementType());
    if (!info || info->dtype < 0)
      return func.emitError("cannot emit result #")
             << i << ": element type " << t.getElementType()
             << " is not supported";
    FailureOr<SplitAxes> split =
        getSplit(func.getResultAttrDict(i), t.getRank(), func.getLoc());
    if (failed(split))
      return failure();
    if (llvm::any_of(*split, [](auto &axes) { return !axes.empty(); }))
      return func.emitError("result #")
             << i << " is split (stp.split); results must be replicated";
    StringRef onnxName;
    if (auto s = func.getResultAttrOfType<StringAttr>(i, "stp.name"))
      onnxName = s.getValue();
    if (!ioOutputs.empty())
      ioOutputs += ",\n    ";
    ioOutputs += jsonEntry(onnxName, "output_" + std::to_string(i) + ".bin",
                           info->dtypeName, t.getShape());
  }
  return emitBlock(func.getBody().front(), /*profile=*/true);
}

std::string cmakeFor(bool cuda) {
  std::string s =
      "# Generated by stpar emit. Builds the per-rank program stpar_program.\n"
      "cmake_minimum_required(VERSION 3.18)\n";
  if (!cuda) {
    s += "project(stpar_program LANGUAGES CXX)\n"
         "if(NOT CMAKE_BUILD_TYPE)\n"
         "  set(CMAKE_BUILD_TYPE Release)\n"
         "endif()\n"
         "set(CMAKE_CXX_STANDARD 17)\n"
         "set(CMAKE_CXX_STANDARD_REQUIRED ON)\n"
         "find_package(MPI REQUIRED COMPONENTS CXX)\n"
         "add_executable(stpar_program program.cpp)\n"
         "target_include_directories(stpar_program PRIVATE "
         "${CMAKE_CURRENT_SOURCE_DIR})\n"
         "target_link_libraries(stpar_program PRIVATE MPI::MPI_CXX)\n";
    return s;
  }
  s +=
      "project(stpar_program LANGUAGES CXX)\n"
      "enable_language(CUDA)\n"
      "if(NOT CMAKE_BUILD_TYPE)\n"
      "  set(CMAKE_BUILD_TYPE Release)\n"
      "endif()\n"
      "set(CMAKE_CXX_STANDARD 17)\n"
      "set(CMAKE_CUDA_STANDARD 17)\n"
      "set(STPAR_CUDA_ARCHITECTURES \"80;90\" CACHE STRING\n"
      "  \"GPU architectures to build for (CUDA_ARCHITECTURES)\")\n"
      "option(STPAR_WITH_MPI\n"
      "  \"Start the ranks with MPI (OFF: one rank only, no MPI needed)\" ON)\n"
      "find_package(CUDAToolkit REQUIRED)\n"
      "if(STPAR_WITH_MPI)\n"
      "  find_package(MPI REQUIRED COMPONENTS CXX)\n"
      "endif()\n"
      "find_path(NCCL_INCLUDE_DIR nccl.h\n"
      "  HINTS $ENV{NCCL_HOME}/include ${CUDAToolkit_INCLUDE_DIRS})\n"
      "find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2\n"
      "  HINTS $ENV{NCCL_HOME}/lib ${CUDAToolkit_LIBRARY_DIR}\n"
      "        ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_TARGET_DIR}/lib)\n"
      "if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)\n"
      "  message(FATAL_ERROR \"NCCL not found (set NCCL_HOME)\")\n"
      "endif()\n"
      "add_executable(stpar_program program.cu)\n"
      "set_target_properties(stpar_program PROPERTIES CUDA_ARCHITECTURES "
      "\"${STPAR_CUDA_ARCHITECTURES}\")\n"
      "target_include_directories(stpar_program PRIVATE "
      "${CMAKE_CURRENT_SOURCE_DIR} ${NCCL_INCLUDE_DIR})\n"
      "target_link_libraries(stpar_program PRIVATE CUDA::cudart CUDA::cublas "
      "${NCCL_LIBRARY})\n"
      "if(STPAR_WITH_MPI)\n"
      "  target_link_libraries(stpar_program PRIVATE MPI::MPI_CXX)\n"
      "else()\n"
      "  target_compile_definitions(stpar_program PRIVATE "
      "STPAR_WITHOUT_MPI)\n"
      "endif()\n";
  return s;
}

FailureOr<EmittedProgram> Printer::run() {
  func = module.lookupSymbol<func::FuncOp>("main");
  if (!func) {
    auto funcs = module.getOps<func::FuncOp>();
    if (std::distance(funcs.begin(), funcs.end()) == 1)
      func = *funcs.begin();
  }
  if (!func || func.isExternal())
    return module.emitError("cannot emit: the module has no function @main "
                            "(or more than one function)"),
           failure();
  bool partitioned = module->hasAttr("stp.partitioned");
  SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
  if (!partitioned) {
    if (failed(checkNoShardOps(module)))
      return failure();
  } else {
    if (grids.size() != 1)
      return module.emitError("cannot emit: a partitioned module must hold "
                              "exactly one shard.grid"),
             failure();
    gridShape.assign(grids[0].getShape().begin(), grids[0].getShape().end());
    if (llvm::any_of(gridShape, [](int64_t s) { return s <= 0; }))
      return grids[0].emitError("cannot emit a grid with dynamic or empty "
                                "axes"),
             failure();
  }
  // Streams, events and communicators (-stp-schedule-collectives).
  auto streams = func->getAttrOfType<DictionaryAttr>(
      stp::STPDialect::kStreamsAttrName);
  if (!streams)
    return func.emitError("cannot emit: the function has no stp.streams "
                          "(run -stp-schedule-collectives)"),
           failure();
  if (auto n = streams.getAs<IntegerAttr>("events"))
    numEvents = n.getInt();
  if (auto groups = streams.getAs<ArrayAttr>("communicators"))
    for (Attribute g : groups)
      if (auto axes = dyn_cast<DenseI64ArrayAttr>(g)) {
        std::string text = "stpar_rt::Shape{";
        for (auto [i, a] : llvm::enumerate(axes.asArrayRef()))
          text += (i ? ", " : "") + std::to_string(a);
        communicators.push_back(text + "}");
      }
  if (failed(emitFunction()))
    return failure();
  if (unplanned) {
    Operation *owner = unplanned.getDefiningOp();
    return (owner ? owner->emitError() : func.emitError())
               << "cannot emit: a tensor has no buffer in the memory plan "
                  "(run -stp-plan-memory after the last change)",
           failure();
  }

  EmittedProgram p;
  p.sourceName = cuda ? "program.cu" : "program.cpp";
  llvm::raw_string_ostream os(p.source);
  os << "// Generated by stpar emit --target " << getEmitTargetName(target)
     << " from " << locString(func.getLoc()) << ". Do not edit.\n"
     << "// Per-rank program on a grid of shape [";
  llvm::interleaveComma(gridShape, os);
  os << "] (" << (partitioned ? "partitioned" : "unpartitioned: one rank")
     << "). Run: mpirun -np N ./stpar_program --weights MODELDIR --inputs INDIR "
        "--outputs OUTDIR\n";
  os << (cuda ? "#include \"stpar_cuda_runtime.cuh\"\n"
              : "#include \"stpar_runtime.h\"\n")
     << "\nnamespace {\n\n"
     << constants << (constants.empty() ? "" : "\n") << kernels
     << "void run(stpar_rt::Context &ctx) {\n";
  if (!communicators.empty())
    os << "  // Communicators of the grid-axes groups (collective calls).\n";
  for (const std::string &g : communicators)
    os << "  ctx.prepare(" << g << ");\n";
  os << body << "}\n\n} // namespace\n\n"
     << "int main(int argc, char **argv) {\n"
     << "  stpar_rt::Context ctx(argc, argv, "
     << stp::getRuntimeShapeLiteral(gridShape);
  if (cuda)
    os << ", " << numEvents;
  os << ");\n  run(ctx);\n  return 0;\n}\n";
  p.cmakeLists = cmakeFor(cuda);
  // "mixed": GEMM operands rounded to bf16 (-stp-mixed-precision).
  auto precision =
      module->getAttrOfType<StringAttr>(stp::STPDialect::kPrecisionAttrName);
  p.ioJson = "{\"precision\": \"" +
             std::string(precision ? precision.getValue() : "fp32") +
             "\",\n \"inputs\": [\n    " + ioInputs +
             "],\n \"outputs\": [\n    " + ioOutputs +
             "],\n \"parameters\": [\n    " + ioParams + "]}\n";
  p.runtimeFiles = {"common/stpar_io.h", "common/stpar_scalar.h",
                    "common/stpar_grid.h"};
  p.runtimeFiles.push_back(cuda ? "cuda/stpar_cuda_runtime.cuh"
                                : "cpu/stpar_runtime.h");
  return p;
}

} // namespace

//===----------------------------------------------------------------------===//
// Legalization
//===----------------------------------------------------------------------===//

/// Whether -stp-pipeline-stages split the module's functions.
static bool isPipelined(ModuleOp module) {
  bool pipelined = false;
  module.walk([&](func::FuncOp f) {
    pipelined |= f->hasAttr(stp::STPDialect::kPipelineAttrName);
  });
  return pipelined;
}

LogicalResult legalizeForEmission(ModuleOp module, EmitTarget target) {
  // Pipeline stages: -stp-pipeline-stages splits the partitioned step into
  // one program per pipeline rank; without it every pipeline rank would
  // run the whole model.
  if (auto mesh =
          module->getAttrOfType<stp::MeshAttr>(stp::STPDialect::kMeshAttrName))
    if (stp::getPipelineStages(mesh) > 1 && !isPipelined(module))
      return module.emitError()
             << "a plan with pipeline stages (pp = "
             << stp::getPipelineStages(mesh) << ") is emitted after "
             << "-stp-pipeline-stages, which splits the training step into "
                "the pipeline ranks' programs (docs/pipeline-parallel.md)";
  if (!module->hasAttr("stp.partitioned") &&
      failed(checkNoShardOps(module)))
    return failure();
  IRRewriter rewriter(module.getContext());
  SmallVector<linalg::LinalgOp> named;
  module.walk([&](linalg::LinalgOp op) {
    if (!isa<linalg::GenericOp, linalg::FillOp, linalg::TransposeOp>(op))
      named.push_back(op);
  });
  for (linalg::LinalgOp op : named) {
    rewriter.setInsertionPoint(op);
    if (failed(linalg::generalizeNamedOp(rewriter, op)))
      return op->emitError("cannot emit '")
             << op->getName() << "' for the "
             << getEmitTargetName(target)
             << " target (it has no linalg.generic form)";
  }
  // The schedule of the collectives, the memory plan of the ops as they
  // are printed (-stp-schedule-collectives, -stp-plan-memory; again when
  // the generalization above replaced ops or the schedule moved them) and
  // the collectives, waits and GEMMs as runtime calls
  // (-stp-lower-collectives, -stp-lower-contractions).
  bool scheduled = true, planned = true;
  module.walk([&](func::FuncOp f) {
    if (f.isExternal())
      return;
    scheduled &= f->hasAttr(stp::STPDialect::kStreamsAttrName);
    planned &= f->hasAttr(stp::STPDialect::kArenaAttrName);
  });
  // (The lowering passes leave what they lowered before as it is.)
  PassManager pm(module.getContext());
  if (!scheduled)
    pm.addPass(stp::createScheduleCollectivesPass());
  if (!named.empty() || !planned || !scheduled)
    pm.addPass(stp::createPlanMemoryPass());
  pm.addPass(stp::createLowerCollectivesPass());
  pm.addPass(stp::createLowerContractionsPass());
  return pm.run(module);
}

FailureOr<EmittedProgram> emitProgram(ModuleOp module, EmitTarget target) {
  Printer printer(module, target);
  return printer.run();
}

} // namespace stpar::target
