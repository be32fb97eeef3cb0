//===- TrainingStep.cpp - -stp-training-step --------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-training-step: the forward function becomes one training
// step (loss, backward pass, optimizer update) made of ops the partitioner
// and the emitters already handle. Rules and the meaning of the results:
// the pass description in Passes.td and docs/training.md.
//
// Gradients of linalg ops are linalg.generics over the forward op's loops:
// the body is the forward body followed by its reverse-mode derivative
// (ScalarDerivative below), so the partition spec of the forward op applies
// with the loop kinds of the gradient (a loop the differentiated operand
// does not index becomes a reduction).
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <numbers>

namespace stpar::stp {
#define GEN_PASS_DEF_TRAININGSTEPPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// Mesh axes of each loop of a loop nest (empty lists: not split).
using LoopAxes = SmallVector<SmallVector<StringAttr>>;

/// How a generic's body result combines with its output element.
enum class Combine { None, Add, Max };

/// A body builder: gets the block arguments (inputs, then the output) and
/// returns the value to combine with the output element.
using BodyFn = function_ref<Value(OpBuilder &, Location, ValueRange)>;

/// `(d0, ..., dn-1) -> (dims...)`; -1 in `dims` is the constant 0 (a
/// broadcast unit dim).
AffineMap mapOf(MLIRContext *context, unsigned numLoops,
                ArrayRef<int64_t> dims) {
  SmallVector<AffineExpr> results;
  for (int64_t d : dims)
    results.push_back(d < 0 ? getAffineConstantExpr(0, context)
                            : getAffineDimExpr(unsigned(d), context));
  return AffineMap::get(numLoops, 0, results, context);
}

/// The map reading `in` (null: a scalar) at each point of a loop nest over
/// the dims of `out`: right-aligned, lower-rank and unit dims broadcast.
AffineMap broadcastMap(MLIRContext *context, RankedTensorType out,
                       RankedTensorType in) {
  unsigned rank = out.getRank(), r = in ? in.getRank() : 0;
  SmallVector<int64_t> dims;
  for (unsigned d = 0; d < r; ++d) {
    unsigned loop = rank - r + d;
    dims.push_back(in.getDimSize(d) == 1 && out.getDimSize(loop) != 1
                       ? -1
                       : int64_t(loop));
  }
  return mapOf(context, rank, dims);
}

SmallVector<int64_t> iota(int64_t begin, int64_t end) {
  SmallVector<int64_t> v;
  for (int64_t i = begin; i < end; ++i)
    v.push_back(i);
  return v;
}

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

Value floatConstant(OpBuilder &b, Location loc, Type type, double value) {
  return arith::ConstantOp::create(b, loc, b.getFloatAttr(type, value));
}

//===----------------------------------------------------------------------===//
// Reverse-mode derivative of a scalar body
//===----------------------------------------------------------------------===//

/// Whether `value` (inside a body) depends on `source` through operands a
/// derivative flows along (not conditions, comparisons, integer casts).
bool dependsDifferentiably(Value value, Value source,
                           DenseMap<Value, bool> &memo) {
  if (value == source)
    return true;
  auto it = memo.find(value);
  if (it != memo.end())
    return it->second;
  memo[value] = false;
  Operation *op = value.getDefiningOp();
  bool result = false;
  if (op && isa<FloatType>(value.getType())) {
    if (auto select = dyn_cast<arith::SelectOp>(op)) {
      result = dependsDifferentiably(select.getTrueValue(), source, memo) ||
               dependsDifferentiably(select.getFalseValue(), source, memo);
    } else if (!isa<arith::CmpFOp, arith::CmpIOp, arith::SIToFPOp,
                    arith::UIToFPOp, tensor::ExtractOp>(op)) {
      for (Value operand : op->getOperands())
        if (isa<FloatType>(operand.getType()) &&
            dependsDifferentiably(operand, source, memo)) {
          result = true;
          break;
        }
    }
  }
  memo[value] = result;
  return result;
}

/// Emits, at the builder's insertion point, the adjoints of the scalar
/// values of a cloned body: given the adjoint `seed` of `root`, walks the
/// body's ops backwards applying the chain rule. Values are the body's
/// (old) values; `map` gives their clones. Only values that depend on one
/// of `targets` get adjoints.
class ScalarDerivative {
public:
  ScalarDerivative(OpBuilder &b, Location loc, IRMapping &map)
      : b(b), loc(loc), map(map) {}

  /// Runs the sweep; fails (with `failedOp` set) on an op without a rule.
  LogicalResult run(Block &body, Value root, Value seed,
                    ArrayRef<Value> targets) {
    // One memo per target (each caches "depends on this target").
    SmallVector<DenseMap<Value, bool>> memos(targets.size());
    auto relevant = [&](Value v) {
      if (!isa<FloatType>(v.getType()))
        return false;
      for (auto [t, memo] : llvm::zip(targets, memos))
        if (dependsDifferentiably(v, t, memo))
          return true;
      return false;
    };
    adjoints[root] = seed;
    for (Operation &op : llvm::reverse(body.without_terminator())) {
      if (op.getNumResults() != 1)
        continue;
      Value result = op.getResult(0);
      auto it = adjoints.find(result);
      if (it == adjoints.end())
        continue;
      Value g = it->second;
      if (isa<tensor::ExtractOp>(op))
        continue; // A leaf: the caller reads its adjoint.
      bool any = false;
      for (Value operand : op.getOperands())
        any |= relevant(operand);
      if (!any)
        continue;
      if (failed(differentiate(op, g, relevant))) {
        failedOp = &op;
        return failure();
      }
    }
    return success();
  }

  /// The adjoint of an old value (null when none reached it).
  Value get(Value v) const { return adjoints.lookup(v); }

  Operation *failedOp = nullptr;

private:
  Value lookup(Value v) { return map.lookupOrDefault(v); }
  void add(Value v, Value g) {
    auto [it, inserted] = adjoints.try_emplace(v, g);
    if (!inserted)
      it->second = arith::AddFOp::create(b, loc, it->second, g);
  }
  Value constant(Type type, double v) { return floatConstant(b, loc, type, v); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }

  LogicalResult differentiate(Operation &op, Value g,
                              function_ref<bool(Value)> relevant) {
    Type type = g.getType();
    Value y = lookup(op.getResult(0));
    auto operand = [&](unsigned i) { return op.getOperand(i); };
    auto x = [&](unsigned i) { return lookup(op.getOperand(i)); };
    auto give = [&](unsigned i, function_ref<Value()> make) {
      if (relevant(operand(i)))
        add(operand(i), make());
    };
    return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
        .Case([&](arith::AddFOp) {
          give(0, [&] { return g; });
          give(1, [&] { return g; });
          return success();
        })
        .Case([&](arith::SubFOp) {
          give(0, [&] { return g; });
          give(1, [&] { return neg(g); });
          return success();
        })
        .Case([&](arith::MulFOp) {
          give(0, [&] { return mul(g, x(1)); });
          give(1, [&] { return mul(g, x(0)); });
          return success();
        })
        .Case([&](arith::DivFOp) {
          give(0, [&] { return div(g, x(1)); });
          give(1, [&] { return neg(div(mul(g, y), x(1))); });
          return success();
        })
        .Case([&](arith::NegFOp) {
          give(0, [&] { return neg(g); });
          return success();
        })
        .Case([&](math::ExpOp) {
          give(0, [&] { return mul(g, y); });
          return success();
        })
        .Case([&](math::LogOp) {
          give(0, [&] { return div(g, x(0)); });
          return success();
        })
        .Case([&](math::TanhOp) {
          give(0, [&] { return mul(g, sub(constant(type, 1.0), mul(y, y))); });
          return success();
        })
        .Case([&](math::ErfOp) {
          // d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2).
          give(0, [&] {
            Value e = math::ExpOp::create(b, loc, neg(mul(x(0), x(0))));
            return mul(g, mul(constant(type, 2.0 / std::sqrt(M_PI)), e));
          });
          return success();
        })
        .Case([&](math::SqrtOp) {
          give(0, [&] { return div(mul(g, constant(type, 0.5)), y); });
          return success();
        })
        .Case([&](math::RsqrtOp) {
          // y = x^-1/2, dy/dx = -1/2 y^3.
          give(0, [&] {
            return mul(g, mul(constant(type, -0.5), mul(y, mul(y, y))));
          });
          return success();
        })
        .Case([&](math::PowFOp) {
          // d x^p / dx = p x^(p-1); d x^p / dp = x^p log(x).
          give(0, [&] {
            Value pm1 = sub(x(1), constant(type, 1.0));
            return mul(g, mul(x(1), math::PowFOp::create(b, loc, x(0), pm1)));
          });
          give(1, [&] {
            return mul(g, mul(y, math::LogOp::create(b, loc, x(0))));
          });
          return success();
        })
        .Case([&](math::AbsFOp) {
          give(0, [&] {
            Value negative = arith::CmpFOp::create(
                b, loc, arith::CmpFPredicate::OLT, x(0), constant(type, 0.0));
            return arith::SelectOp::create(b, loc, negative, neg(g), g);
          });
          return success();
        })
        .Case([&](math::FmaOp) {
          give(0, [&] { return mul(g, x(1)); });
          give(1, [&] { return mul(g, x(0)); });
          give(2, [&] { return g; });
          return success();
        })
        .Case<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
              arith::MinNumFOp>([&](Operation *m) {
          // The gradient goes to the operand chosen (the first on ties).
          bool isMax = isa<arith::MaximumFOp, arith::MaxNumFOp>(m);
          Value first = arith::CmpFOp::create(b, loc,
                                              isMax ? arith::CmpFPredicate::OGE
                                                    : arith::CmpFPredicate::OLE,
                                              x(0), x(1));
          Value zero = constant(type, 0.0);
          give(0,
               [&] { return arith::SelectOp::create(b, loc, first, g, zero); });
          give(1,
               [&] { return arith::SelectOp::create(b, loc, first, zero, g); });
          return success();
        })
        .Case([&](arith::SelectOp s) {
          Value zero = constant(type, 0.0);
          Value c = x(0);
          give(1, [&] { return arith::SelectOp::create(b, loc, c, g, zero); });
          give(2, [&] { return arith::SelectOp::create(b, loc, c, zero, g); });
          return success();
        })
        .Case([&](arith::ExtFOp e) {
          give(0, [&] {
            return arith::TruncFOp::create(b, loc, e.getIn().getType(), g);
          });
          return success();
        })
        .Case([&](arith::TruncFOp t) {
          give(0, [&] {
            return arith::ExtFOp::create(b, loc, t.getIn().getType(), g);
          });
          return success();
        })
        .Default([](Operation *) { return failure(); });
  }

  OpBuilder &b;
  Location loc;
  IRMapping &map;
  DenseMap<Value, Value> adjoints;
};

/// Erases the side-effect-free ops of `block` whose results are unused.
void eraseDeadOps(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  // Users come after their operands' definitions: one backward sweep.
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && isMemoryEffectFree(op))
      op->erase();
}

/// Rebuilds `op` without the inputs its body does not read (a gradient
/// body reads only some of the forward op's inputs); returns the result.
Value pruneUnusedInputs(OpBuilder &b, linalg::GenericOp op) {
  eraseDeadOps(*op.getBody());
  Block *body = op.getBody();
  SmallVector<Value> ins;
  SmallVector<AffineMap> maps;
  SmallVector<unsigned> unused;
  SmallVector<AffineMap> all = op.getIndexingMapsArray();
  for (unsigned i = 0; i < op.getNumDpsInputs(); ++i) {
    if (body->getArgument(i).use_empty()) {
      unused.push_back(i);
      continue;
    }
    ins.push_back(op.getDpsInputOperand(i)->get());
    maps.push_back(all[i]);
  }
  if (unused.empty())
    return op.getResult(0);
  maps.push_back(all.back());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  auto pruned = linalg::GenericOp::create(b, op.getLoc(), op.getResultTypes(),
                                          ins, op.getDpsInits(), maps,
                                          op.getIteratorTypesArray());
  pruned.getRegion().takeBody(op.getRegion());
  for (unsigned i : llvm::reverse(unused))
    pruned.getBody()->eraseArgument(i);
  for (NamedAttribute attr : op->getDiscardableAttrs())
    pruned->setAttr(attr.getName(), attr.getValue());
  op.getResult(0).replaceAllUsesWith(pruned.getResult(0));
  op.erase();
  return pruned.getResult(0);
}

