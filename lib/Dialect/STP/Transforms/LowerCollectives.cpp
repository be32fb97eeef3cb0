//===- LowerCollectives.cpp - -stp-lower-collectives ------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-lower-collectives: each shard collective of the per-rank
// program becomes the runtime call that performs it (emitc.call_opaque) and
// each stp.waits entry a call that waits for the transfer (rules and call
// table in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"
#include "stpar/Dialect/STP/Transforms/Collectives.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace stpar::stp {
#define GEN_PASS_DEF_LOWERCOLLECTIVESPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

const char *reductionText(shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum: return "stpar_rt::Reduction::Sum";
  case shard::ReductionKind::Max: return "stpar_rt::Reduction::Max";
  case shard::ReductionKind::Min: return "stpar_rt::Reduction::Min";
  case shard::ReductionKind::Product: return "stpar_rt::Reduction::Product";
  default: return nullptr;
  }
}

class Lowering {
public:
  explicit Lowering(MLIRContext *ctx) : builder(ctx) {}

  LogicalResult lowerCollective(Operation *op);
  void lowerWaits(Operation *op);

private:
  Attribute opaque(StringRef text) {
    return emitc::OpaqueAttr::get(builder.getContext(), text);
  }
  Attribute i64(int64_t v) { return builder.getI64IntegerAttr(v); }
  Attribute operand(unsigned i) { return builder.getIndexAttr(i); }
  Attribute axes(ArrayRef<int16_t> a) {
    SmallVector<int64_t> v(a.begin(), a.end());
    return opaque(getRuntimeShapeLiteral(v));
  }

  OpBuilder builder;
};

/// The message tag of a pipeline transfer: its stp.transfer id (0 without).
int64_t transferTag(Operation *op) {
  auto id = op->getAttrOfType<IntegerAttr>(STPDialect::kTransferAttrName);
  return id ? id.getInt() : 0;
}

LogicalResult Lowering::lowerCollective(Operation *op) {
  auto inType = cast<RankedTensorType>(op->getOperand(0).getType());
  Attribute ctx = opaque("ctx");
  Attribute inShape = opaque(getRuntimeShapeLiteral(inType.getShape()));
  SmallVector<Attribute> events;
  if (isCommunicatingCollective(op)) {
    auto ev = op->getAttrOfType<DenseI64ArrayAttr>(STPDialect::kEventsAttrName);
    if (!ev || ev.size() != 2)
      return op->emitError("cannot lower '")
             << op->getName()
             << "': it has no stp.events (run -stp-schedule-collectives)";
    events = {i64(ev[0]), i64(ev[1])};
  }
  StringRef callee;
  SmallVector<Attribute> args{ctx};
  args.append(events);
  bool supported = true;
  auto reduction = [&](shard::ReductionKind kind) {
    const char *text = reductionText(kind);
    supported &= text != nullptr;
    return opaque(text ? text : "");
  };
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](shard::AllReduceOp o) {
        callee = "stpar_rt::allReduce";
        args.append({axes(o.getGridAxes()), reduction(o.getReduction())});
      })
      .Case([&](shard::AllGatherOp o) {
        callee = "stpar_rt::allGather";
        args.append({axes(o.getGridAxes()), inShape,
                     i64(o.getGatherAxis().getSExtValue())});
      })
      .Case([&](shard::ReduceScatterOp o) {
        callee = "stpar_rt::reduceScatter";
        args.append({axes(o.getGridAxes()), reduction(o.getReduction()),
                     inShape, i64(o.getScatterAxis().getSExtValue())});
      })
      .Case([&](shard::AllToAllOp o) {
        callee = "stpar_rt::allToAll";
        args.append({axes(o.getGridAxes()), inShape,
                     i64(o.getSplitAxis().getSExtValue()),
                     i64(o.getConcatAxis().getSExtValue())});
      })
      .Case([&](shard::ShiftOp o) {
        callee = "stpar_rt::ringShift";
        args.append({i64(o.getShiftAxis().getSExtValue()),
                     i64(static_cast<int64_t>(o.getOffset())),
                     opaque(o.getRotate() ? "true" : "false")});
      })
      .Case([&](GridPermuteOp o) {
        callee = "stpar_rt::gridPermute";
        SmallVector<int64_t> sources(o.getSources());
        args.append(
            {axes(o.getGridAxes()), opaque(getRuntimeShapeLiteral(sources))});
      })
      .Case([&](MoEAllToAllOp o) {
        // (..., axes, E, C, D, reverse, group size, step, intra-node
        // size, rows, counts [, init]) -> rows, counts.
        auto whole =
            cast<RankedTensorType>(o.getReverse() ? o.getResultRows().getType()
                                                  : o.getRows().getType());
        callee = "stpar_rt::moeAllToAll";
        args.append({axes(o.getGridAxes()), i64(whole.getDimSize(0)),
                     i64(whole.getDimSize(1)), i64(whole.getDimSize(2)),
                     opaque(o.getReverse() ? "true" : "false"),
                     i64(o.getGroupSize()), i64(o.getStep()),
                     i64(o.getIntraNodeSize())});
      })
      .Case([&](MoEShadowBroadcastOp o) {
        // (..., axes, E, experts, weights) -> [S, A, B].
        callee = "stpar_rt::moeShadowBroadcast";
        args.append({axes(o.getGridAxes()), i64(o.getNumExperts()),
                     opaque(getRuntimeShapeLiteral(o.getExperts()))});
      })
      .Case([&](MoEShadowReduceOp o) {
        // (..., axes, E, experts, partial, local) -> [El, A, B].
        callee = "stpar_rt::moeShadowReduce";
        args.append({axes(o.getGridAxes()), i64(o.getNumExperts()),
                     opaque(getRuntimeShapeLiteral(o.getExperts()))});
      })
      .Case([&](shard::SendOp o) {
        // A pipeline transfer (-stp-pipeline-stages): (axis, peer's index
        // on it, tag).
        callee = "stpar_rt::sendTo";
        args.append({i64(o.getGridAxes()[0]), i64(o.getDestination()[0]),
                     i64(transferTag(o))});
      })
      .Case([&](shard::RecvOp o) {
        callee = "stpar_rt::recvFrom";
        std::optional<ArrayRef<int64_t>> source = o.getSource();
        supported &=
            source && source->size() == 1 && o.getGridAxes().size() == 1;
        args.append({i64(o.getGridAxes()[0]),
                     i64(source && !source->empty() ? (*source)[0] : 0),
                     i64(transferTag(o))});
      })
      .Case([&](shard::AllSliceOp o) {
        callee = "stpar_rt::allSlice";
        args.append({axes(o.getGridAxes()), inShape,
                     i64(o.getSliceAxis().getSExtValue())});
      });
  if (!supported)
    return op->emitError("cannot lower '")
           << op->getName()
           << "': unsupported reduction kind or point-to-point form (one "
              "grid axis, a static peer)";
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    args.push_back(operand(i));

  builder.setInsertionPoint(op);
  auto call = emitc::CallOpaqueOp::create(
      builder, op->getLoc(), op->getResultTypes(), callee,
      builder.getArrayAttr(args), /*template_args=*/ArrayAttr(),
      op->getOperands());
  call->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  call->setAttr(STPDialect::kCollectiveAttrName,
                builder.getStringAttr(op->getName().getStringRef()));
  if (std::optional<ArrayRef<int16_t>> gridAxes = getCommunicatorAxes(op))
    call->setAttr(STPDialect::kGridAxesAttrName, builder.getDenseI16ArrayAttr(*gridAxes));
  op->replaceAllUsesWith(call->getResults());
  op->erase();
  return success();
}

