//===- Passes.td - stp dialect passes ----------------------*- tablegen -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD
#define STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintMeshPlacementPass : Pass<"stp-print-mesh-placement"> {
  let summary = "Report the link levels each mesh axis crosses";
  let description = [{
    For every `stp.mesh` attribute on an op, emits one remark per mesh axis
    with its size, its stride in device ids, and the link levels its groups
    cross (`intra-node`, `inter-node`, `hierarchical` with the sizes of
    both parts, or `irregular` when its groups straddle node boundaries
    unevenly, costed as inter-node), as the cost model will see them. The IR is not changed.

    Input:

    ```mlir
    module attributes {stp.mesh = #stp.mesh<#dgx2, ["dp" = 2, "tp" = 8]>} {}
    ```

    Remarks:

    ```
    remark: mesh axis "dp" size 2 stride 8: inter-node (2 nodes)
    remark: mesh axis "tp" size 8 stride 1: intra-node (8 devices)
    ```
  }];
  let statistics = [
    Statistic<"numMeshes", "num-meshes", "Number of meshes reported">
  ];
}

def NormalizePass : Pass<"stp-normalize"> {
  let summary = "Recognize LayerNorm, RMSNorm, GELU, attention and MoE layers";
  let description = [{
    Recognizes, in the IR the ONNX importer produces, the composites that the
    cost model and the partitioner treat as one unit (DESIGN.md, pipeline
    stage 2), with greedy rewrite patterns that fire only when every check
    passes (constants equal the expected values within a relative 1e-4 to
    1e-5, reduced axes are the trailing normalized dims, shapes and
    broadcasting maps match, intermediate values have no other users);
    anything else is left unchanged. No other folding or CSE is done.

    * **LayerNorm** from its decomposition (ReduceMean, Sub, Pow 2 or a
      self-multiply, ReduceMean, Add eps, Sqrt, Div or Reciprocal + Mul,
      optional Mul gamma and Add beta; PyTorch's opset 12/13 exports, also
      with the subtraction duplicated as Megatron's export has it) becomes
      `stp.layer_norm` (a ones scale when there is no gamma).
    * **RMSNorm** (Pow 2, ReduceMean, Add eps, Sqrt, Div or Reciprocal + Mul,
      Mul weight before or after) becomes `stp.rms_norm`.
    * **GELU** in erf form, x * 0.5 * (1 + erf(x / sqrt 2)), or tanh form,
      0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in any operand order
      and association (both sides are compared as polynomials in x and the
      erf/tanh term), becomes one elementwise `linalg.generic` computing GELU
      and carrying `stp.composite = "gelu"`. Single generics whose body
      already computes GELU (the importer's Gelu and FastGelu) get the same
      attribute.
    * **Attention**: Q K^T (a rank-4 matmul), an optional scale (Div or Mul
      by a constant), an optional mask (an additive tensor, or a Where with
      a fill <= -1e9 that is turned into the additive mask select(c, fill,
      0)), `linalg.softmax` over the last dim, times V, becomes
      `stp.attention`. A constant mask (or Where condition) that masks
      exactly the keys after each query becomes the `causal` flag instead.
      K and V whose heads are repeated by Expand/Reshape (grouped-query
      attention) are passed un-repeated.
    * **MoE**: a dense exported top-k MoE layer (a softmax router, TopK,
      the gates, optionally divided by their sum, scattered into a
      [tokens, experts] matrix, every expert's FFN on every token as
      contractions with [E, D, F] and [E, F, D] weights, the gate-weighted
      sum over experts) becomes `stp.moe`; the activation (SiLU, GELU in
      erf or tanh form, ReLU; gated or not) is found by evaluating the
      elementwise ops between the contractions. With `moe-op=false`, or
      where a piece differs, the layer stays dense and, for a TopK over
      the softmax of router logits whose indices scatter the gate weights,
      every op between the router's token input and the reduction that
      combines the gated expert outputs gets `stp.composite = "moe"`
      (unless it is already another composite) and `stp.group = N`, N
      numbering the layers.

    Input (a decomposed LayerNorm; generics abbreviated):

    ```mlir
    %sum = linalg.generic {..reduction..} ins(%x) outs(%zero) -> tensor<2x8x1xf32>
    %mean = linalg.generic {..} ins(%sum) { divf %in, 32.0 }
    %d = linalg.generic {..} ins(%x, %mean) { subf }
    %sq = linalg.generic {..} ins(%d, %two) { powf }
    ... mean of %sq, + 1e-5, sqrt ...
    %n = linalg.generic {..} ins(%d, %std) { divf }
    %g = linalg.generic {..} ins(%n, %gamma) { mulf }
    %y = linalg.generic {..} ins(%g, %beta) { addf }
    ```

    Output:

    ```mlir
    %y = stp.layer_norm %x, %gamma, %beta {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
        : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    ```
  }];
  let dependentDialects = [
    "::stpar::stp::STPDialect", "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect", "::mlir::math::MathDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let statistics = [
    Statistic<"numLayerNorm", "num-layer-norm",
              "Decomposed LayerNorms rewritten to stp.layer_norm">,
    Statistic<"numRMSNorm", "num-rms-norm",
              "Decomposed RMSNorms rewritten to stp.rms_norm">,
    Statistic<"numGeluFused", "num-gelu-fused",
              "Decomposed GELUs fused into one marked generic">,
    Statistic<"numGeluMarked", "num-gelu-marked",
              "Single-generic GELUs marked stp.composite = \"gelu\"">,
    Statistic<"numAttention", "num-attention",
              "Attention subgraphs rewritten to stp.attention">,
    Statistic<"numMoE", "num-moe", "MoE layers marked stp.composite = \"moe\"">,
    Statistic<"numMoEOps", "num-moe-ops",
              "Dense MoE layers rewritten to stp.moe">
  ];
  let options = [
    Option<"moeOp", "moe-op", "bool", /*default=*/"true",
           "Rewrite recognized dense MoE layers into stp.moe (false: only "
           "mark their ops)">
  ];
}

def PipelineSchedulePass
    : Pass<"stp-pipeline-schedule", "::mlir::ModuleOp"> {
  let summary = "Write the plan's pipeline schedule as per-rank slot lists";
  let description = [{
    Writes the pipeline schedule of the module's plan (`stp.plan`'s mesh:
    `pipeline_stages` p, `micro_batches` m, `interleave` v) as the module
    attribute `stp.pipeline_schedule`: for every pipeline rank, the
    forward (`F<micro-batch>`) and backward (`B<micro-batch>`) slots in
    the order the rank runs them, with the model chunk after a dot when
    v > 1 (`F3.1`: micro-batch 3 through the rank's chunk 1, virtual stage
    p + rank). Kinds: `gpipe` (all forwards, then all backwards), `1f1b`
    (PipeDream-Flush as Megatron-LM runs it: p - rank - 1 warm-up
    forwards, then one forward and one backward in turn) and
    `interleaved` (Megatron-LM's interleaved 1F1B, SC'21 Sec. 2.2.2:
    micro-batches in groups of p through chunk 0, 1, ...). Beside the
    lists it records what the cost model charges for the schedule, from
    the same functions the search uses (cost/PipelineSchedule.h):
    `bubble_slots` (idle micro-batch slots per rank: p - 1, or (p - 1) / v
    interleaved) and `in_flight` (per rank, the micro-batches whose
    activations it holds at once). The pass simulates the lists (a slot
    starts when its rank is free and its inputs exist) and fails if they
    deadlock.

    Options override the plan: `kind` (default: the plan's `schedule`,
    else `interleaved` when v > 1 and `1f1b` otherwise), `stages`, `micro-batches`, `virtual-stages` (-1: the
    plan's). Errors: no plan and no options; shapes a kind cannot run
    (interleaved with m not a multiple of p, or v < 2).

    ```mlir
    module attributes {stp.pipeline_schedule = {bubble_slots = 1.0 : f64,
        in_flight = [2.0 : f64, 1.0 : f64], kind = "1f1b",
        micro_batches = 4 : i64,
        ranks = [["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"],
                 ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]],
        stages = 2 : i64, virtual_stages = 1 : i64}} {}
    ```
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"\"",
           "gpipe, 1f1b or interleaved (default: the plan's schedule; "
           "interleaved when it has virtual stages, else 1f1b)">,
    Option<"stages", "stages", "int64_t", /*default=*/"-1",
           "Pipeline stages p (-1: the plan's pipeline_stages)">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"-1",
           "Micro-batches m (-1: the plan's micro_batches)">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"-1",
           "Model chunks per rank v (-1: the plan's interleave)">,
    Option<"ifPipelined", "if-pipelined", "bool", /*default=*/"false",
           "Do nothing unless the plan or the options have pipeline stages "
           "(p > 1): the compile pipeline's setting">,
  ];
}

def PipelineStagesPass : Pass<"stp-pipeline-stages", "::mlir::ModuleOp"> {
  let summary = "Each pipeline rank runs its stages' part of the training "
                "step, in the order of the schedule";
  let description = [{
    Runs on the partitioned training step of a plan with pipeline stages
    (pp > 1). `-stp-partition` keeps `pp` as a grid axis that no spec
    splits, so every pipeline rank holds the whole step on its stage's
    sub-grid; this pass keeps each rank's part
    (docs/pipeline-parallel.md, "Stages in the program"):

    - **Stages.** The plan's records place every planned op: the layers
      in p v equal contiguous blocks (virtual stage s = layer / (L / (p v));
      chunk c of rank r is stage c p + r), the ops before the layers on
      stage 0, those after them on the last. Recomputations, gradients
      (`<op>/grad0`) and collectives named after a planned op follow it;
      other ops follow the latest stage they read, and pure ops that read
      no staged value (constants, slices of the inputs) are recomputed on
      every rank that needs them. Each copied op carries `stp.stage`.
    - **Schedule.** The result is an `scf.index_switch` on the rank's pp
      index with one case per pipeline rank. A case runs the rank's ops
      before the micro-batch loop, then its slots in the order of its list
      in `stp.pipeline_schedule` (-stp-pipeline-schedule): `F<i>.<c>` the
      forward (and loss) ops of micro-batch i on its chunk c, `B<i>.<c>`
      the gradient ops (phases input_grad, weight_grad, grad_sum,
      recompute, and what reads them); gradients accumulate over the
      micro-batches in order. Then the ops after the loop: gradient sync
      and optimizer of the rank's parameters.
    - **Transfers.** A value one rank makes and another reads goes by
      `shard.send` and `shard.recv` on the pp axis, the pair tagged with
      one `stp.transfer` id; the receive sits right before the value's
      first reader.
    - **Transfer groups.** A send waits in the rank's program for its next
      receive (not past the end of the slots or of the case) and goes out
      in one group with it: the F slot's activation leaves with the next
      B slot's gradient receive, as Megatron-LM's
      send_forward_recv_backward. Each group's contiguous ops share one
      `stp.transfer_group` id; the targets issue a group at once (one
      ncclGroupStart/End on cuda) and wait for all of it.
    - **Deadlock and order check.** The pass runs the ranks' groups with
      rendezvous semantics (a transfer completes only while both ranks'
      current groups hold it; a group ends when all its transfers have)
      and fails if a rank would wait forever; and it checks that between
      two ranks the sends and receives come in the same order (NCCL
      matches them by order, not by tag).
    - **Results.** `stp.pipeline_rank` on each function result names the
      rank that returns it; the others return an unwritten buffer. The
      function gets `stp.pipeline` {grid_axis, stages, virtual_stages,
      micro_batches, transfers}.

    Errors: no `stp.pipeline_schedule`; a schedule whose stages or
    micro-batches differ from the grid's pp axis or the step's micro-batch
    loop; layers that do not divide into p v stages; an accumulator read on
    another rank than its update's; transfers that would deadlock or
    arrive out of order. Without pipeline stages the pass does nothing.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
  let statistics = [
    Statistic<"numTransfers", "transfers",
              "Point-to-point sends between pipeline ranks">,
  ];
}

def PartitionPass : Pass<"stp-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite a planned module into the per-device SPMD program";
  let description = [{
    Turns global-shape IR carrying a plan (`stp.mesh` on the module,
    `stp.spec` on ops; docs/plan-format.md) into the program one device runs
    (docs/spmd-ir.md): local tensor types, an upstream `shard.grid @grid`
    with one axis per mesh axis but a `pp` of 1 (no spec splits `pp`:
    -stp-pipeline-stages divides the program over it), explicit `shard` collectives
    and, for PrimePar's temporal primitive, its steps with ring shifts and
    point-to-point transfers (forward, input and weight gradient phases).
    docs/partition.md has the rules.

    Every value carries a sharding (per dim: the grid axes splitting it,
    major first; plus the axes over which it is a partial sum). For each op
    the spec and the indexing maps give the shardings its operands must
    have; the pass inserts the re-layout from the value's sharding
    (`all_slice` to split, `all_gather` to unsplit, `all_to_all` when a split
    moves between dims, `all_reduce` or `reduce_scatter` for partial sums)
    and rewrites the op with local shapes. A split reduction loop leaves a
    partial sum, resolved where a consumer needs the value. A LayerNorm or
    RMSNorm over a split normalized dim becomes local generics whose
    statistics are all-reduced. Ops the pass
    cannot split (unknown ops, views across a split dim that does not line
    up with the blocks, reductions other than sums and max/min, ...) run
    replicated on gathered operands and get `stp.fallback` with the reason.
    Arguments take the sharding their first planned user wants and get
    `stp.split`; results are gathered. Every inserted collective carries
    `stp.plan_step = "<op> forward: <reason>"`, `<op>` being the op's
    ONNX node name (its `NameLoc`) or `<op name>#<position in the body>`.

    Temporal primitive (`temporal = <grid = [r, c], matmul = [m, n, k],
    steps = q>`): the op's reduced dim says the phase (N: forward, K: input
    gradient, M: weight gradient) and so the slice-index rule. Operands
    arrive blocked (first of their matmul dims over `r`, the other over
    `c`); each input is permuted point to point (`stp.grid_permute`) into
    step 0's blocks unless an earlier phase of the same layer left it in
    exactly that layout (F's I and W for G and B, B's dO for G); before each
    step's local product the next step's blocks are sent (`shard.shift`
    along one axis, `stp.grid_permute` for the diagonal moves of B and G,
    both `stp.double_buffer`), the leading identical steps in one
    `scf.for`; G's partial weight gradient moves at the last step while
    the last product runs; the result is permuted back to its blocked
    layout. No collective (docs/partition.md, "Temporal primitive").

    Micro-batches (a training step whose `stp.training` has
    `micro_batches` M > 1; docs/partition.md, "Micro-batches"): the ops
    that read both a parameter and the data (forward, loss, backward) run
    in one `scf.for` over the M micro-batches, with the micro-batch index
    as a sequential axis `mb` that is the major split of every batch loop
    `b` (and of each loop that indexes a micro-batch dim of an operand):
    inside the loop an op sees one micro-batch, split over the device axes
    as its spec says. Values from before the loop are re-laid out there
    with the batch dim whole and sliced per micro-batch
    (`tensor.extract_slice` at the loop counter). Sums over micro-batches
    (the weight gradients' and the loss's partial sums) are the loop's
    iteration arguments, accumulated; their device collectives (gradient
    sync) and everything that reads them (a shared parameter's sum of
    gradients, the optimizer) run once after the loop. Ops of the data
    alone (labels, the loss's token count) run once before it.

    Errors (the pass fails): a `pp` axis larger than 1, a spec whose loops
    do not match the op's loops (count or extents), padded splits, a
    temporal rule other than PrimePar's forward rule or on an op that is not
    a matmul-like contraction.

    Input (Megatron MLP on `["pp" = 1, "x0" = 4]`, bodies abbreviated):

    ```mlir
    %h = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8,
           "n" = 64 {"x0"}, "k" = 32 reduction]>}
           ins(%x, %w1 : tensor<8x32xf32>, tensor<32x64xf32>) outs(%z1 : tensor<8x64xf32>)
    %o = linalg.matmul {stp.spec = #stp.spec<#mesh, loops = ["m" = 8,
           "n" = 32, "k" = 64 reduction {"x0"} ]>}
           ins(%h, %w2 : tensor<8x64xf32>, tensor<64x32xf32>) outs(%z2 : tensor<8x32xf32>)
    ```

    Output:

    ```mlir
    shard.grid @grid(shape = 4)
    func.func @main(%x: tensor<8x32xf32> {stp.split = [[], []]},
                    %w1: tensor<32x16xf32> {stp.split = [[], [0]]},
                    %w2: tensor<16x32xf32> {stp.split = [[0], []]}) -> ... {
      %h = linalg.matmul ins(%x, %w1 : tensor<8x32xf32>, tensor<32x16xf32>) ...
      %p = linalg.matmul ins(%h, %w2 : tensor<8x16xf32>, tensor<16x32xf32>) ...
      %o = shard.all_reduce %p on @grid grid_axes = [0]
             {stp.plan_step = "linalg.matmul#3 forward: partial sums ..."}
      return %o : tensor<8x32xf32>
    }
    ```
  }];
  let dependentDialects = [
    "::stpar::stp::STPDialect", "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect", "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::shard::ShardDialect", "::mlir::tensor::TensorDialect"
  ];
  let statistics = [
    Statistic<"numSplitOps", "num-split-ops", "Ops rewritten with local shapes">,
    Statistic<"numFallbackOps", "num-fallback-ops",
              "Ops run replicated on gathered operands">,
    Statistic<"numTemporalOps", "num-temporal-ops",
              "Temporal-primitive ops turned into steps with ring shifts">,
    Statistic<"numCollectives", "num-collectives", "Collectives inserted">
  ];
}

def CheckCommunicationPass
    : Pass<"stp-check-communication", "::mlir::ModuleOp"> {
  let summary = "Compare a partitioned program's communication with its plan's";
  let description = [{
    The plan <=> program check (docs/plan-format.md, "Plan check"). Totals
    what every collective of a partitioned module sends (elements per
    device per step: the ring volume of its buffer over its group, times
    the trip counts of the loops around it; an all-slice sends nothing), by
    the operator and phase its `stp.plan_step` names, and compares the
    totals with the plan's predictions: the "communication" records of the
    module's `stp.plan` (what `stpar plan` charged in the search objective,
    per micro-batch, times the plan's micro-batches). A gradient op
    `<node>/grad...` counts as its node. Compared: the forward phase, and
    in a training step the backward phase (input and weight gradients
    together); the gradient syncs and ZeRO's gathers (one total), the
    loss, the optimizer, recomputation and the gathers of the results
    (labelled `return`) are listed but not compared. Elements, not bytes,
    are compared; a different element width (the program moving f32 where
    the plan costs 2-byte elements) is stated on the summary line.

    Run it right after -stp-partition (before -stp-bucket-gradients merges
    collectives). The IR is not changed.

    Report (`report=-`, the default):

    ```
    plan check: elements sent per device per step, by operator and phase (plan: per micro-batch x 1)
      operator                                 phase                  plan        program
      /blocks.0/proj/MatMul                    forward                   0           1536  DIFFERS
          program: all-gather over x0 1536
    plan check: 11 of 12 (operator, phase) pairs agree (forward compared)
    ```

    With `fail-on-difference` (default) a differing pair is an error on the
    module naming the first differing operator and both totals. Errors:
    an unpartitioned module, no plan, a plan without "communication"
    records.
  }];
  let options = [
    Option<"report", "report", "std::string", /*default=*/"\"-\"",
           "Where the table goes: a file, '-' for standard output, '' for "
           "none">,
    Option<"failOnDifference", "fail-on-difference", "bool",
           /*default=*/"true",
           "Fail when an (operator, phase) pair differs">,
    Option<"tolerance", "tolerance", "double", /*default=*/"1e-6",
           "Relative difference allowed (plus one element) before a pair "
           "differs (rounding)">
  ];
  let statistics = [
    Statistic<"numCompared", "num-compared",
              "(operator, phase) pairs compared">,
    Statistic<"numDiffering", "num-differing",
              "(operator, phase) pairs that differ">
  ];
}

def BucketGradientsPass : Pass<"stp-bucket-gradients", "::mlir::ModuleOp"> {
  let summary = "Pack the gradient all-reduces and reduce-scatters of a training step into buckets issued as soon as they are full";
  let description = [{
    On the partitioned program of a training step (`-stp-training-step`,
    then `-stp-partition`): the gradient synchronization, i.e. the sum
    `shard.all_reduce`s whose users are all optimizer ops or sums of
    gradients (`stp.phase = "optimizer"` or `"grad_sum"`; the return too,
    when the step returns its gradients), grouped by communicator (grid axes) and element type, in
    the order their gradients are computed, are packed into buckets of at
    most `bucket-bytes` (PyTorch DDP's default, 25 MiB; a larger gradient is
    a bucket of its own). A bucket of two or more becomes one all-reduce of
    the gradients flattened and concatenated (`tensor.collapse_shape`,
    `tensor.concat`), placed right after the op that computes the bucket's
    last gradient, and slices of its result (`tensor.extract_slice`,
    `tensor.expand_shape`) for the optimizer. It then runs on the
    communication stream while the backward pass goes on, until the
    optimizer waits for it (`-stp-schedule-collectives`). Its `stp.plan_step`
    lists the plan steps it replaces.

    The gradient reduce-scatters of ZeRO 2 and 3 are bucketed the same way
    (grouped by communicator and element type): each gradient's scatter
    dim is moved first (`linalg.transpose`) and the gradient viewed as
    `[n, numel / n]` (`n` the group size), so row `i` holds the block rank
    `i` keeps; the bucket concatenates these along dim 1 and one
    `shard.reduce_scatter` of dim 0 leaves every rank its `[1, total]` row,
    from which each gradient's block is sliced, reshaped and transposed
    back. In a pipelined program (`-stp-pipeline-stages`) each pipeline
    rank's case buckets the gradient syncs of its own stages. No change to
    a forward program.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t",
           /*default=*/"25 * 1024 * 1024",
           "Largest bucket in bytes (a larger gradient goes alone)">
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
  let statistics = [
    Statistic<"numBuckets", "num-buckets", "Buckets made">,
    Statistic<"numBucketed", "num-bucketed",
              "All-reduces and reduce-scatters packed into them">
  ];
}

def ScheduleCollectivesPass
    : Pass<"stp-schedule-collectives", "::mlir::ModuleOp"> {
  let summary = "Decide where collectives overlap compute: order, events, waits, communicators";
  let description = [{
    The decisions the emitted program follows to overlap communication
    with compute (docs/emitted-code.md, "cuda streams and events"), made
    on the SPMD IR:

    - Order: in each block, a collective marked `stp.double_buffer` whose
      operands are all ready when the block starts (block arguments or
      values from outside) moves to the start of the block, so the ring
      shift of a temporal loop's next operand runs during the step's
      compute.
    - Events: every collective gets `stp.events = array<i64: ready, done>`
      (cuda: `ready` is recorded on the compute stream before it and
      waited for by the communication stream; `done` is recorded on the
      communication stream after it).
    - Waits: the first op that uses a collective's result (through any
      nested op) gets that collective's `done` in `stp.waits`: the compute
      stream waits for it right before that op, not earlier. A pipeline
      send of a transfer group (`stp.transfer_group`) is waited for by the
      op right after its group; another result nothing in its block uses,
      at the block's terminator.
    - Communicators: `stp.streams = {events = N, communicators = [[axes],
      ...]}` on the function lists the grid-axes groups the collectives
      use, in first-use order; every rank creates them in that order
      before the body runs.

    The cpu target follows the same attributes: its ring shifts are
    non-blocking (`MPI_Isend`/`MPI_Irecv`, completed at the wait), its
    other collectives blocking. Running the pass again replaces the
    attributes.
  }];
}

def LowerCollectivesPass
    : Pass<"stp-lower-collectives", "::mlir::ModuleOp"> {
  let summary = "Lower shard collectives and the compute stream's waits to runtime calls";
  let description = [{
    The last step before printing (after -stp-schedule-collectives and
    -stp-plan-memory): every collective of the per-rank program becomes
    the runtime call that performs it, as an `emitc.call_opaque`, and every
    `stp.waits` entry becomes a call that waits for the transfer right
    before the op that first uses its result. The printer prints these
    calls as they are; both targets' runtimes (runtime/cpu,
    runtime/cuda) implement the same calls (docs/emitted-code.md,
    "Collectives"). An operand reference in `args` (an `index` attribute)
    is the operand's buffer; the result's planned buffer is passed after
    the arguments.

    | shard op | call |
    | --- | --- |
    | `all_reduce` | `stpar_rt::allReduce(ctx, ready, done, axes, reduction, in, out)` |
    | `all_gather` | `stpar_rt::allGather(ctx, ready, done, axes, in_shape, gather_axis, in, out)` |
    | `reduce_scatter` | `stpar_rt::reduceScatter(ctx, ready, done, axes, reduction, in_shape, scatter_axis, in, out)` |
    | `all_to_all` | `stpar_rt::allToAll(ctx, ready, done, axes, in_shape, split_axis, concat_axis, in, out)` |
    | `shift` | `stpar_rt::ringShift(ctx, ready, done, shift_axis, offset, rotate, in, out)` |
    | `stp.grid_permute` | `stpar_rt::gridPermute(ctx, ready, done, axes, sources, in, out)` |
    | `stp.moe_shadow_broadcast` | `stpar_rt::moeShadowBroadcast(ctx, ready, done, axes, num_experts, experts, weights, out)` |
    | `stp.moe_shadow_reduce` | `stpar_rt::moeShadowReduce(ctx, ready, done, axes, num_experts, experts, partial, local, out)` |
    | `all_slice` | `stpar_rt::allSlice(ctx, axes, in_shape, slice_axis, in, out)` (local) |
    | `send` (pipeline) | `stpar_rt::sendTo(ctx, ready, done, axis, peer, tag, in, out)` |
    | `recv` (pipeline) | `stpar_rt::recvFrom(ctx, ready, done, axis, peer, tag, in, out)` |
    | `stp.transfer_group` | `stpar_rt::groupStart(ctx)` before its first call, `stpar_rt::groupEnd(ctx)` after its last |
    | `stp.waits = [done]` | `stpar_rt::waitTransfer(ctx, done)` before the op |

    `ready` and `done` are the collective's `stp.events`. The call keeps the
    collective's attributes (`stp.plan_step`, `stp.events`, the memory
    plan's `stp.buffers`) and records its kind in `stp.collective` and its
    communicator's grid axes in `stp.grid_axes`, so -stp-plan-memory and
    -stp-schedule-collectives still treat it as a collective.

    Input:

    ```mlir
    %1 = shard.all_reduce %0 on @grid grid_axes = [1] {stp.events = array<i64: 0, 1>, ...}
        : tensor<4x8xf32> -> tensor<4x8xf32>
    %2 = linalg.generic ... ins(%1 ...) {stp.waits = array<i64: 1>}
    ```

    Output:

    ```mlir
    %1 = emitc.call_opaque "stpar_rt::allReduce"(%0) {args = [#emitc.opaque<"ctx">,
        0, 1, #emitc.opaque<"stpar_rt::Shape{1}">,
        #emitc.opaque<"stpar_rt::Reduction::Sum">, 0 : index],
        stp.collective = "shard.all_reduce", stp.grid_axes = array<i16: 1>, ...}
        : (tensor<4x8xf32>) -> tensor<4x8xf32>
    emitc.call_opaque "stpar_rt::waitTransfer"() {args = [#emitc.opaque<"ctx">, 1]} : () -> ()
    %2 = linalg.generic ... ins(%1 ...)
    ```

    Errors: a communicating collective without `stp.events` (run
    -stp-schedule-collectives first).
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

def LowerContractionsPass
    : Pass<"stp-lower-contractions", "::mlir::ModuleOp"> {
  let summary = "Lower f32 and bf16 matrix contractions to strided-batched GEMM calls";
  let description = [{
    A linalg op on tensors that is a contraction
    (`linalg::isaContractionOpInterface`: a multiply-add of two inputs into
    one output) into an f32 tensor, of two f32 or two bf16 tensors
    (`-stp-mixed-precision`), whose m, n, k and batch loop groups are each
    one contiguous run in memory becomes one call of
    `stpar_rt::gemm(ctx, transX, transY, rows, cols, k, X, ldx, strideX, Y,
    ldy, strideY, ldc, strideC, batch, C)`: C (the result's buffer, which
    starts as a copy of the init, `stp.accumulate = 2`) += X * Y in
    column-major terms, `batch` times with the given element strides. The
    pass decides the column-major view (C^T = B^T A^T when the result is
    row-major in n, C = A B when column-major in m), the transposes and the
    leading dims. runtime/cuda calls `cublasGemmStridedBatchedEx`,
    runtime/cpu a loop with the same semantics. Other contractions
    (broadcast matrix dims, non-unit inner strides, other types) stay linalg ops
    and are printed as loops or kernels.

    ```mlir
    %c = linalg.generic {...} ins(%a, %b : tensor<8x16xf32>, tensor<16x32xf32>)
        outs(%init : tensor<8x32xf32>) ...  // mul + add
    ```

    becomes

    ```mlir
    %c = emitc.call_opaque "stpar_rt::gemm"(%a, %b, %init) {args = [
        #emitc.opaque<"ctx">, #emitc.opaque<"false">, #emitc.opaque<"false">,
        32, 8, 16, 1 : index, 32, 0, 0 : index, 16, 0, 32, 0, 1],
        stp.accumulate = 2 : i64} : (...) -> tensor<8x32xf32>
    ```
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

def MixedPrecisionPass : Pass<"stp-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "Round the operands of GEMM contractions to bf16 (fp32 accumulation, fp32 master weights)";
  let description = [{
    Mixed-precision training as the cost model assumes it (bf16 tensor-core
    GEMMs; Micikevicius et al., ICLR'18, "Mixed Precision Training", Sec. 3,
    with bf16 instead of fp16 so no loss scaling is needed): on the
    partitioned program, both f32 operands of every contraction that
    `-stp-lower-contractions` turns into a GEMM (the forward, input-gradient
    and weight-gradient products of linear layers, attention projections,
    the head) are rounded to bf16 (round to nearest even) by an elementwise
    `linalg.generic` of `arith.truncf` placed before the contraction, with
    its location and `stp.phase`. The contraction reads the bf16 operands,
    widens each element (`arith.extf`) and accumulates in its f32 result:
    on `cuda` one `cublasGemmStridedBatchedEx` with `CUDA_R_16BF` inputs, an
    `CUDA_R_32F` output and `CUBLAS_COMPUTE_32F`; on `cpu` the same
    rounding and an f32 loop, so both targets compute the same numbers up
    to the order of the f32 sums. A value is rounded once per block (a
    weight read by the forward GEMM and by its input-gradient GEMM shares
    one bf16 copy). Everything else stays f32: parameters (fp32 master
    weights), optimizer states, norms, softmax, the loss, gradient sums and
    the gradient synchronization.

    Not done: activations, collectives and ZeRO-3 parameter gathers in
    bf16 (the cost model counts 2 bytes per element for them; the program
    moves and stores 4), fp16 with loss scaling.

    ```mlir
    %c = linalg.matmul ins(%a, %w : tensor<8x16xf32>, tensor<16x32xf32>)
        outs(%init : tensor<8x32xf32>) -> tensor<8x32xf32>
    ```

    becomes

    ```mlir
    %ab = linalg.generic {...} ins(%a : tensor<8x16xf32>) outs(... : tensor<8x16xbf16>) {
      ^bb0(%x: f32, %o: bf16): %r = arith.truncf %x : f32 to bf16 ...
    %wb = linalg.generic {...} ins(%w ...) -> tensor<16x32xbf16>
    %c = linalg.generic {...} ins(%ab, %wb : tensor<8x16xbf16>, tensor<16x32xbf16>)
        outs(%init : tensor<8x32xf32>) {
      ^bb0(%x: bf16, %y: bf16, %acc: f32):
        %xf = arith.extf %x : bf16 to f32
        %yf = arith.extf %y : bf16 to f32 ...
    ```

    The experts of MoE layers (`stp.moe_experts`) get `bf16_operands`:
    their runtime call rounds its GEMMs' operands the same way (counted as
    two or three GEMMs each).

    The plan's devices (the module's `stp.mesh`) must have bf16 tensor
    cores (a `bf16` peak; cuBLAS takes bf16 operands from sm_80 on): with
    `compute-type=bf16` a cluster without them (V100) is an error, with
    `compute-type=auto` the program stays f32 and a remark says so.

    Errors: a `compute-type` other than `bf16` or `auto`; `bf16` on devices
    without bf16.
  }];
  let options = [
    Option<"computeType", "compute-type", "std::string", /*default=*/"\"bf16\"",
           "The GEMM operands' type: bf16, or auto (bf16 where the plan's "
           "devices have bf16 tensor cores, else no change)">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
  let statistics = [
    Statistic<"numGemms", "num-gemms", "GEMMs given bf16 operands">,
    Statistic<"numRounded", "num-rounded", "Values rounded to bf16">
  ];
}

def PlanMemoryPass : Pass<"stp-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Give every buffer of the per-rank program a place in one arena";
  let description = [{
    A static memory plan for the program `stpar emit` prints: every tensor
    the program holds gets a byte offset in one arena per rank, so the
    program makes one allocation (cuda: one `cudaMalloc`) instead of one
    per tensor, and buffers whose lifetimes do not overlap share memory.

    - Buffers: each function argument (parameters and inputs, live for the
      whole step) and each tensor result of an op that makes a new tensor;
      views (`tensor.expand_shape`, `collapse_shape`, `cast`, `reshape`)
      and `scf.for` results share the buffer they view.
    - Lifetimes, in the order of the function body's ops: from the defining
      op to the last use of the buffer or of any view of it. Everything
      inside an `scf.for` counts as the loop's step. A collective's input
      lives until the last use of the collective's result (the program
      waits for an asynchronous transfer at its result's first use, and the
      transfer reads its input until then); an unused result, until the op
      whose `stp.waits` waits for it (a pipeline send: right after its
      transfer group), else the end of its block. Returned values live to
      the end.
    - A value an `scf.for` carries to its next step (an `scf.yield`
      operand) gets two buffers, used on even and odd steps, so a step
      never overwrites the value it reads (the double buffers of the
      temporal primitive's ring shifts are the same mechanism); both live
      until the last use of the loop's result.
    - Placement: greedy by size, largest first, each at the lowest offset
      (256-byte aligned) free over its whole lifetime.

    Writes `stp.buffers` (and `stp.odd_buffers`) on the ops,
    `stp.arg_buffers` on the function and `stp.arena = {arena, arguments,
    buffers, live_peak}` (bytes) on it: the arena's size, the arguments'
    bytes, the bytes of all buffers (the memory without reuse) and the most
    intermediate bytes live at one step (with the arguments, a lower bound
    of any placement). `-stp-partition`'s output is the usual input; an
    unpartitioned module works too. Running it again replaces the plan.
  }];
}

def ApplyPlanPass : Pass<"stp-apply-plan", "::mlir::ModuleOp"> {
  let summary = "Attach a plan file (plan.json) to the module as attributes";
  let description = [{
    Reads a plan written by `stpar plan -o` or `stpar compile`
    (docs/plan-format.md) and writes it into the IR: `stp.mesh` on the
    module (the cluster restricted to the plan's devices and the plan's
    mesh), `stp.spec` on every planned op, the plan's summary as `stp.plan`
    on the module and each op's records of the file's "operators" as
    `stp.plan_ops`. Operators are found by their stable name (the plan's
    "ir_op": the ONNX node name of the op's location, with `#k` for the
    k-th further op of one node), never by position, so a plan still applies
    after an unrelated op is inserted. `-stp-export-plan` writes the same
    file back: JSON -> IR -> JSON is the identity.

    Everything is checked before anything is written: the file's format,
    its mesh (the axes' product is its device count), every operator's name
    (the first missing one is named: "the plan was made for another
    model?"), its loop count and extents against the op's iteration space,
    the axes of each split and the `#stp.spec` verifier's rules. The pass
    fails with a diagnostic naming the operator.

    The cluster is the `cluster` option (a preset name or a JSON file),
    else the preset the plan names.

    Input: a module as `stpar import` writes it. Output (abbreviated):

    ```mlir
    module attributes {stp.mesh = #stp.mesh<#stp.cluster<"dgx-a100-80g-1",
        ...>, ["pp" = 1, "dp" = 2, "tp" = 2]>, stp.plan = {format =
        "stpar-plan", devices = 4 : i64, ...}} {
      func.func @main(...) {
        %0 = linalg.generic {..., stp.spec = #stp.spec<...>,
               stp.plan_ops = [ {ir_op = "/blocks.0/fc/MatMul", ...} ] } ...
    ```
  }];
  let options = [
    Option<"planFile", "plan", "std::string", /*default=*/"\"\"",
           "The plan file (plan.json)">,
    Option<"cluster", "cluster", "std::string", /*default=*/"\"\"",
           "Cluster preset or JSON file (default: the plan's cluster)">,
    Option<"devices", "devices", "int64_t", /*default=*/"0",
           "Fail unless the plan is for this many devices (0: any)">
  ];
  let dependentDialects = ["::stpar::stp::STPDialect"];
}

def ExportPlanPass : Pass<"stp-export-plan", "::mlir::ModuleOp"> {
  let summary = "Write the module's plan attributes as a plan file";
  let description = [{
    The inverse of `-stp-apply-plan`: writes plan.json (docs/plan-format.md)
    from `stp.mesh`, `stp.plan`, `stp.spec` and `stp.plan_ops`. The specs
    come from the `stp.spec` attributes, so a spec edited in the IR shows in
    the file; ops with `stp.spec` but no plan records (hand-annotated IR)
    get a record with their name and spec. The IR is not changed. Fails
    when the module has no `stp.mesh`.
  }];
  let options = [
    Option<"output", "o", "std::string", /*default=*/"\"-\"",
           "Output file ('-': standard output)">
  ];
}

def TrainingStepPass : Pass<"stp-training-step", "::mlir::ModuleOp"> {
  let summary = "Turn the forward function into one training step: loss, backward pass, optimizer update";
  let description = [{
    Rewrites `func.func @main` (global shapes; planned or not) into the
    function of one training step. After the forward ops it appends, all as
    ops the partitioner and both emitters already handle (mostly
    `linalg.generic`):

    1. **Loss** (`loss=`) on the model output `loss-output` (default: the
       first floating-point result), a scalar `tensor<f32>` result named
       `loss`. With `T` the number of counted tokens of the **global** batch
       (so the value does not depend on how the batch is split):
       * `next-token`: cross-entropy of the logits `[..., S, V]` against the
         integer graph input shaped like the logits without `V` (the input
         ids), shifted by one position; the last position is not counted.
       * `cross-entropy=NAME`: the labels are a new `i64` graph input `NAME`
         shaped like the logits without `V`; negative labels are not
         counted.
       * `sum`: the sum of the output's elements divided by `T`, the number
         of its rows (all dims but the last).
       * `mean-square`: the mean of the squares of the output's elements.
       Cross-entropy is computed as `log(sum(exp(x - max))) + max - x[label]`
       per token; when the plan splits the class dim the max and the two
       sums become partial results that `-stp-partition` all-reduces
       (vocabulary-parallel cross-entropy, Megatron-LM).
    2. **Backward pass** (PrimePar's B and G phases) by reverse-mode
       differentiation of every op, in reverse order. A `linalg` op (generic
       or named) gets, per differentiable input, one `linalg.generic` over
       the **same loops** whose body is the derivative of the forward body
       (recomputed scalars, chain rule over `arith`/`math` ops); loops the
       input does not index become reductions. An embedding (rows read by
       `tensor.extract`) gets a one-hot accumulation over one more loop, the
       table's rows. `stp.layer_norm`, `stp.rms_norm`, `stp.attention`
       (masks, causal, grouped-query heads) and `linalg.softmax` get their
       closed-form gradients as generics; views (`expand_shape`,
       `collapse_shape`, `extract_slice`, `concat`) their inverse views.
       Values used several times sum their gradients, so a parameter shared
       by several operators gets the sum of all its uses.
    3. **Optimizer** (`optimizer=`): `sgd` (`w -= lr * (g + weight-decay * w)`)
       or `adamw` (Loshchilov & Hutter 2019, Algorithm 2, as PyTorch's
       `torch.optim.AdamW`: decoupled weight decay, bias-corrected moments);
       AdamW's moments are new graph inputs and results
       (`adam_m:<param>`, `adam_v:<param>`) and its step count the scalar
       input `adam_step` (1 on the first step).

    4. **ZeRO** (`zero-stage`, default the plan's; Rajbhandari et al.,
       SC'20), over the data-parallel axes (those splitting a planned op's
       batch loop `b`): stage 1 and 2 give the optimizer ops of each
       parameter a spec that also splits its first divisible dim over the
       data-parallel axes it is replicated on, so each rank keeps and
       updates one shard of the optimizer state; stage 2 receives the
       gradient's partial sums reduce-scattered, stage 1 all-reduces them
       first (a copy in the parameter's own layout). Stage 3 also stores the
       parameter sharded: a copy `Ps` with the sharded spec is its first
       user, and each phase reads a gather of it (a copy in the forward
       layout) made right before its first use, once for the forward pass
       and once for the backward pass.

    5. **Micro-batches** (`micro-batches`, default the plan's
       `mesh.micro_batches`): recorded as `micro_batches` in `stp.training`;
       `-stp-partition` runs the forward and backward ops once per
       micro-batch and accumulates the gradients before their sync and the
       update (gradient accumulation). The loss is already a mean over the
       global batch (its token count is taken before the loop), so it is
       normalized once.

    6. **Activation recomputation** (`recompute`, default the plan's
       `mesh.recompute`; Chen et al. 2016, Megatron-LM's full
       recomputation): per layer (the plan's `layer` of each operator), the
       backward ops read copies of the forward ops that compute the
       layer's activations from its saved inputs instead of the saved
       activations. The copies (`stp.phase = "recompute"`, same spec as
       their forward op) are placed right before the first backward op of
       the layer that reads one, so the forward values die after the
       forward pass. Saved: values read outside their layer (the layer
       boundaries), parameters and what is computed from them alone.

    Ops built from a planned op copy its `stp.spec` with the loop kinds of
    the gradient (B and G are partitioned as their forward operator: same
    loops, same mesh axes); the others take the split of the tensor they
    follow. A split reduction loop leaves partial sums that
    `-stp-partition` all-reduces or reduce-scatters, which is how each
    weight gradient is summed over exactly the mesh axes its operator
    replicates it on. The gradients of a temporal operator also keep its
    `temporal` attribute: `-stp-partition` runs them as the primitive's B
    and G phases with their own slice rules and transfers.

    Results: `loss`, then `grad:<param>` per trained parameter when
    `return-gradients` is set, then `param:<param>` (the updated value),
    then the optimizer's new state. A trained parameter is an `stp.param`
    argument marked `trainable` (the importer's rule: floating-point
    initializers with more than one element that are not marked as
    buffers) with a differentiable path to the loss. Every new
    op carries `stp.phase` (`loss`, `input_grad`, `weight_grad`,
    `grad_sum` or `optimizer`) and the module `stp.training` (the options).
    Ops without a gradient rule are an error naming the ONNX node.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"next-token\"",
           "next-token, cross-entropy=INPUT, sum or mean-square">,
    Option<"lossOutput", "loss-output", "std::string", /*default=*/"\"\"",
           "The model output the loss reads (default: the first float one)">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"sgd\"",
           "sgd or adamw">,
    Option<"learningRate", "lr", "double", /*default=*/"1e-3",
           "Learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"epsilon", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay (decoupled for adamw)">,
    Option<"returnGradients", "return-gradients", "bool",
           /*default=*/"false",
           "Also return every trained parameter's gradient">,
    Option<"zeroStage", "zero-stage", "int", /*default=*/"-1",
           "ZeRO stage 0-3 (default -1: the plan's)">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"-1",
           "Micro-batches per step, gradients accumulated over them "
           "(default -1: the plan's)">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"plan\"",
           "Activation recomputation: on, off or plan (the plan's)">
  ];
  let dependentDialects = [
    "::stpar::stp::STPDialect", "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect", "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect"
  ];
}

#endif // STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD
