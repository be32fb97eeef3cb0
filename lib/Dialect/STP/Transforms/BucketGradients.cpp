//===- BucketGradients.cpp - -stp-bucket-gradients ------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-bucket-gradients: the gradient all-reduces and (ZeRO 2
// and 3) reduce-scatters of a partitioned training step (sum collectives
// whose every user is an optimizer op) are packed into buckets, each one
// collective of the concatenated gradients issued right after the last of
// them is computed (as PyTorch DDP and Horovod do), so it overlaps the rest
// of the backward pass on the communication stream. Rules in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

namespace stpar::stp {
#define GEN_PASS_DEF_BUCKETGRADIENTSPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// A gradient sync: a sum all-reduce or reduce-scatter whose every user is
/// an optimizer op, a sum of gradients or the return (a training step that
/// returns its gradients).
bool isGradientSync(Operation *op) {
  shard::ReductionKind kind;
  if (auto ar = dyn_cast<shard::AllReduceOp>(op))
    kind = ar.getReduction();
  else if (auto rs = dyn_cast<shard::ReduceScatterOp>(op))
    kind = rs.getReduction();
  else
    return false;
  if (kind != shard::ReductionKind::Sum || op->use_empty())
    return false;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || !type.hasStaticShape() || type.getRank() == 0)
    return false;
  bool feedsOptimizer = false;
  bool allGradient = llvm::all_of(op->getUsers(), [&](Operation *user) {
    if (isa<func::ReturnOp>(user))
      return true;
    auto phase = user->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName);
    if (!phase)
      return false;
    feedsOptimizer |=
        phase.getValue() == "optimizer" || phase.getValue() == "grad_sum";
    return phase.getValue() == "optimizer" || phase.getValue() == "grad_sum";
  });
  return allGradient && feedsOptimizer;
}

