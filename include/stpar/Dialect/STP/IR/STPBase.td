//===- STPBase.td - stp dialect definition -----------------*- tablegen -*-===//
//
// Part of stpar. The `stp` dialect: the vocabulary of spatial-temporal tensor
// partitioning (clusters, meshes, partition specs).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPBASE_TD
#define STPAR_DIALECT_STP_IR_STPBASE_TD

include "mlir/IR/OpBase.td"

def STP_Dialect : Dialect {
  let name = "stp";
  let summary = "Spatial-temporal tensor partitioning for transformer training";
  let description = [{
    The `stp` dialect describes how a training graph is partitioned over a GPU
    cluster. It follows PrimePar (Wang et al., ASPLOS'24, Sections 3-4): every
    operator is described by its loop dimensions (its iteration space); mesh
    axes split loop dimensions in *space*, and PrimePar's temporal primitive
    additionally splits a matmul's three dimensions over *time* on a square
    grid of devices, so that each device runs `q` steps whose operand slices
    move between neighbours by point-to-point ring shifts.

    Vocabulary (all units SI: bytes, seconds, FLOP/s, bytes/s):

    * `#stp.device`, `#stp.link`, `#stp.cluster`: the hardware, as the cost
      model sees it.
    * `#stp.axis`, `#stp.mesh`: a logical device mesh of named axes laid over a
      cluster in row-major order (the last axis varies fastest, so it is the
      one laid inside a node first).
    * `#stp.loop`, `#stp.temporal`, `#stp.spec`: the partition spec of one
      operator.

    Discardable attributes the dialect verifies wherever they appear:
    `stp.mesh` (a `#stp.mesh`, usually on the module) and `stp.spec`
    (a `#stp.spec` on any op; its mesh must be the mesh of the closest
    enclosing op that carries `stp.mesh`); on function arguments `stp.param`
    (a `#stp.param`) and on arguments and results `stp.name` (the ONNX
    name of a graph input or output, a string).

    Composite markers, set by `-stp-normalize` on ops that stay upstream ops
    but that the cost model and the partitioner treat as one unit:
    `stp.composite` (a string naming the composite kind: `"gelu"` on a
    single elementwise `linalg.generic` whose body computes GELU, `"moe"` on
    every op of a mixture-of-experts layer) and `stp.group` (a non-negative
    integer telling apart the instances of a composite that spans several
    ops, e.g. the MoE layer an op belongs to).

    Markers of the partitioned (SPMD) program `-stp-partition` writes
    (docs/spmd-ir.md): `stp.partitioned` (unit, on the module),
    `stp.plan_step` (a string on every collective the pass inserts, naming
    the plan step it implements), `stp.double_buffer` (unit, on the ring
    shifts of a temporal loop that overlap the step's compute),
    `stp.fallback` (a string on an op the pass could not split and runs
    replicated: the reason), `stp.micro_batch_loop` (unit, on the scf.for
    over a training step's micro-batches) and, on arguments and results,
    `stp.split` (an array with one array of grid-axis indices per tensor
    dim). `-stp-pipeline-stages` adds `stp.stage` (the virtual pipeline
    stage of an op, a non-negative integer), `stp.transfer` (the id a
    shard.send shares with its shard.recv), `stp.transfer_group` (the
    group of sends and receives a rank issues together), `stp.pipeline` (a
    dictionary on the function) and, on results, `stp.pipeline_rank` (the
    pipeline rank that returns it).
  }];
  let cppNamespace = "::stpar::stp";
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Name of the discardable attribute holding the mesh of a module.
    static constexpr ::llvm::StringLiteral kMeshAttrName = "stp.mesh";
    /// Name of the discardable attribute holding an op's partition spec.
    static constexpr ::llvm::StringLiteral kSpecAttrName = "stp.spec";
    /// Argument attribute: a `#stp.param` on a model parameter.
    static constexpr ::llvm::StringLiteral kParamAttrName = "stp.param";
    /// Argument/result attribute: the ONNX name of a graph input/output.
    static constexpr ::llvm::StringLiteral kNameAttrName = "stp.name";
    /// Op attribute: the composite (`"gelu"`, `"moe"`) an op implements or
    /// belongs to.
    static constexpr ::llvm::StringLiteral kCompositeAttrName =
        "stp.composite";
    /// Op attribute: which instance of a multi-op composite an op belongs to.
    static constexpr ::llvm::StringLiteral kGroupAttrName = "stp.group";
    /// Module attribute (string, "mixed"): set by -stp-mixed-precision when
    /// it rounded the program's GEMM operands to bf16 (absent: fp32); the
    /// emitters write it to io.json's "precision".
    static constexpr ::llvm::StringLiteral kPrecisionAttrName =
        "stp.precision";
    /// Module attribute (unit): the module is a partitioned SPMD program.
    static constexpr ::llvm::StringLiteral kPartitionedAttrName =
        "stp.partitioned";
    /// Op attribute (string): the plan step an inserted collective implements.
    static constexpr ::llvm::StringLiteral kPlanStepAttrName = "stp.plan_step";
    /// Op attribute (unit): a transfer overlapped with the step's compute.
    static constexpr ::llvm::StringLiteral kDoubleBufferAttrName =
        "stp.double_buffer";
    /// Op attribute (string): why the partitioner runs an op replicated.
    static constexpr ::llvm::StringLiteral kFallbackAttrName = "stp.fallback";
    /// Argument/result attribute: the grid axes splitting each tensor dim.
    static constexpr ::llvm::StringLiteral kSplitAttrName = "stp.split";
    /// Module attribute (dictionary): the plan's summary, every field of
    /// plan.json but "operators" (docs/plan-format.md, "The plan in the IR").
    static constexpr ::llvm::StringLiteral kPlanAttrName = "stp.plan";
    /// Module attribute (dictionary): the pipeline schedule as explicit
    /// per-rank slot lists and what the cost model charges for it; set by
    /// -stp-pipeline-schedule (docs/pipeline-parallel.md).
    static constexpr ::llvm::StringLiteral kPipelineScheduleAttrName =
        "stp.pipeline_schedule";
    /// Op attribute (unit): the scf.for over the micro-batches of a
    /// training step (-stp-partition).
    static constexpr ::llvm::StringLiteral kMicroBatchLoopAttrName =
        "stp.micro_batch_loop";
    /// Op attribute (i64): the virtual pipeline stage an op of a pipelined
    /// program belongs to (chunk c of pipeline rank r is stage c p + r);
    /// set by -stp-pipeline-stages.
    static constexpr ::llvm::StringLiteral kStageAttrName = "stp.stage";
    /// Op attribute (i64) on shard.send / shard.recv: the transfer a send
    /// and its receive share (unique in the function; the message tag).
    static constexpr ::llvm::StringLiteral kTransferAttrName = "stp.transfer";
    /// Op attribute (i64) on shard.send / shard.recv: the group of
    /// transfers a pipeline rank issues together (contiguous ops; one
    /// ncclGroupStart/End on the cuda target, requests completed together
    /// on the cpu target); unique in the function.
    static constexpr ::llvm::StringLiteral kTransferGroupAttrName =
        "stp.transfer_group";
    /// Function attribute (dictionary) of a pipelined program: `grid_axis`
    /// (the pp axis of the grid), `stages`, `virtual_stages`,
    /// `micro_batches`, `transfers`, `transfer_groups`; result attribute
    /// `stp.pipeline_rank` (i64): the pipeline rank that computes the result
    /// (the others return an unwritten buffer).
    static constexpr ::llvm::StringLiteral kPipelineAttrName = "stp.pipeline";
    static constexpr ::llvm::StringLiteral kPipelineRankAttrName =
        "stp.pipeline_rank";
    /// Op attribute (array of dictionaries): the op's records of plan.json's
    /// "operators", the first without its "spec" (that is `stp.spec`).
    static constexpr ::llvm::StringLiteral kPlanOpsAttrName = "stp.plan_ops";
    /// Module attribute (dictionary of i64): the model's symbolic dims as
    /// the importer bound them (`--dim NAME=VALUE`), e.g. {batch = 8, seq =
    /// 64}; -stp-plan reads the batch (the global batch of one step) here.
    static constexpr ::llvm::StringLiteral kDimsAttrName = "stp.dims";
    /// Op attribute (array<i64>): the byte offset in the rank's arena of
    /// each result's buffer (-1: the result has none, e.g. a view); set by
    /// -stp-plan-memory.
    static constexpr ::llvm::StringLiteral kBuffersAttrName = "stp.buffers";
    /// Op attribute (array<i64>): for results carried to the next step of
    /// an scf.for, the second (odd-step) buffer of each result (-1: none).
    static constexpr ::llvm::StringLiteral kOddBuffersAttrName =
        "stp.odd_buffers";
    /// Function attribute (array<i64>): the arena offset of each argument's
    /// buffer (-1: a scalar).
    static constexpr ::llvm::StringLiteral kArgBuffersAttrName =
        "stp.arg_buffers";
    /// Function attribute (dictionary): the memory plan's totals in bytes:
    /// `arena` (the arena's size), `arguments` (parameters and inputs),
    /// `buffers` (all buffers: the bytes without reuse), `live_peak` (the
    /// most bytes of intermediates live at one step).
    static constexpr ::llvm::StringLiteral kArenaAttrName = "stp.arena";
    /// Op attribute (array<i64: ready, done>): a collective's two events
    /// (cuda: recorded on the compute stream before it, on the
    /// communication stream after it); set by -stp-schedule-collectives.
    static constexpr ::llvm::StringLiteral kEventsAttrName = "stp.events";
    /// Op attribute (array<i64>): the `done` events the compute stream
    /// waits for right before this op (the collectives whose results it is
    /// the first to use, or, on a terminator, that nothing used).
    static constexpr ::llvm::StringLiteral kWaitsAttrName = "stp.waits";
    /// Function attribute (dictionary): `events` (how many) and
    /// `communicators` (the grid-axes groups, as arrays of axis indices, in
    /// the order every rank creates them).
    static constexpr ::llvm::StringLiteral kStreamsAttrName = "stp.streams";
    /// Op attribute (string) on the runtime call a collective was lowered
    /// to by -stp-lower-collectives: the shard op's name.
    static constexpr ::llvm::StringLiteral kCollectiveAttrName =
        "stp.collective";
    /// Op attribute (array<i16>) on such a call: the grid axes of its
    /// communicator.
    static constexpr ::llvm::StringLiteral kGridAxesAttrName = "stp.grid_axes";
    /// Op attribute (string) on ops -stp-training-step adds: the phase of
    /// the training step they belong to (`forward` for ZeRO-3's parameter
    /// gathers, `loss`, `input_grad`, `weight_grad`, `grad_sum`,
    /// `optimizer`, `recompute` for forward ops copied into the backward
    /// pass).
    static constexpr ::llvm::StringLiteral kPhaseAttrName = "stp.phase";
    /// Module attribute (dictionary): the training step's options (loss,
    /// optimizer and its hyper-parameters), set by -stp-training-step.
    static constexpr ::llvm::StringLiteral kTrainingAttrName = "stp.training";
    /// Op attribute (integer) on a runtime call: its result's buffer starts
    /// as a copy of this operand (the call accumulates into it).
    static constexpr ::llvm::StringLiteral kAccumulateAttrName =
        "stp.accumulate";

    void registerOps();

  private:
    void registerAttributes();

  public:
  }];
}

#endif // STPAR_DIALECT_STP_IR_STPBASE_TD
