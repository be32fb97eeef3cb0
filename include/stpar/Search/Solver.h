//===- Solver.h - objective, brute force, segmented DP, search --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The search objective (decomposable: a sum of per-operator terms and
// per-edge re-layout terms plus a memory check; docs/search.md), a
// brute-force enumerator, PrimePar's segmented dynamic program generalized
// to a frontier DP with repeated doubling of identical layers (PrimePar
// ASPLOS'24 Sec. 5.1, Eqs. 11-14), the outer search over meshes, pipeline
// stages, micro-batches and ZeRO stages, and the baselines (Megatron grid
// with and without sequence parallelism, ZeRO data parallelism, spatial-only
// search) in the same objective.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_SEARCH_SOLVER_H
#define STPAR_SEARCH_SOLVER_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/OperatorCost.h"
#include "stpar/Cost/PipelineSchedule.h"
#include "stpar/Cost/TrainingStep.h"
#include "stpar/Search/Problem.h"
#include "stpar/Search/Space.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace stpar::search {

/// One point of the outer choice.
struct Config {
  /// Axis 0 "pp" (size = pipeline stages), then the logical mesh.
  cost::Mesh mesh;
  int64_t microBatches = 1;
  int zeroStage = 0;
  /// Activation recomputation of the layer operators. Full: each re-runs
  /// its forward (and forward collectives) before backward; a layer stashes
  /// only the carry it reads, plus one layer's stash while it is recomputed
  /// (charged as stash / layers per operator). Selective (Korthikanti et
  /// al., MLSys 2023, Sec. 5): only the attention core
  /// (cost::Operator::attentionCore) re-runs, and only its score-sized
  /// tensors (cost::Operand::selectiveRecomputed) are not stashed.
  cost::Recompute recompute = cost::Recompute::None;
  /// Interleaved 1F1B: model chunks per device (v >= 1; 1 = plain 1F1B).
  /// The bubble is (p - 1) / v micro-batch slots and the stage-boundary
  /// sends are v times as many (Narayanan et al., SC'21, Sec. 2.2).
  int64_t interleave = 1;
  /// Each operator's gradient sync overlaps its own backward (exposed:
  /// max(0, sync - (B + G))); off: all of it is exposed.
  bool overlapGradSync = true;
  /// The pipeline schedule: 1F1B (interleaved with v > 1) unless GPipe is
  /// asked for (a baseline: same bubble, m micro-batches in flight).
  bool gpipe = false;
  int64_t getStages() const { return mesh.axes.front().size; }
  /// The fields that change the operators' prices beyond the tables of a
  /// mesh and micro-batch count: ZeRO stage, recomputation, interleave,
  /// gradient-sync overlap, GPipe (a key of maps of per-configuration
  /// results).
  using PriceFields = std::tuple<int, int, int64_t, bool, bool>;
  PriceFields getPriceFields() const {
    return {zeroStage, int(recompute), interleave, overlapGradSync, gpipe};
  }
  /// The schedule's kind and shape (cost/PipelineSchedule.h).
  cost::ScheduleShape getSchedule() const {
    cost::ScheduleShape s;
    s.kind = gpipe            ? cost::ScheduleKind::GPipe
             : interleave > 1 ? cost::ScheduleKind::Interleaved
                              : cost::ScheduleKind::OneFOneB;
    s.stages = getStages();
    s.microBatches = microBatches;
    s.virtualStages = std::max<int64_t>(1, interleave);
    return s;
  }
  /// Micro-batch slots of one step: m + the schedule's bubble ((p - 1) / v;
  /// cost::getBubbleSlots).
  double getSlots() const {
    return double(microBatches) + cost::getBubbleSlots(getSchedule());
  }
};

