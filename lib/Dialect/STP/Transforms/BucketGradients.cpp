//===- BucketGradients.cpp - -stp-bucket-gradients ---------------*- C++
//-*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-bucket-gradients: the gradient all-reduces of a
// partitioned training step (sum all-reduces whose every user is an
// optimizer op) are packed into buckets, each one all-reduce of the
// concatenated gradients issued right after the last of them is computed
// (as PyTorch DDP and Horovod do), so it overlaps the rest of the backward
// pass on the communication stream. Rules in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
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

/// A gradient all-reduce: every user is an optimizer op, a sum of
/// gradients or the return (a training step that returns its gradients).
bool isGradientSync(shard::AllReduceOp op) {
  if (op.getReduction() != shard::ReductionKind::Sum || op->use_empty())
    return false;
  auto type = dyn_cast<RankedTensorType>(op.getType());
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
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal())
        bucketFunction(func);
  }

  void bucketFunction(func::FuncOp func) {
    Block &body = func.getBody().front();
    // Candidates grouped by communicator and element type, in the order
    // their gradients are computed.
    using Key = std::tuple<Attribute, Attribute, Type>;
    DenseMap<Key, SmallVector<shard::AllReduceOp>> groups;
    SmallVector<Key> order;
    for (auto op : body.getOps<shard::AllReduceOp>()) {
      if (!isGradientSync(op))
        continue;
      Key key{op.getGridAttr(), op.getGridAxesAttr(),
              cast<RankedTensorType>(op.getType()).getElementType()};
      if (!groups.count(key))
        order.push_back(key);
      groups[key].push_back(op);
    }
    auto producer = [&](shard::AllReduceOp op) -> Operation * {
      Value v = op.getInput();
      if (Operation *def = v.getDefiningOp())
        return body.findAncestorOpInBlock(*def);
      return nullptr;
    };
    for (const Key &key : order) {
      SmallVector<shard::AllReduceOp> ops = groups[key];
      // In the order the gradients become ready (arguments first).
      llvm::stable_sort(ops, [&](shard::AllReduceOp a, shard::AllReduceOp b) {
        Operation *pa = producer(a), *pb = producer(b);
        if (!pa || !pb)
          return !pa && pb;
        return pa->isBeforeInBlock(pb);
      });
      // The first op that needs a member's result: a bucket must be
      // placed after its last gradient and before that.
      auto firstUser = [&](shard::AllReduceOp op) -> Operation * {
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
      SmallVector<shard::AllReduceOp> bucket;
      int64_t bytes = 0;
      Operation *lastProducer = nullptr, *earliestUser = nullptr;
      for (shard::AllReduceOp op : ops) {
        int64_t b = bytesOf(cast<RankedTensorType>(op.getType()));
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

  void emitBucket(MutableArrayRef<shard::AllReduceOp> bucket, int64_t bytes,
                  Block &body) {
    if (bucket.size() < 2)
      return;
    // Right after the last gradient of the bucket is computed.
    Operation *last = nullptr;
    for (shard::AllReduceOp op : bucket)
      if (Operation *def = op.getInput().getDefiningOp()) {
        Operation *top = body.findAncestorOpInBlock(*def);
        if (!last || last->isBeforeInBlock(top))
          last = top;
      }
    OpBuilder b(bucket.front());
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(&body);
    Location loc = bucket.front().getLoc();
    SmallVector<Value> flat;
    int64_t total = 0;
    for (shard::AllReduceOp op : bucket) {
      auto type = cast<RankedTensorType>(op.getType());
      Value v = op.getInput();
      if (type.getRank() != 1) {
        ReassociationIndices all;
        for (int64_t d = 0; d < type.getRank(); ++d)
          all.push_back(d);
        v = tensor::CollapseShapeOp::create(
            b, loc, v, ArrayRef<ReassociationIndices>{all});
      }
      flat.push_back(v);
      total += type.getNumElements();
    }
    auto element =
        cast<RankedTensorType>(bucket.front().getType()).getElementType();
    auto flatType = RankedTensorType::get({total}, element);
    Value packed = tensor::ConcatOp::create(b, loc, flatType, 0, flat);
    shard::AllReduceOp first = bucket.front();
    auto reduced = shard::AllReduceOp::create(
        b, loc, flatType, first.getGridAttr(), first.getGridAxesAttr(), packed,
        first.getReductionAttr());
    std::string step = "gradient bucket " + std::to_string(numBuckets) +
                       ": all-reduce of " + std::to_string(bucket.size()) +
                       " gradients (" + std::to_string(bytes) +
                       " bytes) as soon as the last is computed:";
    for (shard::AllReduceOp op : bucket)
      if (auto s = op->getAttrOfType<StringAttr>(STPDialect::kPlanStepAttrName))
        step += " [" + s.str() + "]";
    reduced->setAttr(STPDialect::kPlanStepAttrName, b.getStringAttr(step));
    int64_t offset = 0;
    for (shard::AllReduceOp op : bucket) {
      auto type = cast<RankedTensorType>(op.getType());
      int64_t n = type.getNumElements();
      Value piece = tensor::ExtractSliceOp::create(
          b, loc, RankedTensorType::get({n}, element), reduced.getResult(),
          ArrayRef<OpFoldResult>{b.getIndexAttr(offset)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(n)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
      if (type.getRank() != 1) {
        ReassociationIndices all;
        for (int64_t d = 0; d < type.getRank(); ++d)
          all.push_back(d);
        piece = tensor::ExpandShapeOp::create(
            b, loc, type, piece, ArrayRef<ReassociationIndices>{all});
      }
      op.getResult().replaceAllUsesWith(piece);
      offset += n;
    }
    // Erased last: the builder inserts before the op after `last`, which
    // may be one of them.
    for (shard::AllReduceOp op : bucket)
      op.erase();
    ++numBuckets;
    numBucketed += bucket.size();
  }
};

} // namespace