//===----------------------------------------------------------------------===//
// The training-step builder
//===----------------------------------------------------------------------===//

struct Options {
  std::string loss, lossLabels, lossOutput, optimizer;
  double lr, beta1, beta2, epsilon, weightDecay;
  bool returnGradients;
  /// ZeRO stage (0-3); -1: the plan's (`stp.plan`'s mesh.zero_stage).
  int zeroStage;
  /// Micro-batches per step; -1: the plan's (mesh.micro_batches).
  int64_t microBatches;
  /// "on", "off" or "plan" (mesh.recompute).
  std::string recompute;
};

class TrainingStepBuilder {
public:
  TrainingStepBuilder(ModuleOp module, func::FuncOp func, Options options)
      : module(module), func(func), b(func.getContext()),
        context(func.getContext()), options(std::move(options)) {
    mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
  }

  LogicalResult run();

private:
  //===--- Building blocks -------------------------------------------===//

  /// A location naming the ONNX node of `op` with `suffix`.
  Location locFor(Operation *op, StringRef suffix) {
    std::string node = getNodeName(op->getLoc());
    if (node.empty())
      node = op->getName().getStringRef().str();
    return NameLoc::get(b.getStringAttr(node + suffix), op->getLoc());
  }
  Location locFor(Location base, StringRef name) {
    return NameLoc::get(b.getStringAttr(name), base);
  }

  /// A tensor of `type` filled with `value` (zeros when `value` is 0).
  Value filled(Location loc, RankedTensorType type, double value,
               StringRef phase) {
    Value empty =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    Value v = floatConstant(b, loc, type.getElementType(), value);
    auto fill =
        linalg::FillOp::create(b, loc, ValueRange{v}, ValueRange{empty});
    fill->setAttr(STPDialect::kPhaseAttrName, b.getStringAttr(phase));
    return fill.getResult(0);
  }

  /// The spec of a loop nest with `kinds` over `extents`, splitting loop
  /// `i` over `axes[i]` where the split divides the extent and no earlier
  /// loop uses the axis; null without a mesh.
  PartitionSpecAttr makeSpec(ArrayRef<int64_t> extents,
                             ArrayRef<bool> reduction, const LoopAxes &axes,
                             ArrayRef<StringAttr> names = {},
                             TemporalAttr temporal = {}) {
    if (!mesh)
      return {};
    llvm::SmallDenseSet<StringAttr> used;
    SmallVector<LoopDimAttr> loops;
    for (auto [i, extent] : llvm::enumerate(extents)) {
      SmallVector<StringAttr> split;
      int64_t pieces = 1;
      if (i < axes.size())
        for (StringAttr axis : axes[i]) {
          if (!mesh.findAxis(axis.getValue()) || used.contains(axis))
            continue;
          int64_t size = mesh.getAxisSize(axis.getValue());
          if (extent % (pieces * size) != 0)
            continue;
          pieces *= size;
          split.push_back(axis);
          used.insert(axis);
        }
      StringAttr name = i < names.size() && names[i]
                            ? names[i]
                            : b.getStringAttr("d" + std::to_string(i));
      loops.push_back(LoopDimAttr::get(
          context, name, extent,
          reduction[i] ? LoopKind::Reduction : LoopKind::Parallel, split,
          /*padded=*/false));
    }
    return PartitionSpecAttr::get(context, mesh, loops, temporal);
  }

  /// A linalg.generic over loops of `extents` (`reduction` marks the
  /// reduction loops) reading `ins` through `inMaps` into a new tensor of
  /// `outType` through `outMap`: each point combines `body`'s value into the
  /// output element (`combine`; the output starts at the combiner's
  /// identity). Carries `phase` and the spec of `axes`.
  Value generic(Location loc, StringRef phase, ArrayRef<int64_t> extents,
                ArrayRef<bool> reduction, ArrayRef<Value> ins,
                ArrayRef<AffineMap> inMaps, RankedTensorType outType,
                AffineMap outMap, Combine combine, BodyFn body,
                const LoopAxes &axes, ArrayRef<StringAttr> names = {},
                TemporalAttr temporal = {}) {
    Type element = outType.getElementType();
    Value init;
    if (combine == Combine::None)
      init = tensor::EmptyOp::create(b, loc, outType.getShape(), element);
    else
      init = filled(loc, outType,
                    combine == Combine::Add
                        ? 0.0
                        : -std::numeric_limits<double>::infinity(),
                    phase);
    SmallVector<AffineMap> maps(inMaps);
    maps.push_back(outMap);
    SmallVector<utils::IteratorType> iterators;
    for (bool r : reduction)
      iterators.push_back(r ? utils::IteratorType::reduction
                            : utils::IteratorType::parallel);
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{outType}, ins, ValueRange{init}, maps, iterators,
        [&](OpBuilder &nested, Location l, ValueRange args) {
          Value v = body(nested, l, args);
          if (combine == Combine::Add)
            v = arith::AddFOp::create(nested, l, args.back(), v);
          else if (combine == Combine::Max)
            v = arith::MaximumFOp::create(nested, l, args.back(), v);
          linalg::YieldOp::create(nested, l, v);
        });
    op->setAttr(STPDialect::kPhaseAttrName, b.getStringAttr(phase));
    if (PartitionSpecAttr spec =
            makeSpec(extents, reduction, axes, names, temporal))
      op->setAttr(STPDialect::kSpecAttrName, spec);
    return op.getResult(0);
  }

  /// Elementwise generic over the dims of `like`'s type.
  Value elementwise(Location loc, StringRef phase, ArrayRef<Value> ins,
                    RankedTensorType outType, BodyFn body,
                    const LoopAxes &axes) {
    unsigned rank = outType.getRank();
    SmallVector<AffineMap> maps;
    for (Value in : ins)
      maps.push_back(broadcastMap(context, outType,
                                  dyn_cast<RankedTensorType>(in.getType())));
    return generic(loc, phase, outType.getShape(),
                   SmallVector<bool>(rank, false), ins, maps, outType,
                   mapOf(context, rank, iota(0, rank)), Combine::None, body,
                   axes);
  }

  //===--- Specs: which mesh axes split what ---------------------------===//

  /// The loops of `op`'s spec and their axes (empty without a spec).
  LoopAxes specAxes(Operation *op) {
    LoopAxes axes;
    if (auto spec =
            op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName))
      for (LoopDimAttr loop : spec.getLoops())
        axes.emplace_back(loop.getSplit().begin(), loop.getSplit().end());
    return axes;
  }
  SmallVector<StringAttr> specNames(Operation *op) {
    SmallVector<StringAttr> names;
    if (auto spec =
            op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName))
      for (LoopDimAttr loop : spec.getLoops())
        names.push_back(loop.getName());
    return names;
  }

  /// The mesh axes the plan splits each dim of `v` over, as far as the ops
  /// around it tell (a hint: -stp-partition re-lays out whatever differs).
  LoopAxes valueAxes(Value v, unsigned depth = 0) {
    auto type = cast<RankedTensorType>(v.getType());
    LoopAxes axes(type.getRank());
    if (!mesh || depth > 8)
      return axes;
    auto throughMap = [&](Operation *op, AffineMap map) {
      LoopAxes loops = specAxes(op);
      if (loops.empty())
        return false;
      for (auto [d, e] : llvm::enumerate(map.getResults()))
        if (auto dim = dyn_cast<AffineDimExpr>(e))
          if (dim.getPosition() < loops.size())
            axes[d] = loops[dim.getPosition()];
      // A temporal op holds its operands' two matmul dims blocked over the
      // grid (-stp-partition): the first of M, N, K over the row axis, the
      // other over the column axis.
      auto spec =
          op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName);
      if (TemporalAttr temporal = spec.getTemporal()) {
        SmallVector<StringAttr> gridAxes{temporal.getRowAxis(),
                                         temporal.getColAxis()};
        unsigned next = 0;
        for (StringAttr name :
             {temporal.getM(), temporal.getN(), temporal.getK()})
          for (auto [d, e] : llvm::enumerate(map.getResults()))
            if (auto dim = dyn_cast<AffineDimExpr>(e);
                dim && next < 2 && dim.getPosition() < spec.getLoops().size() &&
                spec.getLoops()[dim.getPosition()].getName() == name)
              axes[d].push_back(gridAxes[next++]);
      }
      return true;
    };
    Operation *def = v.getDefiningOp();
    if (def) {
      if (auto linalgOp = dyn_cast<linalg::LinalgOp>(def)) {
        unsigned r = cast<OpResult>(v).getResultNumber();
        if (throughMap(
                def,
                linalgOp
                    .getIndexingMapsArray()[linalgOp.getNumDpsInputs() + r]))
          return axes;
      } else if (isa<LayerNormOp, RMSNormOp>(def)) {
        LoopAxes loops = specAxes(def);
        if (!loops.empty()) {
          for (unsigned d = 0; d < axes.size() && d < loops.size(); ++d)
            axes[d] = loops[d];
          return axes;
        }
        return valueAxes(def->getOperand(0), depth + 1);
      } else if (isa<AttentionOp>(def)) {
        LoopAxes loops = specAxes(def);
        if (loops.size() >= 2) {
          axes[0] = loops[0];
          axes[1] = loops[1];
          return axes;
        }
      } else if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(def)) {
        LoopAxes src = valueAxes(collapse.getSrc(), depth + 1);
        auto srcType = collapse.getSrcType();
        for (auto [d, group] :
             llvm::enumerate(collapse.getReassociationIndices()))
          for (int64_t s : group)
            if (srcType.getDimSize(s) != 1) {
              axes[d] = src[s];
              break;
            }
        return axes;
      } else if (auto expand = dyn_cast<tensor::ExpandShapeOp>(def)) {
        LoopAxes src = valueAxes(expand.getSrc(), depth + 1);
        for (auto [s, group] :
             llvm::enumerate(expand.getReassociationIndices()))
          for (int64_t d : group)
            if (type.getDimSize(d) != 1) {
              axes[d] = src[s];
              break;
            }
        return axes;
      } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(def)) {
        if (slice.getSourceType().getRank() == type.getRank()) {
          LoopAxes src = valueAxes(slice.getSource(), depth + 1);
          for (unsigned d = 0; d < axes.size(); ++d)
            if (slice.getSourceType().getDimSize(d) == type.getDimSize(d))
              axes[d] = src[d];
          return axes;
        }
      }
    }
    // Arguments and the rest: what the first planned user asks (a linalg
    // op through its indexing map; a norm's scale or bias: the trailing
    // loops of the norm's spec).
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (auto linalgOp = dyn_cast<linalg::LinalgOp>(user)) {
        if (throughMap(user, linalgOp.getMatchingIndexingMap(&use)))
          return axes;
        continue;
      }
      if (auto moe = dyn_cast<MoEOp>(user)) {
        // The expert weights as -stp-partition lays them out (loops
        // tokens, model dim, experts, expert hidden dim): w_in and w_mul
        // [e, d, f], w_out [e, f, d]; the router stays whole.
        LoopAxes loops = specAxes(user);
        if (loops.size() != 4 || axes.size() != 3)
          continue;
        bool out = v == moe.getWOut();
        if (!out && v != moe.getWIn() && v != moe.getWMul())
          continue;
        axes = {loops[2], loops[out ? 3 : 1], loops[out ? 1 : 3]};
        return axes;
      }
      if (isa<LayerNormOp, RMSNormOp>(user) && use.getOperandNumber() > 0) {
        LoopAxes loops = specAxes(user);
        if (loops.size() < axes.size())
          continue;
        for (unsigned d = 0; d < axes.size(); ++d)
          axes[d] = loops[loops.size() - axes.size() + d];
        return axes;
      }
    }
    return axes;
  }

  //===--- Analysis ----------------------------------------------------===//

  /// Marks the values with a differentiable path from a trainable param.
  void analyzeRequiresGrad();
  bool needsGrad(Value v) const { return requiresGrad.contains(v); }

  //===--- Adjoints ----------------------------------------------------===//

  void addAdjoint(Value v, Value g, Location loc) {
    auto [it, inserted] = adjoints.try_emplace(v, g);
    if (inserted)
      return;
    auto type = cast<RankedTensorType>(v.getType());
    Value a = it->second;
    // A parameter's gradients summed (a shared initializer) are part of
    // its gradient sync ("grad_sum"); an activation's (a fan-out) are the
    // backward pass of the op that produced it ("input_grad", named after
    // that op, so the re-layouts into its layout are its B).
    StringRef phase = "grad_sum";
    if (phaseOf(v) == "input_grad") {
      phase = "input_grad";
      if (Operation *def = v.getDefiningOp())
        loc = locFor(def, "/grad_sum");
    }
    it->second = elementwise(
        loc, phase, {a, g}, type,
        [](OpBuilder &nb, Location l, ValueRange args) -> Value {
          return arith::AddFOp::create(nb, l, args[0], args[1]);
        },
        valueAxes(v));
  }

  //===--- Gradient rules ----------------------------------------------===//

  LogicalResult backward(Operation *op);
  LogicalResult backwardLinalg(linalg::LinalgOp op, Value dy);
  LogicalResult backwardEmbedding(linalg::LinalgOp op, Value dy,
                                  tensor::ExtractOp extract);
  LogicalResult backwardSoftmax(linalg::SoftmaxOp op, Value dy);
  LogicalResult backwardNorm(Operation *op, Value dy);
  LogicalResult backwardAttention(AttentionOp op, Value dy);
  LogicalResult backwardMoE(MoEOp op, Value dy);
  LogicalResult backwardView(Operation *op, Value dy);

  //===--- Loss and optimizer -----------------------------------------===//

  FailureOr<Value> buildLoss(Value output, Location loc);
  FailureOr<Value> buildCrossEntropy(Value logits, Value labels, Location loc);
  LogicalResult buildOptimizer(Location loc);

  //===--- ZeRO (Rajbhandari et al., SC'20) ---------------------------===//

  /// The data-parallel mesh axes: those splitting a planned op's batch
  /// loop (named "b").
  SmallVector<StringAttr> getDataParallelAxes();
  /// `axes` (one list per dim of `type`) with the data-parallel axes they
  /// do not use appended to the first dim they divide; `axes` unchanged
  /// when none does.
  LoopAxes shardOverDataParallel(LoopAxes axes, RankedTensorType type);
  /// ZeRO-3: every use of `param` goes through `Pf = copy(Ps)`, `Ps =
  /// copy(param)` sharded over the data-parallel axes, so the parameter
  /// is stored sharded and gathered (all-gather) right before its forward
  /// use; the backward pass gathers it again (Pb, see regatherForBackward).
  void shardParameter(BlockArgument param);
  /// ZeRO-3: backward ops read a second gather of each sharded parameter,
  /// made right before the first of them, so the forward gather is dead
  /// (freed) between the phases.
  void regatherForBackward();
  /// The copy generic `v` -> new value with `axes`.
  Value copyOf(Value v, const LoopAxes &axes, Location loc, StringRef phase);

  //===--- Activation recomputation (Chen et al. 2016; Megatron-LM) ---===//

  /// Full recomputation per layer: the backward ops read, instead of a
  /// layer's saved activations, copies of the forward ops that compute
  /// them from the layer's inputs (`stp.phase = "recompute"`), placed right
  /// before the first backward op that reads one. Saved: values read
  /// outside their layer (the layer boundaries, by the plan's `layer` of
  /// each operator) and values not computed from the data (parameters,
  /// their gathers, constants).
  void recomputeActivations(ArrayRef<Operation *> forward);
  unsigned numRecomputed = 0;

  int zeroStage = 0;
  int64_t microBatches = 1;
  bool recompute = false;
  SmallVector<StringAttr> dataParallelAxes;
  /// ZeRO-3: per parameter, its sharded copy Ps and forward gather Pf.
  SmallVector<std::tuple<BlockArgument, Value, Value>> shardedParams;
  /// ZeRO-3's copies (Ps, Pf): the gradient of their result is their
  /// operand's.
  DenseSet<Operation *> zeroCopies;

  /// The phase of the gradient of `operand`: G ("weight_grad") when it is
  /// a parameter, or a view of one (a slice of a rotary table, the
  /// transpose of a tied embedding table) or ZeRO-3's copy of one, B
  /// ("input_grad") otherwise.
  StringRef phaseOf(Value operand) {
    Value v = operand;
    while (Operation *def = v.getDefiningOp()) {
      if (!zeroCopies.contains(def) &&
          !isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
               tensor::ExtractSliceOp, linalg::TransposeOp>(def))
        break;
      v = def->getOperand(0);
    }
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && func.getArgAttr(arg.getArgNumber(),
                                  STPDialect::kParamAttrName)
               ? "weight_grad"
               : "input_grad";
  }

  ModuleOp module;
  func::FuncOp func;
  OpBuilder b;
  MLIRContext *context;
  Options options;
  MeshAttr mesh;

  DenseSet<Value> requiresGrad;
  DenseMap<Value, Value> adjoints;
  /// Trained parameters (arguments) in argument order.
  SmallVector<BlockArgument> params;

  /// New results and their names.
  SmallVector<Value> results;
  SmallVector<std::string> resultNames;
  /// New arguments' names (appended after the existing ones).
  SmallVector<std::pair<Type, std::string>> newArgs;
};

} // namespace

