//===- NormalizeAttention.cpp - attention and MoE recognition --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The attention pattern of -stp-normalize: softmax(Q K^T * scale + mask) V
// as the importer writes it (two rank-4 matmul generics around a
// `linalg.softmax` over the last dim, a Div/Mul by a constant, an additive
// or Where-based mask) becomes `stp.attention`, with grouped-query heads
// un-repeated and a provably causal constant mask turned into the causal
// flag. And the MoE marker: the ops between a router's token input and the
// combine of its gated expert outputs get `stp.composite = "moe"`.
//
//===----------------------------------------------------------------------===//

#include "NormalizeMatchers.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>

using namespace mlir;
using namespace stpar::stp;
using namespace stpar::stp::normalize;

/// Masked-out logits at or below this value count as -infinity when a mask
/// is proven causal or a Where mask is made additive: softmax weights of
/// such entries underflow to exactly 0 in float32 and float64 alike.
static constexpr double kMaskedLogit = -1e9;

namespace {

/// The permutation that transposes the last two dims of `v`, composed with
/// a `linalg.transpose` defining `v`; `source` is what it applies to.
static SmallVector<int64_t> lastTwoTransposed(Value v, Value &source) {
  int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  source = v;
  if (auto transpose = v.getDefiningOp<linalg::TransposeOp>()) {
    ArrayRef<int64_t> inner = transpose.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t p : perm)
      composed.push_back(inner[p]);
    perm = composed;
    source = transpose.getInput();
  }
  return perm;
}

static bool isIdentityPerm(ArrayRef<int64_t> perm) {
  return llvm::equal(perm, llvm::seq<int64_t>(0, perm.size()));
}

/// `v` transposed on its last two dims; folds into a `linalg.transpose`
/// that defines `v` (no op at all when the two transposes cancel).
static Value transposeLastTwo(PatternRewriter &rewriter, Location loc,
                              Value v) {
  Value source;
  SmallVector<int64_t> perm = lastTwoTransposed(v, source);
  if (isIdentityPerm(perm))
    return source;
  auto sourceType = cast<RankedTensorType>(source.getType());
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(sourceType.getDimSize(p));
  Value init = tensor::EmptyOp::create(rewriter, loc, shape,
                                       sourceType.getElementType());
  return linalg::TransposeOp::create(rewriter, loc, source, init, perm)
      ->getResult(0);
}

/// If `v` [B, Hkv*R, S, D] repeats the heads of some [B, Hkv, S, D] tensor
/// R times (Llama's repeat_kv as exported: Unsqueeze, Expand, Reshape), that
/// tensor; otherwise `v`.
static Value peelRepeatedHeads(Value v) {
  auto collapse = v.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse)
    return v;
  SmallVector<ReassociationIndices> reassociation =
      collapse.getReassociationIndices();
  SmallVector<ReassociationIndices> expected = {{0}, {1, 2}, {3}, {4}};
  if (reassociation != expected)
    return v;
  auto broadcast = collapse.getSrc().getDefiningOp<linalg::GenericOp>();
  if (!broadcast || broadcast.getNumDpsInputs() != 1 ||
      broadcast.getNumDpsInits() != 1)
    return v;
  Block &body = broadcast.getRegion().front();
  if (body.getOperations().size() != 1 ||
      body.getTerminator()->getOperand(0) != body.getArgument(0))
    return v;
  MLIRContext *ctx = v.getContext();
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  SmallVector<AffineMap> maps = broadcast.getIndexingMapsArray();
  if (maps[0] != AffineMap::get(
                     5, 0,
                     {d(0), d(1), getAffineConstantExpr(0, ctx), d(3), d(4)},
                     ctx) ||
      !maps[1].isIdentity())
    return v;
  auto expand =
      broadcast.getDpsInputs()[0].getDefiningOp<tensor::ExpandShapeOp>();
  if (!expand)
    return v;
  auto srcType = cast<RankedTensorType>(expand.getSrc().getType());
  auto midType = cast<RankedTensorType>(expand.getResult().getType());
  if (srcType.getRank() != 4 || midType.getRank() != 5 ||
      midType.getDimSize(2) != 1 ||
      midType.getShape().take_front(2) != srcType.getShape().take_front(2) ||
      midType.getShape().take_back(2) != srcType.getShape().take_back(2))
    return v;
  return expand.getSrc();
}

