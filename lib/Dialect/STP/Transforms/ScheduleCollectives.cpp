//===- ScheduleCollectives.cpp - -stp-schedule-collectives ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-schedule-collectives: the order of double-buffered
// transfers, the events of every collective, where the compute stream waits
// for them and which communicators exist, as attributes the emitters print
// (rules in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/Collectives.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace stpar::stp {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVESPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

class Scheduler {
public:
  explicit Scheduler(func::FuncOp func) : func(func) {}

  void run() {
    func.walk([](Operation *op) {
      op->removeAttr(STPDialect::kEventsAttrName);
      op->removeAttr(STPDialect::kWaitsAttrName);
    });
    scheduleBlock(func.getBody().front());
    Builder b(func.getContext());
    SmallVector<Attribute> groups;
    for (const SmallVector<int64_t> &g : communicators)
      groups.push_back(b.getDenseI64ArrayAttr(g));
    func->setAttr(STPDialect::kStreamsAttrName,
                  b.getDictionaryAttr(
                      {b.getNamedAttr("communicators", b.getArrayAttr(groups)),
                       b.getNamedAttr("events", b.getI64IntegerAttr(events))}));
  }

private:
  void scheduleBlock(Block &block) {
    // Double-buffered transfers whose operands are ready when the block
    // starts go first, so they overlap the block's compute.
    SmallVector<Operation *> early;
    for (Operation &op : block)
      if (op.hasAttr(STPDialect::kDoubleBufferAttrName) && isCommunicatingCollective(&op) &&
          llvm::all_of(op.getOperands(), [&](Value v) {
            return v.getParentBlock() != &block || isa<BlockArgument>(v);
          }))
        early.push_back(&op);
    Operation *insertBefore = block.empty() ? nullptr : &block.front();
    for (Operation *op : early) {
      if (op == insertBefore) {
        insertBefore = op->getNextNode();
        continue;
      }
      op->moveBefore(insertBefore);
    }

    // The sends of the transfer group just issued (-stp-pipeline-stages).
    SmallVector<std::pair<Value, int64_t>> groupSends;
    Attribute group;
    for (Operation &op : block) {
      waitFor(&op);
      // A pipeline transfer group's sends are waited for right after the
      // group (as Megatron-LM waits for its batched send/recv requests), so
      // their buffers are free again there.
      Attribute opGroup = op.getAttr(STPDialect::kTransferGroupAttrName);
      if (!groupSends.empty() && opGroup != group) {
        SmallVector<int64_t> waits;
        if (auto existing =
                op.getAttrOfType<DenseI64ArrayAttr>(STPDialect::kWaitsAttrName))
          waits.assign(existing.asArrayRef().begin(),
                       existing.asArrayRef().end());
        for (auto [value, done] : groupSends) {
          waits.push_back(done);
          pending.erase(value);
        }
        op.setAttr(STPDialect::kWaitsAttrName,
                   DenseI64ArrayAttr::get(op.getContext(), waits));
        groupSends.clear();
      }
      group = opGroup;
      // Loops are printed as loops: their bodies are scheduled the same way.
      if (auto loop = dyn_cast<scf::ForOp>(op))
        scheduleBlock(*loop.getBody());
      // The pipeline ranks' programs (-stp-pipeline-stages).
      if (auto sw = dyn_cast<scf::IndexSwitchOp>(op))
        for (Region &region : sw->getRegions())
          scheduleBlock(region.front());
      if (isCommunicatingCollective(&op)) {
        int64_t ready = events++, done = events++;
        op.setAttr(STPDialect::kEventsAttrName,
                   DenseI64ArrayAttr::get(op.getContext(), {ready, done}));
        for (Value result : op.getResults())
          pending[result] = done;
        if (isa<shard::SendOp>(op) && opGroup && op.getResult(0).use_empty())
          groupSends.push_back({op.getResult(0), done});
        if (std::optional<ArrayRef<int16_t>> axes = getCommunicatorAxes(&op)) {
          SmallVector<int64_t> group(axes->begin(), axes->end());
          if (!llvm::is_contained(communicators, group))
            communicators.push_back(group);
        }
      }
    }
    // Transfers of this block that nothing used: waited for at its end.
    SmallVector<int64_t> unused;
    for (auto &[v, id] : pending)
      if (v.getParentBlock() == &block)
        unused.push_back(id);
    if (!unused.empty() && !block.empty()) {
      Operation *terminator = &block.back();
      SmallVector<int64_t> waits;
      if (auto existing = terminator->getAttrOfType<DenseI64ArrayAttr>(
              STPDialect::kWaitsAttrName))
        waits.assign(existing.asArrayRef().begin(), existing.asArrayRef().end());
      waits.append(unused);
      terminator->setAttr(STPDialect::kWaitsAttrName,
                          DenseI64ArrayAttr::get(func.getContext(), waits));
    }
    pending.remove_if([&](std::pair<Value, int64_t> entry) {
      return entry.first.getParentBlock() == &block;
    });
  }

  /// The compute stream waits right before `op` for the pending transfers
  /// `op` (or an op nested in it) is the first to use.
  void waitFor(Operation *op) {
    if (pending.empty())
      return;
    SmallVector<int64_t> waits;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands()) {
        auto it = pending.find(v);
        if (it == pending.end())
          continue;
        if (!llvm::is_contained(waits, it->second))
          waits.push_back(it->second);
        pending.erase(it);
      }
    });
    if (!waits.empty())
      op->setAttr(STPDialect::kWaitsAttrName,
                  DenseI64ArrayAttr::get(op->getContext(), waits));
  }

  func::FuncOp func;
  int64_t events = 0;
  llvm::MapVector<Value, int64_t> pending;
  /// In first-use order.
  std::vector<SmallVector<int64_t>> communicators;
};

struct ScheduleCollectivesPass
    : public stpar::stp::impl::ScheduleCollectivesPassBase<
          ScheduleCollectivesPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        Scheduler(func).run();
  }
};

} // namespace
