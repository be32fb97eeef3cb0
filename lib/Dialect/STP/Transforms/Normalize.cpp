//===- Normalize.cpp - recognize composites (-stp-normalize) ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-normalize: greedy rewrite patterns that turn decomposed
// LayerNorm / RMSNorm into `stp.layer_norm` / `stp.rms_norm`, fold a
// decomposed GELU (erf or tanh form) into one marked elementwise generic,
// and recognize scaled-dot-product attention (NormalizeAttention.cpp); then
// marks existing single-generic GELUs and the ops of MoE layers.
//
// Every pattern checks constants (within tolerance), shapes, reduced axes
// and uses before it fires; anything else is left as it is.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "NormalizeMatchers.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace stpar::stp {
#define GEN_PASS_DEF_NORMALIZEPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;
using namespace stpar::stp::normalize;

//===----------------------------------------------------------------------===//
// LayerNorm / RMSNorm
//===----------------------------------------------------------------------===//

namespace {

/// `v = x - mean(x)` over the trailing dims from `axis`.
static bool isCentered(Value v, Value x, int64_t axis,
                       SmallPtrSetImpl<Operation *> &ops) {
  std::optional<EwOp> sub = matchEw(v, arith::SubFOp::getOperationName());
  if (!sub || !sub->isFull(0) || sub->operands[1].isConstant() ||
      sub->operands[0].tensor != x)
    return false;
  std::optional<MeanInfo> mean = matchMean(sub->operands[1].tensor);
  if (!mean || mean->input != x || mean->axis != axis)
    return false;
  ops.insert(sub->op);
  ops.insert(mean->divOp);
  ops.insert(mean->sumOp);
  return true;
}

/// Whether `w` can be the scale/bias of a normalization of `xType` over the
/// dims from `axis`: a tensor of the same element type and at most the
/// normalized rank (it then broadcasts only along the normalized dims).
static bool isNormParam(Value w, RankedTensorType xType, int64_t axis) {
  auto type = dyn_cast<RankedTensorType>(w.getType());
  return type && type.getElementType() == xType.getElementType() &&
         type.getRank() <= xType.getRank() - axis;
}

/// If `ew` is `mulf` (or `addf`) of `value` (full shape) and a normalization
/// parameter, that parameter.
static Value otherParam(const EwOp &ew, Value value, RankedTensorType xType,
                        int64_t axis) {
  if (ew.operands.size() != 2)
    return {};
  for (unsigned i = 0; i < 2; ++i)
    if (!ew.operands[i].isConstant() && ew.operands[i].tensor == value &&
        ew.isFull(i) && !ew.operands[1 - i].isConstant() &&
        isNormParam(ew.operands[1 - i].tensor, xType, axis))
      return ew.operands[1 - i].tensor;
  return {};
}

/// The single user of `v`'s defining op's result, or null.
static Operation *singleUser(Value v) {
  if (!v.hasOneUse())
    return nullptr;
  return *v.getUsers().begin();
}

/// Anchored on the `sqrt(mean(p) + eps)` of a decomposed normalization
/// (p = (x - mean(x))^2 for LayerNorm, x^2 for RMSNorm), walks forward over
/// the divide (or reciprocal and multiply), the scale multiply and, for
/// LayerNorm, the bias add, and replaces the last of them.
struct DecomposedNormPattern : OpRewritePattern<linalg::GenericOp> {
  DecomposedNormPattern(MLIRContext *ctx, NormalizeCounts &counts)
      : OpRewritePattern(ctx), counts(counts) {}

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (op->getNumResults() != 1)
      return failure();
    Value sqrtValue = op->getResult(0);
    std::optional<EwOp> sqrt =
        matchEw(sqrtValue, math::SqrtOp::getOperationName());
    if (!sqrt || !sqrt->isFull(0))
      return failure();
    SmallPtrSet<Operation *, 16> ops;
    ops.insert(op);
    // mean(p) + eps, eps a small positive constant.
    std::optional<EwOp> addEps =
        matchEw(sqrt->operands[0].tensor, arith::AddFOp::getOperationName());
    if (!addEps)
      return rewriter.notifyMatchFailure(op, "sqrt input is not an add");
    unsigned meanIdx = addEps->operands[0].isConstant() ? 1 : 0;
    const EwOperand &epsOperand = addEps->operands[1 - meanIdx];
    if (!epsOperand.isConstant() || !addEps->isFull(meanIdx) ||
        *epsOperand.constant <= 0.0 || *epsOperand.constant > 1e-2)
      return rewriter.notifyMatchFailure(op, "no epsilon in the sqrt");
    ops.insert(addEps->op);
    std::optional<MeanInfo> meanSq =
        matchMean(addEps->operands[meanIdx].tensor);
    if (!meanSq)
      return rewriter.notifyMatchFailure(op, "no mean under the sqrt");
    ops.insert(meanSq->divOp);
    ops.insert(meanSq->sumOp);
    int64_t axis = meanSq->axis;
    // p = base^2 (powf by 2 or base * base).
    Value base;
    std::optional<EwOp> square = matchEw(meanSq->input);
    if (!square || !square->isFull(0))
      return failure();
    if (square->kind == math::PowFOp::getOperationName() &&
        square->operands[1].isConstant() &&
        *square->operands[1].constant == 2.0)
      base = square->operands[0].tensor;
    else if (square->kind == arith::MulFOp::getOperationName() &&
             square->isFull(1) &&
             square->operands[0].tensor == square->operands[1].tensor)
      base = square->operands[0].tensor;
    else
      return rewriter.notifyMatchFailure(op, "mean is not of a square");
    ops.insert(square->op);
    // LayerNorm when base = x - mean(x), RMSNorm otherwise.
    Value x = base;
    bool isLayerNorm = false;
    if (std::optional<EwOp> sub =
            matchEw(base, arith::SubFOp::getOperationName());
        sub && sub->isFull(0) && !sub->operands[1].isConstant() &&
        isCentered(base, sub->operands[0].tensor, axis, ops)) {
      x = sub->operands[0].tensor;
      isLayerNorm = true;
    }
    auto xType = cast<RankedTensorType>(x.getType());
    if (!isa<FloatType>(xType.getElementType()))
      return failure();
    // A numerator is x (RMSNorm) or x - mean(x) (LayerNorm, possibly a
    // second, identical subtraction as Megatron's export has).
    auto isNumerator = [&](Value n) {
      if (!isLayerNorm)
        return n == x;
      return n == base || isCentered(n, x, axis, ops);
    };
    // The normalized value: n / s, or n * (1 / s); n may already carry the
    // scale (w * n or n * w).
    Operation *user = singleUser(sqrtValue);
    if (!user || user->getNumResults() != 1)
      return rewriter.notifyMatchFailure(op, "sqrt has several users");
    Value numerator, scaled;
    std::optional<EwOp> div =
        matchEw(user->getResult(0), arith::DivFOp::getOperationName());
    if (!div)
      return rewriter.notifyMatchFailure(op, "sqrt is not divided by");
    if (div->operands[0].isConstant() && *div->operands[0].constant == 1.0 &&
        div->isFull(1)) {
      // Reciprocal, then a multiply.
      ops.insert(div->op);
      Value recip = div->op->getResult(0);
      Operation *mulUser = singleUser(recip);
      if (!mulUser || mulUser->getNumResults() != 1)
        return failure();
      std::optional<EwOp> mul =
          matchEw(mulUser->getResult(0), arith::MulFOp::getOperationName());
      if (!mul || mul->operands.size() != 2 || mul->operands[0].isConstant() ||
          mul->operands[1].isConstant())
        return failure();
      unsigned r = mul->operands[0].tensor == recip ? 0 : 1;
      if (mul->operands[r].tensor != recip || !mul->isFull(1 - r))
        return failure();
      numerator = mul->operands[1 - r].tensor;
      scaled = mul->op->getResult(0);
      ops.insert(mul->op);
    } else {
      if (div->operands[0].isConstant() || !div->isFull(0) ||
          div->operands[1].isConstant() || div->operands[1].tensor != sqrtValue)
        return failure();
      numerator = div->operands[0].tensor;
      scaled = div->op->getResult(0);
      ops.insert(div->op);
    }
    Value scale;
    if (!isNumerator(numerator)) {
      // (w * n) / s.
      std::optional<EwOp> mul =
          matchEw(numerator, arith::MulFOp::getOperationName());
      if (!mul)
        return rewriter.notifyMatchFailure(op, "unexpected numerator");
      for (unsigned i = 0; i < 2 && !scale; ++i)
        if (!mul->operands[i].isConstant() && mul->isFull(i) &&
            isNumerator(mul->operands[i].tensor))
          scale = otherParam(*mul, mul->operands[i].tensor, xType, axis);
      if (!scale)
        return rewriter.notifyMatchFailure(op, "unexpected numerator");
      ops.insert(mul->op);
    }
    Value result = scaled;
    // Trailing scale multiply, then (LayerNorm) bias add.
    if (!scale)
      if (Operation *next = singleUser(result);
          next && next->getNumResults() == 1)
        if (std::optional<EwOp> mul =
                matchEw(next->getResult(0), arith::MulFOp::getOperationName()))
          if (Value w = otherParam(*mul, result, xType, axis)) {
            scale = w;
            result = mul->op->getResult(0);
            ops.insert(mul->op);
          }
    Value bias;
    if (isLayerNorm && scale)
      if (Operation *next = singleUser(result);
          next && next->getNumResults() == 1)
        if (std::optional<EwOp> add =
                matchEw(next->getResult(0), arith::AddFOp::getOperationName()))
          if (Value b = otherParam(*add, result, xType, axis)) {
            bias = b;
            result = add->op->getResult(0);
            ops.insert(add->op);
          }
    Operation *root = result.getDefiningOp();
    if (result.getType() != xType || !isClosed(ops, root))
      return rewriter.notifyMatchFailure(op, "intermediate values escape");

    rewriter.setInsertionPoint(root);
    Location loc = root->getLoc();
    if (!scale) {
      auto ones = RankedTensorType::get(xType.getShape().drop_front(axis),
                                        xType.getElementType());
      scale = arith::ConstantOp::create(
          rewriter, loc,
          DenseElementsAttr::get(
              ones, rewriter.getFloatAttr(xType.getElementType(), 1.0)));
    }
    auto axisAttr = rewriter.getI64IntegerAttr(axis);
    auto epsAttr =
        rewriter.getF32FloatAttr(static_cast<float>(*epsOperand.constant));
    Value replacement;
    if (isLayerNorm) {
      replacement = LayerNormOp::create(rewriter, loc, xType, x, scale, bias,
                                        axisAttr, epsAttr);
      ++counts.layerNorm;
    } else {
      replacement =
          RMSNormOp::create(rewriter, loc, xType, x, scale, axisAttr, epsAttr);
      ++counts.rmsNorm;
    }
    rewriter.replaceOp(root, replacement);
    return success();
  }

  NormalizeCounts &counts;
};

//===----------------------------------------------------------------------===//
// GELU
//===----------------------------------------------------------------------===//

static const StringRef kArithKinds[] = {
    arith::AddFOp::getOperationName(), arith::SubFOp::getOperationName(),
    arith::MulFOp::getOperationName(), arith::DivFOp::getOperationName(),
    arith::NegFOp::getOperationName(), math::PowFOp::getOperationName()};