/// Whether the constant additive mask `mask` (broadcast to [.., Sq, Skv])
/// is causal: 0 where key j <= query i + (Skv - Sq), masked elsewhere, the
/// same for every leading index.
static bool isCausalConstantMask(Value mask, int64_t sq, int64_t skv) {
  auto constant = mask.getDefiningOp<arith::ConstantOp>();
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  auto type = cast<RankedTensorType>(mask.getType());
  if (!dense || type.getRank() < 2 ||
      type.getDimSize(type.getRank() - 2) != sq ||
      type.getDimSize(type.getRank() - 1) != skv)
    return false;
  int64_t i = 0;
  for (APFloat value : dense.getValues<APFloat>()) {
    int64_t row = (i / skv) % sq, col = i % skv;
    double v = value.convertToDouble();
    bool visible = col <= row + (skv - sq);
    if (visible ? v != 0.0 : v > kMaskedLogit)
      return false;
    ++i;
  }
  return true;
}

/// Whether the constant condition `cond` of `select(cond, masked, logits)`
/// (or of `select(cond, logits, masked)` when `maskedOnTrue` is false)
/// masks exactly the non-causal positions.
static bool isCausalConstantCondition(Value cond, bool maskedOnTrue, int64_t sq,
                                      int64_t skv) {
  auto constant = cond.getDefiningOp<arith::ConstantOp>();
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseIntElementsAttr>(constant.getValue());
  auto type = cast<RankedTensorType>(cond.getType());
  if (!dense || type.getRank() < 2 ||
      type.getDimSize(type.getRank() - 2) != sq ||
      type.getDimSize(type.getRank() - 1) != skv)
    return false;
  int64_t i = 0;
  for (APInt value : dense.getValues<APInt>()) {
    int64_t row = (i / skv) % sq, col = i % skv;
    bool masked = value.getBoolValue() == maskedOnTrue;
    if (masked != (col > row + (skv - sq)))
      return false;
    ++i;
  }
  return true;
}

/// softmax(Q K^T * scale + mask) V -> stp.attention, anchored on the
/// softmax.
struct AttentionPattern : OpRewritePattern<linalg::SoftmaxOp> {
  AttentionPattern(MLIRContext *ctx, NormalizeCounts &counts)
      : OpRewritePattern(ctx), counts(counts) {}