void TrainingStepBuilder::analyzeRequiresGrad() {
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (auto param = func.getArgAttrOfType<ParamAttr>(
            arg.getArgNumber(), STPDialect::kParamAttrName))
      if (param.getTrainable() && isFloatTensor(arg))
        requiresGrad.insert(arg);
  for (Operation &op : body.without_terminator()) {
    bool any = false;
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(&op)) {
      Block *inner = linalgOp.getBlock();
      Value yielded = inner->getTerminator()->getOperand(0);
      // One memo per source: it caches "depends on this source".
      for (OpOperand *in : linalgOp.getDpsInputOperands()) {
        DenseMap<Value, bool> memo;
        if (needsGrad(in->get()) &&
            dependsDifferentiably(yielded,
                                  linalgOp.getMatchingBlockArgument(in), memo))
          any = true;
      }
      inner->walk([&](tensor::ExtractOp extract) {
        DenseMap<Value, bool> memo;
        if (needsGrad(extract.getTensor()) &&
            dependsDifferentiably(yielded, extract.getResult(), memo))
          any = true;
      });
    } else if (isa<linalg::SoftmaxOp>(&op)) {
      any = needsGrad(op.getOperand(0));
    } else {
      for (Value operand : op.getOperands())
        any |= needsGrad(operand);
    }
    if (any)
      for (Value result : op.getResults())
        if (isFloatTensor(result))
          requiresGrad.insert(result);
  }
}

//===----------------------------------------------------------------------===//
// Gradients of linalg ops
//===----------------------------------------------------------------------===//

LogicalResult TrainingStepBuilder::backwardLinalg(linalg::LinalgOp op,
                                                  Value dy) {
  if (op.getNumDpsInits() != 1)
    return op->emitError() << "gradient of a linalg op with "
                           << op.getNumDpsInits()
                           << " outputs is not supported";
  Block *body = op.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  Value yielded = yield.getOperand(0);
  BlockArgument outArg = op.getMatchingBlockArgument(op.getDpsInitOperand(0));
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  unsigned numInputs = op.getNumDpsInputs();
  unsigned numLoops = op.getNumLoops();
  AffineMap outMap = maps[numInputs];
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  bool hasReduction = llvm::any_of(iters, [](utils::IteratorType t) {
    return t == utils::IteratorType::reduction;
  });
  SmallVector<int64_t> extents = op.getStaticLoopRanges();

  // What the body computes per point: `root`, combined into the output.
  Value root = yielded;
  if (hasReduction) {
    auto add = yielded.getDefiningOp<arith::AddFOp>();
    if (!add || (add.getLhs() != outArg && add.getRhs() != outArg))
      return op->emitError()
             << "gradient of a reduction other than a sum is not supported "
                "(the body must yield out + f(inputs))";
    root = add.getLhs() == outArg ? add.getRhs() : add.getLhs();
    DenseMap<Value, bool> memo;
    if (dependsDifferentiably(root, outArg, memo))
      return op->emitError()
             << "gradient of a reduction whose summand reads the "
                "accumulator is not supported";
  } else {
    DenseMap<Value, bool> memo;
    if (dependsDifferentiably(yielded, outArg, memo))
      return op->emitError() << "gradient of an op whose result reads its "
                                "initial value is not supported";
  }

  // A captured table read by tensor.extract (an embedding).
  SmallVector<tensor::ExtractOp> extracts;
  body->walk([&](tensor::ExtractOp e) {
    if (e.getTensor().getParentBlock() != body && needsGrad(e.getTensor()))
      extracts.push_back(e);
  });
  for (tensor::ExtractOp e : extracts)
    if (failed(backwardEmbedding(op, dy, e)))
      return failure();

  LoopAxes forwardAxes = specAxes(op);
  SmallVector<StringAttr> names = specNames(op);
  bool specMatches = forwardAxes.size() == numLoops;
  // A temporal operator's gradients are the primitive's B and G phases: the
  // same loops, matmul dims and grid (-stp-partition picks the phase's rule
  // from the dims of the gradient's output).
  TemporalAttr temporal;
  if (auto spec =
          op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName))
    temporal = spec.getTemporal();
  for (unsigned i = 0; i < numInputs; ++i) {
    OpOperand *in = op.getDpsInputOperand(i);
    if (!isFloatTensor(in->get()) || !needsGrad(in->get()))
      continue;
    BlockArgument target = op.getMatchingBlockArgument(in);
    DenseMap<Value, bool> memo;
    if (!dependsDifferentiably(root, target, memo))
      continue;
    AffineMap inMap = maps[i];
    auto inType = cast<RankedTensorType>(in->get().getType());
    SmallVector<bool> reduction(numLoops, true);
    for (auto [d, e] : llvm::enumerate(inMap.getResults())) {
      if (auto dim = dyn_cast<AffineDimExpr>(e)) {
        if (!reduction[dim.getPosition()])
          return op->emitError()
                 << "gradient of operand " << i
                 << ": a loop indexes two of its dims (not supported)";
        reduction[dim.getPosition()] = false;
        continue;
      }
      auto c = dyn_cast<AffineConstantExpr>(e);
      if (!c || c.getValue() != 0 || inType.getDimSize(d) != 1)
        return op->emitError()
               << "gradient of operand " << i << " indexed by "
               << AffineMapAttr::get(inMap)
               << " is not supported (dims must be loops or unit "
                  "broadcasts)";
    }
    bool anyReduction = llvm::is_contained(reduction, true);
    SmallVector<Value> ins;
    SmallVector<AffineMap> inMaps;
    for (unsigned k = 0; k < numInputs; ++k) {
      ins.push_back(op.getDpsInputOperand(k)->get());
      inMaps.push_back(maps[k]);
    }
    ins.push_back(dy);
    inMaps.push_back(outMap);
    LogicalResult status = success();
    Location loc = locFor(op, "/grad" + std::to_string(i));
    Value grad = generic(
        loc, phaseOf(in->get()), extents, reduction, ins, inMaps, inType, inMap,
        anyReduction ? Combine::Add : Combine::None,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          IRMapping map;
          for (unsigned k = 0; k < numInputs; ++k)
            map.map(body->getArgument(k), args[k]);
          map.map(outArg, args.back());
          for (Operation &inner : body->without_terminator())
            nb.clone(inner, map);
          ScalarDerivative derivative(nb, l, map);
          if (failed(derivative.run(*body, root, args[numInputs], {target}))) {
            status = op->emitError()
                     << "no gradient rule for '"
                     << derivative.failedOp->getName() << "' in its body";
            return floatConstant(nb, l, inType.getElementType(), 0.0);
          }
          Value g = derivative.get(target);
          return g ? g : floatConstant(nb, l, inType.getElementType(), 0.0);
        },
        specMatches ? forwardAxes : LoopAxes(), names,
        specMatches ? temporal : TemporalAttr());
    if (failed(status))
      return failure();
    grad = pruneUnusedInputs(b, cast<linalg::GenericOp>(grad.getDefiningOp()));
    addAdjoint(in->get(), grad, loc);
  }
  return success();
}