void Lowering::lowerWaits(Operation *op) {
  auto waits = op->getAttrOfType<DenseI64ArrayAttr>(STPDialect::kWaitsAttrName);
  if (!waits)
    return;
  builder.setInsertionPoint(op);
  for (int64_t done : waits.asArrayRef())
    emitc::CallOpaqueOp::create(
        builder, op->getLoc(), TypeRange(), "stpar_rt::waitTransfer",
        builder.getArrayAttr({opaque("ctx"), i64(done)}), ArrayAttr(),
        ValueRange());
  op->removeAttr(STPDialect::kWaitsAttrName);
}

struct LowerCollectivesPass
    : public stpar::stp::impl::LowerCollectivesPassBase<LowerCollectivesPass> {
  void runOnOperation() override {
    Lowering lowering(&getContext());
    SmallVector<Operation *> collectives, waiting;
    getOperation().walk([&](Operation *op) {
      if (isCollective(op) && !op->hasAttr(STPDialect::kCollectiveAttrName))
        collectives.push_back(op);
      if (op->hasAttr(STPDialect::kWaitsAttrName))
        waiting.push_back(op);
    });
    for (Operation *op : waiting)
      lowering.lowerWaits(op);
    // (The transfer groups of the ops lowered now: a second run adds no
    // brackets.)
    DenseSet<int64_t> groups;
    for (Operation *op : collectives)
      if (auto group = op->getAttrOfType<IntegerAttr>(
              STPDialect::kTransferGroupAttrName))
        groups.insert(group.getInt());
    for (Operation *op : collectives)
      if (failed(lowering.lowerCollective(op)))
        return signalPassFailure();
    bracketGroups(groups);
  }

  /// A transfer group's contiguous calls (stp.transfer_group) between
  /// groupStart and groupEnd.
  void bracketGroups(const DenseSet<int64_t> &groups) {
    llvm::MapVector<int64_t, std::pair<Operation *, Operation *>> spans;
    getOperation().walk([&](emitc::CallOpaqueOp call) {
      if (auto group = call->getAttrOfType<IntegerAttr>(
              STPDialect::kTransferGroupAttrName);
          group && groups.contains(group.getInt())) {
        auto [it, inserted] =
            spans.try_emplace(group.getInt(), call.getOperation(), nullptr);
        it->second.second = call;
      }
    });
    OpBuilder b(&getContext());
    for (auto &[group, span] : spans) {
      auto [first, last] = span;
      Attribute ctx = emitc::OpaqueAttr::get(&getContext(), "ctx");
      b.setInsertionPoint(first);
      emitc::CallOpaqueOp::create(b, first->getLoc(), TypeRange(),
                                  "stpar_rt::groupStart", b.getArrayAttr(ctx),
                                  ArrayAttr(), ValueRange());
      b.setInsertionPointAfter(last);
      emitc::CallOpaqueOp::create(b, last->getLoc(), TypeRange(),
                                  "stpar_rt::groupEnd", b.getArrayAttr(ctx),
                                  ArrayAttr(), ValueRange());
    }
  }
};

} // namespace
