//===- PartitionableOpModels.cpp - rules of upstream ops -------------------===//
//
// Part of stpar. PartitionableOpInterface for the upstream ops the importer
// and -stp-normalize produce: linalg structured ops and linalg.softmax,
// tensor creation and view ops, arith.constant and func.return. Each model
// is the one place that says how its op is split and costed.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Matchers.h"

#include <type_traits>

using namespace mlir;
using namespace stpar::stp;

namespace {

//===----------------------------------------------------------------------===//
// linalg
//===----------------------------------------------------------------------===//

/// The kind a split reduction combines partial results with: the op every
/// yielded value applies to its output block argument and one other value.
std::optional<shard::ReductionKind> getGenericCombiner(linalg::GenericOp op) {
  Block *body = op.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  std::optional<shard::ReductionKind> kind;
  for (auto [i, value] : llvm::enumerate(yield.getValues())) {
    BlockArgument out = op.getRegionOutputArgs()[i];
    Operation *def = value.getDefiningOp();
    if (!def || def->getNumOperands() != 2 ||
        !llvm::is_contained(def->getOperands(), Value(out)))
      return std::nullopt;
    std::optional<shard::ReductionKind> k;
    if (isa<arith::AddFOp, arith::AddIOp>(def))
      k = shard::ReductionKind::Sum;
    else if (isa<arith::MulFOp, arith::MulIOp>(def))
      k = shard::ReductionKind::Product;
    else if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MaxSIOp>(def))
      k = shard::ReductionKind::Max;
    else if (isa<arith::MinimumFOp, arith::MinNumFOp, arith::MinSIOp>(def))
      k = shard::ReductionKind::Min;
    if (!k || (kind && *kind != *k))
      return std::nullopt;
    kind = k;
  }
  return kind;
}

/// A fill of a scalar into a fresh tensor.empty: created on demand.
bool isLazyFill(linalg::FillOp fill) {
  return fill.getOutputs()[0].getDefiningOp<tensor::EmptyOp>() &&
         !isa<ShapedType>(fill.getInputs()[0].getType());
}

template <typename OpTy>
struct LinalgStructuredModel
    : public PartitionableOpInterface::ExternalModel<
          LinalgStructuredModel<OpTy>, OpTy> {
  PartitionRule getPartitionRule(Operation *op) const {
    if constexpr (std::is_same_v<OpTy, linalg::FillOp>)
      if (isLazyFill(cast<linalg::FillOp>(op)))
        return PartitionRule::Lazy;
    return cast<linalg::LinalgOp>(op).hasPureTensorSemantics()
               ? PartitionRule::Loops
               : PartitionRule::Unsupported;
  }

  std::optional<shard::ReductionKind> getReductionKind(Operation *op) const {
    if constexpr (std::is_same_v<OpTy, linalg::MatmulOp> ||
                  std::is_same_v<OpTy, linalg::BatchMatmulOp>)
      return shard::ReductionKind::Sum;
    if constexpr (std::is_same_v<OpTy, linalg::GenericOp>)
      return getGenericCombiner(cast<linalg::GenericOp>(op));
    return std::nullopt;
  }


  /// Only a lazy fill is created afresh: a tensor.empty and the fill.
  Operation *createLocalOp(Operation *op, OpBuilder &builder,
                           ValueRange operands, TypeRange resultTypes) const {
    if constexpr (std::is_same_v<OpTy, linalg::FillOp>) {
      auto local = cast<RankedTensorType>(resultTypes.front());
      Value empty = tensor::EmptyOp::create(builder, op->getLoc(),
                                            local.getShape(),
                                            local.getElementType());
      return linalg::FillOp::create(builder, op->getLoc(), operands[0], empty);
    }
    return nullptr;
  }

  CostRule getCostRule(Operation *) const {
    if constexpr (std::is_same_v<OpTy, linalg::GenericOp>)
      return {CostKind::Loops, 0, ""};
    if constexpr (std::is_same_v<OpTy, linalg::TransposeOp>)
      return {CostKind::Transpose, 0, ""};
    if constexpr (std::is_same_v<OpTy, linalg::FillOp>)
      return {CostKind::Free, 0, ""};
    // Named ops are generalized before costing; one that is not is
    // costed as one pass.
    return {};
  }
};

template <typename... OpTys>
void attachLinalgStructured(MLIRContext *ctx) {
  (OpTys::template attachInterface<LinalgStructuredModel<OpTys>>(*ctx), ...);
}

/// identity except `dim`, which must be whole.
LayoutRule wholeAlong(int64_t rank, int64_t dim) {
  LayoutRule rule;
  for (int64_t d = 0; d < rank; ++d)
    rule.resultDims.push_back(d);
  rule.wholeDims.push_back(dim);
  return rule;
}