LogicalResult
TrainingStepBuilder::backwardEmbedding(linalg::LinalgOp op, Value dy,
                                       tensor::ExtractOp extract) {
  // out[p] = table[row(p), index(l1), ...]: the table's gradient is
  // sum over p of dy[p] * (row(p) == r), one more (rows) loop r.
  Value table = extract.getTensor();
  auto tableType = cast<RankedTensorType>(table.getType());
  Block *body = op.getBlock();
  unsigned numLoops = op.getNumLoops();
  SmallVector<int64_t> tableDims{int64_t(numLoops)};
  for (Value index : extract.getIndices().drop_front()) {
    auto idx = index.getDefiningOp<linalg::IndexOp>();
    if (!idx)
      return op->emitError()
             << "gradient of a table read whose trailing indices are not "
                "loop indices is not supported";
    tableDims.push_back(int64_t(idx.getDim()));
  }
  SmallVector<int64_t> extents = op.getStaticLoopRanges();
  extents.push_back(tableType.getDimSize(0));
  SmallVector<bool> reduction(numLoops + 1, true);
  for (int64_t d : tableDims)
    reduction[d] = false;
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  unsigned numInputs = op.getNumDpsInputs();
  auto extend = [&](AffineMap m) {
    return AffineMap::get(numLoops + 1, 0, m.getResults(), context);
  };
  SmallVector<Value> ins;
  SmallVector<AffineMap> inMaps;
  for (unsigned k = 0; k < numInputs; ++k) {
    ins.push_back(op.getDpsInputOperand(k)->get());
    inMaps.push_back(extend(maps[k]));
  }
  ins.push_back(dy);
  inMaps.push_back(extend(maps[numInputs]));
  Value yielded = body->getTerminator()->getOperand(0);
  BlockArgument outArg = op.getMatchingBlockArgument(op.getDpsInitOperand(0));
  Value root = yielded;
  if (auto add = yielded.getDefiningOp<arith::AddFOp>())
    if (add.getLhs() == outArg || add.getRhs() == outArg)
      root = add.getLhs() == outArg ? add.getRhs() : add.getLhs();
  // The forward spec of an embedding has the rows loop last already.
  LoopAxes axes = specAxes(op);
  SmallVector<StringAttr> names = specNames(op);
  if (axes.size() != numLoops + 1) {
    axes.clear();
    names.clear();
  }
  LogicalResult status = success();
  Location loc = locFor(op, "/grad_table");
  Value grad = generic(
      loc, phaseOf(table), extents, reduction, ins, inMaps, tableType,
      mapOf(context, numLoops + 1, tableDims), Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        IRMapping map;
        for (unsigned k = 0; k < numInputs; ++k)
          map.map(body->getArgument(k), args[k]);
        map.map(outArg, args.back());
        for (Operation &inner : body->without_terminator())
          nb.clone(inner, map);
        ScalarDerivative derivative(nb, l, map);
        Type element = tableType.getElementType();
        if (failed(derivative.run(*body, root, args[numInputs],
                                  {extract.getResult()}))) {
          status = op->emitError()
                   << "no gradient rule for '" << derivative.failedOp->getName()
                   << "' in its body";
          return floatConstant(nb, l, element, 0.0);
        }
        Value g = derivative.get(extract.getResult());
        if (!g)
          return floatConstant(nb, l, element, 0.0);
        Value row = map.lookup(extract.getIndices()[0]);
        Value r = linalg::IndexOp::create(nb, l, numLoops);
        Value same =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, row, r);
        return arith::SelectOp::create(nb, l, same, g,
                                       floatConstant(nb, l, element, 0.0));
      },
      axes, names);
  if (failed(status))
    return failure();
  grad = pruneUnusedInputs(b, cast<linalg::GenericOp>(grad.getDefiningOp()));
  addAdjoint(table, grad, loc);
  return success();
}

LogicalResult TrainingStepBuilder::backwardSoftmax(linalg::SoftmaxOp op,
                                                   Value dy) {
  // dx = y * (dy - sum_k(dy * y)).
  Value x = op.getInput();
  if (!needsGrad(x))
    return success();
  Value y = op.getResult()[0];
  auto type = cast<RankedTensorType>(y.getType());
  unsigned rank = type.getRank();
  int64_t k = op.getDimension();
  Location loc = locFor(op, "/grad0");
  LoopAxes axes = valueAxes(x);
  SmallVector<int64_t> outer;
  for (unsigned d = 0; d < rank; ++d)
    if (int64_t(d) != k)
      outer.push_back(d);
  SmallVector<int64_t> outerShape;
  for (int64_t d : outer)
    outerShape.push_back(type.getDimSize(d));
  auto sumType = RankedTensorType::get(outerShape, type.getElementType());
  SmallVector<bool> reduction(rank, false);
  reduction[k] = true;
  AffineMap id = mapOf(context, rank, iota(0, rank));
  Value s = generic(
      loc, "input_grad", type.getShape(), reduction, {dy, y}, {id, id}, sumType,
      mapOf(context, rank, outer), Combine::Add,
      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::MulFOp::create(nb, l, a[0], a[1]);
      },
      axes);
  Value dx = generic(
      loc, "input_grad", type.getShape(), SmallVector<bool>(rank, false),
      {dy, y, s}, {id, id, mapOf(context, rank, outer)}, type, id,
      Combine::None,
      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value d = arith::SubFOp::create(nb, l, a[0], a[2]);
        return arith::MulFOp::create(nb, l, a[1], d);
      },
      axes);
  addAdjoint(x, dx, loc);
  return success();
}

LogicalResult TrainingStepBuilder::backwardNorm(Operation *op, Value dy) {
  // LayerNorm (Ba et al. 2016): xhat = (x - mean) * rstd,
  //   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
  //   dxhat = dy * scale, dscale = sum(dy * xhat), dbias = sum(dy).
  // RMSNorm (Zhang & Sennrich 2019): y = x * rstd * scale,
  //   dx = rstd * dxhat - x * rstd^3 * mean(dxhat * x), dscale = sum(dy * x *
  //   rstd).
  auto norm = cast<NormalizationOpInterface>(op);
  bool rms = !norm.isCentered();
  Value x = op->getOperand(0), scale = norm.getNormScale();
  Value bias = norm.getNormBias();
  int64_t axis = norm.getNormalizedAxis();
  double eps = norm.getNormEpsilon();
  auto type = cast<RankedTensorType>(x.getType());
  Type element = type.getElementType();
  unsigned rank = type.getRank();
  int64_t n = 1;
  for (unsigned d = axis; d < rank; ++d)
    n *= type.getDimSize(d);
  LoopAxes axes = specAxes(op);
  if (axes.size() != rank)
    axes = valueAxes(x);
  Location loc = locFor(op, "/grad");
  AffineMap id = mapOf(context, rank, iota(0, rank));
  SmallVector<int64_t> outerDims = iota(0, axis);
  SmallVector<int64_t> outerShape(type.getShape().take_front(axis));
  auto statType = RankedTensorType::get(outerShape, element);
  AffineMap statMap = mapOf(context, rank, outerDims);
  auto paramMap = [&](Value p) {
    return broadcastMap(context, type, cast<RankedTensorType>(p.getType()));
  };
  SmallVector<bool> normReduction(rank, false), outerReduction(rank, false);
  for (unsigned d = 0; d < rank; ++d)
    (int64_t(d) >= axis ? normReduction : outerReduction)[d] = true;
  auto constantN = [&](OpBuilder &nb, Location l) {
    return floatConstant(nb, l, element, double(n));
  };

  // Statistics: sum(x) (LayerNorm), then sum((x - mean)^2) or sum(x^2).
  Value sum1;
  if (!rms)
    sum1 = generic(
        loc, "input_grad", type.getShape(), normReduction, {x}, {id}, statType,
        statMap, Combine::Add,
        [](OpBuilder &, Location, ValueRange a) -> Value { return a[0]; },
        axes);
  auto centered = [&](OpBuilder &nb, Location l, Value xv, Value s1) -> Value {
    if (rms)
      return xv;
    return arith::SubFOp::create(
        nb, l, xv, arith::DivFOp::create(nb, l, s1, constantN(nb, l)));
  };
  SmallVector<Value> statIns{x};
  SmallVector<AffineMap> statMaps{id};
  if (!rms) {
    statIns.push_back(sum1);
    statMaps.push_back(statMap);
  }
  Value sum2 = generic(
      loc, "input_grad", type.getShape(), normReduction, statIns, statMaps,
      statType, statMap, Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value c = centered(nb, l, a[0], rms ? Value() : a[1]);
        return arith::MulFOp::create(nb, l, c, c);
      },
      axes);
  // rstd and xhat at a point, from x, sum1 (LayerNorm) and sum2.
  auto rstdAt = [&](OpBuilder &nb, Location l, Value s2) -> Value {
    Value var = arith::DivFOp::create(nb, l, s2, constantN(nb, l));
    Value e = floatConstant(nb, l, element, eps);
    return math::RsqrtOp::create(nb, l, arith::AddFOp::create(nb, l, var, e));
  };
  // Inputs of the point-wise generics: x, dy, scale, [sum1], sum2.
  SmallVector<Value> ins{x, dy, scale};
  SmallVector<AffineMap> maps{id, id, paramMap(scale)};
  if (!rms) {
    ins.push_back(sum1);
    maps.push_back(statMap);
  }
  ins.push_back(sum2);
  maps.push_back(statMap);
  auto xhatAt = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value s2 = a[rms ? 3 : 4];
    Value c = centered(nb, l, a[0], rms ? Value() : a[3]);
    return arith::MulFOp::create(nb, l, c, rstdAt(nb, l, s2));
  };

  if (needsGrad(scale)) {
    auto scaleType = cast<RankedTensorType>(scale.getType());
    SmallVector<bool> reduction(rank, true);
    for (AffineExpr e : paramMap(scale).getResults())
      if (auto dim = dyn_cast<AffineDimExpr>(e))
        reduction[dim.getPosition()] = false;
    Value dscale = generic(
        loc, phaseOf(scale), type.getShape(), reduction, ins, maps, scaleType,
        paramMap(scale), Combine::Add,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          return arith::MulFOp::create(nb, l, a[1], xhatAt(nb, l, a));
        },
        axes);
    addAdjoint(scale, dscale, loc);
  }
  if (bias && needsGrad(bias)) {
    auto biasType = cast<RankedTensorType>(bias.getType());
    SmallVector<bool> reduction(rank, true);
    for (AffineExpr e : paramMap(bias).getResults())
      if (auto dim = dyn_cast<AffineDimExpr>(e))
        reduction[dim.getPosition()] = false;
    Value dbias = generic(
        loc, phaseOf(bias), type.getShape(), reduction, {dy}, {id}, biasType,
        paramMap(bias), Combine::Add,
        [](OpBuilder &, Location, ValueRange a) -> Value { return a[0]; },
        axes);
    addAdjoint(bias, dbias, loc);
  }
  if (!needsGrad(x))
    return success();
  // a = sum(dxhat) (LayerNorm only), c = sum(dxhat * xhat).
  Value sumA;
  if (!rms)
    sumA = generic(
        loc, "input_grad", type.getShape(), normReduction, ins, maps, statType,
        statMap, Combine::Add,
        [](OpBuilder &nb, Location l, ValueRange a) -> Value {
          return arith::MulFOp::create(nb, l, a[1], a[2]);
        },
        axes);
  Value sumC = generic(
      loc, "input_grad", type.getShape(), normReduction, ins, maps, statType,
      statMap, Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value dxhat = arith::MulFOp::create(nb, l, a[1], a[2]);
        return arith::MulFOp::create(nb, l, dxhat, xhatAt(nb, l, a));
      },
      axes);
  SmallVector<Value> dxIns(ins);
  SmallVector<AffineMap> dxMaps(maps);
  if (!rms) {
    dxIns.push_back(sumA);
    dxMaps.push_back(statMap);
  }
  dxIns.push_back(sumC);
  dxMaps.push_back(statMap);
  Value dx = generic(
      loc, "input_grad", type.getShape(), SmallVector<bool>(rank, false), dxIns,
      dxMaps, type, id, Combine::None,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value nv = constantN(nb, l);
        Value s2 = a[rms ? 3 : 4];
        Value rstd = rstdAt(nb, l, s2);
        Value xhat = xhatAt(nb, l, a);
        Value dxhat = arith::MulFOp::create(nb, l, a[1], a[2]);
        Value meanC = arith::DivFOp::create(nb, l, a[rms ? 4 : 6], nv);
        Value v = arith::SubFOp::create(
            nb, l, dxhat, arith::MulFOp::create(nb, l, xhat, meanC));
        if (!rms)
          v = arith::SubFOp::create(nb, l, v,
                                    arith::DivFOp::create(nb, l, a[5], nv));
        return arith::MulFOp::create(nb, l, rstd, v);
      },
      axes);
  addAdjoint(x, dx, loc);
  return success();
}