int64_t bytesOf(RankedTensorType type) {
  return type.getNumElements() *
         std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

struct BucketGradientsPass
    : public stpar::stp::impl::BucketGradientsPassBase<BucketGradientsPass> {
  using BucketGradientsPassBase::BucketGradientsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module->hasAttr(STPDialect::kPartitionedAttrName)) {
      module.emitError() << "-stp-bucket-gradients runs on the partitioned "
                            "program (after -stp-partition)";
      return signalPassFailure();
    }
    if (bucketBytes <= 0) {
      module.emitError() << "bucket-bytes must be positive";
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Block &body = func.getBody().front();
      bucketBlock(body);
      // A pipelined program (-stp-pipeline-stages): each pipeline rank's
      // case syncs the gradients of its stages.
      for (auto sw : body.getOps<scf::IndexSwitchOp>())
        for (Region &region : sw.getCaseRegions())
          bucketBlock(region.front());
    }
  }

  void bucketBlock(Block &body) {
    // Candidates grouped by communicator and element type, in the order
    // their gradients are computed.
    using Key = std::tuple<OperationName, Attribute, Attribute, Type>;
    DenseMap<Key, SmallVector<Operation *>> groups;
    SmallVector<Key> order;
    for (Operation &op : body) {
      if (!isGradientSync(&op))
        continue;
      Key key{
          op.getName(), op.getAttr("grid"), op.getAttr("grid_axes"),
          cast<RankedTensorType>(op.getResult(0).getType()).getElementType()};
      if (!groups.count(key))
        order.push_back(key);
      groups[key].push_back(&op);
    }
    auto producer = [&](Operation *op) -> Operation * {
      Value v = op->getOperand(0);
      if (Operation *def = v.getDefiningOp())
        return body.findAncestorOpInBlock(*def);
      return nullptr;
    };
    for (const Key &key : order) {
      SmallVector<Operation *> ops = groups[key];
      // In the order the gradients become ready (arguments first).
      llvm::stable_sort(ops, [&](Operation *a, Operation *b) {
        Operation *pa = producer(a), *pb = producer(b);
        if (!pa || !pb)
          return !pa && pb;
        return pa->isBeforeInBlock(pb);
      });
      // The first op that needs a member's result: a bucket must be
      // placed after its last gradient and before that.
      auto firstUser = [&](Operation *op) -> Operation * {
        Operation *first = nullptr;
        for (Operation *user : op->getUsers()) {
          Operation *top = body.findAncestorOpInBlock(*user);
          if (!first || top->isBeforeInBlock(first))
            first = top;
        }
        return first;
      };
      auto before = [](Operation *a, Operation *b) {
        return a && b && a->isBeforeInBlock(b);
      };
      SmallVector<Operation *> bucket;
      int64_t bytes = 0;
      Operation *lastProducer = nullptr, *earliestUser = nullptr;
      for (Operation *op : ops) {
        int64_t b =
            bytesOf(cast<RankedTensorType>(op->getOperand(0).getType()));
        Operation *p = producer(op), *u = firstUser(op);
        Operation *newLast =
            !lastProducer || before(lastProducer, p) ? p : lastProducer;
        Operation *newUser =
            !earliestUser || before(u, earliestUser) ? u : earliestUser;
        bool fits = !newLast || before(newLast, newUser);
        if (!bucket.empty() && (bytes + b > bucketBytes || !fits)) {
          emitBucket(bucket, bytes, body);
          bucket.clear();
          bytes = 0;
          newLast = p;
          newUser = u;
        }
        bucket.push_back(op);
        bytes += b;
        lastProducer = newLast;
        earliestUser = newUser;
      }
      emitBucket(bucket, bytes, body);
    }
  }

  /// The scatter dim of a reduce-scatter member, -1 for an all-reduce.
  static int64_t scatterDimOf(Operation *op) {
    if (auto rs = dyn_cast<shard::ReduceScatterOp>(op))
      return rs.getScatterAxis().getSExtValue();
    return -1;
  }

  /// `v` (shape `type`) with dim `d` first: a transpose when d > 0.
  static Value moveDimFirst(OpBuilder &b, Location loc, Value v,
                            RankedTensorType type, int64_t d, bool inverse) {
    if (d == 0)
      return v;
    SmallVector<int64_t> perm{d};
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (i != d)
        perm.push_back(i);
    if (inverse) {
      SmallVector<int64_t> inv(perm.size());
      for (auto [i, p] : llvm::enumerate(perm))
        inv[p] = i;
      perm = inv;
    }
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(type.getDimSize(p));
    Value init = tensor::EmptyOp::create(b, loc, shape, type.getElementType());
    return linalg::TransposeOp::create(b, loc, v, init, perm).getResult()[0];
  }

  static Value reshape(OpBuilder &b, Location loc, Value v,
                       ArrayRef<int64_t> shape) {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getShape() == shape)
      return v;
    // Through a 1-D view: collapse everything, expand to `shape`.
    auto all = [](int64_t rank) {
      ReassociationIndices dims;
      for (int64_t d = 0; d < rank; ++d)
        dims.push_back(d);
      return dims;
    };
    if (type.getRank() != 1)
      v = tensor::CollapseShapeOp::create(
          b, loc, v, ArrayRef<ReassociationIndices>{all(type.getRank())});
    if (shape.size() != 1)
      v = tensor::ExpandShapeOp::create(
          b, loc, RankedTensorType::get(shape, type.getElementType()), v,
          ArrayRef<ReassociationIndices>{all(shape.size())});
    return v;
  }

  void emitBucket(MutableArrayRef<Operation *> bucket, int64_t bytes,
                  Block &body) {
    if (bucket.size() < 2)
      return;
    // Right after the last gradient of the bucket is computed.
    Operation *last = nullptr;
    for (Operation *op : bucket)
      if (Operation *def = op->getOperand(0).getDefiningOp()) {
        Operation *top = body.findAncestorOpInBlock(*def);
        if (!last || last->isBeforeInBlock(top))
          last = top;
      }
    OpBuilder b(bucket.front());
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(&body);
    Location loc = bucket.front()->getLoc();
    Operation *first = bucket.front();
    bool scatter = isa<shard::ReduceScatterOp>(first);
    auto element =
        cast<RankedTensorType>(first->getResult(0).getType()).getElementType();
    // An all-reduce bucket is the flat concatenation of the gradients. A
    // reduce-scatter bucket is [n, total]: row i holds, for each gradient,
    // its block i of the scatter dim (dim moved first, then flattened), so
    // one reduce-scatter of dim 0 leaves each rank its block of every one.
    int64_t n = 1;
    if (scatter) {
      auto in = cast<RankedTensorType>(first->getOperand(0).getType());
      auto out = cast<RankedTensorType>(first->getResult(0).getType());
      int64_t d = scatterDimOf(first);
      n = in.getDimSize(d) / out.getDimSize(d);
    }
    SmallVector<Value> pieces;
    int64_t total = 0;
    for (Operation *op : bucket) {
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      Value v = op->getOperand(0);
      int64_t count = in.getNumElements() / n;
      if (scatter)
        v = moveDimFirst(b, loc, v, in, scatterDimOf(op), /*inverse=*/false);
      pieces.push_back(reshape(b, loc, v,
                               scatter ? SmallVector<int64_t>{n, count}
                                       : SmallVector<int64_t>{count}));
      total += count;
    }
    auto packedType = scatter ? RankedTensorType::get({n, total}, element)
                              : RankedTensorType::get({total}, element);
    Value packed =
        tensor::ConcatOp::create(b, loc, packedType, scatter ? 1 : 0, pieces);
    Operation *reduced;
    if (auto rs = dyn_cast<shard::ReduceScatterOp>(first))
      reduced = shard::ReduceScatterOp::create(
          b, loc, RankedTensorType::get({1, total}, element), rs.getGridAttr(),
          rs.getGridAxesAttr(), packed, rs.getReductionAttr(),
          b.getIndexAttr(0));
    else {
      auto ar = cast<shard::AllReduceOp>(first);
      reduced = shard::AllReduceOp::create(b, loc, packedType, ar.getGridAttr(),
                                           ar.getGridAxesAttr(), packed,
                                           ar.getReductionAttr());
    }
    std::string step = "gradient bucket " + std::to_string(numBuckets) +
                       (scatter ? ": reduce-scatter of " : ": all-reduce of ") +
                       std::to_string(bucket.size()) + " gradients (" +
                       std::to_string(bytes) +
                       " bytes) as soon as the last is computed:";
    for (Operation *op : bucket)
      if (auto s = op->getAttrOfType<StringAttr>(STPDialect::kPlanStepAttrName))
        step += " [" + s.str() + "]";
    reduced->setAttr(STPDialect::kPlanStepAttrName, b.getStringAttr(step));
    int64_t offset = 0;
    for (Operation *op : bucket) {
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      int64_t count = in.getNumElements() / n;
      SmallVector<int64_t> sliceShape = scatter ? SmallVector<int64_t>{1, count}
                                                : SmallVector<int64_t>{count};
      SmallVector<OpFoldResult> offsets, sizes, strides;
      for (auto [i, size] : llvm::enumerate(sliceShape)) {
        offsets.push_back(
            b.getIndexAttr(i + 1 == sliceShape.size() ? offset : 0));
        sizes.push_back(b.getIndexAttr(size));
        strides.push_back(b.getIndexAttr(1));
      }
      Value piece = tensor::ExtractSliceOp::create(
          b, loc, RankedTensorType::get(sliceShape, element),
          reduced->getResult(0), offsets, sizes, strides);
      if (scatter) {
        // Back to the gradient's block: scatter dim first, then the inverse
        // transpose.
        int64_t d = scatterDimOf(op);
        SmallVector<int64_t> firstShape{type.getDimSize(d)};
        for (int64_t i = 0; i < type.getRank(); ++i)
          if (i != d)
            firstShape.push_back(type.getDimSize(i));
        piece = reshape(b, loc, piece, firstShape);
        piece = moveDimFirst(b, loc, piece,
                             RankedTensorType::get(firstShape, element), d,
                             /*inverse=*/true);
      } else {
        piece = reshape(b, loc, piece, type.getShape());
      }
      op->getResult(0).replaceAllUsesWith(piece);
      offset += count;
    }
    // Erased last: the builder inserts before the op after `last`, which
    // may be one of them.
    for (Operation *op : bucket)
      op->erase();
    ++numBuckets;
    numBucketed += bucket.size();
  }
};

} // namespace