/// What a plan costs under the search objective (seconds, bytes per device).
struct PlanCost {
  /// The objective: pipeline + exposed gradient sync + optimizer.
  double stepTime = 0;
  /// (m + p - 1) x the weighted per-micro-batch time (compute + operator
  /// collectives + re-layouts + stage sends).
  double pipeline = 0;
  /// The bubble share of `pipeline`: (p - 1) / (m + p - 1) of it.
  double bubble = 0;
  /// Re-layout share of `pipeline`.
  double relayout = 0;
  /// Breakdown of `pipeline` (seconds, weighted like it; PrimePar Fig. 9's
  /// categories): `compute` the operators' F, B, G (and recomputed F)
  /// kernels; `collectives` the collectives the partitions imply inside
  /// operators (statistics all-reduces, column-parallel dX all-reduces not
  /// taken over by an edge); `relayoutReductions` the share of `relayout`
  /// that reduces partial sums (the all-reduce / reduce-scatter of a
  /// row-parallel output or a column-parallel dX); `ring` the temporal
  /// primitive's time beyond its compute (cost::RingOverhead; its input
  /// skew counts as alignment). pipeline = compute + collectives +
  /// ring.getTotal() + relayout + stage sends (the rest).
  double compute = 0, collectives = 0, relayoutReductions = 0;
  cost::RingOverhead ring;
  double exposedSync = 0, optimizer = 0;
  /// Model states + in-flight stashes (additive part) and the largest
  /// transient buffer; memory = their sum.
  double stateBytes = 0, activationBytes = 0, transientBytes = 0;
  double getMemory() const {
    return stateBytes + activationBytes + transientBytes;
  }
  /// The stashes of one micro-batch in flight (bytes): `activationBytes` is
  /// the first pipeline stage's in-flight count (cost::getInFlight(schedule,
  /// 0)) times this, plus what recomputation keeps of one layer.
  double activationBytesPerMicroBatch = 0;
  /// The activations pipeline stage `stage` keeps (bytes): its own
  /// micro-batches in flight (1F1B: min(p - s, m); GPipe: m) times the
  /// stashes of one, plus the rest of `activationBytes`.
  double getStageActivationBytes(const cost::ScheduleShape &schedule,
                                 int64_t stage) const;
  /// Pipeline stage `stage`'s memory (bytes): getMemory() with that
  /// stage's activations.
  double getStageMemory(const cost::ScheduleShape &schedule,
                        int64_t stage) const {
    return getMemory() - activationBytes +
           getStageActivationBytes(schedule, stage);
  }
  bool feasible = false;
  /// Per flattened operator: seconds per micro-batch (F + B + G + its
  /// collectives + re-layouts of its inputs) and bytes (model states +
  /// stashes, unweighted).
  std::vector<double> opSeconds, opBytes;
  /// Per flattened operator: what it adds to one device's memory, as the
  /// plan charges it (weighted by its pipeline stage; ZeRO-sharded states;
  /// saved activations times the micro-batches in flight, or what
  /// recomputation keeps). Summed over operators they are `stateBytes` and
  /// `activationBytes`.
  std::vector<double> opStateBytes, opActivationBytes;
  /// Per MoE operator (flattened index): what FasterMoE's model chose
  /// (expert-parallel group, all-to-all form, schedule, shadowed experts)
  /// and predicts (most loaded worker, busiest links).
  std::vector<std::pair<unsigned, cost::OperatorCost::MoEChoice>> moe;
};

/// A plan: the configuration and one partition per operator of the
/// flattened problem (flatten(problem).ops order).
struct Plan {
  Config config;
  std::vector<Partition> partitions;
  PlanCost cost;
  std::string label;
};

struct SolverOptions {
  SpaceOptions space;
  /// Caps for large problems (0 = unlimited = exact): candidates kept per
  /// operator (the fastest after exact dominance pruning), frontier states
  /// kept per DP step (lowest time), points per Pareto front.
  unsigned maxCandidates = 0, maxStates = 0, maxFront = 0;
  bool isCapped() const { return maxCandidates || maxStates || maxFront; }
  /// The frontier DP finds a step's destination states in a table indexed
  /// by (the state's key without what the step drops, the operator's
  /// signature) while that table has at most this many entries (4 Bytes
  /// each; 4 Mi by default), else in a hash map. The two give the same
  /// results; 0 always takes the hash map (for testing).
  size_t maxSlotTableEntries = size_t(1) << 22;
  /// Exact DPs where memory binds price memory (docs/search.md, "Where
  /// memory binds"): a priced seed DP, transient classes, the layer
  /// block's Lagrangian rest test, and the layer dual -- the layer DP's
  /// fronts priced at the Lagrangian multiplier of the memory limit that
  /// bounds the plan best: that bound prunes the layer products, the
  /// least-priced plan that fits lowers the bound, and the products run
  /// first for plans just above the dual bound. Same results either way;
  /// false turns them off (for testing).
  bool layerDual = true;
  /// With layerDual: the layer block's Lagrangian test prices the other
  /// layers at one layer's exact least price, searched over lambda, and
  /// at that lambda chains the layer prices per pair of the carry's
  /// layouts (dropping layouts no plan that beats the bound enters a
  /// layer in); false: at the chain bound's. Same results either way (for
  /// measuring what it costs and saves).
  bool layerPrice = true;
  /// With layerPrice: the layer price's DP that keeps every pair of the
  /// carry's layouts splits its points by transient class of the
  /// candidates (at most 8 runs of their distinct transients), each priced
  /// with the room its plans leave and chained on its own; that rejects
  /// configurations where no class can beat the bound and otherwise
  /// narrows the transient an answer can have. Same results either way.
  bool transientLayerPrice = true;
  /// With layerPrice, where memory binds: a pass that is not the rest pass
  /// runs the layer price alone before the priced seed where the bound is
  /// at most this share above the time-only relaxation's plan, and where
  /// memory binds the chain bounds (relaxationFirstNodes) before the
  /// relaxation, against the chain bounds' plan bound (its rejection
  /// settles the configuration; its conclusions are kept for the seed and
  /// the Pareto DP). Beyond it the layer price's DPs keep many
  /// more layers and the seed usually lowers the bound by more than they
  /// may be reused for (BLOOM-176B at 16 V100s: 36% above, 8.5 s of layer
  /// price, then the seed lowered the bound by 16%). Same results for any
  /// value; 0: never.
  double layerPriceFirstSlack = 0.1;
  /// With layerDual: where the sections' chain bounds at lambda = 0 choose
  /// partitions that do not fit in the memory, a DPPass::Cheap runs the
  /// layer price alone (layerPriceFirstSlack), then the time-only
  /// relaxation up to `relaxationFirstNodes` nodes; past
  /// them it tries the Pareto DP (without the layer price) up to
  /// `paretoFirstNodes`, whose answer, where it finishes, is the
  /// configuration's, and only then runs the relaxation in full: close to
  /// a configuration's optimum the Pareto DP's memory test drops most
  /// states, where the relaxation, blind to memory, can visit millions.
  /// Same results either way (both exact); paretoFirstNodes = 0: no try.
  size_t relaxationFirstNodes = size_t(1) << 18;
  size_t paretoFirstNodes = size_t(1) << 18;
  /// Exact runs under a bound: the time-only relaxation first finds a plan
  /// among the layers within this share of the slack above the layer's
  /// least time (the slack a layer has when every other costs the least:
  /// bound less the rest's bounds), then, where that plan fits in memory,
  /// runs in full under its time (where it does not, that plan stands for
  /// the relaxation's: memory binds, and the Pareto DP runs). Same results
  /// for any share in (0, 1]; 1: no first plan.
  double relaxationShare = 0.5;
  /// Memory the DP's nodes and front points may take (bytes, estimated at
  /// 56 per node made, a node for every point a step inserted into a
  /// front, including those a later point dropped, of which no node is
  /// kept: an upper estimate); past it solveDP fails (isSolverFailure)
  /// instead of growing until the allocator aborts. Exact DPs of
  /// memory-bound problems can need tens of GiB (bench/search/RESULTS.md).
  size_t maxDPBytes = size_t(8) << 30;
  /// The default caps (`stpar plan` without --exact, the benchmark, the
  /// seed of an exact search): 24 candidates, 256 states, 3 front points.
  void setDefaultCaps() {
    maxCandidates = 24;
    maxStates = 256;
    maxFront = 3;
  }
};

