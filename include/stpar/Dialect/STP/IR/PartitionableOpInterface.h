//===- PartitionableOpInterface.h - per-op partitioning rules ---*- C++ -*-===//
//
// Part of stpar. The rules -stp-partition and the cost model ask of each
// operator (PartitionableOpInterface.td); the external models of upstream
// ops are registered by registerPartitionableOpModels.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_H
#define STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace mlir {
class DialectRegistry;
namespace shard {
// ShardEnums.h.inc; declared here to keep ShardOps.h out of this header.
enum class ReductionKind : uint32_t;
} // namespace shard
} // namespace mlir

namespace stpar::stp {

/// How -stp-partition splits an op (docs/partition.md).
enum class PartitionRule {
  /// A linalg structured op: the stp.spec splits its loops.
  Loops,
  /// An op with NormalizationOpInterface.
  Norm,
  /// stp.attention: batch and head loops.
  Attention,
  /// stp.moe: token loop, expert parallelism over token axes, an expert's
  /// hidden dim over others (docs/moe.md).
  MoE,
  /// Follows an operand's layout as getLayoutRule() says.
  Layout,
  /// Created on demand in the layout its user wants (tensor.empty, a fill
  /// of one, a splat constant).
  Lazy,
  /// The function's terminator: its operands are gathered.
  Terminator,
  /// Runs whole on every rank; nothing to report.
  Replicated,
  /// No local rule: runs whole on every rank, reported as a fallback.
  Unsupported,
};

/// How an op that follows an operand's layout maps dims
/// (PartitionRule::Layout, and the cost model's views).
struct LayoutRule {
  /// For each dim of result 0, the dim of the leading operand whose split
  /// it takes; -1: none (the result dim is replicated).
  llvm::SmallVector<int64_t> resultDims;
  /// Dims of the leading operand that must be whole on every rank.
  llvm::SmallVector<int64_t> wholeDims;
  /// Whether the first split tensor operand leads; otherwise operand 0.
  bool firstSplitOperandLeads = false;
};

/// How the cost model converts an op (docs/cost-model.md).
enum class CostKind {
  /// No operator (creation ops, the terminator).
  Free,
  /// A view of operand 0 (getLayoutRule().resultDims): no compute.
  View,
  /// A linalg.generic: loops, indexing maps and body FLOPs.
  Loops,
  /// linalg.softmax along its dimension.
  Softmax,
  /// linalg.transpose: a copy.
  Transpose,
  /// An op with NormalizationOpInterface; flopsPerPoint per element.
  Norm,
  /// stp.attention: two batched contractions and a softmax.
  Attention,
  /// stp.moe: one OpKind::MoE operator (FasterMoE's model).
  MoE,
  /// One pass over the result of flopsPerPoint FLOPs per element.
  Elementwise,
};

struct CostRule {
  CostKind kind = CostKind::Elementwise;
  /// FLOPs per element (Norm, Elementwise).
  double flopsPerPoint = 1;
  /// Why an Elementwise op is costed so (reported by stpar cost).
  llvm::StringRef note = "unknown op costed as elementwise";
};

/// Attaches PartitionableOpInterface to the linalg, tensor, arith and func
/// ops the importer produces (PartitionableOpModels.cpp). Tools get it from
/// stpar::registerAllDialects; the passes that need it add it to their
/// dependent dialects.
void registerPartitionableOpModels(mlir::DialectRegistry &registry);

/// Error unless the models are attached in `ctx` (without them every
/// upstream op would silently run replicated).
mlir::LogicalResult checkPartitionableOpModels(mlir::MLIRContext *ctx,
                                               mlir::Location loc);

} // namespace stpar::stp

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h.inc"

#endif // STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_H