LogicalResult TrainingStepBuilder::backwardAttention(AttentionOp op, Value dy) {
  // Recompute P = softmax(scale * Q K^T + mask) per (batch, kv head, group,
  // query, key), then (Vaswani et al. 2017; the standard derivation):
  //   dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)) * scale,
  //   dQ = dS K, dK = dS^T Q.
  // Query heads are viewed as [kv heads, group] (grouped-query attention),
  // so every map is a plain projection.
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  Value mask = op.getMask();
  if (mask && needsGrad(mask))
    return op->emitError()
           << "gradient of an attention mask is not supported (the mask "
              "depends on a trained parameter)";
  auto qType = cast<RankedTensorType>(q.getType());
  auto kType = cast<RankedTensorType>(k.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  Type element = qType.getElementType();
  int64_t B = qType.getDimSize(0), Hq = qType.getDimSize(1),
          Sq = qType.getDimSize(2), D = qType.getDimSize(3),
          Hk = kType.getDimSize(1), Sk = kType.getDimSize(2),
          Dv = vType.getDimSize(3);
  int64_t G = Hq / Hk;
  double scale = op.getScale().convertToDouble();
  bool causal = op.getCausal();
  Location loc = locFor(op, "/grad");

  LoopAxes attnAxes = specAxes(op);
  SmallVector<StringAttr> batchAxes, headAxes;
  if (attnAxes.size() >= 2) {
    batchAxes = attnAxes[0];
    headAxes = attnAxes[1];
  }
  // Loops: b, hk, g, i (query), j (key), e (head dim D or Dv).
  enum { LB, LH, LG, LI, LJ, LE };
  auto axesFor = [&](unsigned numLoops) {
    LoopAxes axes(numLoops);
    axes[LB] = batchAxes;
    axes[LH] = headAxes;
    return axes;
  };
  auto q5Type = RankedTensorType::get({B, Hk, G, Sq, D}, element);
  auto o5Type = RankedTensorType::get({B, Hk, G, Sq, Dv}, element);
  SmallVector<ReassociationIndices> heads{{0}, {1, 2}, {3}, {4}};
  Value q5 = tensor::ExpandShapeOp::create(b, loc, q5Type, q, heads);
  Value dO5 = tensor::ExpandShapeOp::create(b, loc, o5Type, dy, heads);
  auto pType = RankedTensorType::get({B, Hk, G, Sq, Sk}, element);
  auto rowType = RankedTensorType::get({B, Hk, G, Sq}, element);
  auto m = [&](ArrayRef<int64_t> dims) { return mapOf(context, 6, dims); };
  AffineMap q5Map = m({LB, LH, LG, LI, LE}), kMap = m({LB, LH, LJ, LE}),
            pMap = m({LB, LH, LG, LI, LJ});
  auto m5 = [&](ArrayRef<int64_t> dims) { return mapOf(context, 5, dims); };
  AffineMap p5 = m5({0, 1, 2, 3, 4}), row5 = m5({0, 1, 2, 3});
  SmallVector<int64_t> ext6D{B, Hk, G, Sq, Sk, D}, ext6V{B, Hk, G, Sq, Sk, Dv},
      ext5{B, Hk, G, Sq, Sk};
  auto red6 = [](std::initializer_list<int> loops) {
    SmallVector<bool> r(6, false);
    for (int l : loops)
      r[l] = true;
    return r;
  };
  SmallVector<bool> par5(5, false), redJ5(5, false);
  redJ5[4] = true;

  // Scores S = scale * Q K^T (+ mask, causal).
  Value s = generic(
      loc, "input_grad", ext6D, red6({LE}), {q5, k}, {q5Map, kMap}, pType, pMap,
      Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::MulFOp::create(nb, l, a[0], a[1]);
      },
      axesFor(6));
  SmallVector<Value> sIns{s};
  SmallVector<AffineMap> sMaps{p5};
  if (mask) {
    auto maskType = cast<RankedTensorType>(mask.getType());
    int64_t lead = 4 - maskType.getRank();
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < maskType.getRank(); ++d) {
      int64_t full = d + lead;
      if (maskType.getDimSize(d) == 1) {
        dims.push_back(-1);
        continue;
      }
      if (full == 1 && G != 1)
        return op->emitError() << "gradient of grouped-query attention with a "
                                  "per-head mask is not supported";
      dims.push_back(full == 0 ? 0 : full == 1 ? 1 : full == 2 ? 3 : 4);
    }
    sIns.push_back(mask);
    sMaps.push_back(m5(dims));
  }
  // P = softmax over keys, in three passes: max, sum of exp, normalize.
  auto scoreAt = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value v = arith::MulFOp::create(nb, l, a[0],
                                    floatConstant(nb, l, element, scale));
    if (mask)
      v = arith::AddFOp::create(nb, l, v, a[1]);
    if (causal) {
      Value i = linalg::IndexOp::create(nb, l, 3);
      Value j = linalg::IndexOp::create(nb, l, 4);
      Value limit = arith::AddIOp::create(
          nb, l, i, arith::ConstantIndexOp::create(nb, l, Sk - Sq));
      Value masked =
          arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sgt, j, limit);
      v = arith::SelectOp::create(
          nb, l, masked,
          floatConstant(nb, l, element,
                        -std::numeric_limits<double>::infinity()),
          v);
    }
    return v;
  };
  LoopAxes axes5 = axesFor(5);
  Value rowMax = generic(loc, "input_grad", ext5, redJ5, sIns, sMaps, rowType,
                         row5, Combine::Max, scoreAt, axes5);
  SmallVector<Value> eIns(sIns);
  SmallVector<AffineMap> eMaps(sMaps);
  eIns.push_back(rowMax);
  eMaps.push_back(row5);
  unsigned maxAt = eIns.size() - 1;
  auto expAt = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value d = arith::SubFOp::create(nb, l, scoreAt(nb, l, a), a[maxAt]);
    return math::ExpOp::create(nb, l, d);
  };
  Value rowSum = generic(loc, "input_grad", ext5, redJ5, eIns, eMaps, rowType,
                         row5, Combine::Add, expAt, axes5);
  SmallVector<Value> pIns(eIns);
  SmallVector<AffineMap> pMaps(eMaps);
  pIns.push_back(rowSum);
  pMaps.push_back(row5);
  unsigned sumAt = pIns.size() - 1;
  Value p = generic(
      loc, "input_grad", ext5, par5, pIns, pMaps, pType, p5, Combine::None,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::DivFOp::create(nb, l, expAt(nb, l, a), a[sumAt]);
      },
      axes5);

  auto mulBody = [](OpBuilder &nb, Location l, ValueRange a) -> Value {
    return arith::MulFOp::create(nb, l, a[0], a[1]);
  };
  AffineMap o5Map = m({LB, LH, LG, LI, LE}), vMap = m({LB, LH, LJ, LE});
  if (needsGrad(v)) {
    Value dv =
        generic(loc, phaseOf(v), ext6V, red6({LG, LI}), {p, dO5}, {pMap, o5Map},
                vType, vMap, Combine::Add, mulBody, axesFor(6));
    addAdjoint(v, dv, loc);
  }
  if (!needsGrad(q) && !needsGrad(k))
    return success();
  Value dp =
      generic(loc, "input_grad", ext6V, red6({LE}), {dO5, v}, {o5Map, vMap},
              pType, pMap, Combine::Add, mulBody, axesFor(6));
  Value rowDot = generic(loc, "input_grad", ext5, redJ5, {p, dp}, {p5, p5},
                         rowType, row5, Combine::Add, mulBody, axes5);
  Value ds = generic(
      loc, "input_grad", ext5, par5, {p, dp, rowDot}, {p5, p5, row5}, pType, p5,
      Combine::None,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value d = arith::SubFOp::create(nb, l, a[1], a[2]);
        Value v = arith::MulFOp::create(nb, l, a[0], d);
        return arith::MulFOp::create(nb, l, v,
                                     floatConstant(nb, l, element, scale));
      },
      axes5);
  if (needsGrad(q)) {
    Value dq5 =
        generic(loc, phaseOf(q), ext6D, red6({LJ}), {ds, k}, {pMap, kMap},
                q5Type, q5Map, Combine::Add, mulBody, axesFor(6));
    Value dq = tensor::CollapseShapeOp::create(b, loc, qType, dq5, heads);
    addAdjoint(q, dq, loc);
  }
  if (needsGrad(k)) {
    Value dk =
        generic(loc, phaseOf(k), ext6D, red6({LG, LI}), {ds, q5}, {pMap, q5Map},
                kType, kMap, Combine::Add, mulBody, axesFor(6));
    addAdjoint(k, dk, loc);
  }
  return success();
}

LogicalResult TrainingStepBuilder::backwardView(Operation *op, Value dy) {
  Location loc = locFor(op, "/grad0");
  Value src = op->getOperand(0);
  if (!needsGrad(src) && !isa<tensor::ConcatOp>(op))
    return success();
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(op)) {
    Value g = tensor::CollapseShapeOp::create(b, loc, expand.getSrcType(), dy,
                                              expand.getReassociationIndices());
    addAdjoint(src, g, loc);
    return success();
  }
  if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(op)) {
    Value g = tensor::ExpandShapeOp::create(b, loc, collapse.getSrcType(), dy,
                                            collapse.getReassociationIndices());
    addAdjoint(src, g, loc);
    return success();
  }
  if (auto cast = dyn_cast<tensor::CastOp>(op)) {
    Value g = tensor::CastOp::create(b, loc, cast.getSource().getType(), dy);
    addAdjoint(src, g, loc);
    return success();
  }
  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    if (!slice.hasUnitStride() ||
        slice.getSourceType().getRank() != slice.getResultType().getRank() ||
        !slice.getSourceType().hasStaticShape())
      return op->emitError() << "gradient of a strided or rank-reducing "
                                "slice is not supported";
    for (OpFoldResult o : slice.getMixedOffsets())
      if (!getConstantIntValue(o))
        return op->emitError()
               << "gradient of a slice with a dynamic offset is not "
                  "supported";
    auto srcType = slice.getSourceType();
    Value zeros = filled(loc, srcType, 0.0, "input_grad");
    Value g = tensor::InsertSliceOp::create(
        b, loc, dy, zeros, slice.getMixedOffsets(), slice.getMixedSizes(),
        slice.getMixedStrides());
    g.getDefiningOp()->setAttr(STPDialect::kPhaseAttrName,
                               b.getStringAttr("input_grad"));
    addAdjoint(src, g, loc);
    return success();
  }
  if (auto concat = dyn_cast<tensor::ConcatOp>(op)) {
    int64_t dim = concat.getDim();
    int64_t offset = 0;
    auto resultType = cast<RankedTensorType>(concat.getType());
    for (Value in : concat.getInputs()) {
      auto inType = cast<RankedTensorType>(in.getType());
      if (needsGrad(in)) {
        SmallVector<OpFoldResult> offsets(resultType.getRank(),
                                          b.getIndexAttr(0));
        SmallVector<OpFoldResult> sizes,
            strides(resultType.getRank(), b.getIndexAttr(1));
        for (int64_t s : inType.getShape())
          sizes.push_back(b.getIndexAttr(s));
        offsets[dim] = b.getIndexAttr(offset);
        Value g = tensor::ExtractSliceOp::create(b, loc, inType, dy, offsets,
                                                 sizes, strides);
        addAdjoint(in, g, loc);
      }
      offset += inType.getDimSize(dim);
    }
    return success();
  }
  return failure();
}