/// Statistics of one DP run.
struct DPStats {
  uint64_t candidates = 0, prunedCandidates = 0, statesVisited = 0;
  uint64_t droppedStates = 0, droppedPoints = 0;
  /// Exact DPs whose time-only relaxation's plan did not fit in memory, so
  /// the Pareto DP over (time, memory, transient) ran too (the other counts
  /// then include every pass: the relaxation, the priced seed's runs and
  /// the Pareto DP).
  uint64_t memoryBoundSolves = 0;
  /// Of those, the ones that ran the layer dual (SolverOptions::layerDual),
  /// the ones whose least-priced plan fit (it lowered the bound), and the
  /// ones answered by a pass below that bound (an early, cheaper pass).
  uint64_t dualSolves = 0, dualSeeds = 0, dualEarlyAnswers = 0;
  /// Memory-bound exact DPs whose priced seed (a DP of one point per front
  /// priced time + lambda x memory) fit and lowered the bound.
  uint64_t pricedSeeds = 0;
  /// Passes of those DPs in which the transient classes rejected the
  /// configuration or narrowed the transient an answer can have, and the
  /// points the layer block's Lagrangian rest test dropped.
  uint64_t transientCuts = 0, pricedRestDrops = 0;
  /// Pareto DPs that the layer dual rejected only per transient class
  /// (each class of the fronts' transients at its own multiplier).
  uint64_t classDualRejections = 0;
  /// Configurations the layer price rejected with its points split by
  /// transient class (SolverOptions::transientLayerPrice).
  uint64_t classLayerPriceRejections = 0;
  /// Layouts of the carry that the layer price's chain along them ruled
  /// out as a layer's entry (dropped from the layer block's anchors).
  uint64_t droppedAnchors = 0;
  /// Cheap passes that tried the Pareto DP first (SolverOptions::
  /// paretoFirstNodes), and those of them it answered.
  uint64_t paretoFirstTries = 0, paretoFirstAnswers = 0;
  /// Where an exact memory-bound DP spends its work, per pass: states
  /// visited and wall seconds of the time-only relaxation, the priced
  /// seed's runs, the layer price's runs (the block's Lagrangian test), a
  /// quick try of the Pareto DP that was abandoned, and the Pareto DP that
  /// answered (its states are statesVisited less the others).
  struct Phase {
    uint64_t states = 0;
    double seconds = 0;
    Phase &operator+=(const Phase &o) {
      states += o.states;
      seconds += o.seconds;
      return *this;
    }
  };
  Phase relaxation, seed, layerPrice, quickTry, pareto;
  bool isExact() const { return droppedStates == 0 && droppedPoints == 0; }
  DPStats &operator+=(const DPStats &o) {
    relaxation += o.relaxation;
    seed += o.seed;
    layerPrice += o.layerPrice;
    quickTry += o.quickTry;
    pareto += o.pareto;
    memoryBoundSolves += o.memoryBoundSolves;
    dualSolves += o.dualSolves;
    dualSeeds += o.dualSeeds;
    dualEarlyAnswers += o.dualEarlyAnswers;
    pricedSeeds += o.pricedSeeds;
    transientCuts += o.transientCuts;
    pricedRestDrops += o.pricedRestDrops;
    classDualRejections += o.classDualRejections;
    classLayerPriceRejections += o.classLayerPriceRejections;
    droppedAnchors += o.droppedAnchors;
    paretoFirstTries += o.paretoFirstTries;
    paretoFirstAnswers += o.paretoFirstAnswers;
    candidates += o.candidates;
    prunedCandidates += o.prunedCandidates;
    statesVisited += o.statesVisited;
    droppedStates += o.droppedStates;
    droppedPoints += o.droppedPoints;
    return *this;
  }
};