/// Tensor-level expression nodes: elementwise generics whose tensor operands
/// all have the result's shape (no broadcasting).
static std::optional<ExprNode> tensorNode(Value v) {
  std::optional<EwOp> ew = matchEw(v);
  if (!ew || !isa<FloatType>(ew->type().getElementType()))
    return std::nullopt;
  for (unsigned i = 0; i < ew->operands.size(); ++i)
    if (!ew->operands[i].isConstant() && !ew->isFull(i))
      return std::nullopt;
  return ExprNode{ew->kind, ew->op, ew->operands};
}

/// Scalar expression nodes: arith/math ops inside one block.
static std::optional<ExprNode> scalarNode(Value v) {
  Operation *op = v.getDefiningOp();
  if (!op || op->getNumResults() != 1 || !isa<FloatType>(v.getType()) ||
      isa<arith::ConstantOp>(op))
    return std::nullopt;
  ExprNode node{op->getName().getStringRef(), op, {}};
  for (Value operand : op->getOperands()) {
    EwOperand arg;
    arg.constant = getConstantScalar(operand);
    if (!arg.constant)
      arg.tensor = operand;
    node.args.push_back(arg);
  }
  return node;
}

/// Whether the erf/tanh node `t` (one operand) is GELU's inner function of
/// some `x`; sets `x` and adds the argument's ops to `ops`.
static bool matchGeluInner(const ExprNode &t, NodeFn node, Value &x,
                           SmallPtrSetImpl<Operation *> &ops) {
  if (t.args.size() != 1 || t.args[0].isConstant())
    return false;
  bool isTanh = t.kind == math::TanhOp::getOperationName();
  // x is the value in which the argument is x/sqrt(2) (erf) or
  // sqrt(2/pi)(x + 0.044715 x^3) (tanh); try each value of the argument's
  // expression.
  SmallVector<Value, 8> candidates;
  collectValues(t.args[0].tensor, node, candidates);
  for (Value candidate : candidates) {
    SmallPtrSet<Operation *, 16> argOps;
    std::optional<Poly> arg =
        evalPoly(t.args[0].tensor, candidate, Value(), node, argOps);
    if (arg && isGeluArgument(*arg, isTanh)) {
      x = candidate;
      ops.insert(argOps.begin(), argOps.end());
      return true;
    }
  }
  return false;
}