LogicalResult TrainingStepBuilder::backwardMoE(MoEOp op, Value dy) {
  // One stp.moe_grad, routed like the forward: -stp-partition expands it
  // into the gates' gradient and a gate-weighted dispatch of dy on the
  // tokens' ranks, the all-to-all to the experts, their backward on the
  // rows the forward sent them, the all-to-all back and the router's
  // backward (docs/moe.md, "Training"). It carries the forward's stp.spec.
  Value x = op.getTokens(), router = op.getRouter(), w1 = op.getWIn(),
        w3 = op.getWMul(), w2 = op.getWOut();
  Location loc = locFor(op, "/grad");
  SmallVector<Type> types{x.getType(), router.getType(), w1.getType()};
  if (w3)
    types.push_back(w3.getType());
  types.push_back(w2.getType());
  auto grad = MoEGradOp::create(b, loc, types, op.getResult(), x, router, w1,
                                w3, w2, dy, op.getTopKAttr(),
                                op.getNormalizeAttr(), op.getActivationAttr());
  grad->setAttr(STPDialect::kPhaseAttrName, b.getStringAttr("input_grad"));
  if (auto spec = op->getAttr(STPDialect::kSpecAttrName))
    grad->setAttr(STPDialect::kSpecAttrName, spec);
  if (needsGrad(x))
    addAdjoint(x, grad.getDTokens(), loc);
  if (needsGrad(router))
    addAdjoint(router, grad.getDRouter(), loc);
  if (needsGrad(w1))
    addAdjoint(w1, grad.getDWIn(), loc);
  if (w3 && needsGrad(w3))
    addAdjoint(w3, grad.getDWMul(), loc);
  if (needsGrad(w2))
    addAdjoint(w2, grad.getDWOut(), loc);
  return success();
}

LogicalResult TrainingStepBuilder::backward(Operation *op) {
  if (op->getNumResults() == 0)
    return success();
  SmallVector<Value> dys;
  bool any = false;
  for (Value r : op->getResults()) {
    dys.push_back(adjoints.lookup(r));
    any |= bool(dys.back());
  }
  if (!any)
    return success();
  if (op->getNumResults() != 1)
    return op->emitError() << "no gradient rule for '" << op->getName()
                           << "' (an op with several results)";
  Value dy = dys[0];
  b.setInsertionPoint(func.getBody().front().getTerminator());
  if (zeroCopies.contains(op)) {
    addAdjoint(op->getOperand(0), dy, op->getLoc());
    return success();
  }
  if (auto softmax = dyn_cast<linalg::SoftmaxOp>(op))
    return backwardSoftmax(softmax, dy);
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
    return backwardLinalg(linalgOp, dy);
  if (isa<LayerNormOp, RMSNormOp>(op))
    return backwardNorm(op, dy);
  if (auto attention = dyn_cast<AttentionOp>(op))
    return backwardAttention(attention, dy);
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
          tensor::ExtractSliceOp, tensor::ConcatOp>(op))
    return backwardView(op, dy);
  if (auto moe = dyn_cast<MoEOp>(op))
    return backwardMoE(moe, dy);
  return op->emitError() << "no gradient rule for '" << op->getName() << "'";
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

FailureOr<Value> TrainingStepBuilder::buildCrossEntropy(Value logits,
                                                        Value labels,
                                                        Location loc) {
  // Per token t with label c >= 0: log(sum_v exp(x_v - m)) + m - x_c, with
  // m = max_v x_v; the loss is the sum over tokens divided by the number of
  // counted tokens of the global batch. d loss / d x_v =
  // (softmax(x)_v - [v == c]) / count.
  auto type = cast<RankedTensorType>(logits.getType());
  Type element = type.getElementType();
  unsigned rank = type.getRank();
  unsigned lead = rank - 1;
  int64_t classes = type.getDimSize(lead);
  auto rowType = RankedTensorType::get(type.getShape().drop_back(), element);
  auto scalarType = RankedTensorType::get({}, element);
  LoopAxes axes = valueAxes(logits);
  LoopAxes rowAxes(axes.begin(), axes.begin() + lead);
  AffineMap id = mapOf(context, rank, iota(0, rank));
  AffineMap row = mapOf(context, rank, iota(0, lead));
  AffineMap rowId = mapOf(context, lead, iota(0, lead));
  SmallVector<bool> classReduction(rank, false);
  classReduction[lead] = true;
  auto labelOf = [&](OpBuilder &nb, Location l, Value label) {
    return arith::IndexCastOp::create(nb, l, nb.getIndexType(), label);
  };
  auto valid = [&](OpBuilder &nb, Location l, Value label) -> Value {
    Value zero = arith::ConstantIntOp::create(nb, l, label.getType(), 0);
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, label, zero);
  };

  // The number of counted tokens.
  Value count = generic(
      loc, "loss", rowType.getShape(), SmallVector<bool>(lead, true), {labels},
      {rowId}, scalarType, mapOf(context, lead, {}), Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::SelectOp::create(nb, l, valid(nb, l, a[0]),
                                       floatConstant(nb, l, element, 1.0),
                                       floatConstant(nb, l, element, 0.0));
      },
      rowAxes);
  Value rowMax = generic(
      loc, "loss", type.getShape(), classReduction, {logits}, {id}, rowType,
      row, Combine::Max,
      [](OpBuilder &, Location, ValueRange a) -> Value { return a[0]; }, axes);
  Value rowSum = generic(
      loc, "loss", type.getShape(), classReduction, {logits, rowMax}, {id, row},
      rowType, row, Combine::Add,
      [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return math::ExpOp::create(nb, l,
                                   arith::SubFOp::create(nb, l, a[0], a[1]));
      },
      axes);
  Value target = generic(
      loc, "loss", type.getShape(), classReduction, {logits, labels}, {id, row},
      rowType, row, Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value v = linalg::IndexOp::create(nb, l, lead);
        Value same = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, v,
                                           labelOf(nb, l, a[1]));
        return arith::SelectOp::create(nb, l, same, a[0],
                                       floatConstant(nb, l, element, 0.0));
      },
      axes);
  AffineMap scalarMap = mapOf(context, lead, {});
  Value loss = generic(
      loc, "loss", rowType.getShape(), SmallVector<bool>(lead, true),
      {rowMax, rowSum, target, labels, count},
      {rowId, rowId, rowId, rowId, scalarMap}, scalarType, scalarMap,
      Combine::Add,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value lse = arith::AddFOp::create(
            nb, l, math::LogOp::create(nb, l, a[1]), a[0]);
        Value tokenLoss = arith::SubFOp::create(nb, l, lse, a[2]);
        Value counted =
            arith::SelectOp::create(nb, l, valid(nb, l, a[3]), tokenLoss,
                                    floatConstant(nb, l, element, 0.0));
        return arith::DivFOp::create(nb, l, counted, a[4]);
      },
      rowAxes);
  AffineMap scalarMapFull = mapOf(context, rank, {});
  Value dlogits = generic(
      loc, "loss", type.getShape(), SmallVector<bool>(rank, false),
      {logits, rowMax, rowSum, labels, count},
      {id, row, row, row, scalarMapFull}, type, id, Combine::None,
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value p = arith::DivFOp::create(
            nb, l,
            math::ExpOp::create(nb, l,
                                arith::SubFOp::create(nb, l, a[0], a[1])),
            a[2]);
        Value v = linalg::IndexOp::create(nb, l, lead);
        Value same = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, v,
                                           labelOf(nb, l, a[3]));
        Value d = arith::SubFOp::create(
            nb, l, p,
            arith::SelectOp::create(nb, l, same,
                                    floatConstant(nb, l, element, 1.0),
                                    floatConstant(nb, l, element, 0.0)));
        Value scaled = arith::DivFOp::create(nb, l, d, a[4]);
        return arith::SelectOp::create(nb, l, valid(nb, l, a[3]), scaled,
                                       floatConstant(nb, l, element, 0.0));
      },
      axes);
  (void)classes;
  addAdjoint(logits, dlogits, loc);
  return loss;
}

FailureOr<Value> TrainingStepBuilder::buildLoss(Value output, Location loc) {
  auto type = cast<RankedTensorType>(output.getType());
  Type element = type.getElementType();
  unsigned rank = type.getRank();
  auto scalarType = RankedTensorType::get({}, element);
  LoopAxes axes = valueAxes(output);
  AffineMap id = mapOf(context, rank, iota(0, rank));
  AffineMap scalarMap = mapOf(context, rank, {});
  Block &body = func.getBody().front();

  if (options.loss == "sum" || options.loss == "mean-square") {
    bool square = options.loss == "mean-square";
    int64_t count = type.getNumElements();
    if (!square && rank > 0)
      count /= type.getDimSize(rank - 1);
    double inv = 1.0 / double(std::max<int64_t>(count, 1));
    Value loss = generic(
        loc, "loss", type.getShape(), SmallVector<bool>(rank, true), {output},
        {id}, scalarType, scalarMap, Combine::Add,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value v = square ? arith::MulFOp::create(nb, l, a[0], a[0]) : a[0];
          return arith::MulFOp::create(nb, l, v,
                                       floatConstant(nb, l, element, inv));
        },
        axes);
    Value dy = elementwise(
        loc, "loss", {output}, type,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value c = floatConstant(nb, l, element, square ? 2.0 * inv : inv);
          return square ? arith::MulFOp::create(nb, l, a[0], c) : c;
        },
        axes);
    addAdjoint(output, dy, loc);
    return loss;
  }

  if (rank < 2)
    return emitError(loc) << "cross-entropy needs logits of rank >= 2 "
                             "([..., classes]), got "
                          << type;
  auto labelType =
      RankedTensorType::get(type.getShape().drop_back(), b.getI64Type());
  Value labels;
  if (options.loss == "next-token") {
    // The integer graph input shaped like the logits without the classes.
    Value ids;
    for (BlockArgument arg : body.getArguments()) {
      auto argType = dyn_cast<RankedTensorType>(arg.getType());
      if (argType && isa<IntegerType>(argType.getElementType()) &&
          argType.getShape() == labelType.getShape() &&
          !func.getArgAttr(arg.getArgNumber(), STPDialect::kParamAttrName)) {
        ids = arg;
        break;
      }
    }
    if (!ids)
      return emitError(loc)
             << "--loss next-token: no integer graph input of shape "
             << labelType
             << " (the token ids the logits predict); use "
                "cross-entropy=NAME, sum or mean-square";
    // labels[..., s] = ids[..., s + 1]; the last position is not counted
    // (-1). Read through tensor.extract: the shift is not a projection.
    unsigned lead = labelType.getRank();
    int64_t seq = labelType.getDimSize(lead - 1);
    auto idsType = cast<RankedTensorType>(ids.getType());
    Type idElement = idsType.getElementType();
    labels = generic(
        loc, "loss", labelType.getShape(), SmallVector<bool>(lead, false), {},
        {}, labelType, mapOf(context, lead, iota(0, lead)), Combine::None,
        [&](OpBuilder &nb, Location l, ValueRange) -> Value {
          SmallVector<Value> idx;
          for (unsigned d = 0; d < lead; ++d)
            idx.push_back(linalg::IndexOp::create(nb, l, d));
          Value s = idx.back();
          Value next = arith::AddIOp::create(
              nb, l, s, arith::ConstantIndexOp::create(nb, l, 1));
          Value inside =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, next,
                                    arith::ConstantIndexOp::create(nb, l, seq));
          idx.back() = arith::SelectOp::create(nb, l, inside, next, s);
          Value id = tensor::ExtractOp::create(nb, l, ids, idx);
          Value wide = id;
          if (idElement != nb.getI64Type())
            wide = arith::ExtSIOp::create(nb, l, nb.getI64Type(), id);
          Value none = arith::ConstantIntOp::create(nb, l, nb.getI64Type(), -1);
          return arith::SelectOp::create(nb, l, inside, wide, none);
        },
        LoopAxes(axes.begin(), axes.begin() + lead));
  } else {
    StringRef name = options.lossLabels;
    labels = body.addArgument(labelType, loc);
    newArgs.push_back({labelType, name.str()});
  }
  return buildCrossEntropy(output, labels, loc);
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