/// The part of an exact DP that Instance::solveDP runs.
enum class DPPass { Whole, Cheap, Rest };

/// One configuration's DP in a search (SearchOptions::trace).
struct ConfigurationTrace {
  Config config;
  /// The configuration's lower bound and the bound its DP ran under (s per
  /// step; inf: none).
  double lowerBound = 0, bound = 0;
  /// Wall time of the DP (s).
  double seconds = 0;
  DPStats stats;
  /// The plan's step time (s), or the DP's answer or error.
  std::optional<double> stepTime;
  std::string message;
  /// A retry of a configuration set aside past the DP's memory budget.
  bool retry = false;
  /// The part of the DP that ran (SearchOptions::cheapFirst), and whether
  /// its answer is the configuration's (false: a DPPass::Cheap whose
  /// relaxed plan does not fit; `stepTime` is then the priced seed's).
  DPPass pass = DPPass::Whole;
  bool settled = true;
  /// A capped DP (SolverOptions::isCapped), e.g. of the capped search that
  /// seeds an exact one's bound (SearchOptions::seedBound).
  bool capped = false;
};

/// One communication the objective charges for a plan, and the flattened
/// operator it belongs to as the partitioned program labels it
/// (`stp.plan_step`): a partial-sum reduction belongs to the operator that
/// produced the partial sums, any other re-layout to the operator that
/// reads the tensor.
struct PlannedCommunication {
  cost::Communication comm;
  unsigned op = 0;
  /// "operator" (the partition's collectives, the temporal primitive's
  /// transfers and input skew), "re-layout" (an edge between operators) or
  /// "gradient sync" (per step, not per micro-batch; phase weight_grad).
  std::string source;
  /// A re-layout at a view on an edge through views (Edge::views): the
  /// view at this position (0 = the one reading the producer's output) on
  /// the way into operand `viewOperand` of `op` issues it; -1 otherwise.
  int viewOperand = -1, viewPosition = -1;
  /// A re-layout's reader: the operator whose operand it lays out (the
  /// edge's consumer, also where another operator issues it); -1 for
  /// other sources.
  int reader = -1;
};

/// The re-layout coefficients of one mesh shape on one cluster's links
/// (opaque; Instance::getRelayoutCoefficients): instances on that mesh, of
/// any micro-batch count, share them. Not thread-safe: instances sharing
/// them are used from one thread at a time.
struct RelayoutCoefficients;

/// Whether an error message of Instance::solveDP is a failure of the
/// solver (an internal error, or the DP past SolverOptions::maxDPBytes)
/// rather than an answer ("no plan fits", "no plan beats the bound"): a
/// search must report it, not skip the configuration.
bool isSolverFailure(const std::string &message);

/// Whether an error message of Instance::solveDP is the DP passing its
/// memory budget (SolverOptions::maxDPBytes), one kind of solver failure
/// (isSolverFailure). A lower bound prunes more states, so the same
/// configuration may solve within the budget under a lower bound.
bool isBudgetFailure(const std::string &message);

/// Frees the calling thread's DP buffers: the frontier DP's state sets and
/// back-pointer nodes are kept from one Instance::solveDP to the next (on
/// the same thread) so that their pages are faulted in once; search()
/// calls this when it ends.
void releaseDPBuffers();

/// The objective for one problem under one configuration. Holds the
/// operators with the micro-batch extent, candidate tables and a re-layout
/// cache.
class Instance {
public:
  /// With `sameTables` built for the same problem, mesh shape, micro-batch
  /// count and space options, its partition tables (per-operator costs
  /// before the ZeRO stage, recomputation and pipeline weights) and
  /// re-layout cache are shared instead of recomputed; the caller keeps the
  /// problem identical. New tables take `coefficients` (or, without them,
  /// those of `sameTables`) where they were made for the same mesh shape
  /// and links.
  static llvm::Expected<std::unique_ptr<Instance>>
  create(const Problem &problem, const cost::Cluster &cluster,
         const Config &config, const cost::EfficiencyModel &eff,
         const SolverOptions &options, const Instance *sameTables = nullptr,
         std::shared_ptr<RelayoutCoefficients> coefficients = nullptr);
  ~Instance();