struct SoftmaxModel
    : public PartitionableOpInterface::ExternalModel<SoftmaxModel,
                                                     linalg::SoftmaxOp> {
  PartitionRule getPartitionRule(Operation *) const {
    return PartitionRule::Layout;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto softmax = cast<linalg::SoftmaxOp>(op);
    return wholeAlong(softmax.getInputOperandType().getRank(),
                      int64_t(softmax.getDimension()));
  }
  CostRule getCostRule(Operation *) const {
    return {CostKind::Softmax, 0, ""};
  }
};

//===----------------------------------------------------------------------===//
// tensor
//===----------------------------------------------------------------------===//

struct EmptyModel
    : public PartitionableOpInterface::ExternalModel<EmptyModel,
                                                     tensor::EmptyOp> {
  PartitionRule getPartitionRule(Operation *op) const {
    return op->getNumOperands() == 0 ? PartitionRule::Lazy
                                     : PartitionRule::Unsupported;
  }
  Operation *createLocalOp(Operation *op, OpBuilder &builder, ValueRange,
                           TypeRange resultTypes) const {
    auto local = cast<RankedTensorType>(resultTypes.front());
    return tensor::EmptyOp::create(builder, op->getLoc(), local.getShape(),
                                   local.getElementType());
  }
  CostRule getCostRule(Operation *) const { return {CostKind::Free, 0, ""}; }
};

/// The first dim of `group` whose size is not 1; -1 if all are.
int64_t majorDim(ArrayRef<int64_t> shape, ArrayRef<int64_t> group) {
  for (int64_t d : group)
    if (shape[d] != 1)
      return d;
  return -1;
}

bool hasStaticShapes(Operation *op) {
  return cast<RankedTensorType>(op->getOperand(0).getType())
             .hasStaticShape() &&
         cast<RankedTensorType>(op->getResult(0).getType()).hasStaticShape();
}

