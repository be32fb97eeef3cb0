//===- PartitionableOpInterface.cpp - the stp ops' partitioning rules -----===//
//
// Part of stpar. The interfaces' generated definitions and the rules of the
// stp ops; upstream ops' rules are in PartitionableOpModels.cpp.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"

using namespace mlir;
using namespace stpar::stp;

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.cpp.inc"

//===----------------------------------------------------------------------===//
// Normalizations: statistics over the trailing dims (docs/partition.md,
// "Normalizations").
//===----------------------------------------------------------------------===//

PartitionRule LayerNormOp::getPartitionRule() { return PartitionRule::Norm; }
// mean, subtract, square, sum, rsqrt-multiply, scale, shift + 1.
CostRule LayerNormOp::getCostRule() { return {CostKind::Norm, 8, ""}; }
int64_t LayerNormOp::getNormalizedAxis() { return int64_t(getAxis()); }
float LayerNormOp::getNormEpsilon() { return getEpsilon().convertToFloat(); }
bool LayerNormOp::isCentered() { return true; }
Value LayerNormOp::getNormScale() { return getScale(); }
Value LayerNormOp::getNormBias() { return getBias(); }

PartitionRule RMSNormOp::getPartitionRule() { return PartitionRule::Norm; }
// square, sum, rsqrt-multiply, scale + 2.
CostRule RMSNormOp::getCostRule() { return {CostKind::Norm, 6, ""}; }
int64_t RMSNormOp::getNormalizedAxis() { return int64_t(getAxis()); }
float RMSNormOp::getNormEpsilon() { return getEpsilon().convertToFloat(); }
bool RMSNormOp::isCentered() { return false; }
Value RMSNormOp::getNormScale() { return getScale(); }
Value RMSNormOp::getNormBias() { return Value(); }

//===----------------------------------------------------------------------===//
// Attention: split over batch and heads (docs/partition.md, "Local rules per op").
//===----------------------------------------------------------------------===//

PartitionRule AttentionOp::getPartitionRule() {
  return PartitionRule::Attention;
}
CostRule AttentionOp::getCostRule() { return {CostKind::Attention, 0, ""}; }

//===----------------------------------------------------------------------===//
// Mixture of experts: tokens split like a batch, experts over some of the
// token axes (expert parallelism), an expert's hidden dim over others
// (docs/moe.md).
//===----------------------------------------------------------------------===//

PartitionRule MoEOp::getPartitionRule() { return PartitionRule::MoE; }
CostRule MoEOp::getCostRule() { return {CostKind::MoE, 0, ""}; }
// The backward of an stp.moe: partitioned as its forward (its stp.spec);
// the plan costs it with the forward's operator.
PartitionRule MoEGradOp::getPartitionRule() { return PartitionRule::MoE; }
CostRule MoEGradOp::getCostRule() { return {CostKind::MoE, 0, ""}; }

//===----------------------------------------------------------------------===//
// Ops along one axis: the axis whole, the other dims as the first split
// operand has them.
//===----------------------------------------------------------------------===//

static LayoutRule alongAxis(int64_t rank, int64_t axis) {
  LayoutRule rule;
  if (axis < 0)
    axis += rank;
  for (int64_t d = 0; d < rank; ++d)
    rule.resultDims.push_back(d);
  if (axis >= 0 && axis < rank)
    rule.wholeDims.push_back(axis);
  rule.firstSplitOperandLeads = true;
  return rule;
}

PartitionRule TopKOp::getPartitionRule() { return PartitionRule::Layout; }
LayoutRule TopKOp::getLayoutRule() {
  return alongAxis(getInput().getType().getRank(), int64_t(getAxis()));
}
CostRule TopKOp::getCostRule() {
  return {CostKind::Elementwise, 1, "top-k costed as an elementwise pass"};
}

PartitionRule ScatterElementsOp::getPartitionRule() {
  return PartitionRule::Layout;
}
LayoutRule ScatterElementsOp::getLayoutRule() {
  return alongAxis(getData().getType().getRank(), int64_t(getAxis()));
}
CostRule ScatterElementsOp::getCostRule() {
  return {CostKind::Elementwise, 0, "scatter costed as an elementwise pass"};
}