  /// Costs a full plan (partitions per flattened operator).
  llvm::Expected<PlanCost> evaluate(llvm::ArrayRef<Partition> partitions);

  /// The same cost as evaluate (stepTime, pipeline, bubble, exposed sync,
  /// optimizer and memory are evaluate's), broken down the way `stpar cost`
  /// prints it: per micro-batch on the critical stage (layer operators
  /// weighted 1/p, pre/post in full) the forward, recomputed forward, input-
  /// and weight-gradient kernels and the rest as communication (operator
  /// collectives, re-layouts, the temporal primitive's ring overhead); the
  /// stage sends; per step the gradient sync (all of it and the exposed
  /// part), the optimizer; model FLOPs (F + B + G of every operator,
  /// recomputation not counted) and MFU against the device's peak for the
  /// efficiency model's dtype; per-device memory split into parameters,
  /// gradients, optimizer states (ZeRO), activations and transient; per
  /// layer kind the unweighted seconds per step (m micro-batches, all
  /// layers). Errors: as evaluate.
  llvm::Expected<cost::StepBreakdown>
  getBreakdown(llvm::ArrayRef<Partition> partitions);

  /// What evaluate charges as communication, one entry per collective:
  /// each operator's (the partial sums and statistics it reduces itself,
  /// not those a consuming edge reduces; its input gradients' reductions
  /// unless the feeding edge takes them over), each edge's re-layout in F
  /// and, for a tensor that needs a gradient, its gradient's re-layout back
  /// in B, and the gradient syncs. Per micro-batch, unweighted. Errors:
  /// as evaluate.
  llvm::Expected<std::vector<PlannedCommunication>>
  getCommunication(llvm::ArrayRef<Partition> partitions);

  /// Exhaustive search over every combination of the (unpruned) candidates
  /// of the flattened operators. Fails above `maxCombinations`.
  llvm::Expected<Plan> bruteForce(double maxCombinations = 5e7);

  /// The segmented frontier DP with doubling over identical layers. With a
  /// finite `bound` (seconds) it looks only for plans strictly faster than
  /// it and fails when there is none; states that cannot beat it (time +
  /// a lower bound of the rest >= bound) or cannot fit (memory + a lower
  /// bound of the rest > limit) are dropped, which keeps the DP exact.
  /// Its other failures (an internal error, the memory budget
  /// SolverOptions::maxDPBytes) are told apart by isSolverFailure.
  ///
  /// `pass` splits an exact DP in two (a capped DP is always whole): DPPass
  /// Cheap runs the time-only relaxation and, where its plan does not fit
  /// in memory, the priced seed (after a first try of the Pareto DP where
  /// memory binds, SolverOptions::paretoFirstNodes, which answers where
  /// it finishes); DPPass::Rest the Pareto DP, without the
  /// seed, reusing the cheap pass's relaxation of the same configuration
  /// (kept in the shared tables; solved again where it is not there).
  /// Cheap sets `*settled` (if given) to
  /// whether its answer is the DP's (the relaxation's plan fits, or nothing
  /// beats the bound); where it is not, it returns the seed's plan if one
  /// fits and an error otherwise, and Rest must run (under a bound no
  /// higher than the seed's step time) for the answer.
  llvm::Expected<Plan>
  solveDP(DPStats *stats = nullptr,
          double bound = std::numeric_limits<double>::infinity(),
          DPPass pass = DPPass::Whole, bool *settled = nullptr);

  /// True when `other` has the same mesh, micro-batches and candidate
  /// partitions and every candidate here costs no more time, additive memory
  /// or transient memory than there (and the stage sends no more): then
  /// every plan is at least as good here, so `other` need not be solved.
  bool dominates(const Instance &other) const;

  /// Records, in the partition tables the instances of `group` share
  /// (Instance::create's `sameTables`; configurations that differ in ZeRO
  /// stage, recomputation or interleave only), each candidate's smallest
  /// time over them. solveDP then first tries to reject its configuration
  /// by one chain bound of those prices, computed once for the whole group
  /// (a lower bound of every configuration's), before computing its own.
  /// Instances that do not share one table are left alone.
  static void shareGroupPrices(llvm::ArrayRef<const Instance *> group);

  /// Lower bound of the objective of any plan of this configuration
  /// (seconds): per-operator minimum times (re-layouts >= 0) plus the stage
  /// sends, or the group's chain bound once getGroupLowerBound has
  /// computed it, whichever is larger.
  double getLowerBound() const;

  /// Computes (once per shared table) the chain bound of the group this
  /// instance shares prices with (shareGroupPrices) and returns
  /// getLowerBound(): the sections' chain bounds at the group's smallest
  /// prices plus this configuration's stage sends. Without a group,
  /// getLowerBound() as it is.
  double getGroupLowerBound();