  LogicalResult matchAndRewrite(linalg::SoftmaxOp softmax,
                                PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(softmax.getInput().getType());
    if (!type || type.getRank() != 4 || !type.hasStaticShape() ||
        softmax.getDimension() != 3)
      return rewriter.notifyMatchFailure(softmax,
                                         "not a rank-4 last-dim softmax");
    Value probs = softmax->getResult(0);
    if (!probs.hasOneUse())
      return failure();
    std::optional<BatchMatmul> pv =
        matchBatchMatmul((*probs.getUsers().begin())->getResult(0));
    if (!pv || pv->lhs != probs)
      return rewriter.notifyMatchFailure(softmax, "probs not multiplied by V");
    SmallPtrSet<Operation *, 8> ops = {softmax, pv->op};

    // The mask, additive or a Where (select) with a very negative fill.
    Value logits = softmax.getInput();
    Value additiveMask, whereCond;
    Operation *whereOp = nullptr;
    bool maskedOnTrue = true;
    double fill = 0;
    std::optional<EwOp> maskOp = matchEw(logits);
    auto isScores = [](Value v) {
      if (matchBatchMatmul(v))
        return true;
      std::optional<EwOp> ew = matchEw(v);
      return ew &&
             (ew->kind == arith::DivFOp::getOperationName() ||
              ew->kind == arith::MulFOp::getOperationName()) &&
             llvm::any_of(ew->operands, [](const EwOperand &o) {
               return !o.isConstant() && matchBatchMatmul(o.tensor);
             });
    };
    Value scores = logits;
    if (maskOp && maskOp->kind == arith::AddFOp::getOperationName() &&
        !maskOp->operands[0].isConstant() &&
        !maskOp->operands[1].isConstant()) {
      for (unsigned i = 0; i < 2 && !additiveMask; ++i)
        if (maskOp->isFull(i) && isScores(maskOp->operands[i].tensor)) {
          scores = maskOp->operands[i].tensor;
          additiveMask = maskOp->operands[1 - i].tensor;
        }
      if (!additiveMask)
        return rewriter.notifyMatchFailure(softmax, "unrecognized mask add");
      ops.insert(maskOp->op);
    } else if (maskOp && maskOp->kind == arith::SelectOp::getOperationName() &&
               maskOp->operands.size() == 3 &&
               !maskOp->operands[0].isConstant()) {
      for (unsigned i = 1; i < 3 && !whereCond; ++i) {
        const EwOperand &filled = maskOp->operands[i];
        const EwOperand &other = maskOp->operands[3 - i];
        if (filled.isConstant() && *filled.constant <= kMaskedLogit &&
            !other.isConstant() && maskOp->isFull(3 - i) &&
            isScores(other.tensor)) {
          whereCond = maskOp->operands[0].tensor;
          whereOp = maskOp->op;
          maskedOnTrue = i == 1;
          fill = *filled.constant;
          scores = other.tensor;
        }
      }
      if (!whereCond)
        return rewriter.notifyMatchFailure(softmax, "unrecognized Where mask");
      ops.insert(maskOp->op);
    }

    // The scale: Div or Mul by a constant, or none.
    double scale = 1.0;
    Value qk = scores;
    if (!matchBatchMatmul(scores)) {
      std::optional<EwOp> scaleOp = matchEw(scores);
      if (!scaleOp || scaleOp->operands.size() != 2)
        return rewriter.notifyMatchFailure(softmax, "no Q K^T under softmax");
      if (scaleOp->kind == arith::DivFOp::getOperationName() &&
          scaleOp->isFull(0) && scaleOp->operands[1].isConstant() &&
          *scaleOp->operands[1].constant != 0.0) {
        scale = 1.0 / *scaleOp->operands[1].constant;
        qk = scaleOp->operands[0].tensor;
      } else if (scaleOp->kind == arith::MulFOp::getOperationName()) {
        unsigned c = scaleOp->operands[0].isConstant() ? 0 : 1;
        if (!scaleOp->operands[c].isConstant() || !scaleOp->isFull(1 - c))
          return rewriter.notifyMatchFailure(softmax, "unrecognized scale");
        scale = *scaleOp->operands[c].constant;
        qk = scaleOp->operands[1 - c].tensor;
      } else {
        return rewriter.notifyMatchFailure(softmax, "unrecognized scale");
      }
      ops.insert(scaleOp->op);
    }
    std::optional<BatchMatmul> qkMatmul = matchBatchMatmul(qk);
    if (!qkMatmul)
      return rewriter.notifyMatchFailure(softmax, "no Q K^T under softmax");
    ops.insert(qkMatmul->op);
    Operation *root = pv->op;
    if (!isClosed(ops, root))
      return rewriter.notifyMatchFailure(softmax, "intermediate values escape");

    Value query = qkMatmul->lhs;
    auto qType = cast<RankedTensorType>(query.getType());
    int64_t sq = qType.getDimSize(2);
    int64_t skv = type.getDimSize(3);
    bool causal = false;
    if (additiveMask && isCausalConstantMask(additiveMask, sq, skv)) {
      causal = true;
      additiveMask = {};
    }
    if (whereCond &&
        isCausalConstantCondition(whereCond, maskedOnTrue, sq, skv)) {
      causal = true;
      whereCond = {};
    }

    // Grouped-query attention: K and V both repeat the heads of smaller
    // tensors; pass those.
    Value keySource, keyHeads, valueHeads;
    bool kvRepeated = false;
    if (isIdentityPerm(lastTwoTransposed(qkMatmul->rhs, keySource))) {
      keyHeads = peelRepeatedHeads(keySource);
      valueHeads = peelRepeatedHeads(pv->rhs);
      kvRepeated =
          keyHeads != keySource && valueHeads != pv->rhs &&
          cast<RankedTensorType>(keyHeads.getType()).getDimSize(1) ==
              cast<RankedTensorType>(valueHeads.getType()).getDimSize(1);
    }

    rewriter.setInsertionPoint(root);
    // Each new op keeps the location of the node it stands for (the ONNX
    // node name is the op's stable name in plans): K^T the Q K^T MatMul's,
    // the additive mask the Where's, the attention the P V MatMul's.
    Location loc = root->getLoc();
    Value key = kvRepeated ? keyHeads
                           : transposeLastTwo(rewriter, qkMatmul->op->getLoc(),
                                              qkMatmul->rhs);
    Location maskLoc = whereOp ? whereOp->getLoc() : loc;
    Value value = kvRepeated ? valueHeads : pv->rhs;
    if (whereCond) {
      // select(c, fill, s) == s + select(c, fill, 0) for finite logits s and
      // fill <= kMaskedLogit (both give weight 0 after the softmax).
      auto condType = cast<RankedTensorType>(whereCond.getType());
      Type elem = type.getElementType();
      Value init =
          tensor::EmptyOp::create(rewriter, maskLoc, condType.getShape(), elem);
      auto identity =
          AffineMap::getMultiDimIdentityMap(condType.getRank(), getContext());
      SmallVector<utils::IteratorType> iterators(condType.getRank(),
                                                 utils::IteratorType::parallel);
      additiveMask =
          linalg::GenericOp::create(
              rewriter, maskLoc, TypeRange{init.getType()},
              ValueRange{whereCond},
              ValueRange{init}, ArrayRef<AffineMap>{identity, identity},
              iterators,
              [&](OpBuilder &b, Location l, ValueRange args) {
                Value masked =
                    arith::ConstantOp::create(b, l, b.getFloatAttr(elem, fill));
                Value zero =
                    arith::ConstantOp::create(b, l, b.getFloatAttr(elem, 0.0));
                Value r =
                    maskedOnTrue
                        ? arith::SelectOp::create(b, l, args[0], masked, zero)
                        : arith::SelectOp::create(b, l, args[0], zero, masked);
                linalg::YieldOp::create(b, l, r);
              })
              ->getResult(0);
    }
    auto resultType = cast<RankedTensorType>(root->getResult(0).getType());
    auto attention = AttentionOp::create(
        rewriter, loc, resultType, query, key, value, additiveMask,
        rewriter.getF32FloatAttr(static_cast<float>(scale)),
        causal ? rewriter.getUnitAttr() : UnitAttr());
    rewriter.replaceOp(root, attention->getResults());
    ++counts.attention;
    return success();
  }

