//===- Collectives.cpp - the shard collectives of partitioned programs ----===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Collectives.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

bool stpar::stp::isCollective(Operation *op) {
  return isa<shard::AllSliceOp>(op) || isCommunicatingCollective(op);
}

bool stpar::stp::isCommunicatingCollective(Operation *op) {
  return isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
             shard::AllToAllOp, shard::ShiftOp>(op);
}

std::optional<ArrayRef<int16_t>>
stpar::stp::getCommunicatorAxes(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<ArrayRef<int16_t>>>(op)
      .Case<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            shard::AllToAllOp>([](auto o) { return o.getGridAxes(); })
      .Default([](Operation *) { return std::nullopt; });
}