  /// Whether the tests the time-only relaxation runs before its first DP
  /// step (the group bound, the chain bounds at lambda = 0 and their
  /// Lagrangian of the memory limit) leave room for a plan faster than
  /// `bound` (seconds) that fits: false proves there is none, so the
  /// configuration's optimum is at least `bound` (the search's lazy lower
  /// bounds, SearchOptions::probeBounds). Runs no DP; the chain bounds are
  /// kept in the shared tables, as the DP's own. `memoryBinds` (if given)
  /// is set to whether the chain bounds' choices at lambda = 0 do not fit
  /// in the memory (then the Lagrangian tests ran).
  bool mayBeat(double bound, bool *memoryBinds = nullptr);

  /// Smallest memory (bytes per device) of any plan of this configuration,
  /// exact (memory does not depend on re-layouts): for "no plan fits"
  /// diagnostics and to skip configurations that cannot fit.
  double getSmallestMemory() const;
  double getMemoryLimit() const;
  const FlatGraph &getFlatGraph() const;
  /// Number of candidates of problem operator `op`.
  size_t getNumCandidates(unsigned op) const;
  /// Approximate bytes held by the partition tables this instance shares
  /// (Instance::create's `sameTables`): the costed partitions and the
  /// re-layout cache; for bounding the memory of a search's table cache.
  size_t getTableBytes() const;
  /// The re-layout coefficients of this instance's mesh (for `create`).
  std::shared_ptr<RelayoutCoefficients> getRelayoutCoefficients() const;

  struct Impl;

private:
  Instance();
  std::unique_ptr<Impl> impl;
};