/// An expand keeps a source dim's split on the outermost non-unit dim of
/// its group (when that dim's size divides).
struct ExpandShapeModel
    : public PartitionableOpInterface::ExternalModel<ExpandShapeModel,
                                                     tensor::ExpandShapeOp> {
  PartitionRule getPartitionRule(Operation *op) const {
    return hasStaticShapes(op) ? PartitionRule::Layout
                               : PartitionRule::Unsupported;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto expand = cast<tensor::ExpandShapeOp>(op);
    ArrayRef<int64_t> shape = expand.getResultType().getShape();
    LayoutRule rule;
    rule.resultDims.assign(shape.size(), -1);
    for (auto [src, group] : llvm::enumerate(expand.getReassociationIndices()))
      if (int64_t major = majorDim(shape, group); major >= 0)
        rule.resultDims[major] = int64_t(src);
    return rule;
  }
  Operation *createLocalOp(Operation *op, OpBuilder &builder,
                           ValueRange operands, TypeRange resultTypes) const {
    return tensor::ExpandShapeOp::create(
        builder, op->getLoc(), resultTypes.front(), operands[0],
        cast<tensor::ExpandShapeOp>(op).getReassociationIndices());
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

/// A collapse keeps the split of each group's outermost non-unit dim; the
/// group's other dims are gathered.
struct CollapseShapeModel
    : public PartitionableOpInterface::ExternalModel<CollapseShapeModel,
                                                     tensor::CollapseShapeOp> {
  PartitionRule getPartitionRule(Operation *op) const {
    return hasStaticShapes(op) ? PartitionRule::Layout
                               : PartitionRule::Unsupported;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto collapse = cast<tensor::CollapseShapeOp>(op);
    ArrayRef<int64_t> shape = collapse.getSrcType().getShape();
    LayoutRule rule;
    for (ReassociationIndices group : collapse.getReassociationIndices())
      rule.resultDims.push_back(majorDim(shape, group));
    return rule;
  }
  Operation *createLocalOp(Operation *op, OpBuilder &builder,
                           ValueRange operands, TypeRange resultTypes) const {
    return tensor::CollapseShapeOp::create(
        builder, op->getLoc(), resultTypes.front(), operands[0],
        cast<tensor::CollapseShapeOp>(op).getReassociationIndices());
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

/// Whether a slice op (extract or insert) has static offsets, sizes and
/// strides.
static bool hasStaticSlicing(OffsetSizeAndStrideOpInterface op) {
  return op.getOffsets().empty() && op.getSizes().empty() &&
         op.getStrides().empty();
}

/// Whether a static slice op spans dim `d` of the full tensor (the
/// extract's source, the insert's destination) of that size whole.
static bool spansWhole(OffsetSizeAndStrideOpInterface op, int64_t d,
                       int64_t size) {
  return op.getStaticOffsets()[d] == 0 && op.getStaticStrides()[d] == 1 &&
         op.getStaticSizes()[d] == size;
}

/// A static slice keeps the splits of the dims it takes whole.
struct ExtractSliceModel
    : public PartitionableOpInterface::ExternalModel<ExtractSliceModel,
                                                     tensor::ExtractSliceOp> {
  static bool isWhole(tensor::ExtractSliceOp slice, int64_t d) {
    return spansWhole(slice, d, slice.getSourceType().getDimSize(d));
  }
  PartitionRule getPartitionRule(Operation *op) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    return hasStaticSlicing(slice) && slice.getSourceType().hasStaticShape()
               ? PartitionRule::Layout
               : PartitionRule::Unsupported;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    llvm::SmallBitVector dropped = slice.getDroppedDims();
    LayoutRule rule;
    for (unsigned d = 0; d < dropped.size(); ++d) {
      if (!dropped[d])
        rule.resultDims.push_back(d);
      if (!isWhole(slice, d))
        rule.wholeDims.push_back(d);
    }
    return rule;
  }
  /// The slice of the local source: a split (hence whole) dim is taken
  /// whole locally too.
  Operation *createLocalOp(Operation *op, OpBuilder &builder,
                           ValueRange operands, TypeRange resultTypes) const {
    auto slice = cast<tensor::ExtractSliceOp>(op);
    auto local = cast<RankedTensorType>(operands[0].getType());
    SmallVector<OpFoldResult> offsets, sizes, strides;
    for (int64_t d = 0; d < local.getRank(); ++d) {
      offsets.push_back(builder.getIndexAttr(slice.getStaticOffsets()[d]));
      sizes.push_back(builder.getIndexAttr(isWhole(slice, d)
                                               ? local.getDimSize(d)
                                               : slice.getStaticSizes()[d]));
      strides.push_back(builder.getIndexAttr(slice.getStaticStrides()[d]));
    }
    return tensor::ExtractSliceOp::create(
        builder, op->getLoc(), cast<RankedTensorType>(resultTypes.front()),
        operands[0], offsets, sizes, strides);
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

/// A static insertion of a slice of the same rank (the training step's
/// gradient of a slice or split: the slice into zeros) keeps the splits of
/// the dims it inserts whole; the source leads and the destination follows.
struct InsertSliceModel
    : public PartitionableOpInterface::ExternalModel<InsertSliceModel,
                                                     tensor::InsertSliceOp> {
  static bool isWhole(tensor::InsertSliceOp insert, int64_t d) {
    return spansWhole(insert, d, insert.getDestType().getDimSize(d));
  }
  PartitionRule getPartitionRule(Operation *op) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    return hasStaticSlicing(insert) && insert.getDestType().hasStaticShape() &&
                   insert.getSourceType().getRank() ==
                       insert.getDestType().getRank()
               ? PartitionRule::Layout
               : PartitionRule::Unsupported;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    LayoutRule rule;
    for (int64_t d = 0; d < insert.getDestType().getRank(); ++d) {
      rule.resultDims.push_back(d);
      if (!isWhole(insert, d))
        rule.wholeDims.push_back(d);
    }
    return rule;
  }
  /// The local source into the local destination: a split (hence whole)
  /// dim is inserted whole locally too.
  Operation *createLocalOp(Operation *op, OpBuilder &builder,
                           ValueRange operands, TypeRange resultTypes) const {
    auto insert = cast<tensor::InsertSliceOp>(op);
    auto local = cast<RankedTensorType>(operands[0].getType());
    SmallVector<OpFoldResult> offsets, sizes, strides;
    for (int64_t d = 0; d < local.getRank(); ++d) {
      offsets.push_back(builder.getIndexAttr(insert.getStaticOffsets()[d]));
      sizes.push_back(builder.getIndexAttr(local.getDimSize(d)));
      strides.push_back(builder.getIndexAttr(insert.getStaticStrides()[d]));
    }
    return tensor::InsertSliceOp::create(builder, op->getLoc(), operands[0],
                                         operands[1], offsets, sizes, strides);
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

/// A concat keeps the splits of the dims it does not concatenate along
/// (costed as a free view; docs/cost-model.md); the first split operand
/// leads, so a replicated operand (a graph input: a KV cache's past) is
/// sliced to a split one instead of the split one being gathered.
struct ConcatModel
    : public PartitionableOpInterface::ExternalModel<ConcatModel,
                                                     tensor::ConcatOp> {
  PartitionRule getPartitionRule(Operation *) const {
    return PartitionRule::Layout;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto concat = cast<tensor::ConcatOp>(op);
    LayoutRule rule =
        wholeAlong(concat.getResultType().getRank(), int64_t(concat.getDim()));
    rule.firstSplitOperandLeads = true;
    return rule;
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

/// tensor.reshape: no local rule; costed as a view that keeps its dims
/// when the shape does not change.
struct ReshapeModel
    : public PartitionableOpInterface::ExternalModel<ReshapeModel,
                                                     tensor::ReshapeOp> {
  PartitionRule getPartitionRule(Operation *) const {
    return PartitionRule::Unsupported;
  }
  LayoutRule getLayoutRule(Operation *op) const {
    auto reshape = cast<tensor::ReshapeOp>(op);
    auto rt = cast<RankedTensorType>(reshape.getResult().getType());
    auto st = cast<RankedTensorType>(reshape.getSource().getType());
    LayoutRule rule;
    for (int64_t d = 0; d < rt.getRank(); ++d)
      rule.resultDims.push_back(rt.getShape() == st.getShape() ? d : -1);
    return rule;
  }
  CostRule getCostRule(Operation *) const { return {CostKind::View, 0, ""}; }
};

//===----------------------------------------------------------------------===//
// arith, func
//===----------------------------------------------------------------------===//

/// A splat tensor constant is created on demand; other constants are
/// replicated.
struct ConstantModel
    : public PartitionableOpInterface::ExternalModel<ConstantModel,
                                                     arith::ConstantOp> {
  PartitionRule getPartitionRule(Operation *op) const {
    auto cst = cast<arith::ConstantOp>(op);
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue()))
      if (isa<RankedTensorType>(cst.getType()) && dense.isSplat())
        return PartitionRule::Lazy;
    return PartitionRule::Replicated;
  }
  Operation *createLocalOp(Operation *op, OpBuilder &builder, ValueRange,
                           TypeRange resultTypes) const {
    auto dense = cast<DenseElementsAttr>(cast<arith::ConstantOp>(op).getValue());
    auto local = cast<ShapedType>(resultTypes.front());
    return arith::ConstantOp::create(builder, op->getLoc(), local,
                                     dense.resizeSplat(local));
  }
  CostRule getCostRule(Operation *) const { return {CostKind::Free, 0, ""}; }
};

struct ReturnModel
    : public PartitionableOpInterface::ExternalModel<ReturnModel,
                                                     func::ReturnOp> {
  PartitionRule getPartitionRule(Operation *) const {
    return PartitionRule::Terminator;
  }
  CostRule getCostRule(Operation *) const { return {CostKind::Free, 0, ""}; }
};

} // namespace

void stpar::stp::registerPartitionableOpModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, linalg::LinalgDialect *) {
    attachLinalgStructured<
#define GET_OP_LIST
#include "mlir/Dialect/Linalg/IR/LinalgStructuredOps.cpp.inc"
        >(ctx);
    linalg::SoftmaxOp::attachInterface<SoftmaxModel>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    tensor::EmptyOp::attachInterface<EmptyModel>(*ctx);
    tensor::ExpandShapeOp::attachInterface<ExpandShapeModel>(*ctx);
    tensor::CollapseShapeOp::attachInterface<CollapseShapeModel>(*ctx);
    tensor::ExtractSliceOp::attachInterface<ExtractSliceModel>(*ctx);
    tensor::InsertSliceOp::attachInterface<InsertSliceModel>(*ctx);
    tensor::ConcatOp::attachInterface<ConcatModel>(*ctx);
    tensor::ReshapeOp::attachInterface<ReshapeModel>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    arith::ConstantOp::attachInterface<ConstantModel>(*ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::ReturnOp::attachInterface<ReturnModel>(*ctx);
  });
}

LogicalResult stpar::stp::checkPartitionableOpModels(MLIRContext *ctx,
                                                     Location loc) {
  for (StringRef name : {linalg::GenericOp::getOperationName(),
                         tensor::ExpandShapeOp::getOperationName(),
                         arith::ConstantOp::getOperationName(),
                         func::ReturnOp::getOperationName()}) {
    std::optional<RegisteredOperationName> op =
        RegisteredOperationName::lookup(name, ctx);
    if (op && !op->hasInterface<PartitionableOpInterface>())
      return emitError(loc) << "internal error: '" << name
                            << "' has no PartitionableOpInterface (call "
                               "stpar::stp::registerPartitionableOpModels)";
  }
  return success();
}