  NormalizeCounts &counts;
};

} // namespace

void stpar::stp::normalize::populateAttentionPatterns(
    RewritePatternSet &patterns, NormalizeCounts &counts) {
  patterns.add<AttentionPattern>(patterns.getContext(), counts);
}

//===----------------------------------------------------------------------===//
// MoE layers
//===----------------------------------------------------------------------===//

/// Ops that only reshape or reorder a tensor.
static bool isDataMovement(Operation *op) {
  return isa<linalg::TransposeOp, tensor::ExpandShapeOp,
             tensor::CollapseShapeOp, tensor::ReshapeOp>(op);
}

/// Whether `op` is a `linalg.generic` with a reduction loop.
static bool isReduction(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  return generic && llvm::is_contained(generic.getIteratorTypesArray(),
                                       utils::IteratorType::reduction);
}

/// For a TopK over a softmax of router logits (a matmul of the tokens), the
/// op that combines the gated expert outputs: the first reduction reached
/// from the scattered gates through data movement and elementwise ops.
static Operation *findCombine(ScatterElementsOp scatter) {
  Value current = scatter.getResult();
  for (int step = 0; step < 8; ++step) {
    if (!current.hasOneUse())
      return nullptr;
    Operation *user = *current.getUsers().begin();
    if (isReduction(user))
      return user;
    if (user->getNumResults() != 1 ||
        !(isDataMovement(user) || matchEw(user->getResult(0))))
      return nullptr;
    current = user->getResult(0);
  }
  return nullptr;
}

int64_t stpar::stp::normalize::markMoELayers(Operation *root) {
  int64_t group = 0;
  root->walk([&](TopKOp topk) {
    // Router: softmax over the experts of a token-by-expert matmul.
    auto softmax = topk.getInput().getDefiningOp<linalg::SoftmaxOp>();
    if (!softmax ||
        static_cast<int64_t>(softmax.getDimension()) !=
            static_cast<int64_t>(topk.getAxis()))
      return;
    auto router = softmax.getInput().getDefiningOp<linalg::GenericOp>();
    if (!router || router.getNumDpsInputs() != 2 || !isReduction(router))
      return;
    Value tokens = router.getDpsInputs()[0];
    // Gate: the top-k indices scatter the (normalized) top-k weights.
    ScatterElementsOp scatter;
    for (Operation *user : topk.getIndices().getUsers())
      if (auto s = dyn_cast<ScatterElementsOp>(user))
        if (s.getIndices() == topk.getIndices())
          scatter = s;
    if (!scatter)
      return;
    Operation *combine = findCombine(scatter);
    if (!combine)
      return;
    // The layer: every op between the tokens and the combine.
    SetVector<Operation *> forward;
    getForwardSlice(tokens, &forward);
    SetVector<Operation *> backward;
    BackwardSliceOptions options;
    options.filter = [&](Operation *op) { return forward.contains(op); };
    (void)getBackwardSlice(combine, &backward, options);
    backward.insert(combine);
    if (!backward.contains(topk) || !backward.contains(router))
      return;
    MLIRContext *ctx = root->getContext();
    for (Operation *op : backward) {
      if (!forward.contains(op))
        continue;
      if (!op->hasAttr(STPDialect::kCompositeAttrName))
        op->setAttr(STPDialect::kCompositeAttrName,
                    StringAttr::get(ctx, "moe"));
      op->setAttr(STPDialect::kGroupAttrName,
                  IntegerAttr::get(IntegerType::get(ctx, 64), group));
    }
    ++group;
  });
  return group;
}