/// Builds `gelu(x)` on one scalar (as the importer's Gelu does).
static Value buildGeluScalar(OpBuilder &b, Location loc, Value x, bool isTanh) {
  auto c = [&](double v) {
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(x.getType(), v))
        .getResult();
  };
  Value inner;
  if (isTanh) {
    Value x3 =
        arith::MulFOp::create(b, loc, x, arith::MulFOp::create(b, loc, x, x));
    Value sum = arith::AddFOp::create(
        b, loc, x, arith::MulFOp::create(b, loc, c(0.044715), x3));
    inner = math::TanhOp::create(
        b, loc, arith::MulFOp::create(b, loc, c(std::sqrt(2.0 / M_PI)), sum));
  } else {
    inner = math::ErfOp::create(b, loc,
                                arith::MulFOp::create(b, loc, x, c(M_SQRT1_2)));
  }
  Value onePlus = arith::AddFOp::create(b, loc, c(1.0), inner);
  return arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, c(0.5), x),
                               onePlus);
}

/// Anchored on an elementwise erf/tanh generic: finds x from its argument,
/// then walks up the single-use chain of arithmetic generics to the one
/// that equals 0.5 x (1 + t), and replaces that chain with one generic.
struct DecomposedGeluPattern : OpRewritePattern<linalg::GenericOp> {
  DecomposedGeluPattern(MLIRContext *ctx, NormalizeCounts &counts)
      : OpRewritePattern(ctx), counts(counts) {}

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (op->getNumResults() != 1 || op->hasAttr(STPDialect::kCompositeAttrName))
      return failure();
    Value t = op->getResult(0);
    std::optional<ExprNode> tNode = tensorNode(t);
    if (!tNode || (tNode->kind != math::ErfOp::getOperationName() &&
                   tNode->kind != math::TanhOp::getOperationName()))
      return failure();
    bool isTanh = tNode->kind == math::TanhOp::getOperationName();
    SmallPtrSet<Operation *, 16> innerOps;
    Value x;
    if (!matchGeluInner(*tNode, tensorNode, x, innerOps))
      return rewriter.notifyMatchFailure(op, "not a GELU argument");
    // Up to four arithmetic generics above t: 1 + t, 0.5 * x, and products.
    Value current = t;
    for (int step = 0; step < 4; ++step) {
      Operation *user = singleUser(current);
      if (!user || user->getNumResults() != 1)
        return failure();
      Value next = user->getResult(0);
      std::optional<ExprNode> n = tensorNode(next);
      if (!n || !llvm::is_contained(kArithKinds, n->kind))
        return failure();
      current = next;
      SmallPtrSet<Operation *, 16> ops(innerOps.begin(), innerOps.end());
      std::optional<Poly> outer = evalPoly(current, x, t, tensorNode, ops);
      if (!outer || !isGeluOuter(*outer))
        continue;
      ops.insert(op);
      Operation *root = current.getDefiningOp();
      if (!isClosed(ops, root))
        return rewriter.notifyMatchFailure(op, "intermediate values escape");
      auto type = cast<RankedTensorType>(current.getType());
      if (cast<RankedTensorType>(x.getType()) != type)
        return failure();
      rewriter.setInsertionPoint(root);
      Location loc = root->getLoc();
      Value init = tensor::EmptyOp::create(rewriter, loc, type.getShape(),
                                           type.getElementType());
      auto identity =
          AffineMap::getMultiDimIdentityMap(type.getRank(), getContext());
      SmallVector<utils::IteratorType> iterators(type.getRank(),
                                                 utils::IteratorType::parallel);
      auto gelu = linalg::GenericOp::create(
          rewriter, loc, TypeRange{type}, ValueRange{x}, ValueRange{init},
          ArrayRef<AffineMap>{identity, identity}, iterators,
          [&](OpBuilder &b, Location l, ValueRange args) {
            linalg::YieldOp::create(b, l,
                                    buildGeluScalar(b, l, args[0], isTanh));
          });
      gelu->setAttr(STPDialect::kCompositeAttrName,
                    rewriter.getStringAttr("gelu"));
      rewriter.replaceOp(root, gelu->getResults());
      ++counts.geluFused;
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no 0.5 x (1 + t) above t");
  }

