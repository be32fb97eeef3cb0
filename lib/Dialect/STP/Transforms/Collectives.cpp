//===- Collectives.cpp - the shard collectives of partitioned programs ----===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Collectives.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using stpar::stp::STPDialect;

bool stpar::stp::isCollective(Operation *op) {
  return isa<shard::AllSliceOp>(op) || isCommunicatingCollective(op) ||
         op->hasAttr(STPDialect::kCollectiveAttrName);
}

bool stpar::stp::isCommunicatingCollective(Operation *op) {
  if (auto kind = op->getAttrOfType<StringAttr>(STPDialect::kCollectiveAttrName))
    return kind.getValue() != shard::AllSliceOp::getOperationName();
  return isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
             shard::AllToAllOp, shard::ShiftOp, shard::SendOp, shard::RecvOp,
             stpar::stp::GridPermuteOp, stpar::stp::MoEAllToAllOp,
             stpar::stp::MoEShadowBroadcastOp, stpar::stp::MoEShadowReduceOp>(
      op);
}

std::optional<ArrayRef<int16_t>>
stpar::stp::getCommunicatorAxes(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<ArrayRef<int16_t>>>(op)
      .Case<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            shard::AllToAllOp, stpar::stp::MoEAllToAllOp,
            stpar::stp::MoEShadowBroadcastOp, stpar::stp::MoEShadowReduceOp,
            shard::SendOp, shard::RecvOp>(
          [](auto o) { return o.getGridAxes(); })
      .Default([](Operation *op) -> std::optional<ArrayRef<int16_t>> {
        if (auto axes = op->getAttrOfType<DenseI16ArrayAttr>(STPDialect::kGridAxesAttrName))
          return axes.asArrayRef();
        return std::nullopt;
      });
}

std::string stpar::stp::getRuntimeShapeLiteral(ArrayRef<int64_t> values) {
  std::string s = "stpar_rt::Shape{";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(values, os);
  os << "}";
  return s;
}