LogicalResult TrainingStepBuilder::buildOptimizer(Location loc) {
  Block &body = func.getBody().front();
  bool adam = options.optimizer == "adamw";
  Value step;
  if (adam) {
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    step = body.addArgument(scalar, loc);
    newArgs.push_back({scalar, "adam_step"});
  }
  SmallVector<Value> grads, updated, moments1, moments2;
  SmallVector<std::string> names;
  for (BlockArgument param : params) {
    auto type = cast<RankedTensorType>(param.getType());
    Type element = type.getElementType();
    Value g = adjoints.lookup(param);
    std::string name =
        cast<ParamAttr>(
            func.getArgAttr(param.getArgNumber(), STPDialect::kParamAttrName))
            .getName()
            .str();
    names.push_back(name);
    grads.push_back(g);
    LoopAxes axes = valueAxes(param);
    if (zeroStage >= 1) {
      // ZeRO-1/2: each data-parallel rank updates its shard of the
      // parameter and keeps only that shard of the optimizer state. The
      // gradient's partial sum over the data-parallel axes then arrives
      // reduce-scattered (stage 2); stage 1 all-reduces it first (the full
      // gradient on every rank) and takes the shard.
      LoopAxes sharded = shardOverDataParallel(axes, type);
      if (zeroStage == 1 && sharded != axes)
        g = copyOf(g, axes, NameLoc::get(b.getStringAttr("zero1:" + name), loc),
                   "optimizer");
      axes = sharded;
    }
    Location ploc = NameLoc::get(b.getStringAttr("optimizer:" + name), loc);
    double lr = options.lr, wd = options.weightDecay;
    if (!adam) {
      updated.push_back(elementwise(
          ploc, "optimizer", {param, g}, type,
          [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
            Value d = a[1];
            if (wd != 0)
              d = arith::AddFOp::create(
                  nb, l, d,
                  arith::MulFOp::create(nb, l, a[0],
                                        floatConstant(nb, l, element, wd)));
            return arith::SubFOp::create(
                nb, l, a[0],
                arith::MulFOp::create(nb, l, d,
                                      floatConstant(nb, l, element, lr)));
          },
          axes));
      continue;
    }
    Value m = body.addArgument(type, ploc);
    newArgs.push_back({type, "adam_m:" + name});
    Value v = body.addArgument(type, ploc);
    newArgs.push_back({type, "adam_v:" + name});
    double b1 = options.beta1, b2 = options.beta2, eps = options.epsilon;
    Value m1 = elementwise(
        ploc, "optimizer", {m, g}, type,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value x = arith::MulFOp::create(nb, l, a[0],
                                          floatConstant(nb, l, element, b1));
          Value y = arith::MulFOp::create(
              nb, l, a[1], floatConstant(nb, l, element, 1.0 - b1));
          return arith::AddFOp::create(nb, l, x, y);
        },
        axes);
    Value v1 = elementwise(
        ploc, "optimizer", {v, g}, type,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          Value x = arith::MulFOp::create(nb, l, a[0],
                                          floatConstant(nb, l, element, b2));
          Value gg = arith::MulFOp::create(nb, l, a[1], a[1]);
          Value y = arith::MulFOp::create(
              nb, l, gg, floatConstant(nb, l, element, 1.0 - b2));
          return arith::AddFOp::create(nb, l, x, y);
        },
        axes);
    // PyTorch's AdamW: w *= 1 - lr * wd; w -= lr / bc1 * m / (sqrt(v) /
    // sqrt(bc2) + eps), bc_i = 1 - beta_i^step.
    updated.push_back(elementwise(
        ploc, "optimizer", {param, m1, v1, step}, type,
        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
          auto c = [&](double x) { return floatConstant(nb, l, element, x); };
          Value t = a[3];
          Value bc1 = arith::SubFOp::create(
              nb, l, c(1.0), math::PowFOp::create(nb, l, c(b1), t));
          Value bc2 = arith::SubFOp::create(
              nb, l, c(1.0), math::PowFOp::create(nb, l, c(b2), t));
          Value decayed = arith::MulFOp::create(nb, l, a[0], c(1.0 - lr * wd));
          Value denom = arith::AddFOp::create(
              nb, l,
              arith::DivFOp::create(nb, l, math::SqrtOp::create(nb, l, a[2]),
                                    math::SqrtOp::create(nb, l, bc2)),
              c(eps));
          Value stepSize = arith::DivFOp::create(nb, l, c(lr), bc1);
          Value delta = arith::MulFOp::create(
              nb, l, stepSize, arith::DivFOp::create(nb, l, a[1], denom));
          return arith::SubFOp::create(nb, l, decayed, delta);
        },
        axes));
    moments1.push_back(m1);
    moments2.push_back(v1);
  }
  if (options.returnGradients)
    for (auto [g, name] : llvm::zip(grads, names)) {
      results.push_back(g);
      resultNames.push_back("grad:" + name);
    }
  for (auto [w, name] : llvm::zip(updated, names)) {
    results.push_back(w);
    resultNames.push_back("param:" + name);
  }
  for (auto [m, name] : llvm::zip(moments1, names)) {
    results.push_back(m);
    resultNames.push_back("adam_m:" + name);
  }
  for (auto [v, name] : llvm::zip(moments2, names)) {
    results.push_back(v);
    resultNames.push_back("adam_v:" + name);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ZeRO
//===----------------------------------------------------------------------===//

SmallVector<StringAttr> TrainingStepBuilder::getDataParallelAxes() {
  SmallVector<StringAttr> axes;
  func.walk([&](Operation *op) {
    auto spec = op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName);
    if (!spec)
      return;
    for (LoopDimAttr loop : spec.getLoops())
      if (loop.getName().getValue() == "b")
        for (StringAttr axis : loop.getSplit())
          if (!llvm::is_contained(axes, axis))
            axes.push_back(axis);
  });
  return axes;
}

LoopAxes TrainingStepBuilder::shardOverDataParallel(LoopAxes axes,
                                                    RankedTensorType type) {
  if (!mesh)
    return axes;
  SmallVector<StringAttr> add;
  int64_t size = 1;
  for (StringAttr axis : dataParallelAxes) {
    bool used = llvm::any_of(
        axes, [&](auto &list) { return llvm::is_contained(list, axis); });
    if (!used) {
      add.push_back(axis);
      size *= mesh.getAxisSize(axis.getValue());
    }
  }
  if (add.empty())
    return axes;
  for (unsigned d = 0; d < axes.size(); ++d) {
    int64_t pieces = 1;
    for (StringAttr axis : axes[d])
      pieces *= mesh.getAxisSize(axis.getValue());
    if (type.getDimSize(d) % (pieces * size) == 0) {
      axes[d].append(add.begin(), add.end());
      return axes;
    }
  }
  return axes;
}

Value TrainingStepBuilder::copyOf(Value v, const LoopAxes &axes, Location loc,
                                  StringRef phase) {
  auto type = cast<RankedTensorType>(v.getType());
  return elementwise(
      loc, phase, {v}, type,
      [](OpBuilder &, Location, ValueRange a) -> Value { return a[0]; }, axes);
}

void TrainingStepBuilder::shardParameter(BlockArgument param) {
  if (param.use_empty())
    return;
  auto type = cast<RankedTensorType>(param.getType());
  LoopAxes forwardAxes = valueAxes(param);
  LoopAxes sharded = shardOverDataParallel(forwardAxes, type);
  if (sharded == forwardAxes)
    return; // Nothing to shard over (or no dim divides).
  std::string name =
      cast<ParamAttr>(
          func.getArgAttr(param.getArgNumber(), STPDialect::kParamAttrName))
          .getName()
          .str();
  Block &body = func.getBody().front();
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : param.getUses())
    uses.push_back(&use);
  Operation *first = nullptr;
  for (OpOperand *use : uses) {
    Operation *owner = body.findAncestorOpInBlock(*use->getOwner());
    if (!first || owner->isBeforeInBlock(first))
      first = owner;
  }
  b.setInsertionPointToStart(&body);
  Value ps = copyOf(
      param, sharded,
      NameLoc::get(b.getStringAttr("zero3:shard:" + name), param.getLoc()),
      "forward");
  b.setInsertionPoint(first);
  Value pf = copyOf(
      ps, forwardAxes,
      NameLoc::get(b.getStringAttr("zero3:gather:" + name), param.getLoc()),
      "forward");
  for (OpOperand *use : uses)
    use->set(pf);
  shardedParams.push_back({param, ps, pf});
  // Their gradients pass through unchanged (no copy), so the parameter's
  // gradient is the partial sum that the sharded optimizer reduce-scatters.
  zeroCopies.insert(ps.getDefiningOp());
  zeroCopies.insert(pf.getDefiningOp());
}

void TrainingStepBuilder::regatherForBackward() {
  for (auto &[param, ps, pf] : shardedParams) {
    SmallVector<OpOperand *> backwardUses;
    Operation *first = nullptr;
    Block &body = func.getBody().front();
    for (OpOperand &use : pf.getUses()) {
      Operation *owner = body.findAncestorOpInBlock(*use.getOwner());
      auto phase = owner->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName);
      if (!phase || (phase.getValue() != "input_grad" &&
                     phase.getValue() != "weight_grad" &&
                     phase.getValue() != "recompute"))
        continue;
      backwardUses.push_back(&use);
      if (!first || owner->isBeforeInBlock(first))
        first = owner;
    }
    if (!first)
      continue;
    // Pf's op is the copy generic; its spec is the forward layout. A new
    // sharded copy (not Ps itself, whose forward gather the partitioner
    // would reuse) is gathered again.
    Operation *gather = pf.getDefiningOp();
    b.setInsertionPoint(first);
    Operation *shard = b.clone(*ps.getDefiningOp());
    IRMapping map;
    map.map(ps, shard->getResult(0));
    Operation *again = b.clone(*gather, map);
    again->setLoc(NameLoc::get(
        b.getStringAttr(getNodeName(gather->getLoc()) + ":backward"),
        gather->getLoc()));
    again->setAttr(STPDialect::kPhaseAttrName, b.getStringAttr("input_grad"));
    for (OpOperand *use : backwardUses)
      use->set(again->getResult(0));
  }
}

//===----------------------------------------------------------------------===//
// Activation recomputation
//===----------------------------------------------------------------------===//