  NormalizeCounts &counts;
};

} // namespace

int64_t stpar::stp::normalize::markGeluBodies(Operation *root) {
  int64_t marked = 0;
  root->walk([&](linalg::GenericOp op) {
    if (op->hasAttr(STPDialect::kCompositeAttrName) ||
        op->getNumResults() != 1 || op.getNumDpsInputs() != 1 ||
        op.getNumDpsInits() != 1 ||
        !llvm::all_of(op.getIteratorTypesArray(),
                      [](utils::IteratorType t) {
                        return t == utils::IteratorType::parallel;
                      }) ||
        !llvm::all_of(op.getIndexingMapsArray(),
                      [](AffineMap m) { return m.isIdentity(); }))
      return;
    Block &body = op.getRegion().front();
    Value x = body.getArgument(0);
    Value yielded = body.getTerminator()->getOperand(0);
    Operation *t = nullptr;
    for (Operation &inner : body.without_terminator()) {
      if (!isa<math::ErfOp, math::TanhOp>(inner))
        continue;
      if (t)
        return;
      t = &inner;
    }
    if (!t)
      return;
    std::optional<ExprNode> tNode = scalarNode(t->getResult(0));
    SmallPtrSet<Operation *, 16> ops;
    Value argX;
    if (!tNode || !matchGeluInner(*tNode, scalarNode, argX, ops) || argX != x)
      return;
    std::optional<Poly> outer =
        evalPoly(yielded, x, t->getResult(0), scalarNode, ops);
    if (!outer || !isGeluOuter(*outer))
      return;
    op->setAttr(STPDialect::kCompositeAttrName,
                StringAttr::get(op->getContext(), "gelu"));
    ++marked;
  });
  return marked;
}

void stpar::stp::normalize::populateNormPatterns(RewritePatternSet &patterns,
                                                 NormalizeCounts &counts) {
  patterns.add<DecomposedNormPattern>(patterns.getContext(), counts);
}

void stpar::stp::normalize::populateGeluPatterns(RewritePatternSet &patterns,
                                                 NormalizeCounts &counts) {
  patterns.add<DecomposedGeluPattern>(patterns.getContext(), counts);
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct NormalizePass
    : public stpar::stp::impl::NormalizePassBase<NormalizePass> {
  using NormalizePassBase::NormalizePassBase;
  void runOnOperation() override {
    NormalizeCounts counts;
    RewritePatternSet patterns(&getContext());
    populateNormPatterns(patterns, counts);
    populateGeluPatterns(patterns, counts);
    populateAttentionPatterns(patterns, counts);
    // Rewrite only what the patterns recognize: no folding or constant CSE
    // of the rest of the graph (dead ops left by a rewrite are erased).
    GreedyRewriteConfig config;
    config.enableFolding(false).enableConstantCSE(false);
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                     config))) {
      getOperation()->emitError("stp-normalize did not converge");
      return signalPassFailure();
    }
    numLayerNorm += counts.layerNorm;
    numRMSNorm += counts.rmsNorm;
    numGeluFused += counts.geluFused;
    numAttention += counts.attention;
    numGeluMarked += markGeluBodies(getOperation());
    if (moeOp)
      numMoEOps += rewriteMoELayers(getOperation());
    numMoE += markMoELayers(getOperation());
  }
};
} // namespace