struct SearchOptions {
  SolverOptions solver;
  unsigned maxMeshAxes = 3;
  /// ZeRO stages searched (the data-parallel axes' optimizer-state
  /// sharding). A stage whose configuration is dominated candidate by
  /// candidate by another stage of the same mesh (Instance::dominates; in
  /// this objective stage 2 dominates 1 and 0: same traffic, fewer bytes,
  /// no more optimizer time) is dropped without solving.
  std::vector<int> zeroStages = {0, 1, 2, 3};
  bool pipeline = true;
  /// Recomputation settings tried. Selective recomputation is not tried by
  /// default: with it the exact search of OPT-6.7B on 32 V100s goes from
  /// 5 s to beyond 100 s, in Pareto DPs of configurations whose memory
  /// binds (docs/search.md, "Objective").
  std::vector<cost::Recompute> recompute = {cost::Recompute::None,
                                            cost::Recompute::Full};
  /// Interleaved 1F1B schedules tried on pipelined configurations: model
  /// chunks per device v where p * v divides the layers and p divides m
  /// (1 = plain 1F1B). Only 1 by default: with {1, 2} and the interleaved
  /// schedule's extra activations charged, the exact search of GPT-3 175B
  /// on 1024 A100s ran past 6 minutes and 14 GB in the Pareto DPs of
  /// memory-bound configurations (docs/search.md, "Objective").
  std::vector<int64_t> interleave = {1};
  /// Micro-batch counts tried per pipeline depth p: p * 2^i (i < this; 0 =
  /// every i) when they divide the batch (p = 1, m > 1: gradient
  /// accumulation).
  unsigned microBatchChoices = 2;
  /// When not empty: only these logical mesh shapes (major first), without
  /// pipeline stages. For Megatron, shape [a, b] is dp = a, tp = b and [n] is
  /// tp = n.
  std::vector<std::vector<int64_t>> meshShapes;
  /// Branch and bound over the configurations (exact; see search()). Off:
  /// every configuration that can fit is solved without a bound (for
  /// testing the bound).
  bool branchAndBound = true;
  /// Exact search (no caps) with branch and bound: first run the capped
  /// search (SolverOptions::setDefaultCaps) and start the bound at its plan's
  /// time. Still exact: a configuration or DP state is pruned only when it
  /// cannot beat a plan already found; the capped plan is kept where nothing
  /// beats it.
  bool seedBound = true;
  /// With branchAndBound: a configuration whose DP passes the memory budget
  /// (SolverOptions::maxDPBytes) is set aside and solved again once the
  /// other configurations have lowered the bound, and the search fails only
  /// when a retry passes the budget under a bound no lower than before.
  /// Off: the search fails at the first such DP (a caller that falls back
  /// to a capped search rather than wait for the retries).
  bool retryOverBudget = true;
  /// With branch and bound and an exact DP, every configuration first runs
  /// only the cheap part of its DP (DPPass::Cheap: the time-only
  /// relaxation, which settles it where its plan fits, and the priced
  /// seed), in increasing lower bound; the Pareto DPs of the others run
  /// after that (DPPass::Rest), in the same order, under the bound the
  /// cheap passes left. Exact either way (each configuration is solved in
  /// full or dropped by its lower bound); the cheap passes' plans lower the
  /// bound before the first Pareto DP runs. False: each DP whole in turn.
  bool cheapFirst = true;
  /// With cheapFirst: before a configuration's cheap pass, its tests
  /// before any DP (Instance::mayBeat) are tried at the midpoint of its
  /// lower bound and the bound; where they rule out every plan under it,
  /// its lower bound rises to that midpoint (at most `probeBounds` times)
  /// and the configuration of least lower bound goes next. Exact (a lower
  /// bound only orders and drops configurations); where memory binds, the
  /// pre-DP tests see it while the configurations' first lower bounds do
  /// not, so a configuration whose plans must trade much time for memory
  /// no longer runs its DPs under a weak bound first. 0: no probes.
  unsigned probeBounds = 4;
  /// With probeBounds: where a probe's pre-DP tests leave room under the
  /// midpoint and memory does not bind them (Instance::mayBeat), the
  /// cheap pass runs under the midpoint too (its time-only relaxation,
  /// whose plan then likely fits, visits fewer states under a lower
  /// bound); where it finds no plan there, the lower bound rises to the
  /// midpoint as after a probe (counted in raisedBounds) and the
  /// configuration is queued again; where its plan does not fit, the
  /// cheap pass runs again under the search's bound. Exact, as the probes
  /// (what the relaxation finds under the midpoint is its answer under any
  /// higher bound). False: the cheap pass runs under the search's bound.
  bool probeRelaxations = true;
  /// Capped search with the temporal primitive: a second pass over the
  /// configurations whose matmuls keep only their temporal candidates
  /// (SpaceOptions::onlyTemporal), bounded by the first pass's plan; the
  /// faster plan wins. The caps rank candidates and states by their time
  /// so far, and the temporal primitive's are slower locally (ring
  /// start-ups, alignments) even where the plan is faster in the end (no
  /// re-layouts or reductions on its edges): without this pass the capped
  /// DP drops them (PrimePar protocol, bench/search/RESULTS.md). Its
  /// configurations and DP statistics are added to the result's.
  bool temporalPass = true;
  /// Only meshes with two axes of equal size >= 2 (besides the pipeline
  /// axis): those where the temporal primitive applies. The temporal pass
  /// sets it (elsewhere it would repeat the first pass).
  bool squareMeshesOnly = false;
  /// Progress output: called with (0, total) before the first
  /// configuration, (n, total) after the n-th solved one, and (total, total)
  /// once at the end, also when the bound stops the search early (the
  /// configurations it skips are done: none of them can win). With the
  /// temporal pass, `total` counts its configurations too (after the first
  /// pass's), so one count runs from 0 to total.
  std::function<void(size_t, size_t)> progress;
  /// Called after each configuration's DP (in the order they run: the
  /// capped seed search's (ConfigurationTrace::capped), cheap and rest
  /// passes, retries, the temporal pass's): what it was, the bound it ran
  /// under and how it went (for a trace of a slow search).
  std::function<void(const ConfigurationTrace &)> trace;
  /// The Megatron baseline (searchMegatron) on problems whose edges do not
  /// carry every split (an imported model: the bridge keeps no edge through
  /// a reshape or transpose): Megatron's partition of every flattened
  /// operator of `flat` (the configuration's flattened problem) on the mesh
  /// [pp, dp, tp], or nullopt when that grid does not apply (tp does not
  /// divide the heads). Empty: the splits are followed along the problem's
  /// edges. Both apply cost/MegatronRule.h and makeMegatronPartition.
  std::function<llvm::Expected<std::optional<std::vector<Partition>>>(
      const FlatGraph &flat, const cost::Mesh &mesh, bool sequenceParallel)>
      megatronPartitions;
  /// The Megatron baseline at one configuration (`--strategy
  /// megatron:tp=..,pp=..,dp=..`): each field > 0 fixes that value of the
  /// grid (micro-batches: per step); 0 leaves it searched. The ZeRO stage of
  /// the dp axis (Megatron's distributed optimizer is stage 1).
  /// `interleave` > 0 fixes the schedule (0: SearchOptions::interleave is
  /// searched); `overlapGradSync` is the configuration's (Config).
  struct MegatronGrid {
    int64_t tp = 0, pp = 0, dp = 0, microBatches = 0;
    int zeroStage = 0;
    int64_t interleave = 0;
    bool overlapGradSync = true;
    /// GPipe instead of 1F1B (Config::gpipe).
    bool gpipe = false;
  } megatron;
};

struct SearchResult {
  /// Best feasible plan, if any.
  std::optional<Plan> best;
  /// Smallest memory over all configurations (bytes) when nothing fits.
  double smallestMemory = 0;
  double memoryLimit = 0;
  size_t configurations = 0;
  /// Configurations whose DP ran (the others could not fit or could not
  /// beat the best plan by their lower bound).
  size_t solvedConfigurations = 0;
  /// Configurations dropped because another ZeRO stage of the same mesh
  /// dominates them.
  size_t dominatedConfigurations = 0;
  /// DPs run again on configurations set aside after passing the DP's
  /// memory budget (SolverOptions::maxDPBytes), under a lower bound than
  /// their first run's; not counted in solvedConfigurations.
  size_t retriedConfigurations = 0;
  /// Probes of the configurations' lower bounds (SearchOptions::
  /// probeBounds), and how many raised one; of those, the ones that ran
  /// the cheap pass (SearchOptions::probeRelaxations), and how many of
  /// these raised one, and how many of these left their Pareto DP to a
  /// DPPass::Rest without a second cheap pass (a plan had brought the bound
  /// to the midpoint or below).
  size_t boundProbes = 0, raisedBounds = 0;
  size_t relaxationProbes = 0, relaxationRaises = 0, relaxationProbesLeft = 0;
  DPStats stats;
};