void TrainingStepBuilder::recomputeActivations(ArrayRef<Operation *> forward) {
  Block &body = func.getBody().front();
  // The layer of each forward op: its plan record's, else (views and ops
  // the plan does not list) that of the planned op before it.
  DenseMap<Operation *, int64_t> layerOf;
  int64_t current = -1;
  for (Operation *op : forward) {
    if (auto records =
            op->getAttrOfType<ArrayAttr>(STPDialect::kPlanOpsAttrName))
      if (!records.empty())
        if (auto record = dyn_cast<DictionaryAttr>(records[0]))
          if (auto layer = record.getAs<IntegerAttr>("layer"))
            current = layer.getInt();
    layerOf[op] = current;
  }
  // Values computed from the data (not parameters alone or constants).
  DenseSet<Value> onData;
  for (BlockArgument arg : body.getArguments())
    if (!func.getArgAttr(arg.getArgNumber(), STPDialect::kParamAttrName))
      onData.insert(arg);
  auto readsData = [&](Operation *op) {
    bool reads = false;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        reads |= onData.contains(v);
    });
    return reads;
  };
  DenseSet<Operation *> forwardOps(forward.begin(), forward.end());
  for (Operation *op : forward)
    if (readsData(op))
      for (Value r : op->getResults())
        onData.insert(r);
  // Recomputable: a data-dependent value of a layer that no op outside the
  // layer's forward pass reads except backward ops.
  auto isBackward = [](Operation *op) {
    auto phase = op->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName);
    return phase && (phase.getValue() == "input_grad" ||
                     phase.getValue() == "weight_grad" ||
                     phase.getValue() == "grad_sum");
  };
  auto recomputable = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || !forwardOps.contains(def) || layerOf.lookup(def) < 0 ||
        !onData.contains(v))
      return false;
    int64_t layer = layerOf.lookup(def);
    return llvm::all_of(v.getUsers(), [&](Operation *user) {
      Operation *top = body.findAncestorOpInBlock(*user);
      return isBackward(top) ||
             (forwardOps.contains(top) && layerOf.lookup(top) == layer);
    });
  };
  // Per layer: the backward uses of its recomputable values.
  std::map<int64_t, SmallVector<OpOperand *>> uses;
  for (Operation &op : body) {
    if (!isBackward(&op))
      continue;
    op.walk([&](Operation *inner) {
      for (OpOperand &use : inner->getOpOperands())
        if (recomputable(use.get()))
          uses[layerOf.lookup(use.get().getDefiningOp())].push_back(&use);
    });
  }
  for (auto &[layer, layerUses] : uses) {
    // The forward ops to copy: the producers of the used values, back to
    // the saved values.
    DenseSet<Operation *> needed;
    SmallVector<Operation *> work;
    Operation *first = nullptr;
    for (OpOperand *use : layerUses) {
      work.push_back(use->get().getDefiningOp());
      Operation *top = body.findAncestorOpInBlock(*use->getOwner());
      if (!first || top->isBeforeInBlock(first))
        first = top;
    }
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!needed.insert(op).second)
        continue;
      // (Fresh tensors the copies write into are made again too, so that
      // the forward ones die with the forward pass.)
      op->walk([&](Operation *inner) {
        for (Value v : inner->getOperands()) {
          Operation *def = v.getDefiningOp();
          if ((recomputable(v) && layerOf.lookup(def) == layer) ||
              (def && forwardOps.contains(def) &&
               isa<tensor::EmptyOp, linalg::FillOp>(def)))
            work.push_back(def);
        }
      });
    }
    IRMapping map;
    b.setInsertionPoint(first);
    for (Operation *op : forward) {
      if (!needed.contains(op))
        continue;
      Operation *copy = b.clone(*op, map);
      copy->setAttr(STPDialect::kPhaseAttrName, b.getStringAttr("recompute"));
      copy->removeAttr(STPDialect::kPlanOpsAttrName);
      ++numRecomputed;
    }
    for (OpOperand *use : layerUses)
      use->set(map.lookup(use->get()));
  }
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult TrainingStepBuilder::run() {
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "the training step needs a single-block "
                               "function";
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Location loc = func.getLoc();

  // The output the loss reads.
  Value output;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto name =
        func.getResultAttrOfType<StringAttr>(i, STPDialect::kNameAttrName);
    if (!options.lossOutput.empty()) {
      if (name && name.getValue() == options.lossOutput)
        output = v;
      continue;
    }
    if (isFloatTensor(v)) {
      output = v;
      break;
    }
  }
  if (!output)
    return emitError(loc) << (options.lossOutput.empty()
                                  ? std::string("the model has no "
                                                "floating-point output")
                                  : "the model has no output named '" +
                                        options.lossOutput + "'");

  // The plan's choices (`stp.plan`'s mesh entry), where an option does not
  // override them.
  DictionaryAttr planMesh = getPlanMesh(module);
  auto planInteger = [&](StringRef key, int64_t otherwise) {
    if (planMesh)
      if (auto value = planMesh.getAs<IntegerAttr>(key))
        return value.getInt();
    return otherwise;
  };
  // The ZeRO stage: the option, else the plan's.
  zeroStage = options.zeroStage >= 0 ? options.zeroStage
                                     : int(planInteger("zero_stage", 0));
  // Micro-batches: the option, else the plan's. -stp-partition runs the
  // step's forward and backward once per micro-batch and sums the
  // gradients; the loss is already a mean over the global batch.
  microBatches = options.microBatches >= 0
                     ? options.microBatches
                     : std::max<int64_t>(planInteger("micro_batches", 1), 1);
  // Recomputation: the option, else the plan's.
  recompute = options.recompute == "on";
  if (options.recompute == "plan" && planMesh) {
    if (auto r = planMesh.getAs<BoolAttr>("recompute"))
      recompute = r.getValue();
    if (auto mode = planMesh.getAs<StringAttr>("recompute_mode"))
      if (mode.getValue() == "selective")
        return emitError(loc)
               << "the plan recomputes selectively (the attention core "
                  "only), which the training step does not emit yet; "
                  "recompute fully or not at all (recompute=on or off)";
  }
  if (zeroStage > 3)
    return emitError(loc) << "ZeRO stage " << zeroStage
                          << " does not exist (0, 1, 2 or 3)";
  dataParallelAxes = getDataParallelAxes();
  if (zeroStage == 3)
    for (BlockArgument arg : body.getArguments())
      if (auto param = func.getArgAttrOfType<ParamAttr>(
              arg.getArgNumber(), STPDialect::kParamAttrName))
        if (param.getTrainable() && isFloatTensor(arg))
          shardParameter(arg);

  analyzeRequiresGrad();
  if (!needsGrad(output))
    return emitError(loc) << "the loss does not depend on any "
                             "floating-point parameter: nothing to train";

  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);

  b.setInsertionPoint(ret);
  FailureOr<Value> loss = buildLoss(output, locFor(loc, "loss"));
  if (failed(loss))
    return failure();
  results.push_back(*loss);
  resultNames.push_back("loss");

  for (Operation *op : llvm::reverse(forward))
    if (failed(backward(op)))
      return failure();
  if (recompute) {
    recomputeActivations(forward);
    if (numRecomputed == 0)
      emitWarning(loc) << "activation recomputation: the plan names no "
                          "layers (or no layer has activations the backward "
                          "pass reads), so nothing is recomputed";
  }
  regatherForBackward();

  for (BlockArgument arg : body.getArguments())
    if (requiresGrad.contains(arg) && adjoints.count(arg))
      params.push_back(arg);
  if (params.empty())
    return emitError(loc) << "no parameter receives a gradient";
  b.setInsertionPoint(ret);
  if (failed(buildOptimizer(loc)))
    return failure();

  // The new signature: arguments appended by addArgument above, results
  // replaced.
  unsigned firstNew = func.getNumArguments();
  SmallVector<Type> argTypes(func.getArgumentTypes());
  for (auto &[type, name] : newArgs)
    argTypes.push_back(type);
  SmallVector<Type> resultTypes;
  for (Value v : results)
    resultTypes.push_back(v.getType());
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned i = 0; i < firstNew; ++i)
    argAttrs.push_back(func.getArgAttrDict(i));
  for (auto &[type, name] : newArgs)
    argAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(STPDialect::kNameAttrName, b.getStringAttr(name))));
  func.setFunctionType(FunctionType::get(context, argTypes, resultTypes));
  func.setAllArgAttrs(argAttrs);
  SmallVector<DictionaryAttr> resultAttrs;
  for (const std::string &name : resultNames)
    resultAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(STPDialect::kNameAttrName, b.getStringAttr(name))));
  func.setAllResultAttrs(resultAttrs);
  b.setInsertionPoint(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  eraseDeadOps(body);

  SmallVector<NamedAttribute> training{
      b.getNamedAttr("loss", b.getStringAttr(options.loss +
                                             (options.lossLabels.empty()
                                                  ? ""
                                                  : "=" + options.lossLabels))),
      b.getNamedAttr("optimizer", b.getStringAttr(options.optimizer)),
      b.getNamedAttr("lr", b.getF64FloatAttr(options.lr)),
      b.getNamedAttr("weight_decay", b.getF64FloatAttr(options.weightDecay)),
      b.getNamedAttr("parameters", b.getI64IntegerAttr(params.size())),
      b.getNamedAttr("zero_stage", b.getI64IntegerAttr(zeroStage)),
      b.getNamedAttr("micro_batches", b.getI64IntegerAttr(microBatches)),
      b.getNamedAttr("recompute", b.getBoolAttr(recompute))};
  if (options.optimizer == "adamw") {
    training.push_back(
        b.getNamedAttr("beta1", b.getF64FloatAttr(options.beta1)));
    training.push_back(
        b.getNamedAttr("beta2", b.getF64FloatAttr(options.beta2)));
    training.push_back(
        b.getNamedAttr("eps", b.getF64FloatAttr(options.epsilon)));
  }
  module->setAttr(STPDialect::kTrainingAttrName, b.getDictionaryAttr(training));
  return success();
}

namespace {
struct TrainingStepPass
    : public stpar::stp::impl::TrainingStepPassBase<TrainingStepPass> {
  using TrainingStepPassBase::TrainingStepPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Options o;
    StringRef lossText = loss;
    if (lossText.consume_front("cross-entropy=")) {
      if (lossText.empty()) {
        module.emitError() << "--loss cross-entropy=NAME needs the name of "
                              "the new labels input";
        return signalPassFailure();
      }
      o.loss = "cross-entropy";
      o.lossLabels = lossText.str();
    } else if (lossText == "next-token" || lossText == "sum" ||
               lossText == "mean-square") {
      o.loss = lossText.str();
    } else {
      module.emitError() << "unknown loss '" << loss
                         << "' (expected next-token, cross-entropy=NAME, sum "
                            "or mean-square)";
      return signalPassFailure();
    }
    if (optimizer != "sgd" && optimizer != "adamw") {
      module.emitError() << "unknown optimizer '" << optimizer
                         << "' (expected sgd or adamw)";
      return signalPassFailure();
    }
    if (!(learningRate >= 0) || !(weightDecay >= 0) || !(beta1 >= 0) ||
        !(beta1 < 1) || !(beta2 >= 0) || !(beta2 < 1) || !(epsilon > 0)) {
      module.emitError() << "optimizer options out of range (lr, "
                            "weight-decay >= 0; 0 <= beta < 1; eps > 0)";
      return signalPassFailure();
    }
    o.lossOutput = lossOutput;
    o.optimizer = optimizer;
    o.lr = learningRate;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.epsilon = epsilon;
    o.weightDecay = weightDecay;
    o.returnGradients = returnGradients;
    o.zeroStage = zeroStage;
    o.microBatches = microBatches;
    o.recompute = recompute;
    if (o.recompute != "on" && o.recompute != "off" && o.recompute != "plan") {
      module.emitError() << "recompute must be on, off or plan, got '"
                         << o.recompute << "'";
      return signalPassFailure();
    }
    if (o.microBatches == 0 || o.microBatches < -1) {
      module.emitError() << "micro-batches must be at least 1 (or -1: the "
                            "plan's), got "
                         << o.microBatches;
      return signalPassFailure();
    }
    if (module->hasAttr(STPDialect::kTrainingAttrName)) {
      module.emitError() << "the module is a training step already";
      return signalPassFailure();
    }
    if (module->hasAttr(STPDialect::kPartitionedAttrName)) {
      module.emitError() << "-stp-training-step runs on the global-shape "
                            "IR, before -stp-partition";
      return signalPassFailure();
    }
    func::FuncOp func;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal()) {
        if (func) {
          module.emitError() << "-stp-training-step expects one function";
          return signalPassFailure();
        }
        func = f;
      }
    if (!func) {
      module.emitError() << "no function to turn into a training step";
      return signalPassFailure();
    }
    if (failed(TrainingStepBuilder(module, func, o).run()))
      return signalPassFailure();
  }
};
} // namespace
