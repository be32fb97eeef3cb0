//===- PartitionableOpInterface.td - per-op partitioning rules -*- tablegen -*-===//
//
// Part of stpar. The one place that says how an operator is partitioned and
// costed: -stp-partition, the cost model's converter (ConvertToOperators.cpp,
// which feeds -stp-plan, stpar cost and the benchmarks) and the memory and
// collective passes ask these interfaces instead of matching op types.
// Upstream ops (linalg, tensor, arith, func) get external models
// (PartitionableOpModels.cpp), as upstream attaches ShardingInterface; stp
// ops implement them directly.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_TD
#define STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def STP_PartitionableOpInterface : OpInterface<"PartitionableOpInterface"> {
  let cppNamespace = "::stpar::stp";
  let description = [{
    How -stp-partition splits an operator over the mesh and how the cost
    model counts it (docs/partition.md, docs/cost-model.md). An op
    without this interface runs replicated, with an `stp.fallback` note
    where that overrides a plan, and is costed as one elementwise pass.

    - `getPartitionRule()` selects the rule: `Loops` (a linalg structured
      op: its loops, indexing maps and iterator types come from
      `linalg::LinalgOp`; the stp.spec splits loops), `Norm` (an op with
      `NormalizationOpInterface`), `Attention` (`stp.attention`), `Layout`
      (the op follows an operand's layout as `getLayoutRule()` says),
      `Lazy` (created on demand in the layout its user wants), `Terminator`
      (results gathered), `Replicated` (runs whole on every rank, nothing
      to report) or `Unsupported` (runs whole, reported).
    - `getReductionKind()`: how the partial results of a split reduction
      loop are combined (the all-reduce's reduction kind); std::nullopt
      where no split reduction is allowed.
    - `getLayoutRule()`: for `Layout` ops and the cost model's views, which
      operand dim each result dim takes its split from and which dims must
      be whole.
    - `createLocalOp()`: the per-rank op for local operands and result
      types, for ops whose attributes carry global shapes (slices,
      reshapes, creation ops); null means "clone the op with local types".
    - `getCostRule()`: how the cost model converts the op (units in
      docs/cost-model.md).
  }];
  let methods = [
    InterfaceMethod<"How -stp-partition splits this op.",
      "::stpar::stp::PartitionRule", "getPartitionRule">,
    InterfaceMethod<[{
        How a split reduction loop's partial results combine (the kind of
        the all-reduce that completes them); std::nullopt: unknown, no
        reduction loop may be split.
      }],
      "std::optional<::mlir::shard::ReductionKind>", "getReductionKind",
      (ins), "", "return std::nullopt;">,
    InterfaceMethod<[{
        For ops that follow an operand's layout (PartitionRule::Layout) and
        for the cost model's views: for each dim of result 0 the dim of the
        leading operand whose split it takes (-1: none), the leading
        operand's dims that must be whole on every rank, and whether the
        first split operand leads (else operand 0).
      }],
      "::stpar::stp::LayoutRule", "getLayoutRule", (ins), "",
      "return {};">,
    InterfaceMethod<[{
        The per-rank op computing this op's local block: `operands` are the
        local operands (null for tensor operands of Lazy ops, which are
        created afresh), `resultTypes` the local result types. Null: clone
        the op and set the local result types.
      }],
      "::mlir::Operation *", "createLocalOp",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$operands,
           "::mlir::TypeRange":$resultTypes), "",
      "return nullptr;">,
    InterfaceMethod<"How the cost model converts this op.",
      "::stpar::stp::CostRule", "getCostRule">,
  ];
}

def STP_NormalizationOpInterface : OpInterface<"NormalizationOpInterface"> {
  let cppNamespace = "::stpar::stp";
  let description = [{
    A normalization over the trailing dims from `getNormalizedAxis()`:
    `y = (x - c) / sqrt(m + epsilon) * scale (+ bias)` where `c` is the
    mean when `isCentered()` (LayerNorm) and 0 otherwise (RMSNorm), and `m`
    the mean of `(x - c)^2`. -stp-partition all-reduces the statistics when
    a normalized dim is split; the cost model counts `getCostRule()`'s
    FLOPs per element.
  }];
  let methods = [
    InterfaceMethod<"The first normalized dim (0 <= axis < rank).",
      "int64_t", "getNormalizedAxis">,
    InterfaceMethod<"The epsilon added to the variance.", "float",
      "getNormEpsilon">,
    InterfaceMethod<"Whether the mean is subtracted (LayerNorm).", "bool",
      "isCentered">,
    InterfaceMethod<"The scale, shaped like the normalized dims.",
      "::mlir::Value", "getNormScale">,
    InterfaceMethod<"The bias, or null.", "::mlir::Value", "getNormBias">,
  ];
}

#endif // STPAR_DIALECT_STP_IR_PARTITIONABLEOPINTERFACE_TD