/// The outer search: pipeline depth p (dividing the devices and the layers),
/// logical mesh of devices/p, micro-batches, ZeRO stage; the DP inside.
llvm::Expected<SearchResult> search(const Problem &problem,
                                    const cost::Cluster &cluster,
                                    const cost::EfficiencyModel &eff,
                                    const SearchOptions &options);
/// The same, starting from `incumbent` (a plan of the same problem in this
/// objective, or null): returned unless a faster plan is found, and its
/// time bounds the branch and bound from the start.
llvm::Expected<SearchResult> search(const Problem &problem,
                                    const cost::Cluster &cluster,
                                    const cost::EfficiencyModel &eff,
                                    const SearchOptions &options,
                                    const Plan *incumbent);

/// Baselines in the same objective. Megatron: mesh [pp, dp, tp], batch on
/// dp, tensor parallelism by Megatron-LM's rule (cost/MegatronRule.h:
/// column-parallel linear unless its input arrives split on the reduction
/// loop, then row-parallel; attention follows the heads; vocab-parallel
/// embedding; norms never split on the normalized loop; with sequence
/// parallelism the operators between the tensor-parallel regions split the
/// sequence), followed along the problem's edges or given by
/// SearchOptions::megatronPartitions. Best over the tp x pp x dp grid and
/// micro-batch counts; ZeRO 0.
/// Megatron's partition of `op` on the mesh [pp, dp, tp] once its
/// tensor-parallel loop is chosen (`tpLoop`, -1 for none): that loop on
/// "tp", the loop named `batchLoop` on "dp" when dp divides it.
Partition makeMegatronPartition(const cost::Operator &op,
                                llvm::StringRef batchLoop, int tpLoop,
                                const cost::Mesh &mesh);

llvm::Expected<SearchResult> searchMegatron(const Problem &problem,
                                            const cost::Cluster &cluster,
                                            const cost::EfficiencyModel &eff,
                                            bool sequenceParallel,
                                            const SearchOptions &options);

/// Pure data parallelism over all devices with ZeRO stage `zeroStage`: the
/// batch loop split over one "dp" axis, or, with a `meshShape` of several
/// axes ("dp0", "dp1", ...), over all of them (its product must be the
/// devices). Without a `meshShape`, a problem with MoE operators gets
/// DeepSpeed-MoE's layout: axes "dp" and "ep" (ep = gcd of the expert
/// count and the devices, minor), the batch over both, the experts over
/// "ep" (the plan's label adds "ep=N").
llvm::Expected<SearchResult> searchZeRO(const Problem &problem,
                                        const cost::Cluster &cluster,
                                        const cost::EfficiencyModel &eff,
                                        int zeroStage,
                                        llvm::ArrayRef<int64_t> meshShape = {});

/// DeepSpeed's ZeRO data parallelism as it is run: pure data parallelism
/// over one "dp" axis with ZeRO stage `zeroStage`, best over the gradient
/// accumulation steps (micro-batches m = 2^i dividing the batch, i <
/// options.microBatchChoices, every i when 0) and activation checkpointing
/// (options.recompute). The plan's label names its configuration
/// ("zero-3 dp=32 m=4 recompute").
llvm::Expected<SearchResult> searchZeRO(const Problem &problem,
                                        const cost::Cluster &cluster,
                                        const cost::EfficiencyModel &eff,
                                        int zeroStage,
                                        const SearchOptions &options);

/// The heading line of a plan table: "mesh AXIS=SIZE ..., micro-batches M,
/// ZeRO stage Z[, recomputation]".
void printPlanConfig(llvm::raw_ostream &os, const Config &config);

/// One row per operator of a plan (flattened order; layers folded when
/// `foldLayers` and every copy has the same partition).
void printPlan(llvm::raw_ostream &os, const Problem &problem, const Plan &plan,
               bool foldLayers = true);

/// The line of a plan table about MoE operator `op` (named `name`): the
/// expert-parallel group and experts per device, the all-to-all's form,
/// smart scheduling's group size, shadowed experts, the most loaded
/// device's tokens, the busiest links' bytes per dispatch, the tokens per
/// expert and dropped tokens (FasterMoE's model, stpar/Cost/MoE.h).
void printMoELine(llvm::raw_ostream &os, llvm::StringRef name,
                  const cost::Operator &op,
                  const cost::OperatorCost::MoEChoice &moe);

/// The totals under a plan table: step time (ms) with its pipeline, bubble,
/// re-layout, exposed gradient sync and optimizer parts, memory per
/// device (GiB) by category and, with pipeline stages, each stage's memory
/// with its own micro-batches in flight (cost::getInFlight).
void printPlanTotals(llvm::raw_ostream &os, const PlanCost &cost,
                     const Config &config);

} // namespace stpar::search

#endif // STPAR_SEARCH_SOLVER_H
