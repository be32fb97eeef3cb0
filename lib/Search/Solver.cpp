//===- Solver.cpp - objective, brute force, segmented DP --------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The objective (docs/search.md, "Objective"): per operator o with partition
// P, from costOperator (stpar/Cost/OperatorCost.h),
//   t_o   = F + B + G + forward/backward collectives   (per micro-batch)
//   sync  = all-reduce (+ all-gather for ZeRO-3) of its gradients over the
//           axes of the loops its parameters do not index
//   exp_o = max(0, sync - (B + G))      (bucketed overlap with its backward)
//   opt_o = 28 bytes x locally updated parameters / HBM bandwidth
//   time  = w (m + (p - 1)/v) t_o + w (exp_o + opt_o)
//   mem   = w (ZeRO model states + min(m, p) x stash), peak = transient
// with w = 1/p for layer operators (a stage holds layers/p of them) and 1
// for pre/post operators (charged to the critical stage in full), v the
// interleaved schedule's model chunks per device (1: plain 1F1B); per edge
// w_consumer (m + (p - 1)/v) x (forward + backward re-layout seconds).
// Without overlap (Config::overlapGradSync) exp_o = sync. A
// matmul/embedding output with partial sums that feeds an edge leaves the
// reduction to the edge (all-reduce or reduce-scatter, as the consumer
// needs), so costOperator's forward all-reduce is not charged twice.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/Solver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

using namespace llvm;
using namespace stpar::cost;

namespace stpar::search {

static Error err(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// The start of the error of a DP past its memory budget.
static constexpr const char *kBudgetMessage =
    "the DP needs more memory than its budget";

bool isBudgetFailure(const std::string &message) {
  return StringRef(message).starts_with(kBudgetMessage);
}

bool isSolverFailure(const std::string &message) {
  return StringRef(message).starts_with("internal error") ||
         isBudgetFailure(message);
}

static constexpr double kAdamBytesPerParam = 28;
static constexpr int kExternal = -1;
/// solve()'s answer where Instance::Impl::layerPriceOnly stopped it.
static constexpr const char *kLayerPriceDone = "layer price done";

namespace {
/// What one partition of one problem operator costs independently of the
/// ZeRO stage, recomputation and pipeline weights: shared by every
/// configuration with the same mesh and micro-batch count.
struct Raw {
  Partition part;
  OperatorCost cost;
  /// Forward collectives actually charged to the operator (0 for partial
  /// sums left to the consuming edge). (The temporal primitive's input
  /// skew is its forward alignment, costed with the operator.)
  double fwdComm = 0;
  /// Per parameter: local parameter count, data-parallel ranks, and the
  /// all-reduce / all-gather seconds of its gradient sync.
  struct Sync {
    double psi = 0;
    int64_t ranks = 1;
    double allReduce = 0, allGather = 0;
  };
  std::vector<Sync> syncs;
  /// Bytes of the first input (the layer checkpoint when recomputing).
  double firstInputBytes = 0;
  /// Bytes of the stash selective recomputation regenerates (the attention
  /// core's score-sized operands; cost::Operand::selectiveRecomputed).
  double selectiveBytes = 0;
  /// Global layout id per operand (-1 where not an Input/Output).
  std::vector<int> layouts;
};

/// One candidate of one problem operator under the configuration.
struct Cand {
  const Raw *raw = nullptr;
  /// Objective contributions (weighted).
  double time = 0, pipe = 0, sync = 0, opt = 0;
  double stateBytes = 0, actBytes = 0, peak = 0;
  /// The part of actBytes that one micro-batch in flight stashes (actBytes
  /// holds the first stage's in-flight count of it).
  double actPerMicroBatch = 0;
  /// Unweighted, for printing.
  double seconds = 0, bytes = 0;
  /// Unweighted shares of `seconds` (PlanCost's breakdown).
  RingOverhead ring;
  double collectives = 0;
};

/// A plan's flattened operators, costed (Instance::Impl::costPlan): one
/// candidate per operator; layer copies with the same partition share one
/// Raw.
struct CostedOps {
  std::vector<std::vector<std::unique_ptr<Raw>>> raws;
  std::vector<Cand> chosen;
};

struct Point {
  double time = 0, mem = 0, peak = 0;
  int32_t node = -1;
  /// In a DP step's fronts (runSegment): the candidate chosen, with `node`
  /// its state's point's node; the step writes a node for each point its
  /// fronts keep at its end (-1 elsewhere).
  int32_t cand = -1;
};
/// Two consecutive parts of a plan: times and additive memory add, the
/// transient is the larger (no node: the caller makes one if it keeps it).
static Point addPoints(const Point &a, const Point &b) {
  return Point{a.time + b.time, a.mem + b.mem, std::max(a.peak, b.peak), -1};
}
/// A Pareto front of points. SmallVector's move cannot fail but is not
/// declared noexcept, so std::vector would copy fronts when it grows; this
/// one moves them.
struct Front : SmallVector<Point, 2> {
  Front() = default;
  Front(const Front &) = default;
  Front(Front &&other) noexcept : SmallVector(std::move(other)) {}
  Front &operator=(const Front &) = default;
  Front &operator=(Front &&other) noexcept {
    SmallVector::operator=(std::move(other));
    return *this;
  }
};

struct Node {
  int32_t a = -1, b = -1;
  /// >= 0: a choice (problem op, candidate); -1 root; -2 concat.
  int32_t op = -1, cand = -1;
};

/// An allocator for the DP's large arrays (states, slots, nodes): blocks of
/// 2 MiB or more are advised for transparent huge pages (Linux), so that
/// filling them faults once per 2 MiB rather than once per 4 KiB page. On
/// this project's VMs a page fault costs about 15 us (BLOOM-7B1 on 32
/// devices: its exact DP's 8,800 faults -> 5,000, the search 4% faster).
template <typename T> struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U> HugePageAllocator(const HugePageAllocator<U> &) {}
  T *allocate(size_t n) {
    T *p = std::allocator<T>().allocate(n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    size_t bytes = n * sizeof(T);
    if (bytes >= (size_t(2) << 20)) {
      static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
      uintptr_t begin = uintptr_t(p) & ~(page - 1),
                end = (uintptr_t(p) + bytes + page - 1) & ~(page - 1);
      // (Advice only: where the kernel declines, nothing changes.)
      (void)madvise(reinterpret_cast<void *>(begin), end - begin,
                    MADV_HUGEPAGE);
    }
#endif
    return p;
  }
  void deallocate(T *p, size_t n) { std::allocator<T>().deallocate(p, n); }
  bool operator==(const HugePageAllocator &) const { return true; }
  bool operator!=(const HugePageAllocator &) const { return false; }
};
template <typename T> using HugeVector = std::vector<T, HugePageAllocator<T>>;
/// The thread's buffer of DP back-pointers (Instance::Impl::Borrow).
static HugeVector<Node> &getNodeBuffer() {
  static thread_local HugeVector<Node> buffer;
  return buffer;
}
} // namespace

/// About the heap bytes of one allocation of `n` elements of `T` (malloc
/// rounds to 16 bytes and keeps 8 of its own); for Instance::getTableBytes.
template <typename T> static size_t getHeapBytes(size_t n) {
  return n ? (n * sizeof(T) + 8 + 15) / 16 * 16 : 0;
}
static size_t getHeapBytes(const std::string &s) {
  return s.capacity() > 15 ? getHeapBytes<char>(s.capacity() + 1) : 0;
}
template <typename T> static size_t getHeapBytes(const std::vector<T> &v) {
  return getHeapBytes<T>(v.capacity());
}
/// A lower bound of a segment's time (seconds, or time + lambda x bytes)
/// and the additive memory (bytes) of the choices attaining it.
struct BoundValue {
  double time = 0, mem = 0;
};
/// The chain bounds of the pre, layer and post sections at a Lagrangian
/// multiplier lambda of the memory limit (Instance::Impl::solve).
struct SectionBounds {
  double lambda = 0;
  BoundValue pre, layer, post;
};

/// getRelayoutSeconds is affine in the tensor's bytes per device (each step
/// an alpha-beta collective of those bytes times a fixed ratio), so per pair
/// of per-axis uses it keeps (seconds at 0 bytes, seconds per byte) and
/// serves every tensor and micro-batch count of a mesh. Pairs of uses are
/// numbered densely (ids, 5 bits (state, dim) per axis -> id) and their
/// coefficients kept in a matrix [from][to] (NaN until fitted). Made for
/// one mesh shape and the links of one cluster (`meshShape`, `cluster`).
struct RelayoutCoefficients {
  std::vector<int64_t> meshShape;
  Cluster cluster;
  DenseMap<uint64_t, unsigned> ids;
  std::vector<SmallVector<AxisUse, 4>> uses;
  std::vector<std::vector<std::pair<double, double>>> rows;
};

/// The part of an instance that depends only on the problem, the mesh and
/// the micro-batch count (Instance::create's `sameTables`).
struct Tables {
  /// The problem with the batch loop divided by the micro-batches.
  Problem problem;
  /// Built on first use (solving, evaluating): the layers written out.
  std::optional<FlatGraph> flat;
  const FlatGraph &getFlat();
  /// About the bytes `flat` holds (Instance::getTableBytes).
  size_t flatBytes = 0;
  std::vector<bool> outputHasEdges;
  /// Per operator and operand: an edge feeds it (its input gradient is
  /// then re-laid out by the edge, not reduced by the operator).
  std::vector<std::vector<bool>> inputHasEdges;
  /// Layer operators reading the carry (first one only): the checkpoint.
  std::vector<bool> isCheckpoint;
  std::map<LayoutCode, int> layoutIds;
  std::vector<LayoutCode> layouts;
  /// What the re-layouts of one tensor (edgeTensorIds) between the
  /// layouts it has met are made of, by local layout index (handed out on
  /// first use): each layout's per-axis uses and bytes, from which
  /// edgeSeconds sums the mesh's coefficients; for a tensor fed through
  /// views, or a layout without them, the seconds themselves (a dense
  /// matrix, NaN where not yet costed).
  struct RelayoutMatrix {
    /// Global layout id (layoutIds) -> local index, or -1.
    std::vector<int> localOf;
    std::vector<std::vector<double>> rows;
    /// What relayoutEdge derives from one layout of the tensor, by local
    /// index: the ids (RelayoutCoefficients) of its per-axis uses as a source
    /// (partial sums kept), as a target (partial sums dropped) and as a
    /// gradient's layout, and its bytes per device as a source and as a
    /// gradient. Filled for tensors not fed through views (`viaViews`).
    struct LayoutUses {
      int from = -1, to = -1, gradient = -1;
      double fromBytes = 0, gradientBytes = 0;
    };
    std::vector<LayoutUses> uses;
    bool viaViews = false, needsGrad = false;
    unsigned getLocal(int layout) {
      if (unsigned(layout) >= localOf.size())
        localOf.resize(unsigned(layout) + 1, -1);
      int &l = localOf[layout];
      if (l < 0) {
        l = int(rows.size());
        rows.emplace_back();
      }
      return unsigned(l);
    }
    size_t getBytes() const {
      size_t bytes =
          getHeapBytes(localOf) + getHeapBytes(rows) + getHeapBytes(uses);
      for (const std::vector<double> &r : rows)
        bytes += getHeapBytes(r);
      return bytes;
    }
  };
  /// Indexed by tensor id.
  std::vector<RelayoutMatrix> relayouts;
  /// What a configuration changes in the candidates' prices beyond the
  /// tables (Config::getPriceFields), and the multiplier lambda.
  using PriceKey = std::pair<Config::PriceFields, double>;
  static PriceKey getPriceKey(const Config &c, double lambda) {
    return {c.getPriceFields(), lambda};
  }
  /// Chain bounds of the sections per configuration and lambda (solve).
  std::map<PriceKey, SectionBounds> sectionBounds;
  /// The same under a transient ceiling (bytes; solve(): the transient
  /// classes' bounds and the layer price per class).
  std::map<std::pair<PriceKey, double>, SectionBounds> ceiledSectionBounds;
  /// What solve()'s transient classes concluded per configuration, bound
  /// (s), transient floor given (bytes), memory limit (bytes) and
  /// constant time (s): the priced seed's runs and the Pareto DP ask
  /// under the same bound.
  struct TransientOutcome {
    bool rejected = false, cut = false;
    double peakLB = 0, peakCeiling = 0;
  };
  std::map<std::tuple<Config::PriceFields, double, double, double, double>,
           TransientOutcome>
      transientOutcomes;
  /// Per configuration whose time-only plan does not fit: that plan's DP
  /// time (s; -inf where the relaxation stopped at a first plan that does
  /// not fit, whose time bounds no plan from below) and the states its
  /// relaxation visited, kept by a DPPass::Cheap for its DPPass::Rest
  /// (solveDP).
  struct Relaxation {
    double time;
    uint64_t states;
  };
  std::map<Config::PriceFields, Relaxation> relaxations;
  /// Per configuration, what the layer price (solve()) concluded under
  /// `bound`, for its later passes under that bound or a lower one (each
  /// conclusion holds for the plans that beat a lower bound as well): the
  /// multiplier, one layer's least price at it and the sections' chain
  /// bounds there, the carry layouts a plan that beats the bound can enter
  /// a layer in, the transient range an answer can have, and per layout
  /// the price outside a layer entered in it. `floor`: its bound of the
  /// plan (the slack bound - floor is what its cuts leave; a pass whose
  /// bound takes more than a quarter of it away searches again, its
  /// conclusions being that much tighter).
  struct LayerPriceMemo {
    double bound = 0, floor = 0, lambda = 0, layerPrice = 0;
    SectionBounds at;
    std::vector<int> liveAnchors;
    double peakLB = 0, peakCeiling = 0;
    std::map<int, double> outside;
  };
  std::map<Config::PriceFields, LayerPriceMemo> layerPrices;
  /// Per operator and candidate (raw's order): the smallest time over a
  /// group of configurations sharing these tables
  /// (Instance::shareGroupPrices), and the sections' chain bounds at those
  /// prices (lambda = 0), computed on first use.
  std::vector<std::vector<double>> groupPrices;
  std::optional<SectionBounds> groupBounds;
  /// The group's configurations (PriceKey at lambda 0): only they may use
  /// the group's bound.
  std::set<PriceKey> groupMembers;
  /// Shared by every table of one mesh shape (any micro-batch count).
  std::shared_ptr<RelayoutCoefficients> relayoutCoefs;
  /// Per (consumer, operand): an id of what its re-layouts depend on
  /// besides the layouts (shape, element bytes, whether a gradient flows
  /// back), so that edges carrying the same tensor share cache entries;
  /// -1 until first used. Indexed [consumer][operand].
  std::vector<std::vector<int>> edgeTensorIds;
  std::map<std::tuple<std::vector<int64_t>, int64_t, bool>, unsigned> tensorIds;
  /// Ids handed out (tensorIds' and one per edge through views).
  unsigned numTensorIds = 0;
  /// Per (consumer, operand) fed through views: the edge (Problem::edges).
  DenseMap<uint64_t, unsigned> viewEdges;
  /// Per problem operator, every enumerated partition.
  std::vector<std::vector<Raw>> raw;
  /// Every (operator, partition) in increasing transient bytes (a
  /// partition's transient does not depend on the configuration;
  /// computeBounds).
  std::vector<std::pair<unsigned, unsigned>> peakOrder;
  /// About the bytes `raw` holds (Instance::getTableBytes).
  size_t rawBytes = 0;
  /// What the tables were built for.
  std::vector<int64_t> meshShape;
  int64_t microBatches = 0;
  bool temporal = true;
  bool onlyTemporal = false;
  unsigned firstAxis = 1;
  std::vector<std::pair<std::string, std::string>> fixed;
};

static size_t getBytes(const Operator &op) {
  size_t bytes = sizeof(Operator) + getHeapBytes(op.name) +
                 getHeapBytes(op.layerKind) + getHeapBytes(op.loops) +
                 getHeapBytes(op.operands);
  for (const LoopDim &l : op.loops)
    bytes += getHeapBytes(l.name) + getHeapBytes(l.axes);
  for (const Operand &o : op.operands)
    bytes += getHeapBytes(o.name) + getHeapBytes(o.dims);
  return bytes;
}
static size_t getBytes(const Raw &r) {
  size_t bytes = sizeof(Raw) + getHeapBytes(r.layouts) + getHeapBytes(r.syncs) +
                 getHeapBytes(r.cost.communication) +
                 getHeapBytes(r.part.loopAxes);
  for (const std::vector<unsigned> &axes : r.part.loopAxes)
    bytes += getHeapBytes(axes);
  for (const cost::Communication &c : r.cost.communication)
    bytes += getHeapBytes(c.axes) + getHeapBytes(c.what);
  return bytes;
}

const FlatGraph &Tables::getFlat() {
  if (!flat) {
    flat = flatten(problem);
    for (const Operator &op : flat->ops)
      flatBytes += getBytes(op);
    flatBytes += getHeapBytes(flat->edges) + getHeapBytes(flat->ops);
  }
  return *flat;
}

struct Instance::Impl {
  std::shared_ptr<Tables> tables;
  Problem &problem;
  Cluster cluster;
  Config config;
  EfficiencyModel eff;
  SolverOptions options;
  const FlatGraph &getFlat() const { return tables->getFlat(); }
  double limit = 0;
  double slots = 1;
  double constantTime = 0;
  std::vector<std::vector<Cand>> cands;
  std::vector<bool> &outputHasEdges;
  std::vector<std::vector<bool>> &inputHasEdges;
  std::vector<bool> &isCheckpoint;
  std::map<LayoutCode, int> &layoutIds;
  std::vector<LayoutCode> &layouts;

  explicit Impl(std::shared_ptr<Tables> t)
      : tables(std::move(t)), problem(tables->problem),
        outputHasEdges(tables->outputHasEdges),
        inputHasEdges(tables->inputHasEdges),
        isCheckpoint(tables->isCheckpoint), layoutIds(tables->layoutIds),
        layouts(tables->layouts) {}
  /// The DP's back-pointers, from the DP's first node (the root) on; the
  /// thread's buffer while a DP runs (Borrow), empty otherwise.
  HugeVector<Node> nodes;
  /// Lends the thread's node buffer to `nodes` for the lifetime of this
  /// object (Instance's entry points that run DPs): its pages are faulted
  /// in once per thread rather than once per configuration. Nestable.
  struct Borrow {
    Impl &impl;
    bool owner;
    explicit Borrow(Impl &impl) : impl(impl), owner(!impl.borrowing) {
      if (owner) {
        std::swap(impl.nodes, getNodeBuffer());
        impl.borrowing = true;
      }
    }
    ~Borrow() {
      if (owner) {
        std::swap(impl.nodes, getNodeBuffer());
        impl.borrowing = false;
      }
    }
  };
  bool borrowing = false;
  /// solve()'s chain bounds: per operator and the operands its chain
  /// inputs enter, its candidates grouped by the layouts those inputs want
  /// (groupOf, per candidate; wants and their local indices in the
  /// re-layout matrices, per group), and per source layout the re-layout
  /// seconds into each group, per input (NaN until costed).
  struct ChainGroups {
    std::vector<unsigned> groupOf;
    std::vector<SmallVector<int, 2>> wants;
    std::vector<SmallVector<unsigned, 2>> local;
    SmallVector<unsigned, 2> matrices;
    DenseMap<int, std::vector<double>> seconds;
  };
  std::map<std::pair<unsigned, SmallVector<unsigned, 2>>, ChainGroups>
      chainGroups;
  /// Below 1: the layer block keeps only the layers within this share of
  /// the slack above its least time (solve(); a first plan for solveDP's
  /// relaxation).
  double layerShare = 1;
  /// The nodes a DP has made (checkBudget's measure of its work), counting
  /// as well the points a step inserted into a front and dropped before
  /// its end (runSegment writes nodes only for those it keeps): at least
  /// nodes.size(). Set with it by resetNodes.
  size_t nodesMade = 1;
  void resetNodes(size_t size = 1, size_t made = 1) {
    nodes.resize(size);
    nodesMade = made;
  }
  double smallestMemory = std::numeric_limits<double>::infinity();
  DPStats stats;
  /// Per problem operator, minima over its candidates: objective time,
  /// additive memory (states + stashes), transient peak.
  std::vector<double> minTime, minMem, minPeak;
  /// The plan's transient peak is at least the largest per-operator minimum.
  double peakLB = 0;
  /// Lower bound of any plan's objective (sum of per-operator minima plus
  /// the stage sends; re-layouts >= 0).
  double timeLB = 0;
  /// The lambda of computeBounds' best Lagrangian bound (0: none beat the
  /// sum of minima); solve() tries it on the chain bound.
  double bestLambda = 0;
  /// Only plans strictly faster than this are searched for (seconds).
  double bound = std::numeric_limits<double>::infinity();
  /// getGroupLowerBound: solve() stops after the group's bound (groupLB,
  /// seconds; 0 until computed).
  bool groupBoundOnly = false;
  double groupLB = 0;
  /// mayBeat: solve() stops before its first DP step, setting boundsPassed
  /// where its tests left room for a plan under `bound`.
  bool boundsOnly = false, boundsPassed = false;

  void computeBounds();

  /// Builds the shared tables (fresh) or checks them (reused).
  Error init(bool fresh);
  int intern(const LayoutCode &code) {
    auto [it, inserted] = layoutIds.try_emplace(code, int(layouts.size()));
    if (inserted)
      layouts.push_back(code);
    return it->second;
  }
  double weight(unsigned op) const {
    return problem.sections[op] == Section::Layer
               ? 1.0 / double(config.getStages())
               : 1.0;
  }
  /// Costs `part` of problem operator `i`; `work` is a copy of that
  /// operator whose partition fields are overwritten.
  Expected<Raw> costRaw(unsigned i, Operator &work, const Partition &part);
  Cand derive(unsigned op, const Raw &raw) const;
  /// With pipeline stages: the carry operator (problem index) and the
  /// bytes one device sends to the next stage per micro-batch and boundary
  /// (the carry tensor, one micro-batch's, evenly split over a stage's
  /// devices); its gradient comes back the same size.
  std::optional<std::pair<unsigned, double>> getStageSend() const;
  /// An operator's gradient sync and optimizer (seconds, unweighted, added
  /// to `sync` and `opt`) and its model states under the configuration.
  ModelStateBytes getSyncTerms(const Raw &raw, double &sync, double &opt) const;
  double edgeSeconds(unsigned consumer, unsigned operand, int from, int to);
  /// The id of the re-layout matrix (tables->relayouts) of the tensor fed
  /// into `operand` of `consumer` (made on first use).
  unsigned getRelayoutMatrix(unsigned consumer, unsigned operand);
  /// edgeSeconds from the layouts `from` (not kExternal) and `to` and their
  /// local indices `f`, `t` in matrix `id` (getLocalLayout): for loops
  /// that cost many pairs of one edge's layouts (chainBound).
  double matrixSeconds(unsigned id, unsigned consumer, unsigned operand,
                       int from, unsigned f, int to, unsigned t);
  /// `layout`'s local index in `m`, the matrix of the tensor into `operand`
  /// of `consumer` (its uses filled on first sight).
  unsigned getLocalLayout(Tables::RelayoutMatrix &m, unsigned consumer,
                          unsigned operand, int layout);
  /// Uncached: (seconds, the share of them reducing partial sums).
  std::pair<double, double> edgeParts(unsigned consumer, unsigned operand,
                                      int from, int to) const;
  /// The re-layouts of an edge into `operand` of problem operator
  /// `consumer`: F (the producer's layout `from` into the consumer's `to`)
  /// and, when the tensor needs a gradient, B (its gradient back); empty
  /// steps where none is needed or the layouts are external.
  std::pair<RelayoutCost, RelayoutCost>
  edgeRelayouts(unsigned consumer, unsigned operand, int from, int to,
                RelayoutCost *beforeViews = nullptr) const;
  double edgeCost(unsigned consumer, unsigned operand, int from, int to) {
    return weight(consumer) * slots * edgeSeconds(consumer, operand, from, to);
  }
  bool insert(Front &front, Point p);
  /// Solve the time-only relaxation: memory is ignored and every front
  /// keeps its fastest point (solveDP, exact searches).
  bool timeOnly = false;
  /// With timeOnly: each front keeps its least time + priceLambda x
  /// additive memory instead (seconds per byte; 0: the time-only
  /// relaxation). A heuristic's plan (solveDP's priced seed), not a bound:
  /// the DP still prunes by time against `bound`, and (unlike the
  /// relaxation) by memory against the limit.
  double priceLambda = 0;
  /// With timeOnly and priceLambda: no memory test either, so that each
  /// front's point is the least price of its state (a bound, solve()'s
  /// layer price).
  bool noMemoryTest = false;
  /// Set by solve() where the choices of the sections' chain bounds at
  /// lambda = 0 do not fit in the memory (its Lagrangian tests ran).
  bool chainMemoryBinds = false;
  /// The chain bounds' bound of the whole plan (seconds; solve()'s bounds
  /// before any DP, the Lagrangian's best where memory binds).
  double chainPlanBound = 0;
  /// Set when the DP's nodes pass SolverOptions::maxDPBytes (about 56
  /// bytes each with the front point they stand for); solve() then fails
  /// with kBudgetMessage instead of growing until the allocator aborts.
  bool overBudget = false;
  /// Runs `run` and adds its states visited and wall time to `phase`, less
  /// those of the layer price's runs inside it (counted in their own).
  template <typename Run> auto measurePhase(DPStats::Phase &phase, Run run) {
    // (A layer price run has none inside it: the differences are zero.)
    DPStats::Phase inner = stats.layerPrice;
    uint64_t states = stats.statesVisited;
    auto start = std::chrono::steady_clock::now();
    auto result = run();
    std::chrono::duration<double> wall =
        std::chrono::steady_clock::now() - start;
    phase.states +=
        stats.statesVisited - states - (stats.layerPrice.states - inner.states);
    phase.seconds += wall.count() - (stats.layerPrice.seconds - inner.seconds);
    return result;
  }
  /// A quick try of a Pareto DP (solveDP's cheap pass, SolverOptions::
  /// paretoFirstNodes), while quickTryNodes > 0: without the layer price
  /// search (solve(), the layer block's Lagrangian), and past
  /// `quickTryNodes` nodes from there on it stops with overQuickTry set
  /// (and overBudget, so it stops as at the budget).
  size_t quickTryNodes = 0, quickTryLimit = ~size_t(0);
  /// The states the layer price's DPs may visit (solve(); a DP stops past
  /// what is left of them, so no more are visited): solveDP sets 4 per
  /// state its relaxation visited, at least 2^22.
  uint64_t layerPriceStates = ~uint64_t(0);
  /// solve() stops after the layer price (solveDP's pass before the
  /// priced seed): its conclusions are kept (Tables::layerPrices) or it
  /// rejects the configuration.
  bool layerPriceOnly = false;
  bool overQuickTry = false;
  /// A limit on the nodes of a whole solve() (solveDP's first try of the
  /// Pareto DP, SolverOptions::paretoFirstNodes): past it, as past
  /// quickTryLimit.
  size_t nodeLimit = ~size_t(0);
  /// Set with overBudget where the nodes passed SolverOptions::maxDPBytes
  /// (not a quick try's limit).
  bool overMemoryBudget = false;
  bool checkBudget() {
    if (nodesMade > quickTryLimit || nodesMade > nodeLimit)
      overQuickTry = overBudget = true;
    if (nodesMade > options.maxDPBytes / 56)
      overMemoryBudget = overBudget = true;
    return overBudget;
  }
  /// Whether the time-only relaxation's tests before its first DP step
  /// pass under `bound` (Instance::mayBeat); sets chainMemoryBinds.
  bool passesBounds() {
    boundsOnly = true;
    timeOnly = true;
    boundsPassed = false;
    Expected<Plan> stop = solve(); // (stops before the DP)
    boundsOnly = false;
    timeOnly = false;
    if (!stop)
      consumeError(stop.takeError());
    return boundsPassed;
  }
  double rank(const Point &p) const { return p.time + priceLambda * p.mem; }
  /// Placement of each mesh axis (relayoutEdge; filled on first use).
  mutable SmallVector<AxisPlacement, 4> placements;
  /// The re-layouts of an edge into `operand` of problem operator
  /// `consumer` from the producer's layout `from` to the consumer's `to`
  /// (getRelayoutSeconds on the layout codes): forward, and when the tensor
  /// needs a gradient its gradient back. Returns F + B seconds
  /// (unweighted); fills the steps when asked.
  double relayoutEdge(unsigned consumer, unsigned operand, int from, int to,
                      RelayoutCost *forward = nullptr,
                      RelayoutCost *backward = nullptr,
                      RelayoutCost *beforeViews = nullptr) const;
  /// getRelayoutSeconds(from, to, localBytes) on this configuration's mesh;
  /// without `cost` from the tables' affine coefficients (relayoutCoefs).
  double relayoutSeconds(ArrayRef<AxisUse> from, ArrayRef<AxisUse> to,
                         double localBytes, RelayoutCost *cost) const;
  /// The id of per-axis uses in the tables' coefficients; -1 where they
  /// cannot be keyed (more than 6 axes, a dim beyond 7).
  int getUsesId(ArrayRef<AxisUse> uses) const;
  /// relayoutSeconds of uses `from` -> `to` (ids) at `localBytes` > 0.
  double coefSeconds(unsigned from, unsigned to, double localBytes) const;
  /// Fills `placements` (first use).
  void ensurePlacements() const;
  /// The edge into `operand` of `consumer` when it runs through views.
  const Edge *getViewEdge(unsigned consumer, unsigned operand) const {
    auto it = tables->viewEdges.find(uint64_t(consumer) << 8 | operand);
    return it == tables->viewEdges.end() ? nullptr : &problem.edges[it->second];
  }
  /// Per mesh axis, for the producer's layout `from` on a view edge: the
  /// view position where its split is lost (gathered), -1 where it carries
  /// over or the axis does not split the producer's output.
  SmallVector<int, 4> getViewLosses(const Edge &edge, int from) const;
  /// The share of a view edge's gradient that goes back to its producer:
  /// below 1 where the views widen the tensor (a concatenation with other
  /// operands, the KV-cache's), whose gradient the program slices to the
  /// producer's part before it re-lays that part out, for the producer's
  /// backward; else 1.
  double getViewGradientShare(const Edge &edge) const;
  /// Where the program gathers a view edge's gradient over mesh `axis` for
  /// the consumer's layout `to`: the position of the view whose gradient
  /// drops the split (EdgeViews::gradientLostAt, or a size along the way
  /// that the axis group does not divide), or -1 for the producer's
  /// backward.
  int getGradientGatherView(const Edge &edge, int to, unsigned axis) const;
  /// relayoutEdge for an edge through views: the producer's output is
  /// re-laid out to what the views keep (partial sums reduced, lost splits
  /// gathered; `beforeViews`, only on the edge that pays it), the views'
  /// result then into the consumer's layout (`forward`); the gradient
  /// comes back from the consumer's layout to the views' (`backward`).
  double relayoutViews(const Edge &edge, int from, int to,
                       RelayoutCost *forward, RelayoutCost *backward,
                       RelayoutCost *beforeViews) const;
  Expected<Plan> solve();
  void walk(int32_t node, std::vector<std::pair<int, int>> &out) const;
  /// Costs one partition per flattened operator (evaluate, getBreakdown).
  Error costPlan(ArrayRef<Partition> partitions, CostedOps &out);
  /// The objective of costed operators and the re-layouts of the edges
  /// between them.
  Expected<PlanCost> composePlan(const CostedOps &ops);
};

Instance::Instance() = default;
Instance::~Instance() = default;

static bool sameLinks(const LinkSpec &a, const LinkSpec &b) {
  return a.bandwidth == b.bandwidth && a.latency == b.latency;
}

Expected<std::unique_ptr<Instance>>
Instance::create(const Problem &problem, const Cluster &cluster,
                 const Config &config, const EfficiencyModel &eff,
                 const SolverOptions &options, const Instance *sameTables,
                 std::shared_ptr<RelayoutCoefficients> coefficients) {
  std::vector<int64_t> shape;
  for (const MeshAxis &a : config.mesh.axes)
    shape.push_back(a.size);
  // Coefficients made for this mesh shape and these links.
  auto fits = [&](const RelayoutCoefficients &c) {
    return c.meshShape == shape &&
           c.cluster.devicesPerNode == cluster.devicesPerNode &&
           sameLinks(c.cluster.intraNode, cluster.intraNode) &&
           sameLinks(c.cluster.interNode, cluster.interNode);
  };
  std::shared_ptr<Tables> tables;
  if (sameTables) {
    const Tables &t = *sameTables->impl->tables;
    if (fits(*t.relayoutCoefs) && t.microBatches == config.microBatches &&
        t.temporal == options.space.temporal &&
        t.onlyTemporal == options.space.onlyTemporal &&
        t.fixed == options.space.fixed &&
        t.firstAxis == options.space.firstAxis)
      tables = sameTables->impl->tables;
  }
  bool fresh = !tables;
  if (fresh) {
    tables = std::make_shared<Tables>();
    tables->problem = problem;
    tables->meshShape = shape;
    tables->microBatches = config.microBatches;
    tables->temporal = options.space.temporal;
    tables->onlyTemporal = options.space.onlyTemporal;
    tables->fixed = options.space.fixed;
    tables->firstAxis = options.space.firstAxis;
    // The re-layout coefficients depend on the mesh and its links only.
    if (coefficients && fits(*coefficients))
      tables->relayoutCoefs = std::move(coefficients);
    else if (sameTables && fits(*sameTables->impl->tables->relayoutCoefs))
      tables->relayoutCoefs = sameTables->impl->tables->relayoutCoefs;
    else {
      tables->relayoutCoefs = std::make_shared<RelayoutCoefficients>();
      tables->relayoutCoefs->meshShape = shape;
      tables->relayoutCoefs->cluster = cluster;
    }
  }
  std::unique_ptr<Instance> inst(new Instance());
  inst->impl = std::make_unique<Impl>(std::move(tables));
  Impl &I = *inst->impl;
  I.cluster = cluster;
  I.config = config;
  I.eff = eff;
  I.options = options;
  if (Error e = I.init(fresh))
    return std::move(e);
  return std::move(inst);
}

Error Instance::Impl::init(bool fresh) {
  int64_t m = config.microBatches, p = config.getStages();
  if (config.mesh.getNumDevices() > cluster.getNumDevices())
    return err("the mesh has " + Twine(config.mesh.getNumDevices()) +
               " devices but the cluster '" + cluster.name + "' only " +
               Twine(cluster.getNumDevices()));
  if (config.interleave < 1)
    return err("interleave (virtual stages per device) must be >= 1");
  if (config.interleave > 1 &&
      (p == 1 || problem.layers % (p * config.interleave)))
    return err("interleave " + Twine(config.interleave) +
               " needs pipeline stages that hold equal chunks of the " +
               Twine(problem.layers) + " layers");
  // (p - 1) / v bubble slots hold only when the micro-batches come in
  // groups of p (Megatron-LM refuses interleaving otherwise).
  if (config.interleave > 1 && m % p)
    return err("interleave " + Twine(config.interleave) + ": the " + Twine(m) +
               " micro-batches are not a multiple of the " + Twine(p) +
               " pipeline stages");
  slots = config.getSlots();
  limit = problem.memoryLimit ? *problem.memoryLimit
                              : double(cluster.device.hbmCapacity);
  if (fresh) {
    if (Error e = verifyProblem(problem))
      return e;
    // One micro-batch: divide the batch loop.
    for (Operator &op : problem.ops)
      for (LoopDim &l : op.loops)
        if (!problem.batchLoop.empty() && l.name == problem.batchLoop) {
          if (l.extent % m)
            return err("micro-batches " + Twine(m) +
                       " do not divide the batch " + Twine(l.extent));
          l.extent /= m;
        }
  }
  if (fresh) {
    // Which outputs feed edges (their partial sums are reduced by the edge).
    outputHasEdges.assign(problem.ops.size(), false);
    for (const Edge &e : problem.edges)
      outputHasEdges[e.producer] = true;
    std::optional<unsigned> lastPre;
    for (unsigned i = 0; i < problem.ops.size(); ++i)
      if (problem.sections[i] == Section::Pre)
        lastPre = i;
    if (lastPre && getCarryOp(problem))
      outputHasEdges[*lastPre] = true;
    inputHasEdges.resize(problem.ops.size());
    for (unsigned i = 0; i < problem.ops.size(); ++i)
      inputHasEdges[i].assign(problem.ops[i].operands.size(), false);
    for (const Edge &e : problem.edges)
      inputHasEdges[e.consumer][e.consumerOperand] = true;
    // Tensor ids are handed out on first use (edgeSeconds).
    tables->edgeTensorIds.resize(problem.ops.size());
    for (unsigned i = 0; i < problem.ops.size(); ++i)
      tables->edgeTensorIds[i].assign(problem.ops[i].operands.size(), -1);
    tables->viewEdges.clear();
    for (auto [k, e] : llvm::enumerate(problem.edges))
      if (e.views)
        tables->viewEdges[uint64_t(e.consumer) << 8 | e.consumerOperand] =
            unsigned(k);
    isCheckpoint.assign(problem.ops.size(), false);
    std::optional<unsigned> first;
    for (const Edge &e : problem.edges)
      if (e.nextLayer && (!first || e.consumer < *first))
        first = e.consumer;
    if (first)
      isCheckpoint[*first] = true;
    tables->raw.resize(problem.ops.size());
    for (unsigned i = 0; i < problem.ops.size(); ++i) {
      Operator work = problem.ops[i];
      for (const Partition &part :
           enumeratePartitions(problem.ops[i], config.mesh, options.space)) {
        Expected<Raw> r = costRaw(i, work, part);
        if (!r)
          return r.takeError();
        tables->raw[i].push_back(std::move(*r));
      }
      if (tables->raw[i].empty())
        return err("operator '" + problem.ops[i].name + "' has no partition");
      for (const Raw &r : tables->raw[i])
        tables->rawBytes += getBytes(r);
      tables->rawBytes +=
          getBytes(problem.ops[i]) + getHeapBytes(tables->raw[i]);
    }
  }
  // Stage-boundary sends: the carry tensor, evenly split over a stage, sent
  // forward and its gradient backward, over the link between stages.
  if (std::optional<std::pair<unsigned, double>> send = getStageSend()) {
    AxisPlacement pl = config.mesh.getPlacement(0, cluster.devicesPerNode);
    double one =
        getCollectiveTime(Collective::PointToPoint, send->second, pl, cluster);
    // v model chunks per device: v boundaries each way.
    constantTime = slots * 2 * one * double(config.interleave);
  }
  cands.resize(problem.ops.size());
  for (unsigned i = 0; i < problem.ops.size(); ++i) {
    cands[i].reserve(tables->raw[i].size());
    for (const Raw &r : tables->raw[i])
      cands[i].push_back(derive(i, r));
  }
  nodes.push_back({}); // node 0: root
  computeBounds();
  return Error::success();
}

void Instance::Impl::computeBounds() {
  const double inf = std::numeric_limits<double>::infinity();
  unsigned n = unsigned(problem.ops.size());
  minTime.assign(n, inf);
  minMem.assign(n, inf);
  minPeak.assign(n, inf);
  // How often each problem operator occurs in the flattened plan.
  std::vector<double> copies(n, 0);
  for (unsigned i = 0; i < n; ++i)
    copies[i] =
        problem.sections[i] == Section::Layer ? double(problem.layers) : 1.0;
  for (unsigned i = 0; i < n; ++i)
    for (const Cand &c : cands[i]) {
      minTime[i] = std::min(minTime[i], c.time);
      minMem[i] = std::min(minMem[i], c.stateBytes + c.actBytes);
      minPeak[i] = std::min(minPeak[i], c.peak);
    }
  timeLB = constantTime;
  bestLambda = 0;
  peakLB = 0;
  for (unsigned i = 0; i < n; ++i) {
    timeLB += copies[i] * minTime[i];
    if (copies[i] > 0)
      peakLB = std::max(peakLB, minPeak[i]);
  }
  // Lagrangian bound of the memory limit: every feasible plan has additive
  // memory <= limit - peakLB, so for any lambda >= 0 its time is at least
  //   sum_o copies_o min_c (time_c + lambda mem_c) - lambda (limit - peakLB)
  // (re-layouts >= 0 dropped). Tried on a geometric grid of lambda.
  double room = limit - peakLB;
  if (room > 0 && std::isfinite(timeLB)) {
    double scale = timeLB / room;
    for (int j = -8; j <= 12; ++j) {
      double lambda = scale * std::ldexp(1.0, j);
      double bound = constantTime - lambda * room;
      for (unsigned i = 0; i < n && std::isfinite(bound); ++i) {
        if (copies[i] == 0)
          continue;
        double best = inf;
        for (const Cand &c : cands[i])
          best = std::min(best, c.time + lambda * (c.stateBytes + c.actBytes));
        bound += copies[i] * best;
      }
      if (std::isfinite(bound) && bound > timeLB) {
        timeLB = bound;
        bestLambda = lambda;
      }
    }
  }
  // The smallest memory of any plan, exactly: memory is a sum of per-copy
  // terms plus the largest transient, and the choices are independent, so
  // for each transient threshold T (ascending) take every operator's
  // smallest additive memory among its candidates with peak <= T.
  // (Every candidate in increasing transient: a property of the tables,
  // sorted once.)
  if (tables->peakOrder.empty()) {
    for (unsigned i = 0; i < n; ++i)
      for (unsigned k = 0; k < cands[i].size(); ++k)
        tables->peakOrder.push_back({i, k});
    llvm::sort(tables->peakOrder, [&](const auto &a, const auto &b) {
      return cands[a.first][a.second].peak < cands[b.first][b.second].peak;
    });
  }
  std::vector<double> cur(n, inf);
  unsigned missing = 0;
  for (unsigned i = 0; i < n; ++i)
    missing += copies[i] > 0 ? 1 : 0;
  double sum = 0;
  smallestMemory = inf;
  for (auto [op, k] : tables->peakOrder) {
    const Cand &c = cands[op][k];
    double mem = c.stateBytes + c.actBytes;
    if (copies[op] == 0 || mem >= cur[op])
      continue;
    if (cur[op] == inf) {
      --missing;
      sum += copies[op] * mem;
    } else {
      sum += copies[op] * (mem - cur[op]);
    }
    cur[op] = mem;
    if (missing == 0)
      smallestMemory = std::min(smallestMemory, sum + c.peak);
  }
  if (n == 0 || tables->peakOrder.empty())
    smallestMemory = 0;
}

Expected<Raw> Instance::Impl::costRaw(unsigned i, Operator &op,
                                      const Partition &part) {
  applyPartition(op, part);
  Expected<OperatorCost> c = costOperator(op, config.mesh, cluster, eff);
  if (!c)
    return c.takeError();
  Raw raw;
  raw.part = part;
  raw.cost = *c;
  raw.fwdComm = c->forwardComm;
  if ((op.kind == OpKind::MatMul || op.kind == OpKind::Embedding) &&
      outputHasEdges[i]) {
    raw.fwdComm = 0; // the consuming edge reduces the partial sums
    // ... so they are the edge's communication, not the operator's (a
    // temporal op has no forward collective; its transfers stay).
    if (!op.temporal)
      erase_if(raw.cost.communication, [](const Communication &m) {
        return m.phase == Phase::Forward;
      });
  }
  // Likewise in B: the partial input gradient of a contraction split on a
  // loop its input does not index (column-parallel dX) is reduced by the
  // feeding edge into the producer's layout: an all-reduce when that is
  // replicated, a reduce-scatter when it is split over the axis (Megatron's
  // sequence parallelism, Korthikanti et al. 2023, Sec. 4.2.2).
  // The axes are the operand's kPartialGradient axes, the layout the edge
  // reduces from (edgeSeconds).
  for (auto [j, o] : llvm::enumerate(op.operands)) {
    if (!inputHasEdges[i][j])
      continue;
    LayoutCode code = getOperandLayout(op, unsigned(j), part,
                                       unsigned(config.mesh.axes.size()));
    std::vector<unsigned> axes;
    for (unsigned axis = 0; axis < code.size(); ++axis)
      if (code[axis] == kPartialGradient)
        axes.push_back(axis);
    if (!axes.empty()) {
      raw.cost.backwardComm -= getMultiAxisCollectiveTime(
          Collective::AllReduce,
          getLocalElements(op, o, config.mesh) * double(o.elementBytes), axes,
          config.mesh, cluster);
      raw.cost.backwardComm = std::max(0.0, raw.cost.backwardComm);
      erase_if(raw.cost.communication, [&](const Communication &m) {
        return m.phase == Phase::InputGrad && m.operand == int(j);
      });
    }
  }
  for (const GradientSync &g : getGradientSyncs(op, config.mesh, 0u)) {
    Raw::Sync s;
    for (unsigned axis : g.axes)
      s.ranks *= config.mesh.axes[axis].size;
    // Parameters per device. For the temporal primitive `g.bytes` is one
    // (N/q, K/q) block, which is exactly what a device owns: W is cut into
    // q x q blocks, one per device of the square, and only moves around the
    // ring (no replicated W or dW, ../shared/DESIGN.md "Temporal
    // partition"); its gradient is replicated only over the axes outside
    // the square (g.axes).
    s.psi = g.bytes / 2;
    s.allReduce = getMultiAxisCollectiveTime(Collective::AllReduce, g.bytes,
                                             g.axes, config.mesh, cluster);
    s.allGather = getMultiAxisCollectiveTime(Collective::AllGather, g.bytes,
                                             g.axes, config.mesh, cluster);
    raw.syncs.push_back(s);
  }
  if (op.recomputable)
    for (const Operand &o : op.operands)
      if (o.selectiveRecomputed &&
          (op.kind == OpKind::Softmax ? o.role == OperandRole::Output
                                      : o.role == OperandRole::Input))
        raw.selectiveBytes +=
            getLocalElements(op, o, config.mesh) * double(o.elementBytes);
  for (const Operand &o : op.operands)
    if (o.role == OperandRole::Input) {
      raw.firstInputBytes =
          getLocalElements(op, o, config.mesh) * double(o.elementBytes);
      break;
    }
  unsigned numAxes = unsigned(config.mesh.axes.size());
  raw.layouts.assign(op.operands.size(), -1);
  for (unsigned j = 0; j < op.operands.size(); ++j)
    if (op.operands[j].role != OperandRole::Parameter)
      raw.layouts[j] = intern(getOperandLayout(op, j, part, numAxes));
  return raw;
}

/// Whether `op` re-runs its forward before its backward under `r`: every
/// (layer) operator under full recomputation; under selective
/// recomputation the attention core (QK^T, softmax) and the operators that
/// read what it regenerates (attention over V; Korthikanti et al., MLSys
/// 2023, Sec. 5).
static bool reruns(const Operator &op, Recompute r) {
  if (r == Recompute::Full)
    return true;
  if (r != Recompute::Selective)
    return false;
  return op.attentionCore || any_of(op.operands, [](const Operand &o) {
           return o.role == OperandRole::Input && o.selectiveRecomputed;
         });
}

ModelStateBytes Instance::Impl::getSyncTerms(const Raw &raw, double &sync,
                                             double &opt) const {
  ModelStateBytes states;
  for (const Raw::Sync &s : raw.syncs) {
    ModelStateBytes st = getModelStateBytes(s.psi, s.ranks, config.zeroStage);
    states.parameters += st.parameters;
    states.gradients += st.gradients;
    states.optimizer += st.optimizer;
    sync += s.allReduce + (config.zeroStage == 3 ? s.allGather : 0);
    double updated = config.zeroStage >= 1 ? s.psi / double(s.ranks) : s.psi;
    opt += updated * kAdamBytesPerParam /
           (cluster.device.hbmBandwidth * eff.hbmEfficiency);
  }
  return states;
}

std::optional<std::pair<unsigned, double>>
Instance::Impl::getStageSend() const {
  int64_t p = config.getStages();
  std::optional<unsigned> carry = getCarryOp(problem);
  if (p < 2 || !carry)
    return std::nullopt;
  const Operator &op = problem.ops[*carry];
  for (const Edge &e : problem.edges)
    if (e.nextLayer) {
      const Operand &o = op.operands[e.producerOperand];
      double bytes = double(o.elementBytes);
      for (unsigned d : o.dims)
        bytes *= double(op.loops[d].extent);
      return std::make_pair(*carry,
                            bytes / double(config.mesh.getNumDevices() / p));
    }
  return std::nullopt;
}

Cand Instance::Impl::derive(unsigned i, const Raw &raw) const {
  const OperatorCost &c = raw.cost;
  Cand cand;
  cand.raw = &raw;
  double t = c.forward + c.backwardInput + c.backwardWeight + raw.fwdComm +
             c.backwardComm;
  const Operator &op = problem.ops[i];
  bool layer = problem.sections[i] == Section::Layer;
  bool recompute = layer && reruns(op, config.recompute);
  cand.ring = c.ring;
  cand.collectives = raw.fwdComm + c.backwardComm;
  if (recompute) {
    t += c.forward + raw.fwdComm;
    cand.ring += c.forwardRing;
    cand.collectives += raw.fwdComm;
  }
  double sync = 0, opt = 0;
  ModelStateBytes modelStates = getSyncTerms(raw, sync, opt);
  double exposed =
      config.overlapGradSync
          ? std::max(0.0, sync - (c.backwardInput + c.backwardWeight))
          : sync;
  double w = weight(i);
  // The first stage's micro-batches in flight, the most of any stage
  // (cost::getInFlight: min(p, m) for 1F1B; interleaved 1F1B's first stage
  // holds 1 + (p - 1) / (p v) times as many, Korthikanti et al., MLSys
  // 2023, Sec. 4.2.3; GPipe all m).
  double inFlight = cost::getInFlight(config.getSchedule(), 0);
  cand.pipe = w * slots * t;
  cand.sync = w * exposed;
  cand.opt = w * opt;
  cand.time = cand.pipe + cand.sync + cand.opt;
  double states = modelStates.getTotal();
  cand.stateBytes = w * states;
  // (actPerMicroBatch: the same stashes for one micro-batch in flight.)
  cand.actBytes = w * inFlight * c.stashBytes;
  cand.actPerMicroBatch = w * c.stashBytes;
  double layers = double(std::max<int64_t>(1, problem.layers));
  if (recompute && config.recompute == Recompute::Full) {
    double checkpoint = isCheckpoint[i] ? raw.firstInputBytes : 0;
    cand.actBytes = w * inFlight * checkpoint + c.stashBytes / layers;
    cand.actPerMicroBatch = w * checkpoint;
  } else if (layer && config.recompute == Recompute::Selective) {
    // Selective: the core's score-sized tensors are regenerated (one
    // layer's at a time), also those its consumers read (the context's
    // probabilities); the rest stashed.
    double dropped = std::min(raw.selectiveBytes, c.stashBytes);
    cand.actBytes = w * inFlight * (c.stashBytes - dropped) + dropped / layers;
    cand.actPerMicroBatch = w * (c.stashBytes - dropped);
  }
  cand.peak = c.transientBytes;
  cand.seconds = t;
  cand.bytes = states + c.stashBytes;
  return cand;
}

static SmallVector<AxisUse, 4> getAxisUses(const LayoutCode &code,
                                           unsigned numAxes, unsigned rank,
                                           bool dropPartial, bool gradient);
static double getLocalBytes(int64_t elementBytes, ArrayRef<int64_t> extents,
                            ArrayRef<AxisUse> u, const Mesh &mesh);

/// `gradient`: the layout of an input's gradient (kPartialGradient axes
/// hold partial sums); otherwise those axes are replicated.
double Instance::Impl::edgeSeconds(unsigned consumer, unsigned operand,
                                   int from, int to) {
  if (from == kExternal)
    return 0;
  unsigned id = getRelayoutMatrix(consumer, operand);
  Tables::RelayoutMatrix &m = tables->relayouts[id];
  unsigned f = getLocalLayout(m, consumer, operand, from),
           t = getLocalLayout(m, consumer, operand, to);
  return matrixSeconds(id, consumer, operand, from, f, to, t);
}

unsigned Instance::Impl::getRelayoutMatrix(unsigned consumer,
                                           unsigned operand) {
  int &tid = tables->edgeTensorIds[consumer][operand];
  if (tid < 0) {
    uint64_t edge = uint64_t(consumer) << 8 | operand;
    const Operator &op = problem.ops[consumer];
    const Operand &o = op.operands[operand];
    std::vector<int64_t> shape;
    for (unsigned d : o.dims)
      shape.push_back(op.loops[d].extent);
    unsigned id;
    if (tables->viewEdges.count(edge)) {
      // Through views: the cost depends on the edge's dim map too.
      id = tables->numTensorIds++;
    } else {
      auto [it, ins] = tables->tensorIds.try_emplace(
          {shape, o.elementBytes, o.needsGrad}, tables->numTensorIds);
      if (ins)
        ++tables->numTensorIds;
      id = it->second;
    }
    tid = int(id);
  }
  if (unsigned(tid) >= tables->relayouts.size())
    tables->relayouts.resize(unsigned(tid) + 1);
  Tables::RelayoutMatrix &m = tables->relayouts[tid];
  if (m.rows.empty()) {
    m.viaViews = getViewEdge(consumer, operand) != nullptr;
    m.needsGrad = problem.ops[consumer].operands[operand].needsGrad;
  }
  return unsigned(tid);
}

double Instance::Impl::matrixSeconds(unsigned id, unsigned consumer,
                                     unsigned operand, int from, unsigned f,
                                     int to, unsigned t) {
  Tables::RelayoutMatrix &m = tables->relayouts[id];
  // relayoutEdge's sum from the layouts' uses (the same figures): two
  // lookups of the mesh's coefficients, cheaper than keeping the sums
  // (GPT-3 175B on 1024 GPUs: 7.7 -> 6.5 s without the matrix of sums).
  const Tables::RelayoutMatrix::LayoutUses &a = m.uses[f], &b = m.uses[t];
  if (!m.viaViews && a.from >= 0 && b.to >= 0 && a.fromBytes > 0 &&
      (!m.needsGrad || (b.gradient >= 0 && a.to >= 0 && b.gradientBytes > 0))) {
    double seconds = coefSeconds(unsigned(a.from), unsigned(b.to), a.fromBytes);
    if (m.needsGrad)
      seconds +=
          coefSeconds(unsigned(b.gradient), unsigned(a.to), b.gradientBytes);
    return seconds;
  }
  std::vector<double> &row = m.rows[f];
  if (row.size() <= t)
    row.resize(std::max(size_t(t) + 1, 2 * row.size()),
               std::numeric_limits<double>::quiet_NaN());
  double &seconds = row[t];
  if (std::isnan(seconds))
    seconds = relayoutEdge(consumer, operand, from, to);
  return seconds;
}

unsigned Instance::Impl::getLocalLayout(Tables::RelayoutMatrix &m,
                                        unsigned consumer, unsigned operand,
                                        int layout) {
  unsigned local = m.getLocal(layout);
  if (m.uses.size() > local)
    return local;
  Tables::RelayoutMatrix::LayoutUses &u = m.uses.emplace_back();
  if (m.viaViews)
    return local;
  const Operator &op = problem.ops[consumer];
  const Operand &o = op.operands[operand];
  unsigned rank = unsigned(o.dims.size());
  unsigned numAxes = unsigned(config.mesh.axes.size());
  SmallVector<int64_t, 4> extents;
  for (unsigned d : o.dims)
    extents.push_back(op.loops[d].extent);
  const LayoutCode &code = layouts[layout];
  SmallVector<AxisUse, 4> from = getAxisUses(code, numAxes, rank, false, false),
                          to = getAxisUses(code, numAxes, rank, true, false),
                          gradient =
                              getAxisUses(code, numAxes, rank, true, true);
  u.from = getUsesId(from);
  u.to = getUsesId(to);
  u.gradient = getUsesId(gradient);
  u.fromBytes = getLocalBytes(o.elementBytes, extents, from, config.mesh);
  u.gradientBytes =
      getLocalBytes(o.elementBytes, extents, gradient, config.mesh);
  return local;
}

/// Per mesh axis, how a tensor of `rank` dims uses it under `code`: split on
/// a dim, partial sums (kPartial unless `dropPartial`; kPartialGradient in a
/// gradient's layout), or replicated.
static SmallVector<AxisUse, 4> getAxisUses(const LayoutCode &code,
                                           unsigned numAxes, unsigned rank,
                                           bool dropPartial, bool gradient) {
  SmallVector<AxisUse, 4> u(numAxes);
  for (unsigned a = 0; a < numAxes && a < code.size(); ++a) {
    if (code[a] >= 0 && unsigned(code[a]) < rank)
      u[a] = {AxisUse::State::Split, unsigned(code[a])};
    else if ((code[a] == kPartial && !dropPartial) ||
             (code[a] == kPartialGradient && gradient))
      u[a] = {AxisUse::State::Partial, 0};
  }
  return u;
}

/// Bytes per device of a tensor of `extents` (one per dim) laid out as `u`.
static double getLocalBytes(int64_t elementBytes, ArrayRef<int64_t> extents,
                            ArrayRef<AxisUse> u, const Mesh &mesh) {
  double local = double(elementBytes);
  for (unsigned d = 0; d < extents.size(); ++d) {
    int64_t split = 1;
    for (unsigned a = 0; a < u.size(); ++a)
      if (u[a].state == AxisUse::State::Split && u[a].dim == d)
        split *= mesh.axes[a].size;
    local *= double((extents[d] + split - 1) / split);
  }
  return local;
}

double Instance::Impl::relayoutSeconds(ArrayRef<AxisUse> from,
                                       ArrayRef<AxisUse> to, double localBytes,
                                       RelayoutCost *cost) const {
  auto direct = [&](double bytes, RelayoutCost *c) {
    return getRelayoutSeconds(from, to, bytes, config.mesh, placements, cluster,
                              c);
  };
  if (cost || localBytes <= 0)
    return direct(localBytes, cost);
  int f = getUsesId(from), t = getUsesId(to);
  if (f < 0 || t < 0 || from.size() != to.size())
    return direct(localBytes, nullptr);
  return coefSeconds(unsigned(f), unsigned(t), localBytes);
}

int Instance::Impl::getUsesId(ArrayRef<AxisUse> uses) const {
  if (uses.size() > 6)
    return -1;
  // Per axis 5 bits: state, dim.
  uint64_t key = uses.size();
  for (const AxisUse &u : uses) {
    if (u.dim >= 8)
      return -1;
    key = key << 5 | uint64_t(u.state) << 3 | u.dim;
  }
  RelayoutCoefficients &c = *tables->relayoutCoefs;
  auto [it, inserted] = c.ids.try_emplace(key, unsigned(c.uses.size()));
  if (inserted)
    c.uses.emplace_back(uses.begin(), uses.end());
  return int(it->second);
}

double Instance::Impl::coefSeconds(unsigned from, unsigned to,
                                   double localBytes) const {
  RelayoutCoefficients &c = *tables->relayoutCoefs;
  if (c.rows.size() <= from)
    c.rows.resize(from + 1);
  std::vector<std::pair<double, double>> &row = c.rows[from];
  if (row.size() <= to)
    row.resize(std::max({size_t(to) + 1, c.uses.size(), 2 * row.size()}),
               {std::numeric_limits<double>::quiet_NaN(), 0.0});
  std::pair<double, double> &coef = row[to];
  if (std::isnan(coef.first)) {
    // Two evaluations far apart: the per-byte slope to full precision,
    // then the intercept (latencies).
    ensurePlacements();
    auto direct = [&](double bytes) {
      return getRelayoutSeconds(c.uses[from], c.uses[to], bytes, config.mesh,
                                placements, cluster, nullptr);
    };
    const double lo = 1 << 20, hi = double(int64_t(1) << 40);
    double sLo = direct(lo), sHi = direct(hi);
    double slope = (sHi - sLo) / (hi - lo);
    coef = {sLo - slope * lo, slope};
  }
  return coef.first + coef.second * localBytes;
}

void Instance::Impl::ensurePlacements() const {
  if (placements.size() != config.mesh.axes.size())
    for (unsigned a = 0; a < config.mesh.axes.size(); ++a)
      placements.push_back(config.mesh.getPlacement(a, cluster.devicesPerNode));
}

SmallVector<int, 4> Instance::Impl::getViewLosses(const Edge &edge,
                                                  int from) const {
  const EdgeViews &v = *edge.views;
  const Operator &prod = problem.ops[edge.producer];
  const Operand &po = prod.operands[edge.producerOperand];
  const LayoutCode &src = layouts[from];
  unsigned numAxes = unsigned(config.mesh.axes.size());
  unsigned rank = unsigned(po.dims.size());
  SmallVector<int64_t, 4> group(rank, 1);
  for (unsigned a = 0; a < numAxes && a < src.size(); ++a)
    if (src[a] >= 0 && unsigned(src[a]) < rank)
      group[src[a]] *= config.mesh.axes[a].size;
  SmallVector<int, 4> lostAt(rank, -1);
  for (unsigned d = 0; d < rank; ++d) {
    if (group[d] == 1)
      continue;
    lostAt[d] = v.lostAt[d];
    auto it = llvm::find(v.producerDimOf, int(d));
    if (it == v.producerDimOf.end()) {
      if (lostAt[d] < 0)
        lostAt[d] = std::max(0, int(v.count) - 1);
      continue;
    }
    // A size along the way the group does not divide drops the split
    // there (Partition.cpp, planLayout).
    const std::vector<int64_t> &sizes = v.sizes[it - v.producerDimOf.begin()];
    for (unsigned k = 0; k < sizes.size(); ++k)
      if (sizes[k] % group[d] != 0) {
        if (lostAt[d] < 0 || int(k) < lostAt[d])
          lostAt[d] = int(k);
        break;
      }
  }
  SmallVector<int, 4> out(numAxes, -1);
  for (unsigned a = 0; a < numAxes && a < src.size(); ++a)
    if (src[a] >= 0 && unsigned(src[a]) < rank)
      out[a] = lostAt[src[a]];
  return out;
}

double Instance::Impl::getViewGradientShare(const Edge &edge) const {
  const Operator &prod = problem.ops[edge.producer];
  const Operand &po = prod.operands[edge.producerOperand];
  const Operator &cons = problem.ops[edge.consumer];
  const Operand &co = cons.operands[edge.consumerOperand];
  if (!edge.views || !edge.views->count)
    return 1;
  double produced = 1, read = 1;
  for (unsigned d : po.dims)
    produced *= double(prod.loops[d].extent);
  for (unsigned d : co.dims)
    read *= double(cons.loops[d].extent);
  return read > produced ? produced / read : 1;
}

int Instance::Impl::getGradientGatherView(const Edge &edge, int to,
                                          unsigned axis) const {
  const EdgeViews &v = *edge.views;
  int last = int(v.count) - 1;
  const Operand &co = problem.ops[edge.consumer].operands[edge.consumerOperand];
  unsigned numAxes = unsigned(config.mesh.axes.size());
  SmallVector<AxisUse, 4> grad =
      getAxisUses(layouts[to], numAxes, unsigned(co.dims.size()), true, true);
  if (v.gradientLostAt.empty() || axis >= grad.size() ||
      grad[axis].state != AxisUse::State::Split ||
      grad[axis].dim >= v.gradientLostAt.size())
    return last;
  unsigned c = grad[axis].dim;
  int64_t group = 1;
  for (unsigned a = 0; a < numAxes; ++a)
    if (grad[a].state == AxisUse::State::Split && grad[a].dim == c)
      group *= config.mesh.axes[a].size;
  // Walking back from the consumer: a view whose source size along the
  // dim the group does not divide drops the split too.
  const Operator &prod = problem.ops[edge.producer];
  const Operand &po = prod.operands[edge.producerOperand];
  int lost = v.gradientLostAt[c];
  for (int k = last; k > lost; --k) {
    int64_t sourceSize = 0;
    if (k > 0)
      sourceSize = v.sizes[c][k - 1];
    else if (int p = v.producerDimOf[c]; p >= 0 && unsigned(p) < po.dims.size())
      sourceSize = prod.loops[po.dims[p]].extent;
    if (sourceSize % group != 0)
      return k;
  }
  return lost;
}

double Instance::Impl::relayoutViews(const Edge &edge, int from, int to,
                                     RelayoutCost *forward,
                                     RelayoutCost *backward,
                                     RelayoutCost *beforeViews) const {
  const EdgeViews &v = *edge.views;
  const Operator &prod = problem.ops[edge.producer];
  const Operand &po = prod.operands[edge.producerOperand];
  const Operator &cons = problem.ops[edge.consumer];
  const Operand &co = cons.operands[edge.consumerOperand];
  const LayoutCode &src = layouts[from], &dst = layouts[to];
  unsigned numAxes = unsigned(config.mesh.axes.size());
  // The operands' extents; without views they are one tensor, whose
  // extents are the producer's (a grouped-query key read by the
  // query-head loop has the key/value heads).
  SmallVector<int64_t, 4> prodExtents, consExtents;
  for (unsigned d : po.dims)
    prodExtents.push_back(prod.loops[d].extent);
  for (auto [c, d] : llvm::enumerate(co.dims))
    consExtents.push_back(v.count == 0 && v.producerDimOf[c] >= 0
                              ? prodExtents[v.producerDimOf[c]]
                              : cons.loops[d].extent);
  auto prodBytes = [&](ArrayRef<AxisUse> u) {
    return getLocalBytes(po.elementBytes, prodExtents, u, config.mesh);
  };
  auto consBytes = [&](ArrayRef<AxisUse> u) {
    return getLocalBytes(co.elementBytes, consExtents, u, config.mesh);
  };
  SmallVector<int, 4> losses = getViewLosses(edge, from);
  // The producer's layout, what the views keep of it (in the producer's
  // dims and in the consumer's), and the consumer's.
  SmallVector<AxisUse, 4> before(numAxes), kept(numAxes), after(numAxes);
  unsigned prodRank = unsigned(po.dims.size()),
           consRank = unsigned(co.dims.size());
  for (unsigned a = 0; a < numAxes && a < src.size(); ++a) {
    if (src[a] >= 0 && unsigned(src[a]) < prodRank) {
      before[a] = {AxisUse::State::Split, unsigned(src[a])};
      auto it = llvm::find(v.producerDimOf, int(src[a]));
      if (losses[a] < 0 && it != v.producerDimOf.end()) {
        kept[a] = before[a];
        after[a] = {AxisUse::State::Split,
                    unsigned(it - v.producerDimOf.begin())};
      }
    } else if (src[a] == kPartial) {
      before[a] = {AxisUse::State::Partial, 0};
      // Without views the consumer's re-layout reduces them.
      if (v.count == 0)
        after[a] = before[a];
    }
  }
  SmallVector<AxisUse, 4> back(after);
  for (AxisUse &u : back)
    if (u.state == AxisUse::State::Partial)
      u = AxisUse();
  SmallVector<AxisUse, 4> want =
                              getAxisUses(dst, numAxes, consRank, true, false),
                          grad =
                              getAxisUses(dst, numAxes, consRank, true, true);
  // (getRelayoutSeconds appends its steps to the cost it is given.)
  double seconds = 0;
  if (v.count && v.chargesGather)
    seconds += relayoutSeconds(before, kept, prodBytes(before),
                               beforeViews ? beforeViews : forward);
  seconds += relayoutSeconds(after, want, consBytes(after), forward);
  // The gradient: from the consumer's layout (its partial sums reduced)
  // back to what the views keep; through the views and into the
  // producer's split nothing moves (only slices). Of a concatenation's
  // gradient only the producer's part moves.
  if (co.needsGrad)
    seconds += relayoutSeconds(
        grad, back, consBytes(grad) * getViewGradientShare(edge), backward);
  return seconds;
}

double Instance::Impl::relayoutEdge(unsigned consumer, unsigned operand,
                                    int from, int to, RelayoutCost *forward,
                                    RelayoutCost *backward,
                                    RelayoutCost *beforeViews) const {
  ensurePlacements();
  if (const Edge *edge = getViewEdge(consumer, operand))
    return relayoutViews(*edge, from, to, forward, backward, beforeViews);
  const Operator &op = problem.ops[consumer];
  const Operand &o = op.operands[operand];
  const LayoutCode &src = layouts[from], &dst = layouts[to];
  unsigned rank = unsigned(o.dims.size());
  unsigned numAxes = unsigned(config.mesh.axes.size());
  auto uses = [&](const LayoutCode &code, bool dropPartial, bool gradient) {
    return getAxisUses(code, numAxes, rank, dropPartial, gradient);
  };
  SmallVector<int64_t, 4> extents;
  for (unsigned d : o.dims)
    extents.push_back(op.loops[d].extent);
  auto localBytes = [&](ArrayRef<AxisUse> u) {
    return getLocalBytes(o.elementBytes, extents, u, config.mesh);
  };
  SmallVector<AxisUse, 4> f = uses(src, false, false),
                          t = uses(dst, true, false);
  double seconds = relayoutSeconds(f, t, localBytes(f), forward);
  if (o.needsGrad) {
    SmallVector<AxisUse, 4> grad = uses(dst, true, true),
                            back = uses(src, true, false);
    seconds += relayoutSeconds(grad, back, localBytes(grad), backward);
  }
  return seconds;
}

std::pair<RelayoutCost, RelayoutCost>
Instance::Impl::edgeRelayouts(unsigned consumer, unsigned operand, int from,
                              int to, RelayoutCost *beforeViews) const {
  std::pair<RelayoutCost, RelayoutCost> result;
  if (from != kExternal)
    relayoutEdge(consumer, operand, from, to, &result.first, &result.second,
                 beforeViews);
  return result;
}

static bool isReduction(Collective kind) {
  return kind == Collective::AllReduce || kind == Collective::ReduceScatter;
}

std::pair<double, double> Instance::Impl::edgeParts(unsigned consumer,
                                                    unsigned operand, int from,
                                                    int to) const {
  auto [f, b] = edgeRelayouts(consumer, operand, from, to);
  double seconds = 0, reductions = 0;
  for (const RelayoutCost *c : {&f, &b}) {
    seconds += c->seconds;
    for (const RelayoutStep &step : c->steps)
      if (isReduction(step.kind))
        reductions += step.seconds;
  }
  return {seconds, reductions};
}

Error Instance::Impl::costPlan(ArrayRef<Partition> partitions, CostedOps &out) {
  const FlatGraph &g = getFlat();
  if (partitions.size() != g.ops.size())
    return err("the plan has " + Twine(partitions.size()) +
               " partitions for " + Twine(g.ops.size()) + " operators");
  out.raws.clear();
  out.raws.resize(problem.ops.size());
  out.chosen.clear();
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    unsigned op = g.original[i];
    const Raw *raw = nullptr;
    for (const auto &r : out.raws[op])
      if (r->part == partitions[i])
        raw = r.get();
    if (!raw) {
      Operator work = problem.ops[op];
      Expected<Raw> r = costRaw(op, work, partitions[i]);
      if (!r)
        return r.takeError();
      out.raws[op].push_back(std::make_unique<Raw>(std::move(*r)));
      raw = out.raws[op].back().get();
    }
    out.chosen.push_back(derive(op, *raw));
  }
  return Error::success();
}

Expected<PlanCost> Instance::evaluate(ArrayRef<Partition> partitions) {
  CostedOps ops;
  if (Error e = impl->costPlan(partitions, ops))
    return std::move(e);
  return impl->composePlan(ops);
}

Expected<PlanCost> Instance::Impl::composePlan(const CostedOps &ops) {
  Impl &I = *this;
  const FlatGraph &g = I.getFlat();
  const std::vector<Cand> &chosen = ops.chosen;
  PlanCost pc;
  pc.opSeconds.assign(g.ops.size(), 0);
  pc.opBytes.assign(g.ops.size(), 0);
  pc.opStateBytes.assign(g.ops.size(), 0);
  pc.opActivationBytes.assign(g.ops.size(), 0);
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Cand &c = chosen[i];
    pc.pipeline += c.pipe;
    pc.exposedSync += c.sync;
    pc.optimizer += c.opt;
    pc.stateBytes += c.stateBytes;
    pc.activationBytes += c.actBytes;
    pc.activationBytesPerMicroBatch += c.actPerMicroBatch;
    pc.transientBytes = std::max(pc.transientBytes, c.peak);
    pc.opSeconds[i] = c.seconds;
    pc.opBytes[i] = c.bytes;
    pc.opStateBytes[i] = c.stateBytes;
    pc.opActivationBytes[i] = c.actBytes;
    if (c.raw && c.raw->cost.moe)
      pc.moe.push_back({i, *c.raw->cost.moe});
    double share = c.seconds > 0 ? c.pipe / c.seconds : 0;
    pc.ring += c.ring.scaled(share);
    pc.collectives += share * c.collectives;
    pc.compute += c.pipe - share * (c.ring.getTotal() + c.collectives);
  }
  for (const Edge &e : g.edges) {
    unsigned cons = g.original[e.consumer];
    int from = chosen[e.producer].raw->layouts[e.producerOperand];
    int to = chosen[e.consumer].raw->layouts[e.consumerOperand];
    double t = I.edgeCost(cons, e.consumerOperand, from, to);
    pc.pipeline += t;
    pc.relayout += t;
    double tabled = I.edgeSeconds(cons, e.consumerOperand, from, to);
    pc.opSeconds[e.consumer] += tabled;
    auto [seconds, reductions] = I.edgeParts(cons, e.consumerOperand, from, to);
    // The DP's tables share cache entries between edges carrying the same
    // tensor; a cached cost that differs from this edge's own is a bug
    // (a key collision), not a plan.
    if (std::abs(seconds - tabled) > 1e-12 * std::max(1.0, seconds))
      return err("internal error: re-layout tables disagree on an edge into '" +
                 g.ops[e.consumer].name + "' (" + std::to_string(tabled) +
                 " s vs " + std::to_string(seconds) + " s)");
    if (seconds > 0)
      pc.relayoutReductions += t * reductions / seconds;
  }
  pc.pipeline += I.constantTime;
  int64_t m = I.config.microBatches;
  double idle = cost::getBubbleSlots(I.config.getSchedule());
  pc.bubble = pc.pipeline * idle / (double(m) + idle);
  pc.stepTime = pc.pipeline + pc.exposedSync + pc.optimizer;
  pc.feasible = pc.getMemory() <= I.limit;
  return pc;
}

Expected<StepBreakdown> Instance::getBreakdown(ArrayRef<Partition> partitions) {
  Impl &I = *impl;
  CostedOps ops;
  if (Error e = I.costPlan(partitions, ops))
    return std::move(e);
  Expected<PlanCost> pc = I.composePlan(ops);
  if (!pc)
    return pc.takeError();
  const FlatGraph &g = I.getFlat();
  const Config &config = I.config;
  int64_t p = config.getStages(), m = config.microBatches;
  StepBreakdown b;
  b.numDevices = config.mesh.getNumDevices();
  b.microBatches = m;
  b.pipelineStages = p;
  b.interleave = config.interleave;
  b.boundStage = true;
  std::map<std::string, PhaseTimes> kinds;
  double modelFlops = 0, recomputeFlops = 0;
  // Per micro-batch, unweighted: each flattened operator's own seconds plus
  // the re-layouts of its inputs.
  std::vector<PhaseTimes> perOp(g.ops.size());
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Cand &c = ops.chosen[i];
    const OperatorCost &oc = c.raw->cost;
    PhaseTimes &t = perOp[i];
    t.forward = oc.forward;
    unsigned op = g.original[i];
    bool recompute = I.problem.sections[op] == Section::Layer &&
                     reruns(I.problem.ops[op], config.recompute);
    t.recompute = recompute ? oc.forward : 0;
    t.backwardInput = oc.backwardInput;
    t.backwardWeight = oc.backwardWeight;
    t.communication = c.seconds - t.forward - t.recompute - t.backwardInput -
                      t.backwardWeight;
    if (std::abs(t.communication) <= 1e-12 * c.seconds)
      t.communication = 0; // rounding of a difference, not a time
    double w = I.weight(op);
    double sync = 0, opt = 0;
    ModelStateBytes states = I.getSyncTerms(*c.raw, sync, opt);
    b.peakMemory.parameters += w * states.parameters;
    b.peakMemory.gradients += w * states.gradients;
    b.peakMemory.optimizer += w * states.optimizer;
    b.gradSync += w * sync;
    // Whole mesh: the local FLOPs times the devices of one stage.
    double share = double(b.numDevices) / double(p);
    modelFlops +=
        (oc.forwardFlops + oc.backwardInputFlops + oc.backwardWeightFlops) *
        share;
    if (recompute)
      recomputeFlops += oc.forwardFlops * share;
  }
  for (const Edge &e : g.edges) {
    unsigned cons = g.original[e.consumer];
    int from = ops.chosen[e.producer].raw->layouts[e.producerOperand];
    int to = ops.chosen[e.consumer].raw->layouts[e.consumerOperand];
    perOp[e.consumer].communication +=
        I.edgeSeconds(cons, e.consumerOperand, from, to);
  }
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    unsigned op = g.original[i];
    double w = I.weight(op);
    const PhaseTimes &t = perOp[i];
    b.criticalStage.forward += w * t.forward;
    b.criticalStage.recompute += w * t.recompute;
    b.criticalStage.backwardInput += w * t.backwardInput;
    b.criticalStage.backwardWeight += w * t.backwardWeight;
    b.criticalStage.communication += w * t.communication;
    PhaseTimes step = t;
    step.forward *= double(m);
    step.recompute *= double(m);
    step.backwardInput *= double(m);
    step.backwardWeight *= double(m);
    step.communication *= double(m);
    kinds[I.problem.ops[op].layerKind] += step;
  }
  double slots = config.getSlots();
  b.pipelineSend = I.constantTime / slots;
  b.microBatchTime = b.criticalStage.getTotal() + b.pipelineSend;
  b.pipelineTime = pc->pipeline;
  b.bubble = pc->bubble;
  b.gradSyncExposed = pc->exposedSync;
  b.optimizer = pc->optimizer;
  b.stepTime = pc->stepTime;
  b.modelFlops = modelFlops * double(m);
  b.hardwareFlops = (modelFlops + recomputeFlops) * double(m);
  b.modelFlopsPerDevice = b.modelFlops / b.stepTime / double(b.numDevices);
  double peak = I.cluster.device.getPeak(I.eff.dtype);
  if (peak <= 0)
    peak = I.cluster.device.fp32;
  b.mfu = b.modelFlopsPerDevice / peak;
  b.peakMemory.activations = pc->activationBytes;
  b.peakMemory.transient = pc->transientBytes;
  b.deviceCapacity = I.limit;
  b.fitsMemory = pc->feasible;
  for (auto &[name, t] : kinds)
    b.perLayerKind.emplace_back(name, t);
  // The breakdown is evaluate's cost, not a second composition.
  double states =
      b.peakMemory.parameters + b.peakMemory.gradients + b.peakMemory.optimizer;
  if (std::abs(b.microBatchTime * slots - b.pipelineTime) >
          1e-9 * b.pipelineTime ||
      std::abs(states - pc->stateBytes) > 1e-9 * std::max(1.0, states))
    return err("internal error: the step breakdown does not add up to the "
               "plan's cost (pipeline " +
               std::to_string(b.microBatchTime * slots) + " s vs " +
               std::to_string(b.pipelineTime) + " s, model states " +
               std::to_string(states) + " B vs " +
               std::to_string(pc->stateBytes) + " B)");
  return b;
}

Expected<std::vector<PlannedCommunication>>
Instance::getCommunication(ArrayRef<Partition> partitions) {
  Impl &I = *impl;
  const FlatGraph &g = I.getFlat();
  if (partitions.size() != g.ops.size())
    return err("the plan has " + Twine(partitions.size()) + " partitions for " +
               Twine(g.ops.size()) + " operators");
  std::vector<PlannedCommunication> out;
  std::vector<Raw> raws;
  raws.reserve(g.ops.size());
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    unsigned op = g.original[i];
    Operator work = I.problem.ops[op];
    Expected<Raw> r = I.costRaw(op, work, partitions[i]);
    if (!r)
      return r.takeError();
    raws.push_back(std::move(*r));
    const Raw &raw = raws.back();
    // As costRaw charges them (the reductions edges take over are the
    // edges').
    for (const Communication &c : raw.cost.communication)
      out.push_back({c, i, "operator"});
    for (const GradientSync &s : getGradientSyncs(work, I.config.mesh, 0u)) {
      if (s.axes.empty())
        continue;
      // As derive() charges it: the gradient's all-reduce, and under ZeRO
      // stage 3 the parameter's all-gather.
      Communication c;
      c.phase = Phase::WeightGrad;
      c.perMicroBatch = false;
      c.axes = s.axes;
      c.bytes = s.bytes;
      for (const Operand &o : work.operands)
        if (o.role == OperandRole::Parameter && o.name == s.parameter)
          c.elementBytes = o.elementBytes;
      c.what = "gradient of " + s.parameter;
      out.push_back({c, i, "gradient sync"});
      if (I.config.zeroStage == 3) {
        c.kind = Collective::AllGather;
        c.what = "ZeRO-3 gather of " + s.parameter;
        out.push_back({std::move(c), i, "gradient sync"});
      }
    }
  }
  for (const Edge &e : g.edges) {
    unsigned cons = g.original[e.consumer];
    int from = raws[e.producer].layouts[e.producerOperand];
    int to = raws[e.consumer].layouts[e.consumerOperand];
    RelayoutCost gather;
    auto [f, b] = I.edgeRelayouts(cons, e.consumerOperand, from, to, &gather);
    std::string what = "operand " + std::to_string(e.consumerOperand) + " of " +
                       g.ops[e.consumer].name + " (produced by " +
                       g.ops[e.producer].name + ")";
    const Edge *viewEdge = I.getViewEdge(cons, e.consumerOperand);
    SmallVector<int, 4> losses;
    if (viewEdge && from != kExternal)
      losses = I.getViewLosses(*viewEdge, from);
    int64_t width = g.ops[e.consumer].operands[e.consumerOperand].elementBytes;
    // One record per step, but consecutive all-reduces (all-to-alls) of
    // the same buffer over several axes as one over their group, as the
    // program issues it (getRelayoutCost lists one per axis).
    auto add = [&](const RelayoutStep &step, Phase phase, unsigned owner,
                   const std::string &text, int view = -1,
                   int64_t elementBytes = 0) {
      PlannedCommunication *last = out.empty() ? nullptr : &out.back();
      if (last &&
          (step.kind == Collective::AllReduce ||
           step.kind == Collective::AllToAll) &&
          last->source == "re-layout" && last->op == owner &&
          last->comm.phase == phase && last->comm.kind == step.kind &&
          last->comm.bytes == step.bytes && last->comm.what == text &&
          last->viewPosition == view) {
        last->comm.axes.push_back(step.axis);
        return;
      }
      Communication c;
      c.elementBytes = elementBytes ? elementBytes : width;
      c.phase = phase;
      c.kind = step.kind;
      c.axes = {step.axis};
      c.bytes = step.bytes;
      c.what = text;
      PlannedCommunication pc{std::move(c), owner, "re-layout"};
      pc.reader = int(e.consumer);
      if (view >= 0) {
        pc.viewOperand = int(e.consumerOperand);
        pc.viewPosition = view;
      }
      out.push_back(std::move(pc));
    };
    // Through views: the producer's output re-laid out before the views
    // (its reductions the producer's, its gathers the view's that drops
    // the split).
    int64_t producerWidth =
        g.ops[e.producer].operands[e.producerOperand].elementBytes;
    for (const RelayoutStep &step : gather.steps) {
      if (isReduction(step.kind)) {
        add(step, Phase::Forward, e.producer,
            "re-layout before the views of " + what, -1, producerWidth);
        continue;
      }
      int at = step.axis < losses.size() ? losses[step.axis] : -1;
      add(step, Phase::Forward, e.consumer,
          "re-layout before the views of " + what, std::max(0, at),
          producerWidth);
    }
    if (viewEdge && viewEdge->views->count) {
      for (const RelayoutStep &step : f.steps)
        add(step, Phase::Forward, e.consumer, "re-layout of " + what);
      // The gradient is gathered where a view's gradient cannot keep the
      // split (walking back from the consumer), else by the producer's
      // backward.
      for (const RelayoutStep &step : b.steps) {
        if (isReduction(step.kind)) {
          add(step, Phase::InputGrad, e.consumer,
              "gradient re-layout of " + what);
          continue;
        }
        int at = I.getGradientGatherView(*viewEdge, to, step.axis);
        add(step, Phase::InputGrad, at < 0 ? e.producer : e.consumer,
            "gradient re-layout of " + what, at);
      }
      continue;
    }
    for (const RelayoutStep &step : f.steps)
      add(step, Phase::Forward,
          isReduction(step.kind) ? e.producer : e.consumer,
          "re-layout of " + what);
    for (const RelayoutStep &step : b.steps)
      add(step, Phase::InputGrad,
          isReduction(step.kind) ? e.consumer : e.producer,
          "gradient re-layout of " + what);
  }
  // Pipeline stages: the carry tensor to the next stage and its gradient
  // back over the pipeline axis, once per micro-batch, as the objective
  // charges them (its constant time). One record per boundary between
  // virtual stages, under the carry op of the last layer before it, for
  // the device that sends it (the device of virtual stage b - 1 sends
  // boundary b: v of them with v model chunks, as the objective counts).
  if (std::optional<std::pair<unsigned, double>> send = I.getStageSend()) {
    int64_t total =
        I.config.getStages() * std::max<int64_t>(1, I.config.interleave);
    int64_t perStage = std::max<int64_t>(1, I.problem.layers / total);
    int64_t width = 2;
    for (const Operand &o : I.problem.ops[send->first].operands)
      if (o.role == OperandRole::Output)
        width = o.elementBytes;
    for (int64_t boundary = 1; boundary < total; ++boundary) {
      int64_t last = boundary * perStage - 1;
      std::optional<unsigned> owner;
      for (unsigned i = 0; i < g.ops.size(); ++i)
        if (g.original[i] == send->first && (!owner || g.layerOf[i] == last))
          owner = i;
      for (Phase phase : {Phase::Forward, Phase::InputGrad}) {
        Communication c;
        c.phase = phase;
        c.kind = Collective::PointToPoint;
        c.axes = {0};
        c.bytes = send->second;
        c.elementBytes = width;
        c.count = 1;
        c.what = phase == Phase::Forward
                     ? "activation to the next pipeline stage"
                     : "activation gradient to the previous pipeline stage";
        out.push_back({std::move(c), *owner, "pipeline"});
      }
    }
  }
  return out;
}

bool Instance::Impl::insert(Front &front, Point p) {
  if (timeOnly) {
    // The time-only relaxation keeps one point per state.
    if (!front.empty() && rank(front.front()) <= rank(p))
      return false;
    front.assign(1, p);
    return true;
  }
  // One pass: drops the points p dominates, and stops at one that
  // dominates p. Nothing has been dropped by then: a point p dominates
  // would be dominated by that one too, and no point of a front is.
  size_t kept = 0;
  for (size_t i = 0, e = front.size(); i < e; ++i) {
    const Point &q = front[i];
    if (q.time <= p.time && q.mem <= p.mem && q.peak <= p.peak) {
      assert(kept == i && "a front holds a dominated point");
      return false;
    }
    if (p.time <= q.time && p.mem <= q.mem && p.peak <= q.peak)
      continue;
    if (kept != i)
      front[kept] = q;
    ++kept;
  }
  front.resize(kept);
  front.push_back(p);
  if (options.maxFront && front.size() > options.maxFront) {
    // Keep the fastest and the smallest; drop the point in between whose
    // time is highest.
    llvm::sort(front, [](const Point &a, const Point &b) {
      return a.time < b.time;
    });
    front.erase(front.end() - 2);
    ++stats.droppedPoints;
  }
  return true;
}

Expected<Plan> Instance::bruteForce(double maxCombinations) {
  Impl &I = *impl;
  const FlatGraph &g = I.getFlat();
  double combos = 1;
  for (unsigned i = 0; i < g.ops.size(); ++i)
    combos *= double(I.cands[g.original[i]].size());
  if (combos > maxCombinations)
    return err("brute force: " + std::to_string(combos) +
               " combinations exceed " + std::to_string(maxCombinations));
  // Incoming edges per flat op.
  std::vector<std::vector<const Edge *>> in(g.ops.size());
  for (const Edge &e : g.edges)
    in[e.consumer].push_back(&e);
  std::vector<int> choice(g.ops.size(), 0), best;
  double bestTime = std::numeric_limits<double>::infinity();
  std::function<void(unsigned, double, double, double)> rec =
      [&](unsigned i, double t, double mem, double peak) {
        if (i == g.ops.size()) {
          I.smallestMemory = std::min(I.smallestMemory, mem + peak);
          double total = t + I.constantTime;
          if (mem + peak <= I.limit && total < bestTime) {
            bestTime = total;
            best = choice;
          }
          return;
        }
        unsigned op = g.original[i];
        for (unsigned c = 0; c < I.cands[op].size(); ++c) {
          const Cand &cand = I.cands[op][c];
          double add = cand.time;
          for (const Edge *e : in[i]) {
            const Cand &prod = I.cands[g.original[e->producer]]
                                      [choice[e->producer]];
            add += I.edgeCost(op, e->consumerOperand,
                              prod.raw->layouts[e->producerOperand],
                              cand.raw->layouts[e->consumerOperand]);
          }
          choice[i] = int(c);
          rec(i + 1, t + add, mem + cand.stateBytes + cand.actBytes,
              std::max(peak, cand.peak));
        }
      };
  rec(0, 0, 0, 0);
  if (best.empty())
    return err("no plan fits in " + std::to_string(I.limit) +
               " bytes per device");
  Plan plan;
  plan.config = I.config;
  for (unsigned i = 0; i < g.ops.size(); ++i)
    plan.partitions.push_back(I.cands[g.original[i]][best[i]].raw->part);
  Expected<PlanCost> pc = evaluate(plan.partitions);
  if (!pc)
    return pc.takeError();
  plan.cost = std::move(*pc);
  return plan;
}

//===----------------------------------------------------------------------===//
// Segmented frontier DP
//===----------------------------------------------------------------------===//

namespace {
/// One position of a segment: a problem operator, or an anchor (a tensor
/// entering the segment from outside, in one of `anchorLayouts`).
struct SegItem {
  int op = -1;
  std::vector<int> anchorLayouts;
};
struct SegEdge {
  unsigned from, fromOperand, to, toOperand;
};
using Key = std::vector<int>;
using StateMap = std::map<Key, Front>;
/// A DP step's states, flat: state i's key (the signatures of the live
/// items, `width` of them) and its front (points [start[i], start[i + 1])).
/// Three flat arrays instead of a key and a front per state: the memory a
/// step touches is what the exact DP's time goes to (page faults).
struct StateSet {
  unsigned width = 0;
  HugeVector<int> keys;
  HugeVector<Point> points;
  HugeVector<uint32_t> start{0};
  size_t size() const { return start.size() - 1; }
  ArrayRef<int> key(size_t i) const {
    return ArrayRef<int>(keys).slice(i * width, width);
  }
  ArrayRef<Point> front(size_t i) const {
    return ArrayRef<Point>(points).slice(start[i], start[i + 1] - start[i]);
  }
  /// Empties the set for keys of `w` signatures (buffers kept).
  void reset(unsigned w) {
    width = w;
    keys.clear();
    points.clear();
    start.assign(1, 0);
  }
  void push(ArrayRef<int> key, ArrayRef<Point> front) {
    assert(key.size() == width && "key of another width");
    keys.insert(keys.end(), key.begin(), key.end());
    points.insert(points.end(), front.begin(), front.end());
    start.push_back(uint32_t(points.size()));
  }
};
/// A DP step's destinations (slots; Instance::Impl::solve's runSegment):
/// in the time-only relaxation, per slot the fastest point with its
/// parent's node and the choice, whose node is made once the step is done.
struct Pick {
  Point point;
  int cand;
};
/// The buffers of a segment's DP (runSegment), kept from one DP to the
/// next so that their pages are faulted in once (thread-local: one per
/// thread that runs DPs).
struct SegmentBuffers {
  StateSet states, next;
  HugeVector<uint64_t> slotKeys;
  std::vector<Front> slotFronts;
  HugeVector<Pick> picks;
  HugeVector<double> slotEstimate, nextEstimate;
  std::vector<uint32_t> stateBase;
  HugeVector<uint32_t> slotTable;
  bool inUse = false;
};
static SegmentBuffers &getSegmentBuffers() {
  static thread_local SegmentBuffers buffers;
  return buffers;
}
/// Dense ids (0, 1, ... in order of first insertion) of int tuples: the
/// DP's base keys and producer layouts, hashed, each tuple kept once.
class TupleIds {
public:
  /// The id of `tuple`, and whether it is new.
  std::pair<unsigned, bool> insert(ArrayRef<int> tuple) {
    auto it = ids.find(tuple);
    if (it != ids.end())
      return {it->second, false};
    int *copy = storage.Allocate<int>(std::max<size_t>(tuple.size(), 1));
    llvm::copy(tuple, copy);
    ArrayRef<int> kept(copy, tuple.size());
    unsigned id = unsigned(tuples.size());
    ids.try_emplace(kept, id);
    tuples.push_back(kept);
    return {id, true};
  }
  ArrayRef<int> operator[](unsigned id) const { return tuples[id]; }
  size_t size() const { return tuples.size(); }

private:
  BumpPtrAllocator storage;
  DenseMap<ArrayRef<int>, unsigned> ids;
  std::vector<ArrayRef<int>> tuples;
};
/// Fronts keyed by layout ids.
using Matrix = std::map<std::pair<int, int>, Front>;

/// Transient classes: the distinct transients (bytes) given, split in
/// increasing order into at most `most` runs [low(k), high(k)] of nearly
/// equal counts. A plan's transient is one of its parts' (candidates',
/// points') transients, so it lies in one run.
class TransientClasses {
public:
  TransientClasses(std::vector<double> peaks, size_t most)
      : peaks(std::move(peaks)) {
    llvm::sort(this->peaks);
    this->peaks.erase(std::unique(this->peaks.begin(), this->peaks.end()),
                      this->peaks.end());
    count = std::min(this->peaks.size(), most);
  }
  size_t size() const { return count; }
  double low(size_t k) const { return peaks[k * peaks.size() / count]; }
  double high(size_t k) const {
    return peaks[(k + 1) * peaks.size() / count - 1];
  }

private:
  std::vector<double> peaks;
  size_t count = 0;
};

/// Golden-section search for the maximum of `f` over [lo, hi], which must
/// be unimodal there (the Lagrangian bounds below are concave in lambda,
/// so unimodal in log2 lambda): `iterations` steps after the first two
/// evaluations. `f` may return +inf to stop the search at once (a value
/// that already settles what the caller asks). Returns the largest value
/// seen; the caller keeps whatever else it needs of that evaluation.
/// With a finite `target`, for f concave in 2^x (the Lagrangian bounds):
/// the search also ends once the values seen show that none reaches the
/// target -- the maximum lies between the best point seen and its two
/// neighbours, where f is below the lines through the best point and
/// each neighbour.
template <typename F>
double
maximizeUnimodal(double lo, double hi, int iterations, F f,
                 double target = std::numeric_limits<double>::infinity()) {
  const double g = (std::sqrt(5.0) - 1) / 2;
  SmallVector<std::pair<double, double>, 40> seen; // (2^x, f), by x
  auto eval = [&](double x) {
    double v = f(x);
    if (std::isfinite(target))
      seen.insert(llvm::upper_bound(seen, std::make_pair(std::exp2(x), v),
                                    llvm::less_first()),
                  {std::exp2(x), v});
    return v;
  };
  auto cannotReach = [&] {
    if (seen.size() < 3)
      return false;
    size_t b =
        size_t(llvm::max_element(seen, llvm::less_second()) - seen.begin());
    if (b == 0 || b + 1 == seen.size() || !std::isfinite(seen[b].second))
      return false;
    auto [la, fa] = seen[b - 1];
    auto [lb, fb] = seen[b];
    auto [lc, fc] = seen[b + 1];
    double rise = (fb - fa) / (lb - la) * (lc - lb);
    double fall = (fb - fc) / (lc - lb) * (lb - la);
    return fb + std::max({rise, fall, 0.0}) < target;
  };
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  double f1 = eval(x1);
  double f2 = f1 == std::numeric_limits<double>::infinity() ? f1 : eval(x2);
  for (int it = 0; it < iterations && std::isfinite(f1) && std::isfinite(f2) &&
                   !cannotReach();
       ++it) {
    if (f1 < f2) {
      lo = x1;
      x1 = x2;
      f1 = f2;
      x2 = lo + g * (hi - lo);
      f2 = eval(x2);
    } else {
      hi = x2;
      x2 = x1;
      f2 = f1;
      x1 = hi - g * (hi - lo);
      f1 = eval(x1);
    }
  }
  return std::max(f1, f2);
}

/// Lagrangian bounds along the carry's n layouts (the layer price,
/// Instance::Impl::solve), given `pre[a]`, a lower bound of the price
/// (time + lambda x additive memory, seconds) of the pre section left in
/// layout a (inf: no plan that beats the bound leaves it so),
/// `layer[a * n + b]`, that of one layer entered in a and left in b, and
/// `post`, that of the post section from any layout. O(layers x n^2).
struct LayerEntryBounds {
  /// Per layout a: the least price of a plan of `layers` layers one of
  /// which is entered in a (pre, k layers ending in a, layers - k from a,
  /// post, over k < layers).
  std::vector<double> entry;
  /// Per layout a: the least price of everything but a layer entered in
  /// a (pre, k layers ending in a, layers - 1 - k layers from any layout,
  /// post).
  std::vector<double> outside;
  /// The least price of any plan.
  double whole;
};
static LayerEntryBounds getLayerEntryBounds(ArrayRef<double> pre,
                                            ArrayRef<double> layer, double post,
                                            int64_t layers) {
  const double inf = std::numeric_limits<double>::infinity();
  size_t n = pre.size();
  LayerEntryBounds r;
  r.whole = inf;
  if (n == 0)
    return r;
  // before[k][a]: pre and k layers ending in a; after[j][a]: j layers
  // from a and post.
  std::vector<std::vector<double>> before(size_t(layers) + 1),
      after(size_t(layers) + 1);
  before[0].assign(pre.begin(), pre.end());
  after[0].assign(n, post);
  for (size_t k = 0; k < size_t(layers); ++k) {
    before[k + 1].assign(n, inf);
    after[k + 1].assign(n, inf);
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        double l = layer[a * n + b];
        before[k + 1][b] = std::min(before[k + 1][b], before[k][a] + l);
        after[k + 1][a] = std::min(after[k + 1][a], l + after[k][b]);
      }
  }
  r.whole =
      *std::min_element(before[layers].begin(), before[layers].end()) + post;
  r.entry.assign(n, inf);
  r.outside.assign(n, inf);
  for (size_t k = 0; k < size_t(layers); ++k) {
    double anyAfter = *std::min_element(after[layers - 1 - k].begin(),
                                        after[layers - 1 - k].end());
    for (size_t a = 0; a < n; ++a) {
      r.entry[a] = std::min(r.entry[a], before[k][a] + after[layers - k][a]);
      r.outside[a] = std::min(r.outside[a], before[k][a] + anyAfter);
    }
  }
  return r;
}

/// Lagrangian bounds of the memory limit computed from the layer DP's own
/// fronts (exact runs where memory binds; Instance::Impl::solve). At a
/// multiplier lambda >= 0 (seconds per byte) every point is priced
/// time + lambda x additive memory; each front then counts only by its
/// least price, so the pre section, the layer block and the post section
/// become vectors and a matrix of prices over the carry's layouts
/// (anchors), and the layers a min-plus chain of that matrix. A plan that
/// fits leaves its additive memory at most `room` (the limit less its
/// largest transient), so its time is at least its price minus
/// lambda x room: the Lagrangian relaxation of a resource-constrained
/// shortest path, with the DP's exact prices instead of the chain bounds'
/// relaxed ones (docs/search.md, "Pruning"). The least-priced plan itself
/// is a plan of the configuration, often one that fits: it seeds the bound.
class LayerDual {
  static constexpr double inf = std::numeric_limits<double>::infinity();

public:
  /// `layers` identical layers between `pre` (fronts per carry layout) and
  /// `post` (per carry layout); `block` maps (layout in, layout out) to the
  /// fronts of one layer. Points the DP pruned by the bound are absent,
  /// which only raises the prices of plans that cannot beat it. Only the
  /// plans whose transient is at most `maxPeak` (bytes) are priced.
  LayerDual(ArrayRef<int> anchors, const std::map<int, Front> &pre,
            const Matrix &block, const std::map<int, Front> &post,
            int64_t layers, double lambda, double maxPeak = inf)
      : lambda(lambda), layers(layers) {
    size_t n = anchors.size();
    for (auto [i, a] : llvm::enumerate(anchors))
      index[a] = unsigned(i);
    auto cheapest = [&](const Front &f) {
      const Point *best = nullptr;
      for (const Point &p : f)
        if (p.peak <= maxPeak && (!best || price(p) < price(*best)))
          best = &p;
      return best;
    };
    auto vectorOf = [&](const std::map<int, Front> &fronts) {
      std::vector<Cell> v(n);
      for (auto &[l, f] : fronts)
        if (auto it = index.find(l); it != index.end())
          if (const Point *p = cheapest(f))
            v[it->second] = Cell{price(*p), *p, -1, p};
      return v;
    };
    for (auto &[ab, f] : block) {
      auto a = index.find(ab.first), b = index.find(ab.second);
      if (a != index.end() && b != index.end())
        if (const Point *p = cheapest(f))
          edges.push_back({a->second, b->second, p});
    }
    // before[i][a]: the least-priced pre section and i layers ending in
    // layout a; after[j][b]: j layers entered in b and the post section.
    before.assign(layers + 1, std::vector<Cell>(n));
    after.assign(layers + 1, std::vector<double>(n, inf));
    before[0] = vectorOf(pre);
    for (auto [a, c] : llvm::enumerate(vectorOf(post))) {
      after[0][a] = c.price;
      postCell.push_back(c);
    }
    for (int64_t i = 0; i < layers; ++i)
      for (const BlockEdge &e : edges) {
        const Cell &from = before[i][e.from];
        double p = from.price + price(*e.point);
        Cell &to = before[i + 1][e.to];
        if (p < to.price)
          to = Cell{p, addPoints(from.total, *e.point), int(e.from), e.point};
        after[i + 1][e.from] =
            std::min(after[i + 1][e.from], price(*e.point) + after[i][e.to]);
      }
    for (unsigned a = 0; a < n; ++a) {
      double p = before[layers][a].price + postCell[a].price;
      if (p < whole) {
        whole = p;
        last = int(a);
        wholeTotal = addPoints(before[layers][a].total, *postCell[a].point);
      }
    }
  }
  double lambda;
  /// The least price of a whole plan (seconds; inf: none beats the bound).
  double getWhole() const { return whole; }
  /// The time, additive memory and transient of that plan (its node unset).
  const Point &getWholeTotal() const { return wholeTotal; }
  /// The least price of everything but `count` consecutive layers entered
  /// in layout a and left in layout b, wherever they stand in the stack.
  double getRest(int a, int b, int64_t count) const {
    auto ia = index.find(a), ib = index.find(b);
    if (ia == index.end() || ib == index.end() || count > layers)
      return inf;
    double best = inf;
    for (int64_t i = 0; i <= layers - count; ++i)
      best = std::min(best, before[i][ia->second].price +
                                after[layers - count - i][ib->second]);
    return best;
  }
  /// The least-priced plan's points in order (pre, each layer, post), for
  /// the caller to join into one node (empty where there is none).
  std::vector<Point> getWholePoints() const {
    std::vector<Point> out;
    if (last < 0)
      return out;
    out.push_back(*postCell[last].point);
    int a = last;
    for (int64_t i = layers; i >= 0; --i) {
      const Cell &c = before[i][a];
      out.push_back(*c.point);
      a = c.prev;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

private:
  double price(const Point &p) const { return p.time + lambda * p.mem; }
  struct Cell {
    double price = inf;
    Point total; ///< time, memory, transient of the cell's path
    int prev = -1;
    const Point *point = nullptr;
  };
  struct BlockEdge {
    unsigned from, to;
    const Point *point;
  };
  int64_t layers;
  DenseMap<int, unsigned> index;
  std::vector<BlockEdge> edges;
  std::vector<std::vector<Cell>> before;
  std::vector<std::vector<double>> after;
  std::vector<Cell> postCell;
  double whole = inf;
  int last = -1;
  Point wholeTotal;
};
} // namespace

void Instance::Impl::walk(int32_t node,
                          std::vector<std::pair<int, int>> &out) const {
  if (node <= 0)
    return;
  const Node &n = nodes[node];
  if (n.op == -2) {
    walk(n.a, out);
    walk(n.b, out);
    return;
  }
  walk(n.a, out);
  if (n.op >= 0)
    out.push_back({n.op, n.cand});
}

Expected<Plan> Instance::Impl::solve() {
  const Problem &P = problem;
  // A plan found on the way may lower `bound` (LayerDual's seed, below);
  // the caller's is restored on return.
  const double givenBound = bound;
  llvm::scope_exit restoreBound([&] { bound = givenBound; });
  overBudget = overMemoryBudget = false;
  overQuickTry = false;
  quickTryLimit = ~size_t(0);
  chainMemoryBinds = false;
  chainPlanBound = 0;
  auto budgetError = [&] {
    return err(Twine(kBudgetMessage) + " (SolverOptions::maxDPBytes, " +
               Twine(options.maxDPBytes >> 20) +
               " MiB); search with caps (stpar plan without --exact, "
               "stpar-bench-search --caps)");
  };
  std::vector<unsigned> pre, layer, post;
  for (unsigned i = 0; i < P.ops.size(); ++i)
    (P.sections[i] == Section::Pre     ? pre
     : P.sections[i] == Section::Layer ? layer
                                       : post)
        .push_back(i);
  std::optional<unsigned> carry = getCarryOp(P);
  unsigned carryOperand = 0;
  for (const Edge &e : P.edges)
    if (e.nextLayer)
      carryOperand = e.producerOperand;
  bool hasLayers = !layer.empty();
  unsigned preOutOperand = 0;
  if (!pre.empty())
    for (unsigned j = 0; j < P.ops[pre.back()].operands.size(); ++j)
      if (P.ops[pre.back()].operands[j].role == OperandRole::Output) {
        preOutOperand = j;
        break;
      }
  const double inf = std::numeric_limits<double>::infinity();
  auto sumOver = [](const std::vector<unsigned> &ops,
                    const std::vector<double> &v) {
    double s = 0;
    for (unsigned op : ops)
      s += v[op];
    return s;
  };
  // Lower bounds of the sections (sums of per-operator minima; edges >= 0).
  double blockTimeLB = sumOver(layer, minTime),
         blockMemLB = sumOver(layer, minMem);
  double postTimeLB = sumOver(post, minTime), postMemLB = sumOver(post, minMem);
  double layers = double(hasLayers ? P.layers : 0);
  // Exact pruning: a point whose time plus a lower bound of the rest cannot
  // beat `bound`, or whose memory plus a lower bound of the rest exceeds the
  // limit, is never part of an answer.
  // peakCeiling: the largest transient a plan that beats `bound` can have
  // (transient classes, below); peakLB may be raised there for the same
  // reason.
  double peakCeiling = inf;
  const double givenPeakLB = peakLB;
  llvm::scope_exit restorePeakLB([&] { peakLB = givenPeakLB; });
  auto admissible = [&](const Point &p, double restTime, double restMem) {
    if (p.time + restTime + constantTime >= bound || p.peak > peakCeiling)
      return false;
    return (timeOnly && (priceLambda == 0 || noMemoryTest)) ||
           p.mem + restMem + std::max(p.peak, peakLB) <= limit * (1 + 1e-12);
  };

  // Layout-dependent lower bounds of the rest of a segment (an A*-style
  // heuristic, exact): a backward DP along the segment's chain, the edges
  // from item v to item v + 1 (ln1 -> qkv -> scores -> ... -> residual2 in
  // a transformer layer), dropping every other edge (re-layouts >= 0).
  // after[v][l] bounds the time of items v+1.. when the tensor v feeds to
  // v + 1 is in layout l; afterAny[v] bounds it for any layout. Without it
  // the bound is the sum of per-operator minima, which ignores every
  // re-layout, and at 8 devices the attention's three live tensors reach
  // millions of states that cannot beat the plan already found.
  struct ChainBound {
    using Value = BoundValue;
    std::vector<int> chainOperand;
    std::vector<DenseMap<int, Value>> after;
    std::vector<Value> afterAny;
    /// Lower bound of the whole segment (and its path's memory).
    Value total;
    Value restValue(unsigned v, const Cand *c, int anchorLayout) const {
      if (chainOperand[v] < 0)
        return afterAny[v];
      int l = c ? c->raw->layouts[chainOperand[v]] : anchorLayout;
      auto it = after[v].find(l);
      return it == after[v].end() ? afterAny[v] : it->second;
    }
    double rest(unsigned v, const Cand *c, int anchorLayout) const {
      return restValue(v, c, anchorLayout).time;
    }
  };
  // With lambda > 0 every candidate's time is charged lambda x its additive
  // memory as well (the Lagrangian of the memory limit, below).
  // `prices` (per operator and candidate) replace the candidates' times
  // where given (the group bound, lambda = 0).
  auto chainBound = [&](const std::vector<SegItem> &items,
                        const std::vector<SegEdge> &edges, double lambda = 0,
                        const std::vector<std::vector<double>> *prices =
                            nullptr) {
    using Value = ChainBound::Value;
    auto memOf = [](const Cand &c) { return c.stateBytes + c.actBytes; };
    // (A candidate over the transient ceiling is in no plan that beats
    // the bound.)
    auto price = [&](unsigned op, size_t k) {
      const Cand &c = cands[op][k];
      if (c.peak > peakCeiling)
        return inf;
      return prices ? (*prices)[op][k] : c.time + lambda * memOf(c);
    };
    unsigned n = unsigned(items.size());
    ChainBound cb;
    if (n == 0)
      return cb;
    cb.chainOperand.assign(n, -1);
    cb.after.resize(n);
    cb.afterAny.assign(n, Value{});
    std::vector<SmallVector<const SegEdge *, 2>> chainIn(n);
    for (const SegEdge &e : edges)
      if (e.to == e.from + 1 &&
          (chainIn[e.to].empty() ||
           chainIn[e.to].front()->fromOperand == e.fromOperand))
        chainIn[e.to].push_back(&e);
    for (unsigned v = 1; v < n; ++v)
      if (!chainIn[v].empty())
        cb.chainOperand[v - 1] = int(chainIn[v].front()->fromOperand);
    for (unsigned v = n - 1; v-- > 0;) {
      unsigned w = v + 1;
      unsigned op = unsigned(items[w].op);
      // Candidates of w: their price plus the bound of what follows them.
      SmallVector<Value> g;
      Value best{inf, 0};
      for (auto [k, c] : llvm::enumerate(cands[op])) {
        Value r = cb.restValue(w, &c, kExternal);
        g.push_back({price(op, k) + r.time, memOf(c) + r.mem});
        if (g.back().time < best.time)
          best = g.back();
      }
      cb.afterAny[v] = best;
      if (cb.chainOperand[v] < 0)
        continue;
      unsigned from = unsigned(cb.chainOperand[v]);
      std::vector<int> ls;
      if (items[v].op < 0)
        ls = items[v].anchorLayouts;
      else
        for (const Cand &c : cands[items[v].op])
          ls.push_back(c.raw->layouts[from]);
      // The candidates of w grouped by the layouts their chain inputs
      // want (many share them), each group at its smallest g, in
      // increasing g: once g alone cannot beat the best, no later group
      // can (re-layouts >= 0), so few re-layouts are costed. The groups
      // and the re-layouts costed do not depend on the prices: kept for
      // every chain bound of this configuration (chainGroups).
      SmallVector<unsigned, 2> operands;
      for (const SegEdge *e : chainIn[w])
        operands.push_back(e->toOperand);
      ChainGroups &cg = chainGroups[{op, operands}];
      unsigned numIn = unsigned(operands.size());
      if (cg.groupOf.size() != cands[op].size()) {
        cg = ChainGroups();
        for (unsigned o : operands)
          cg.matrices.push_back(getRelayoutMatrix(op, o));
        std::map<SmallVector<int, 2>, unsigned> index;
        for (const Cand &c : cands[op]) {
          SmallVector<int, 2> wants;
          for (unsigned o : operands)
            wants.push_back(c.raw->layouts[o]);
          auto [it, ins] = index.try_emplace(wants, unsigned(cg.wants.size()));
          if (ins) {
            SmallVector<unsigned, 2> local;
            for (unsigned k = 0; k < numIn; ++k)
              local.push_back(getLocalLayout(tables->relayouts[cg.matrices[k]],
                                             op, operands[k], wants[k]));
            cg.wants.push_back(std::move(wants));
            cg.local.push_back(std::move(local));
          }
          cg.groupOf.push_back(it->second);
        }
      }
      size_t numGroups = cg.wants.size();
      std::vector<Value> groupG(numGroups, Value{inf, 0});
      std::vector<bool> seen(numGroups, false);
      for (size_t k = 0; k < g.size(); ++k) {
        unsigned gi = cg.groupOf[k];
        if (!seen[gi] || g[k].time < groupG[gi].time)
          groupG[gi] = g[k];
        seen[gi] = true;
      }
      std::vector<unsigned> order(numGroups);
      std::iota(order.begin(), order.end(), 0u);
      llvm::stable_sort(order, [&](unsigned a, unsigned b) {
        return groupG[a].time < groupG[b].time;
      });
      double scale = weight(op) * slots;
      SmallVector<unsigned, 2> at;
      for (int l : ls) {
        auto [it, ins] = cb.after[v].try_emplace(l, Value{inf, 0});
        if (!ins)
          continue;
        std::vector<double> *row = nullptr;
        at.clear();
        for (unsigned gi : order) {
          const Value &gv = groupG[gi];
          if (gv.time >= it->second.time)
            break;
          double t = gv.time;
          if (l != kExternal) {
            if (!row) {
              auto [r, fresh] = cg.seconds.try_emplace(l);
              if (fresh)
                r->second.assign(numGroups * numIn,
                                 std::numeric_limits<double>::quiet_NaN());
              row = &r->second;
            }
            for (unsigned k = 0; k < numIn; ++k) {
              double &sec = (*row)[gi * numIn + k];
              if (std::isnan(sec)) {
                if (at.empty())
                  for (unsigned k2 = 0; k2 < numIn; ++k2)
                    at.push_back(
                        getLocalLayout(tables->relayouts[cg.matrices[k2]], op,
                                       operands[k2], l));
                sec = matrixSeconds(cg.matrices[k], op, operands[k], l, at[k],
                                    cg.wants[gi][k], cg.local[gi][k]);
              }
              t += scale * sec;
            }
          }
          if (t < it->second.time)
            it->second = {t, gv.mem};
        }
      }
    }
    if (n > 0 && items[0].op >= 0) {
      cb.total = {inf, 0};
      unsigned op = unsigned(items[0].op);
      for (auto [k, c] : llvm::enumerate(cands[op])) {
        Value r = cb.restValue(0, &c, kExternal);
        if (price(op, k) + r.time < cb.total.time)
          cb.total = {price(op, k) + r.time, memOf(c) + r.mem};
      }
    } else if (n > 0) {
      cb.total = cb.afterAny[0];
      if (!items[0].anchorLayouts.empty()) {
        cb.total = {inf, 0};
        for (int l : items[0].anchorLayouts) {
          Value r = cb.restValue(0, nullptr, l);
          if (r.time < cb.total.time)
            cb.total = r;
        }
      }
    }
    return cb;
  };

  // A section's segment: in the layer block and the post section item 0 is
  // an anchor (the carry entering the layer; the last layer's output) in
  // one of `anchors`; the pre section has none. `pos` maps problem
  // operators to items.
  struct Segment {
    std::vector<SegItem> items;
    std::vector<SegEdge> edges;
    std::map<unsigned, unsigned> pos;
  };
  auto makeSegment = [&](const std::vector<unsigned> &ops, Section section,
                         std::vector<int> anchors) {
    Segment seg;
    if (section != Section::Pre)
      seg.items.push_back({-1, std::move(anchors)});
    for (unsigned op : ops) {
      seg.pos[op] = unsigned(seg.items.size());
      seg.items.push_back({int(op), {}});
    }
    for (const Edge &e : P.edges) {
      if (P.sections[e.consumer] != section)
        continue;
      bool fromAnchor = section == Section::Layer
                            ? e.nextLayer
                            : P.sections[e.producer] == Section::Layer;
      if (fromAnchor) {
        seg.edges.push_back({0, 0, seg.pos[e.consumer], e.consumerOperand});
      } else if (section == Section::Post ||
                 P.sections[e.producer] == section) {
        // (verifyProblem rejects edges from pre to post operators.)
        auto it = seg.pos.find(e.producer);
        seg.edges.push_back({it == seg.pos.end() ? 0u : it->second,
                             e.producerOperand, seg.pos[e.consumer],
                             e.consumerOperand});
      }
    }
    return seg;
  };
  // Chain bounds of the sections at a Lagrangian multiplier lambda of the
  // memory limit (time + lambda x memory; below), each with the memory of
  // the choices attaining it. Layer and post segments with any anchor
  // layout.
  Segment preSeg = makeSegment(pre, Section::Pre, {});
  Segment blockSeg = makeSegment(layer, Section::Layer, {});
  Segment postSeg = makeSegment(post, Section::Post, {});
  auto computeSectionBounds =
      [&](double lambda, const std::vector<std::vector<double>> *prices) {
        SectionBounds b;
        b.lambda = lambda;
        if (!pre.empty())
          b.pre = chainBound(preSeg.items, preSeg.edges, lambda, prices).total;
        if (hasLayers)
          b.layer =
              chainBound(blockSeg.items, blockSeg.edges, lambda, prices).total;
        if (!post.empty())
          b.post =
              chainBound(postSeg.items, postSeg.edges, lambda, prices).total;
        return b;
      };
  Tables::PriceKey priceKey = Tables::getPriceKey(config, 0);
  auto sectionBounds = [&](double lambda) {
    // (Under a transient ceiling, below, kept per ceiling.)
    if (std::isfinite(peakCeiling)) {
      auto [it, ins] = tables->ceiledSectionBounds.try_emplace(
          {Tables::getPriceKey(config, lambda), peakCeiling});
      if (ins)
        it->second = computeSectionBounds(lambda, nullptr);
      return it->second;
    }
    // The same configuration's bounds are asked for by every pass of a
    // search (the capped seed and the exact pass): kept in the tables.
    auto [it, ins] =
        tables->sectionBounds.try_emplace(Tables::getPriceKey(config, lambda));
    if (ins)
      it->second = computeSectionBounds(lambda, nullptr);
    return it->second;
  };
  // The same with the candidates of transient above `high` left out too
  // (a transient class's; kept per ceiling).
  auto sectionBoundsUnder = [&](double high, double lambda) {
    double given = peakCeiling;
    peakCeiling = std::min(given, high);
    SectionBounds s = sectionBounds(lambda);
    peakCeiling = given;
    return s;
  };
  // A configuration of a group sharing these tables (shareGroupPrices)
  // that even the group's bound (its smallest prices) cannot let beat
  // `bound` is rejected without a chain bound of its own.
  if ((std::isfinite(bound) || groupBoundOnly) &&
      tables->groupMembers.count(priceKey)) {
    if (!tables->groupBounds)
      tables->groupBounds = computeSectionBounds(0, &tables->groupPrices);
    const SectionBounds &g = *tables->groupBounds;
    groupLB = constantTime + g.pre.time + layers * g.layer.time + g.post.time;
    if (groupBoundOnly || groupLB >= bound)
      return err("no plan beats the bound");
  }
  if (groupBoundOnly)
    return err("no group");
  // At lambda = 0 the bounds of a layer and of the post section replace
  // their sums of per-operator minima.
  SectionBounds zero = sectionBounds(0);
  if (hasLayers)
    blockTimeLB = std::max(blockTimeLB, zero.layer.time);
  if (!post.empty())
    postTimeLB = std::max(postTimeLB, zero.post.time);

  auto lagrangeSlack = [&](double lambda) {
    return 1e-9 * (std::abs(bound) + lambda * limit);
  };
  // Transient classes (exact runs that price memory: the priced seed and
  // the Pareto DP). A plan's transient is its largest candidate's, one of
  // the candidates' distinct transients T_0 = peakLB < T_1 < ...; split
  // into at most 24 runs [T_lo, T_hi], a plan whose transient lies in one
  // uses only candidates with transient <= T_hi and has additive memory
  // <= limit - T_lo, so the chain Lagrangian bound (below) with those
  // candidates and that room bounds its time. Classes whose bound cannot
  // beat `bound` hold no answer; the rest bound every answer's transient
  // from below (peakLB) and above (peakCeiling), which `admissible`
  // enforces. Where the transient decides whether the fastest plans fit
  // (the additive memory's Lagrangian bound then stays at lambda = 0),
  // this is the bound that rises.
  // (What they conclude, for the tables' memo.)
  auto findTransientClasses = [&] {
    std::vector<double> peaks;
    for (unsigned op = 0; op < P.ops.size(); ++op)
      for (const Cand &c : cands[op])
        if (c.peak >= peakLB)
          peaks.push_back(c.peak);
    TransientClasses classes(std::move(peaks), 24);
    size_t numClasses = classes.size();
    auto classLow = [&](size_t k) { return classes.low(k); };
    auto classHigh = [&](size_t k) { return classes.high(k); };
    // (The chain bounds of class k's candidates are those under the
    // transient ceiling classHigh(k), kept in the tables per ceiling and
    // lambda: every probe and pass of the configuration asks for them.)
    auto classBound = [&](size_t k, double lambda, double room) {
      SectionBounds s = sectionBoundsUnder(classHigh(k), lambda);
      return ChainBound::Value{constantTime - lambda * room + s.pre.time +
                                   layers * s.layer.time + s.post.time,
                               s.pre.mem + layers * s.layer.mem + s.post.mem};
    };
    // Whether class k's bound, maximized over lambda (concave in it: a
    // golden-section search over log2 lambda), cannot beat `bound`.
    auto beaten = [&](size_t k) {
      double room = limit - classLow(k);
      if (room <= 0)
        return true;
      ChainBound::Value v0 = classBound(k, 0, room);
      if (v0.time >= bound + lagrangeSlack(0))
        return true;
      if (v0.mem <= room)
        return false;
      // (Starting where lambda x the excess memory closes the gap, rounded
      // to a power of two: the lambdas tried are then the same under every
      // bound, and so their chain bounds kept.)
      double x = std::round(std::log2(std::max(bound - v0.time, 1e-12 * bound) /
                                      (v0.mem - room)));
      // (Ending where the values seen show that no lambda can reach the
      // bound: the least slack, lambda's, is at lambda = 0.)
      return std::isinf(maximizeUnimodal(
          x - 8, x + 8, 24,
          [&](double x) {
            double value = classBound(k, std::exp2(x), room).time;
            return value >= bound + lagrangeSlack(std::exp2(x)) ? inf : value;
          },
          bound + lagrangeSlack(0)));
    };
    // (Only the lowest and the highest class that can beat it matter.)
    std::optional<size_t> lowest, highest;
    for (size_t k = 0; k < numClasses && !lowest; ++k)
      if (!beaten(k))
        lowest = k;
    for (size_t k = numClasses; lowest && !highest && k-- > *lowest;)
      if (k == *lowest || !beaten(k))
        highest = k;
    Tables::TransientOutcome o;
    o.cut = !lowest || *lowest > 0 || *highest + 1 < numClasses;
    o.rejected = !lowest;
    o.peakLB = lowest ? std::max(peakLB, classLow(*lowest)) : peakLB;
    o.peakCeiling =
        lowest && *highest + 1 < numClasses ? classHigh(*highest) : inf;
    return o;
  };
  if (!options.isCapped() && options.layerDual && std::isfinite(bound) &&
      (!timeOnly || priceLambda > 0) && !P.ops.empty()) {
    auto [known, isNew] = tables->transientOutcomes.try_emplace(
        {config.getPriceFields(), bound, peakLB, limit, constantTime});
    Tables::TransientOutcome &outcome = known->second;
    if (isNew)
      outcome = findTransientClasses();
    if (outcome.cut)
      ++stats.transientCuts;
    if (outcome.rejected)
      return err("no plan beats the bound");
    peakLB = outcome.peakLB;
    if (std::isfinite(outcome.peakCeiling)) {
      peakCeiling = outcome.peakCeiling;
      zero = sectionBounds(0);
      if (hasLayers)
        blockTimeLB = std::max(blockTimeLB, zero.layer.time);
      if (!post.empty())
        postTimeLB = std::max(postTimeLB, zero.post.time);
    }
  }

  // A configuration that cannot beat `bound` is rejected before any DP:
  // for lambda >= 0 every feasible plan (additive memory <= limit - peakLB)
  // costs at least the chain bound of time + lambda x memory over the whole
  // plan (pre, layers x one layer, post) minus lambda (limit - peakLB) --
  // the per-operator Lagrangian bound of computeBounds with the re-layouts
  // along the chains counted. Tried at lambda = 0 and, where memory binds,
  // on a grid of lambda, refined to its maximum in exact runs; the section
  // bounds at each lambda > 0 are kept to prune the layer products
  // (`lagranges`) and the best prices the layer block's DP (PricedRest).
  std::vector<SectionBounds> lagranges;
  // The one of them whose plan bound is the largest.
  std::optional<size_t> bestLagrange;
  if (std::isfinite(bound) && limit - peakLB > 0) {
    double room = limit - peakLB;
    // The bound of the whole plan and the memory of the choices attaining
    // it.
    auto planBound = [&](const SectionBounds &s) {
      return ChainBound::Value{constantTime - s.lambda * room + s.pre.time +
                                   layers * s.layer.time + s.post.time,
                               s.pre.mem + layers * s.layer.mem + s.post.mem};
    };
    ChainBound::Value b0 = planBound(zero);
    chainPlanBound = b0.time;
    if (b0.time >= bound)
      return err("no plan beats the bound");
    chainMemoryBinds = b0.mem > room;
    // Where the choices attaining the lambda = 0 bound fit in the memory,
    // no lambda > 0 can raise it (they price below it); otherwise try a
    // geometric grid of lambda around the one that would close the gap.
    if (b0.mem > room) {
      // lambda is capped (the largest of computeBounds' grid) and the
      // Lagrangian bounds must clear `bound` by a margin: lambda x bytes
      // terms nearly cancel, so their rounding scales with lambda x limit.
      double lambdaMax = std::max(timeLB, bound) / room * std::ldexp(1.0, 12);
      // (Where it is the one that would close the gap, rounded to a power
      // of two: the grid and the refinement's lambdas are then the same
      // under every bound a probe or pass of this configuration tries, and
      // their chain bounds, kept in the tables, are computed once.)
      double lambda0 =
          std::min(lambdaMax, bestLambda > 0
                                  ? bestLambda
                                  : std::exp2(std::round(std::log2(
                                        (bound - b0.time) / (b0.mem - room)))));
      int bestJ = 0;
      for (int j = -3; j <= 3; ++j) {
        double lambda = std::min(lambdaMax, lambda0 * std::ldexp(1.0, j));
        lagranges.push_back(sectionBounds(lambda));
        if (planBound(lagranges.back()).time >= bound + lagrangeSlack(lambda))
          return err("no plan beats the bound");
        if (planBound(lagranges.back()).time > planBound(lagranges[bestJ]).time)
          bestJ = int(lagranges.size()) - 1;
      }
      bestLagrange = size_t(bestJ);
      // (Exact runs) its maximum, between the grid's best and its
      // neighbours.
      if (!options.isCapped()) {
        double x = std::log2(lagranges[bestJ].lambda);
        SectionBounds best = lagranges[bestJ];
        maximizeUnimodal(x - 1, x + 1, 20, [&](double x) {
          SectionBounds b = sectionBounds(std::min(lambdaMax, std::exp2(x)));
          if (planBound(b).time > planBound(best).time)
            best = b;
          return planBound(b).time;
        });
        lagranges.push_back(best);
        bestLagrange = lagranges.size() - 1;
        chainPlanBound = std::max(chainPlanBound, planBound(best).time);
        if (planBound(best).time >= bound + lagrangeSlack(best.lambda))
          return err("no plan beats the bound");
      }
    }
  }

  if (boundsOnly) {
    boundsPassed = true;
    return err("bounds only");
  }

  // Whether a cap ranks choices (the candidate or the state cap): only
  // then do the segments' exits (SegmentExit) matter.
  bool capsRank = options.maxCandidates || options.maxStates;
  // The capped search's families of choices (below): mesh axes of the
  // same size and placement are interchangeable; axisClass[a] is the first
  // axis like a.
  std::vector<unsigned> axisClass(config.mesh.axes.size());
  for (unsigned a = 0; a < axisClass.size(); ++a) {
    axisClass[a] = a;
    for (unsigned b = 0; b < a; ++b)
      if (config.mesh.axes[a].size == config.mesh.axes[b].size &&
          config.mesh.getPlacement(a, cluster.devicesPerNode) ==
              config.mesh.getPlacement(b, cluster.devicesPerNode)) {
        axisClass[a] = axisClass[b];
        break;
      }
  }
  // Where a segment's output enters the next segment (the pre section's
  // last output and the layer's carry enter a layer), for the caps'
  // ranking only: `next` is that segment's chain bound with this output's
  // layouts among its anchors, so next->rest(0, nullptr, l) bounds what it
  // costs when entered in layout l.
  struct SegmentExit {
    unsigned item, operand;
    const ChainBound *next;
  };
  // Runs the frontier DP over `items`; returns fronts keyed by the layouts of
  // the sticky (item, operand) pairs. `outTime`/`outMem` bound what the rest
  // of the plan (outside this segment) adds. `given` is the segment's chain
  // bound where the caller has it (else it is computed here).
  // The Lagrangian of the memory limit inside a segment (exact runs where
  // memory binds): `rest` is the segment's chain bound at `lambda`, and
  // `out` bounds the price (time + lambda x additive memory) of everything
  // outside the segment. A point whose price plus those, minus lambda x the
  // room its transient leaves, cannot beat `bound` is dropped. Without
  // `ownTransient` the room is the one every plan has (limit - peakLB), so
  // that whether a point is dropped depends on its price alone (as a front
  // of one point, kept by its price, needs).
  struct PricedRest {
    double lambda;
    ChainBound rest;
    double out;
    bool ownTransient = true;
    /// In a segment whose item 0 is an anchor: per layout of it, a bound
    /// of the price outside the segment for the points entered in that
    /// layout, at least `out` (absent: `out`).
    std::map<int, double> outFrom;
    /// Transient classes (time-only DPs without ownTransient: the layer
    /// price's; none: one class): the upper ends of runs of transients
    /// (bytes, increasing, the last at least every candidate's that
    /// `admissible` lets pass); a point is of the first run whose end is
    /// at least its transient so far. Each class has its own slots (a
    /// point is compared only with points of its class), and a point of
    /// class c is dropped with classExtra[c] added to its price: lambda x
    /// the room below limit - peakLB that every plan of the class lacks.
    std::vector<double> classHighs, classExtra;
  };
  auto runSegment =
      [&](const std::vector<SegItem> &items, const std::vector<SegEdge> &edges,
          const std::vector<std::pair<unsigned, unsigned>> &sticky,
          double outTime, double outMem, const ChainBound *given = nullptr,
          std::optional<SegmentExit> exit = std::nullopt,
          const PricedRest *priced = nullptr) -> StateMap {
    unsigned n = unsigned(items.size());
    std::vector<int> lastUse(n, -1);
    std::vector<std::vector<unsigned>> relevant(n);
    std::vector<std::vector<const SegEdge *>> inEdges(n);
    for (const SegEdge &e : edges) {
      lastUse[e.from] = std::max(lastUse[e.from], int(e.to));
      relevant[e.from].push_back(e.fromOperand);
      inEdges[e.to].push_back(&e);
    }
    std::vector<bool> isSticky(n, false);
    for (auto [item, operand] : sticky) {
      isSticky[item] = true;
      relevant[item].push_back(operand);
    }
    for (auto &r : relevant) {
      llvm::sort(r);
      r.erase(std::unique(r.begin(), r.end()), r.end());
    }
    // Lower bounds of the items after v: time by the chain bound (per
    // layout), memory by per-operator minima (restMem[v + 1]).
    std::optional<ChainBound> own;
    if (!given)
      own = chainBound(items, edges);
    const ChainBound &cb = given ? *given : *own;
    std::vector<double> restMem(n + 1, 0);
    for (unsigned v = n; v-- > 0;) {
      restMem[v] = restMem[v + 1];
      if (items[v].op >= 0)
        restMem[v] += minMem[items[v].op];
    }
    // Signature tables: item -> tuple of layouts of its relevant operands.
    std::vector<std::map<std::vector<int>, int>> sigIds(n);
    std::vector<std::vector<std::vector<int>>> sigLayouts(n);
    auto sigOf = [&](unsigned item, std::vector<int> tuple) {
      auto [it, ins] = sigIds[item].try_emplace(tuple,
                                                int(sigLayouts[item].size()));
      if (ins)
        sigLayouts[item].push_back(tuple);
      return it->second;
    };
    auto layoutOf = [&](unsigned item, int sig, unsigned operand) {
      const std::vector<unsigned> &r = relevant[item];
      unsigned slot = unsigned(find(r, operand) - r.begin());
      return sigLayouts[item][sig][slot];
    };
    // Transient classes (PricedRest::classHighs; one: none).
    uint32_t numClasses =
        priced ? std::max<uint32_t>(1, priced->classHighs.size()) : 1;
    assert((numClasses == 1 || timeOnly) && "classes in a Pareto DP");
    auto classOf = [&](double peak) -> uint32_t {
      if (numClasses == 1)
        return 0;
      return std::min<uint32_t>(
          numClasses - 1, uint32_t(llvm::lower_bound(priced->classHighs, peak) -
                                   priced->classHighs.begin()));
    };
    std::vector<unsigned> live; // items in the key, in order
    SegmentBuffers &buffers = getSegmentBuffers();
    assert(!buffers.inUse && "segment DPs do not nest");
    buffers.inUse = true;
    llvm::scope_exit release([&] { buffers.inUse = false; });
    StateSet &states = buffers.states, &next = buffers.next;
    states.reset(0);
    next.reset(0);
    states.push({}, Point{0, 0, 0, 0});
    // A step's destinations (slots): per (base key id, signature of v) its
    // front. The time-only relaxation keeps one point per slot, the
    // fastest (of equal ones the first, as insert keeps; Pick). Kept
    // across steps, as their buffers are.
    HugeVector<uint64_t> &slotKeys = buffers.slotKeys;
    std::vector<Front> &slotFronts = buffers.slotFronts;
    HugeVector<Pick> &picks = buffers.picks;
    // Per slot: the least time so far + rest bound of a point inserted
    // there, what a search with a state cap ranks states by (kept only
    // then: the exact DPs never read it).
    bool ranked = options.maxStates != 0;
    HugeVector<double> &slotEstimate = buffers.slotEstimate,
                       &nextEstimate = buffers.nextEstimate;
    slotEstimate.clear();
    nextEstimate.clear();
    auto estimate = [&](int slot, double value) {
      if (ranked)
        slotEstimate[slot] = std::min(slotEstimate[slot], value);
    };
    // Per state its base key's id; per (base, signature) its slot (~0u:
    // none yet).
    std::vector<uint32_t> &stateBase = buffers.stateBase;
    HugeVector<uint32_t> &slotTable = buffers.slotTable;
    for (unsigned v = 0; v < n; ++v) {
      if (checkBudget())
        return StateMap{};
      // Candidates of v: (cost, sig, column per in-edge, candidate index).
      struct SC {
        double time, mem, peak;
        int sig;
        std::vector<int> in;
        int cand;
        /// Lower bound of the items after v given this choice.
        double rest;
        /// The same at `priced`'s lambda (time + lambda x memory).
        double restPrice = 0;
        /// The least time so far with which it can follow (capped search
        /// only, to rank the candidates).
        double before = 0;
        /// At the segment's exit (capped search only, to rank candidates
        /// and states): what entering the next segment in this choice's
        /// output layout costs at least beyond the least over layouts.
        double exitRank = 0;
        /// Its transient's class (numClasses > 1 only).
        uint32_t cls = 0;
      };
      std::vector<SC> scs;
      unsigned numIn = unsigned(inEdges[v].size());
      std::vector<int> livePos(n, -1);
      for (unsigned i = 0; i < live.size(); ++i)
        livePos[live[i]] = int(i);
      if (items[v].op < 0) {
        for (int l : items[v].anchorLayouts) {
          scs.push_back(
              {0, 0, 0, sigOf(v, {l}), {}, -1, cb.rest(v, nullptr, l)});
          if (priced)
            scs.back().restPrice = priced->rest.rest(v, nullptr, l);
        }
      } else {
        unsigned op = unsigned(items[v].op);
        std::map<std::pair<int, std::vector<int>>, std::vector<SC>> groups;
        for (unsigned c = 0; c < cands[op].size(); ++c) {
          const Cand &cand = cands[op][c];
          std::vector<int> tuple;
          for (unsigned operand : relevant[v])
            tuple.push_back(cand.raw->layouts[operand]);
          std::vector<int> inL;
          for (const SegEdge *e : inEdges[v])
            inL.push_back(cand.raw->layouts[e->toOperand]);
          int sig = sigOf(v, tuple);
          SC sc{cand.time, cand.stateBytes + cand.actBytes, cand.peak, sig, inL,
                int(c),    cb.rest(v, &cand, kExternal)};
          if (priced)
            sc.restPrice = priced->rest.rest(v, &cand, kExternal);
          auto &grp = groups[{sig, inL}];
          // Exact dominance pruning within a signature group.
          bool dominated = false;
          for (const SC &o : grp)
            if (o.time <= sc.time && o.mem <= sc.mem && o.peak <= sc.peak)
              dominated = true;
          ++stats.candidates;
          if (dominated) {
            ++stats.prunedCandidates;
            continue;
          }
          size_t before = grp.size();
          erase_if(grp, [&](const SC &o) {
            return sc.time <= o.time && sc.mem <= o.mem && sc.peak <= o.peak;
          });
          stats.prunedCandidates += before - grp.size();
          grp.push_back(std::move(sc));
        }
        for (auto &[k, grp] : groups)
          for (SC &sc : grp)
            scs.push_back(std::move(sc));
        if (exit && exit->item == v && capsRank) {
          // The least over the next segment's entry layouts is its total.
          double least = exit->next->total.time;
          for (SC &sc : scs)
            sc.exitRank = std::max(
                0.0, exit->next->rest(
                         0, nullptr,
                         cands[op][sc.cand].raw->layouts[exit->operand]) -
                         least);
        }
        if (options.maxCandidates && scs.size() > options.maxCandidates) {
          // Keep the fastest half and the smallest half. Fastest: A*'s f
          // through the candidate, the least time so far of the states it
          // can follow with the re-layouts into its input layouts, plus
          // its own time, plus the chain bound of the rest given its
          // output layout, plus at the segment's exit what the next
          // segment costs beyond its least when entered in that layout (a
          // candidate that is fast alone but whose layouts cost what comes
          // before or after goes first).
          std::map<std::vector<int>, double> sofar;
          for (size_t i = 0; i < states.size(); ++i) {
            ArrayRef<int> key = states.key(i);
            std::vector<int> from;
            for (const SegEdge *e : inEdges[v])
              from.push_back(
                  layoutOf(e->from, key[livePos[e->from]], e->fromOperand));
            double fastest = std::numeric_limits<double>::infinity();
            for (const Point &pt : states.front(i))
              fastest = std::min(fastest, pt.time);
            auto [it, ins] = sofar.try_emplace(std::move(from), fastest);
            if (!ins)
              it->second = std::min(it->second, fastest);
          }
          for (SC &sc : scs) {
            double best = std::numeric_limits<double>::infinity();
            for (const auto &[from, time] : sofar) {
              double t = time;
              for (unsigned k = 0; k < numIn && t < best; ++k)
                t += edgeCost(op, inEdges[v][k]->toOperand, from[k], sc.in[k]);
              best = std::min(best, t);
            }
            sc.before = best;
          }
          unsigned half = options.maxCandidates / 2;
          std::vector<SC> byTime = scs, byMem = scs;
          llvm::stable_sort(byTime, [](const SC &a, const SC &b) {
            return a.before + a.time + a.rest + a.exitRank <
                   b.before + b.time + b.rest + b.exitRank;
          });
          llvm::stable_sort(byMem, [](const SC &a, const SC &b) {
            return a.mem + a.peak < b.mem + b.peak;
          });
          // Distinct choices first: choices that differ only in which of
          // the interchangeable mesh axes (axisClass) they use are one
          // family, and each half takes the first of every family in its
          // order before any second one. (On a mesh with interchangeable
          // axes the best choices come as families of relabelings, often
          // of equal rank, that would fill a half with one choice.)
          auto familyOf = [&](const SC &sc) {
            const Partition &part = cands[op][sc.cand].raw->part;
            std::vector<int> key;
            for (const std::vector<unsigned> &axes : part.loopAxes) {
              key.push_back(-1);
              for (unsigned a : axes)
                key.push_back(int(axisClass[a]));
            }
            if (const auto &t = part.temporal)
              key.insert(key.end(), {-2, int(axisClass[t->rowAxis]),
                                     int(axisClass[t->colAxis]), int(t->mDim),
                                     int(t->nDim), int(t->kDim)});
            return key;
          };
          std::vector<SC> kept;
          std::set<int> seen;
          auto take = [&](const std::vector<SC> &order, size_t upto) {
            std::set<std::vector<int>> families;
            for (const SC &sc : order)
              if (kept.size() < upto && !seen.count(sc.cand) &&
                  families.insert(familyOf(sc)).second) {
                seen.insert(sc.cand);
                kept.push_back(sc);
              }
            for (const SC &sc : order)
              if (kept.size() < upto && seen.insert(sc.cand).second)
                kept.push_back(sc);
          };
          take(byTime, half);
          take(byMem, options.maxCandidates);
          stats.droppedStates += scs.size() - kept.size();
          scs = std::move(kept);
        }
      }
      if (numClasses > 1)
        for (SC &sc : scs)
          sc.cls = classOf(sc.peak);
      // Edge-cost tables: per in-edge, the candidates' distinct input
      // layouts are columns; a row (one producer layout) is filled once.
      std::vector<std::vector<int>> colLayout(numIn);
      std::vector<std::vector<unsigned>> colOf(scs.size(),
                                               std::vector<unsigned>(numIn));
      for (unsigned k = 0; k < numIn; ++k) {
        DenseMap<int, unsigned> cols;
        for (unsigned s = 0; s < scs.size(); ++s) {
          auto [it, ins] =
              cols.try_emplace(scs[s].in[k], unsigned(colLayout[k].size()));
          if (ins)
            colLayout[k].push_back(scs[s].in[k]);
          colOf[s][k] = it->second;
        }
      }
      std::vector<DenseMap<int, std::vector<double>>> rows(numIn);
      auto getRow = [&](unsigned k, int from) -> const std::vector<double> & {
        auto [it, ins] = rows[k].try_emplace(from);
        if (ins) {
          it->second.reserve(colLayout[k].size());
          for (int to : colLayout[k])
            it->second.push_back(edgeCost(unsigned(items[v].op),
                                          inEdges[v][k]->toOperand, from, to));
        }
        return it->second;
      };
      // Live set after v.
      std::vector<unsigned> nextLive;
      for (unsigned u : live)
        if (isSticky[u] || lastUse[u] > int(v))
          nextLive.push_back(u);
      bool vLive = isSticky[v] || lastUse[v] > int(v);
      if (vLive)
        nextLive.push_back(v);
      double restM = restMem[v + 1] + outMem;
      // Destination fronts by (base key id, signature of v).
      TupleIds bases;
      DenseMap<uint64_t, unsigned> slotOf;
      slotKeys.clear();
      slotFronts.clear();
      picks.clear();
      slotEstimate.clear();
      // Per combination of the in-edges' producer layouts (all a state's
      // re-layouts into v depend on; far fewer than the states): each
      // choice's own time plus its re-layouts, summed as the DP sums them,
      // and per choice s the least of that plus the rest bound over the
      // choices s, s+1, ..., so a state's loop ends where no later choice
      // can pass admissible's time test.
      // In the layer price's DPs (priced by price alone, one point per
      // state; not at the anchor, whose price outside varies with the
      // choice) the choices are taken in increasing price (their time
      // and re-layouts, lambda x memory and the priced rest bound), and a
      // state's loop ends at the first that fails the Lagrangian test by
      // a margin (every later one fails it exactly).
      bool priceOrder = priced && !priced->ownTransient && timeOnly && v > 0;
      struct Adds {
        std::vector<double> add, restFrom;
        /// (priceOrder) the choices by increasing price, and the prices.
        std::vector<unsigned> byPrice;
        std::vector<double> price;
      };
      TupleIds froms;
      std::vector<Adds> addsOf;
      auto getAdds = [&](ArrayRef<int> from) -> const Adds & {
        auto [id, ins] = froms.insert(from);
        if (!ins)
          return addsOf[id];
        Adds &a = addsOf.emplace_back();
        SmallVector<const std::vector<double> *, 2> row;
        for (unsigned k = 0; k < numIn; ++k)
          row.push_back(&getRow(k, from[k]));
        a.add.resize(scs.size());
        for (unsigned s = 0; s < scs.size(); ++s) {
          a.add[s] = scs[s].time;
          for (unsigned k = 0; k < numIn; ++k)
            a.add[s] += (*row[k])[colOf[s][k]];
        }
        a.restFrom.assign(scs.size() + 1,
                          std::numeric_limits<double>::infinity());
        for (unsigned s = unsigned(scs.size()); s-- > 0;)
          a.restFrom[s] = std::min(a.restFrom[s + 1], a.add[s] + scs[s].rest);
        if (priceOrder) {
          a.price.resize(scs.size());
          for (unsigned s = 0; s < scs.size(); ++s)
            a.price[s] =
                a.add[s] + priced->lambda * scs[s].mem + scs[s].restPrice;
          a.byPrice.resize(scs.size());
          std::iota(a.byPrice.begin(), a.byPrice.end(), 0u);
          llvm::stable_sort(a.byPrice, [&](unsigned x, unsigned y) {
            return a.price[x] < a.price[y];
          });
        }
        return a;
      };
      // Each state's base key (its key without what v's step drops), by
      // id; then the slots: per base a row of v's signatures where all
      // rows fit in a small table (no hashing in the loop below;
      // SolverOptions::maxSlotTableEntries), else a hash map of (base,
      // signature).
      SmallVector<int, 4> from;
      SmallVector<int, 8> base;
      stateBase.resize(states.size());
      for (size_t i = 0; i < states.size(); ++i) {
        ArrayRef<int> key = states.key(i);
        base.clear();
        for (unsigned u : nextLive)
          if (u != v)
            base.push_back(key[livePos[u]]);
        stateBase[i] = bases.insert(base).first;
      }
      size_t numSigs = vLive ? sigLayouts[v].size() : 1;
      // Per base a row of numSigs x numClasses slots.
      size_t rowSize = numSigs * numClasses;
      bool dense = bases.size() * rowSize <= options.maxSlotTableEntries;
      // The price outside the segment per signature of its anchor (item
      // 0; PricedRest::outFrom), where known.
      std::vector<double> anchorOut;
      if (priced && !priced->outFrom.empty() && items[0].op < 0)
        for (unsigned sig = 0; sig < sigLayouts[0].size(); ++sig) {
          auto it = priced->outFrom.find(layoutOf(0, int(sig), 0));
          anchorOut.push_back(it == priced->outFrom.end() ? priced->out
                                                          : it->second);
        }
      if (dense)
        slotTable.assign(bases.size() * rowSize, ~0u);
      for (size_t i = 0; i < states.size(); ++i) {
        // (Often: a step can make hundreds of slots per state.)
        if ((i & 255) == 0 && checkBudget())
          return StateMap{};
        ++stats.statesVisited;
        ArrayRef<int> key = states.key(i);
        ArrayRef<Point> front = states.front(i);
        int anchorSig = v > 0 && !anchorOut.empty() ? key[livePos[0]] : 0;
        from.clear();
        for (const SegEdge *e : inEdges[v])
          from.push_back(
              layoutOf(e->from, key[livePos[e->from]], e->fromOperand));
        const Adds &adds = getAdds(from);
        uint64_t bi = uint64_t(stateBase[i]) << 32;
        uint32_t *row =
            dense ? slotTable.data() + size_t(stateBase[i]) * rowSize : nullptr;
        // A choice whose time and rest bound, from the state's fastest
        // point, already fail admissible's time test is skipped (the same
        // additions in the same order: exact), and the loop ends where no
        // later choice can pass (suffix minima, with a margin for their
        // different rounding).
        double fastest = std::numeric_limits<double>::infinity();
        for (const Point &pt : front)
          fastest = std::min(fastest, pt.time);
        // (Classes: time-only DPs, one point per state.)
        uint32_t frontCls = numClasses > 1 ? classOf(front[0].peak) : 0;
        // (priceOrder) what the test adds to a choice's price: the state's
        // price, the price outside and the room, less the bound.
        double priceBase = 0;
        if (priceOrder)
          priceBase = front[0].time + priced->lambda * front[0].mem +
                      (anchorOut.empty() ? priced->out
                                         : anchorOut[unsigned(anchorSig)]) +
                      constantTime - priced->lambda * (limit - peakLB) -
                      (bound + lagrangeSlack(priced->lambda));
        for (unsigned at = 0; at < scs.size(); ++at) {
          unsigned s = at;
          if (priceOrder) {
            s = adds.byPrice[at];
            if (priceBase + adds.price[s] >= 1e-12 * std::abs(bound))
              break;
          } else if ((fastest + adds.restFrom[s] + outTime) + constantTime >=
                     bound + 1e-12 * std::abs(bound)) {
            break;
          }
          const SC &sc = scs[s];
          double add = adds.add[s];
          if ((fastest + add) + (sc.rest + outTime) + constantTime >= bound)
            continue;
          uint64_t sigSlots = uint64_t(vLive ? sc.sig : 0) * numClasses;
          int dstSlot = -1;
          uint32_t dstClass = 0;
          for (const Point &pt : front) {
            Point np{pt.time + add, pt.mem + sc.mem,
                     std::max(pt.peak, sc.peak), -1};
            if (!admissible(np, sc.rest + outTime, restM))
              continue;
            uint32_t cls = std::max(frontCls, sc.cls);
            if (cls != dstClass) {
              dstSlot = -1;
              dstClass = cls;
            }
            if (priced &&
                np.time + priced->lambda * np.mem + sc.restPrice +
                        (anchorOut.empty()
                             ? priced->out
                             : anchorOut[unsigned(v == 0 ? sc.sig
                                                         : anchorSig)]) +
                        constantTime -
                        priced->lambda *
                            (limit - (priced->ownTransient
                                          ? std::max(np.peak, peakLB)
                                          : peakLB)) +
                        (numClasses > 1 ? priced->classExtra[cls] : 0) >=
                    bound + lagrangeSlack(priced->lambda)) {
              ++stats.pricedRestDrops;
              continue;
            }
            if (dstSlot < 0) {
              uint64_t dk = bi | uint32_t(sigSlots + cls);
              bool sins = false;
              if (dense) {
                uint32_t &cell = row[uint32_t(dk)];
                if (cell == ~0u) {
                  cell = uint32_t(slotKeys.size());
                  sins = true;
                }
                dstSlot = int(cell);
              } else {
                auto [sit, ins] =
                    slotOf.try_emplace(dk, unsigned(slotKeys.size()));
                sins = ins;
                dstSlot = int(sit->second);
              }
              if (sins) {
                slotKeys.push_back(dk);
                if (ranked)
                  slotEstimate.push_back(
                      std::numeric_limits<double>::infinity());
                if (timeOnly) {
                  // (Its node, made at the step's end, counted now.)
                  picks.push_back({Point{inf, 0, 0, -1}, -1});
                  ++nodesMade;
                } else {
                  slotFronts.emplace_back();
                }
              }
            }
            if (timeOnly) {
              Pick &pick = picks[dstSlot];
              if (rank(pick.point) <= rank(np))
                continue;
              np.node = pt.node;
              pick = {np, sc.cand};
              estimate(dstSlot, np.time + sc.rest + outTime + sc.exitRank);
              continue;
            }
            // (Its node is written at the step's end if its front keeps
            // it; counted now.)
            np.node = pt.node;
            np.cand = sc.cand;
            if (insert(slotFronts[dstSlot], np)) {
              ++nodesMade;
              estimate(dstSlot, np.time + sc.rest + outTime + sc.exitRank);
            }
          }
        }
      }
      next.reset(unsigned(nextLive.size()));
      nextEstimate.clear();
      for (auto [i, dk] : llvm::enumerate(slotKeys)) {
        ArrayRef<Point> front;
        Point picked;
        if (timeOnly) {
          const Pick &pick = picks[i];
          nodes.push_back({pick.point.node, -1,
                           pick.cand >= 0 ? items[v].op : -1, pick.cand});
          picked = pick.point;
          picked.node = int32_t(nodes.size() - 1);
          front = picked;
        } else {
          for (Point &pt : slotFronts[i]) {
            nodes.push_back(
                {pt.node, -1, pt.cand >= 0 ? items[v].op : -1, pt.cand});
            pt.node = int32_t(nodes.size() - 1);
            pt.cand = -1;
          }
          front = slotFronts[i];
        }
        if (front.empty())
          continue;
        base.assign(bases[unsigned(dk >> 32)]);
        if (vLive)
          base.push_back(int(uint32_t(dk) / numClasses));
        next.push(base, front);
        if (ranked)
          nextEstimate.push_back(slotEstimate[i]);
      }
      if (ranked && next.size() > options.maxStates) {
        // Ranked by time so far plus the chain bound of the rest (A*'s
        // f = g + h, with the bound that prunes exactly): a state that is
        // fast so far but whose layout costs the rest more goes first.
        std::vector<std::pair<double, unsigned>> order;
        for (unsigned i = 0; i < next.size(); ++i)
          order.push_back({nextEstimate[i], i});
        std::nth_element(order.begin(), order.begin() + options.maxStates,
                         order.end());
        StateSet kept;
        kept.reset(next.width);
        for (unsigned i = 0; i < options.maxStates; ++i)
          kept.push(next.key(order[i].second), next.front(order[i].second));
        stats.droppedStates += next.size() - options.maxStates;
        next = std::move(kept);
      }
      std::swap(states, next);
      live = std::move(nextLive);
    }
    // Re-key by the sticky operands' layouts.
    StateMap out;
    for (size_t i = 0; i < states.size(); ++i) {
      Key k;
      for (auto [item, operand] : sticky) {
        unsigned pos = unsigned(find(live, item) - live.begin());
        k.push_back(layoutOf(item, states.key(i)[pos], operand));
      }
      Front &dst = out[k];
      for (const Point &pt : states.front(i)) {
        if (numClasses == 1) {
          insert(dst, pt);
          continue;
        }
        // (Per class its least-ranked point.)
        auto same = llvm::find_if(dst, [&](const Point &q) {
          return classOf(q.peak) == classOf(pt.peak);
        });
        if (same == dst.end())
          dst.push_back(pt);
        else if (rank(pt) < rank(*same))
          *same = pt;
      }
    }
    return out;
  };

  auto concat = [&](const Point &a, const Point &b) {
    nodes.push_back({a.node, b.node, -2, -1});
    ++nodesMade;
    Point sum = addPoints(a, b);
    sum.node = int32_t(nodes.size() - 1);
    return sum;
  };

  // A capped search ranks the choices at a segment's exit by what entering
  // the next segment in their layout costs (SegmentExit): the layer's chain
  // bound with every layout the pre section's output and the carry can
  // take among its anchors (the layer's own DP reads the same bound), and
  // where one layer is followed by the post section, the post's.
  std::optional<ChainBound> exitBlock, exitPost;
  if (hasLayers && capsRank) {
    std::set<int> entries;
    for (const Cand &c : cands[*carry])
      entries.insert(c.raw->layouts[carryOperand]);
    if (!pre.empty())
      for (const Cand &c : cands[pre.back()])
        entries.insert(c.raw->layouts[preOutOperand]);
    std::vector<int> anchors(entries.begin(), entries.end());
    Segment seg = makeSegment(layer, Section::Layer, anchors);
    exitBlock = chainBound(seg.items, seg.edges);
    if (P.layers == 1 && !post.empty()) {
      Segment postExit = makeSegment(post, Section::Post, anchors);
      exitPost = chainBound(postExit.items, postExit.edges);
    }
  }

  // Pre section.
  std::map<int, Front> preFront; // carry layout -> front
  Front noLayerFront;
  {
    if (!pre.empty()) {
      std::vector<std::pair<unsigned, unsigned>> sticky;
      std::optional<SegmentExit> exit;
      if (hasLayers)
        sticky.push_back({preSeg.pos[pre.back()], preOutOperand});
      if (exitBlock)
        exit = SegmentExit{preSeg.pos[pre.back()], preOutOperand, &*exitBlock};
      StateMap res = runSegment(preSeg.items, preSeg.edges, sticky,
                                layers * blockTimeLB + postTimeLB,
                                layers * blockMemLB + postMemLB, nullptr, exit);
      if (overBudget)
        return budgetError();
      for (auto &[k, f] : res) {
        if (hasLayers)
          preFront[k[0]] = f;
        else
          noLayerFront = f;
      }
    } else if (hasLayers) {
      preFront[kExternal].push_back(Point{0, 0, 0, 0});
    }
  }

  Point bestPoint;
  bool found = false;
  double bestTime = inf, bestRank = inf;
  auto consider = [&](const Point &pt) {
    double total = pt.time + constantTime;
    // (Without priceLambda the rank is the total time, the same sum.)
    double r = rank(pt) + constantTime;
    if ((timeOnly || pt.mem + pt.peak <= limit) && r < bestRank) {
      bestRank = r;
      bestTime = total;
      bestPoint = pt;
      found = true;
    }
  };

  if (!hasLayers) {
    for (const Point &pt : noLayerFront)
      consider(pt);
  } else {
    // The pre section's exact minima tighten the bounds of the rest.
    double preTime = inf, preMem = inf;
    for (auto &[l, f] : preFront)
      for (const Point &pt : f) {
        preTime = std::min(preTime, pt.time);
        preMem = std::min(preMem, pt.mem);
      }
    if (preFront.empty())
      return err("no plan fits in the memory limit");
    // Anchors: every layout the carry can arrive in.
    std::set<int> anchorSet;
    for (auto &[l, f] : preFront)
      anchorSet.insert(l);
    for (const Cand &c : cands[*carry])
      anchorSet.insert(c.raw->layouts[carryOperand]);
    std::vector<int> anchors(anchorSet.begin(), anchorSet.end());
    // Block.
    Matrix block;
    {
      Segment seg = makeSegment(layer, Section::Layer, anchors);
      std::vector<std::pair<unsigned, unsigned>> sticky = {
          {0, 0}, {seg.pos[*carry], carryOperand}};
      // (exitBlock's anchors include this segment's: the same bounds.)
      std::optional<SegmentExit> exit;
      if (exitBlock && P.layers > 1)
        exit = SegmentExit{seg.pos[*carry], carryOperand, &*exitBlock};
      else if (exitPost)
        exit = SegmentExit{seg.pos[*carry], carryOperand, &*exitPost};
      const ChainBound *given = exitBlock ? &*exitBlock : nullptr;
      double outMem = preMem + (layers - 1) * blockMemLB + postMemLB;
      // A block entry is worth keeping when it and layers - 1 others, at
      // least blockTimeLB each, can beat the bound: its time is below
      // bound - rest (the DP prunes at time + outTime + constantTime >=
      // bound). With many layers that leaves one layer the whole plan's
      // slack, so first only the entries below blockTimeLB + slack /
      // layers are sought (few states survive): where there are none, every
      // layer costs at least that much and no plan beats the bound; else
      // their least time M is every layer's exact minimum, which lowers
      // the needed threshold to bound - pre - post - (layers - 1) M, and
      // the block is run again only if that is above the first one.
      auto outTime = [&](double perLayer) {
        return preTime + (layers - 1) * perLayer + postTimeLB;
      };
      double out = outTime(blockTimeLB);
      StateMap res;
      bool rerun = true;
      // (Exact runs only: a capped run's least time is no bound.)
      // (Not before the layer price alone: it does not read them.)
      if (std::isfinite(bound) && layers > 1 && !options.isCapped() &&
          !layerPriceOnly) {
        double slack = bound - constantTime - out - blockTimeLB;
        if (slack <= 0)
          return err("no plan beats the bound");
        // (A margin toward keeping more: "none" must hold exactly.)
        double first = bound - constantTime - (blockTimeLB + slack / layers) -
                       1e-9 * std::abs(bound);
        res = runSegment(seg.items, seg.edges, sticky, first, outMem, given,
                         exit);
        if (overBudget)
          return budgetError();
        double least = inf;
        for (auto &[k, f] : res)
          for (const Point &pt : f)
            least = std::min(least, pt.time);
        if (!std::isfinite(least))
          return err("no plan beats the bound");
        blockTimeLB = std::max(blockTimeLB, least);
        out = outTime(blockTimeLB);
        rerun = out < first;
        if (rerun && layerShare < 1) {
          out += (bound - constantTime - out - blockTimeLB) * (1 - layerShare);
          rerun = out < first;
        }
      }
      std::optional<PricedRest> priced;
      if ((!timeOnly || priceLambda > 0) && bestLagrange && options.layerDual &&
          !options.isCapped()) {
        const SectionBounds *best = &lagranges[*bestLagrange];
        // Every other layer's price is at least one layer's least price,
        // which the block's DP with fronts of one point priced time +
        // lambda x additive memory finds (exact for that sum, by Bellman)
        // with no time or memory test; only the transient ceiling holds
        // (a candidate over it is in no plan that beats the bound, and a
        // point over it stays over it). Unlike the chain bound
        // it counts every re-layout, and it is multiplied by layers - 1.
        // Its points are pruned by the Lagrangian test with the chain
        // bound of the other layers and the room every plan has (so by
        // price alone): every layer through a dropped point costs at least
        // `cut`, so min(least price, cut) bounds every layer of a plan that
        // beats the bound. (Pareto runs only: a priced seed's run would
        // pay for it again per lambda.)
        // (room, peakLB and peakCeiling are narrowed per transient class
        // below.)
        double room = limit - peakLB;
        // The pre section's least price of the points of transient <= high,
        // at least b's bound of it.
        auto prePriceUnder = [&](double lambda, double high,
                                 const SectionBounds &b) {
          double price = inf;
          for (auto &[l, f] : preFront)
            for (const Point &pt : f)
              if (pt.peak <= high)
                price = std::min(price, pt.time + lambda * pt.mem);
          return std::max(price, b.pre.time);
        };
        auto prePriceAt = [&](double lambda, const SectionBounds &b) {
          return prePriceUnder(lambda, peakCeiling, b);
        };
        // The layer price's DPs also bound, per layout a of the carry, the
        // price of every plan with a layer entered in a (pre, layers and
        // post chained along the carry's layouts, each layer priced per
        // pair of layouts in and out: getLayerEntryBounds); where that
        // cannot beat the bound, no plan that does enters a layer in a,
        // and a is dropped from the layer's anchors (for the DPs that
        // follow, this one's included). The chain's least also bounds the
        // whole plan, more tightly than layers x the least layer price.
        std::vector<int> &liveAnchors = seg.items[0].anchorLayouts;
        // The last DP's `outside` per anchor layout, and the one at the
        // lambda chosen (PricedRest::outFrom).
        std::map<int, double> lastOutside, outsideAt;
        // The DP that keeps every pair of layouts splits its points by
        // transient (SolverOptions::transientLayerPrice): runs [T_lo, T_hi]
        // of the candidates' distinct transients in [peakLB, peakCeiling]
        // (at most 8). A plan whose transient lies in one uses candidates
        // of transient <= T_hi only and leaves its additive memory at most
        // limit - T_lo: its layers are priced with that room (each class
        // keeping its own points: PricedRest::classHighs), and chained per
        // class. Where a class cannot beat the bound, no plan of it can;
        // the lowest and the highest class that can then bound every
        // answer's transient (classRange).
        TransientClasses classes = [&] {
          std::vector<double> peaks;
          if (options.transientLayerPrice)
            for (unsigned op = 0; op < P.ops.size(); ++op)
              for (const Cand &c : cands[op])
                if (c.peak >= peakLB && c.peak <= peakCeiling)
                  peaks.push_back(c.peak);
          return TransientClasses(std::move(peaks), 8);
        }();
        std::optional<std::pair<double, double>> classRange;
        // (Its DP stops past `maxNodes` nodes: then no price, nullopt;
        // else the least layer price and the chain's plan bound.)
        // (`allPairs`: the second DP below as well.)
        auto layerPriceAt =
            [&](double lambda, const SectionBounds &b, size_t maxNodes,
                bool allPairs) -> std::optional<std::pair<double, double>> {
          double prePrice = prePriceAt(lambda, b);
          PricedRest others{lambda, chainBound(seg.items, seg.edges, lambda),
                            prePrice + (layers - 1) * b.layer.time +
                                b.post.time,
                            /*ownTransient=*/false};
          // Its DP keeps the layers priced below `cut`: the price beyond
          // which no plan that beats the bound has a layer, given that
          // every other layer costs at least `other`.
          double full = bound + lagrangeSlack(lambda) + lambda * room -
                        constantTime - prePrice - b.post.time;
          auto cutFor = [&](double other) {
            return full - (layers - 1) * other;
          };
          double cut = cutFor(b.layer.time);
          bool perClass = allPairs && classes.size() > 1;
          // Per class K, the pre and post sections' chain bounds under its
          // ceiling (the layer's: b's; the layers' least prices per class,
          // below, bound them more tightly).
          std::vector<SectionBounds> classBounds;
          for (size_t k = 0; perClass && k < classes.size(); ++k) {
            SectionBounds under = sectionBoundsUnder(classes.high(k), lambda);
            SectionBounds &bk = classBounds.emplace_back(b);
            bk.pre = under.pre;
            bk.post = under.post;
          }
          // Per class c, what its points are charged beyond the cut `c0`
          // of the DP: a layer of class c is in plans of the classes
          // K >= c only, whose other layers cost at least other[K] each
          // (+inf: none of its plans beats the bound), whose pre section
          // costs at least its points of transient <= T_hi(K) do, the post
          // section its chain bound under T_hi(K), and whose room is
          // limit - T_lo(K), so it is in no plan that beats the
          // bound where its price is at least each of those K's cuts: the
          // largest of them is the class's (none: +inf charged). Empty
          // `other`: no classes.
          auto classExtras = [&](double c0, const std::vector<double> &other) {
            std::vector<double> extra(other.size(), inf);
            double cutK = -inf;
            for (size_t k = other.size(); k-- > 0;) {
              if (std::isfinite(other[k])) {
                double preK =
                    prePriceUnder(lambda, classes.high(k), classBounds[k]);
                cutK = std::max(
                    cutK,
                    full + prePrice - preK + b.post.time -
                        classBounds[k].post.time -
                        lambda * (std::max(classes.low(k), peakLB) - peakLB) -
                        (layers - 1) * other[k]);
              }
              extra[k] = std::max(0.0, c0 - cutK);
            }
            return extra;
          };
          timeOnly = true;
          priceLambda = lambda;
          noMemoryTest = true;
          size_t mark = nodes.size(), madeAtMark = nodesMade;
          size_t givenLimit = quickTryLimit;
          if (givenLimit > madeAtMark && maxNodes < givenLimit - madeAtMark)
            quickTryLimit = madeAtMark + maxNodes;
          // (`extra`: per transient class, what its points' prices are
          // charged beyond `c` (PricedRest::classExtra); empty: the points
          // are not split by class.)
          auto runBelow = [&](double c, std::vector<double> extra) {
            others.out = full + prePrice + b.post.time - c;
            others.classHighs.clear();
            if (!extra.empty())
              for (size_t k = 0; k < classes.size(); ++k)
                others.classHighs.push_back(classes.high(k));
            others.classExtra = std::move(extra);
            return measurePhase(stats.layerPrice, [&] {
              return runSegment(seg.items, seg.edges, sticky, -inf, 0, given,
                                std::nullopt, &others);
            });
          };
          // First only the layers below the chain bound plus 1/layers of
          // the slack (some layer of a plan that beats the bound is; few
          // states): where there are none, no plan beats it; else their
          // least is every layer's least price, and (where `allPairs`) the
          // layers below the cut it gives, lower, are sought again: every
          // pair of layouts that a plan beating the bound can use, which
          // the chain below needs to drop layouts (PricedRest::out is what
          // the cut is made of).
          double first = b.layer.time + (cut - b.layer.time) / layers +
                         1e-9 * std::abs(bound);
          // Where the last DP's cut is cutFor(m) for a price m no layer is
          // below (b.layer.time, the least found, or where none is below
          // `first`, `first` itself: cutFor(first) is `first` less the
          // margin), a plan with a layer through a dropped point costs at
          // least the bound: its pairs of layouts are in no such plan.
          bool droppedDead = false;
          StateMap least;
          if (first < cut && layers > 1) {
            least = runBelow(first, perClass
                                        ? std::vector<double>(classes.size(), 0)
                                        : std::vector<double>());
            double found = inf;
            for (auto &[k, f] : least)
              for (const Point &pt : f)
                found = std::min(found, pt.time + lambda * pt.mem);
            droppedDead = !std::isfinite(found);
            double second = std::isfinite(found)
                                ? cutFor(std::max(found, b.layer.time))
                                : first;
            if (!allPairs)
              second = first;
            if (second > first && !overQuickTry) {
              // Per class, the least price of its layers (the first DP
              // kept each class's least below `first`; none: every layer
              // of it costs at least `first`, so none of its plans beats
              // the bound).
              std::vector<double> classOther;
              for (size_t k = 0; perClass && k < classes.size(); ++k) {
                double least_k = inf;
                for (auto &[key, f] : least)
                  for (const Point &pt : f)
                    if (pt.peak <= classes.high(k))
                      least_k = std::min(least_k, pt.time + lambda * pt.mem);
                classOther.push_back(
                    std::max(least_k, classBounds[k].layer.time));
              }
              least = runBelow(second, classExtras(second, classOther));
              droppedDead = true;
            }
            cut = std::min(cut, std::max(second, first));
          } else {
            std::vector<double> classOther;
            for (const SectionBounds &bk : classBounds)
              classOther.push_back(bk.layer.time);
            least = runBelow(cut, classExtras(cut, classOther));
            droppedDead = true;
          }
          quickTryLimit = givenLimit;
          resetNodes(mark, madeAtMark);
          timeOnly = false;
          priceLambda = 0;
          noMemoryTest = false;
          if (overQuickTry) {
            overQuickTry = false;
            overBudget = overMemoryBudget;
            return std::nullopt;
          }
          double price = cut;
          for (auto &[k, f] : least)
            for (const Point &pt : f)
              price = std::min(price, pt.time + lambda * pt.mem);
          price = std::max(b.layer.time, price);
          // Per pair of layouts: its least, or where its points were
          // dropped `cut` (+inf where droppedDead); +inf from a dropped
          // anchor (no plan that beats the bound enters a layer there).
          // Chained for the plans of transient in [low, high] (the whole
          // range, or per class): points above `high` left out, the room
          // limit - low.
          size_t n = anchors.size();
          auto indexOf = [&](int layout) {
            return size_t(llvm::lower_bound(anchors, layout) - anchors.begin());
          };
          auto chainOf = [&](double high, const SectionBounds &b) {
            std::vector<double> pre(n, inf), pairs(n * n, inf);
            for (auto [i, a] : llvm::enumerate(anchors)) {
              if (!llvm::is_contained(liveAnchors, a))
                continue;
              for (size_t j = 0; j < n; ++j)
                pairs[i * n + j] =
                    droppedDead ? inf : std::max(cut, b.layer.time);
              if (auto it = preFront.find(a); it != preFront.end()) {
                for (const Point &pt : it->second)
                  if (pt.peak <= high)
                    pre[i] = std::min(pre[i], pt.time + lambda * pt.mem);
                pre[i] = std::max(pre[i], b.pre.time);
              }
            }
            for (auto &[k, f] : least) {
              size_t i = indexOf(k[0]), j = indexOf(k[1]);
              if (i == n || j == n || anchors[i] != k[0] || anchors[j] != k[1])
                continue;
              for (const Point &pt : f)
                if (pt.peak <= high)
                  pairs[i * n + j] = std::min(
                      pairs[i * n + j],
                      std::max(b.layer.time, pt.time + lambda * pt.mem));
            }
            return getLayerEntryBounds(pre, pairs, b.post.time, layers);
          };
          // (With each range's chain bounds.)
          std::vector<std::tuple<double, double, const SectionBounds *>> ranges;
          for (size_t k = 0; perClass && k < classes.size(); ++k)
            ranges.push_back({std::max(classes.low(k), peakLB), classes.high(k),
                              &classBounds[k]});
          if (ranges.empty())
            ranges.push_back({peakLB, peakCeiling, &b});
          // The least plan bound over the ranges; per layout, whether a
          // plan of some range that beats the bound can enter a layer in
          // it, and the least price outside such a layer.
          double value = inf;
          std::vector<bool> entered(n, false);
          std::vector<double> outside(n, inf);
          std::optional<std::pair<double, double>> beatable;
          for (auto [low, high, bounds] : ranges) {
            LayerEntryBounds chain = chainOf(high, *bounds);
            double rangeRoom = limit - low;
            double v = chain.whole + constantTime - lambda * rangeRoom;
            value = std::min(value, v);
            if (v < bound + lagrangeSlack(lambda))
              beatable = {beatable ? beatable->first : low, high};
            double slack = bound + lagrangeSlack(lambda) + lambda * rangeRoom -
                           constantTime;
            for (size_t i = 0; i < n; ++i) {
              if (chain.entry[i] < slack)
                entered[i] = true;
              outside[i] = std::min(outside[i], chain.outside[i]);
            }
          }
          if (perClass)
            classRange = beatable;
          size_t live = liveAnchors.size();
          erase_if(liveAnchors, [&](int a) {
            size_t i = indexOf(a);
            return i < n && anchors[i] == a && !entered[i];
          });
          stats.droppedAnchors += live - liveAnchors.size();
          lastOutside.clear();
          for (auto [i, a] : llvm::enumerate(anchors))
            lastOutside[a] = outside[i];
          return std::make_pair(price, value);
        };
        double lambda = best->lambda, layerPrice = best->layer.time;
        SectionBounds at = *best;
        if (!timeOnly && layers > 1 && quickTryNodes > 0) {
          quickTryLimit = nodesMade + quickTryNodes;
        } else if (auto known =
                       tables->layerPrices.find(config.getPriceFields());
                   layers > 1 && options.layerPrice &&
                   known != tables->layerPrices.end() &&
                   known->second.bound >= bound &&
                   known->second.bound - bound <=
                       (known->second.bound - known->second.floor) / 4) {
          // Concluded by an earlier pass under this bound or a higher one
          // (the priced seed's DPs read it too).
          const Tables::LayerPriceMemo &m = known->second;
          lambda = m.lambda;
          layerPrice = m.layerPrice;
          at = m.at;
          erase_if(liveAnchors, [&](int a) {
            return !llvm::is_contained(m.liveAnchors, a);
          });
          peakLB = std::max(peakLB, m.peakLB);
          peakCeiling = std::min(peakCeiling, m.peakCeiling);
          outsideAt = m.outside;
        } else if (!timeOnly && layers > 1 && options.layerPrice) {
          // The layer price's plan bound is concave in lambda (a least of
          // sums linear in it, less lambda x room): its maximum near the
          // chain bound's best lambda, stopping at a lambda that rejects
          // the configuration.
          // Its DPs stop once they have visited layerPriceStates states in
          // all (each DP's node limit is what is left: one node per state
          // in these one-point DPs); the golden section keeps the best
          // lambda evaluated (any lambda's price is a bound; a DP stopped
          // short gives none).
          double bestValue = -inf;
          double x0 = std::log2(best->lambda);
          size_t spent = 0;
          maximizeUnimodal(x0 - 1, x0 + 2, 6, [&](double x) {
            if (spent >= layerPriceStates)
              return -inf;
            double l = std::exp2(x);
            SectionBounds b = sectionBounds(l);
            uint64_t before = stats.layerPrice.states;
            std::optional<std::pair<double, double>> price =
                layerPriceAt(l, b, layerPriceStates - spent, false);
            spent += stats.layerPrice.states - before;
            if (!price) {
              spent = layerPriceStates;
              return -inf;
            }
            auto [lp, v] = *price;
            if (v > bestValue) {
              bestValue = v;
              lambda = l;
              layerPrice = lp;
              at = b;
              outsideAt = lastOutside;
            }
            return v >= bound + lagrangeSlack(l) ? inf : v;
          });
          if (overBudget)
            return budgetError();
          if (bestValue >= bound + lagrangeSlack(lambda))
            return err("no plan beats the bound");
          // At the best lambda, every pair of layouts below the cut: the
          // chain's layouts dropped and the outside per anchor.
          // (Kept for later passes where it finished: Tables::layerPrices.)
          bool finished = false;
          if (std::isfinite(bestValue) && spent < layerPriceStates) {
            std::optional<std::pair<double, double>> price =
                layerPriceAt(lambda, at, layerPriceStates - spent, true);
            finished = price.has_value();
            if (price) {
              outsideAt = lastOutside;
              if (price->second >= bound + lagrangeSlack(lambda)) {
                if (classes.size() > 1)
                  ++stats.classLayerPriceRejections;
                return err("no plan beats the bound");
              }
              if (classRange) {
                peakLB = std::max(peakLB, classRange->first);
                peakCeiling = std::min(peakCeiling, classRange->second);
              }
            }
            if (overBudget)
              return budgetError();
          }
          if (finished)
            tables->layerPrices[config.getPriceFields()] =
                Tables::LayerPriceMemo{bound,      bestValue,   lambda,
                                       layerPrice, at,          liveAnchors,
                                       peakLB,     peakCeiling, outsideAt};
        }
        priced.emplace(PricedRest{
            lambda, chainBound(seg.items, seg.edges, lambda),
            prePriceAt(lambda, at) + (layers - 1) * layerPrice + at.post.time});
        for (auto &[a, o] : outsideAt)
          priced->outFrom[a] = std::max(priced->out, o);
      }
      if (layerPriceOnly)
        return err(kLayerPriceDone);
      if (rerun)
        res = runSegment(seg.items, seg.edges, sticky, out, outMem, given, exit,
                         priced ? &*priced : nullptr);
      if (overBudget)
        return budgetError();
      for (auto &[k, f] : res)
        block[{k[0], k[1]}] = f;
    }
    // The post section's fronts per carry layout entering it.
    auto solvePost = [&](const std::vector<int> &outs, double outTime,
                         double outMem) {
      std::map<int, Front> fronts;
      if (post.empty()) {
        for (int l : outs)
          fronts[l].push_back(Point{0, 0, 0, 0});
      } else if (!outs.empty()) {
        Segment seg = makeSegment(post, Section::Post, outs);
        StateMap res =
            runSegment(seg.items, seg.edges, {{0, 0}}, outTime, outMem);
        for (auto &[k, f] : res)
          fronts[k[0]] = f;
      }
      return fronts;
    };
    std::map<int, Front> postFront;
    bool postSolved = false;
    // Exact runs where memory binds (solveDP runs this DP only when the
    // time-only plan does not fit): the post section is solved first from
    // every carry layout, and the Lagrangian bound of the DP's own fronts
    // (LayerDual) at the multiplier that maximizes it either rejects the
    // configuration or prunes the layer products, per pair of carry
    // layouts. The bound is concave in lambda, so a golden-section search
    // over log2 lambda finds its maximum.
    std::optional<LayerDual> dual;
    std::vector<LayerDual> moreDuals;
    double dualValue = inf;
    if (!timeOnly && !options.isCapped() && options.layerDual &&
        std::isfinite(bound) && limit - peakLB > 0) {
      ++stats.dualSolves;
      postFront = solvePost(anchors, preTime + layers * blockTimeLB,
                            preMem + layers * blockMemLB);
      postSolved = true;
      if (overBudget)
        return budgetError();
      double room = limit - peakLB;
      auto value = [&](const LayerDual &d) {
        return d.getWhole() + constantTime - d.lambda * room;
      };
      // The least-priced plan at each lambda tried that fits: the fastest
      // seeds the bound (below).
      double seedLambda = -1, seedTime = bound - constantTime;
      auto at = [&](double x) {
        LayerDual d(anchors, preFront, block, postFront, P.layers,
                    std::exp2(x));
        const Point &t = d.getWholeTotal();
        if (std::isfinite(d.getWhole()) && t.mem + t.peak <= limit &&
            t.time < seedTime) {
          seedTime = t.time;
          seedLambda = d.lambda;
        }
        return d;
      };
      double hi = std::log2(std::max(timeLB, bound) / room) + 12;
      double best = -inf;
      maximizeUnimodal(hi - 48, hi, 32, [&](double x) {
        LayerDual d = at(x);
        double v = value(d);
        if (!dual || v > best) {
          best = v;
          dual.emplace(std::move(d));
        }
        return v;
      });
      dualValue = value(*dual);
      if (value(*dual) >= bound + lagrangeSlack(dual->lambda))
        return err("no plan beats the bound");
      // Per transient class of the fronts: a plan whose transient lies in
      // [T_lo, T_hi] has parts of transient <= T_hi only and leaves at
      // most limit - T_lo for its additive memory, so the dual over those
      // parts, with that room and its own best lambda, bounds it (the
      // whole dual's single lambda and room limit - peakLB are weaker
      // where the plans that fit carry larger transients). Where no class
      // can beat the bound, no plan does. The class of the whole dual's
      // plan first: it is the likeliest to beat the bound, which ends
      // the test.
      {
        std::vector<double> peaks;
        auto collect = [&](const Front &f) {
          for (const Point &p : f)
            peaks.push_back(std::max(p.peak, peakLB));
        };
        for (auto &[l, f] : preFront)
          collect(f);
        for (auto &[ab, f] : block)
          collect(f);
        for (auto &[l, f] : postFront)
          collect(f);
        TransientClasses classes(std::move(peaks), 8);
        size_t numClasses = classes.size();
        std::vector<size_t> order;
        double wholePeak = std::max(dual->getWholeTotal().peak, peakLB);
        for (size_t k = 0; k < numClasses; ++k)
          order.push_back(k);
        auto classOf = [&](size_t k) {
          return std::make_pair(classes.low(k), classes.high(k));
        };
        std::stable_partition(order.begin(), order.end(), [&](size_t k) {
          auto [lo, hi] = classOf(k);
          return lo <= wholePeak && wholePeak <= hi;
        });
        bool beatable = numClasses < 2;
        for (size_t k : order) {
          if (beatable)
            break;
          auto [lo, hi] = classOf(k);
          double classRoom = limit - lo;
          if (classRoom <= 0)
            continue;
          double top = std::log2(std::max(timeLB, bound) / classRoom) + 12;
          beatable =
              std::isfinite(maximizeUnimodal(
                  top - 48, top, 32,
                  [&](double x) {
                    LayerDual d(anchors, preFront, block, postFront, P.layers,
                                std::exp2(x), hi);
                    double v =
                        d.getWhole() + constantTime - d.lambda * classRoom;
                    return v >= bound + lagrangeSlack(d.lambda) ? inf : v;
                  },
                  bound + lagrangeSlack(0)));
        }
        if (!beatable) {
          ++stats.classDualRejections;
          return err("no plan beats the bound");
        }
      }
      // The products' test below holds at every lambda, and which lambda
      // rejects a point depends on its memory: a point heavier than the
      // optimum's is rejected sooner by a larger lambda, a lighter one by
      // a smaller. So the duals at lambda x 2^k (k = +-1..3) test too.
      for (int k : {-3, -2, -1, 1, 2, 3})
        moreDuals.emplace_back(anchors, preFront, block, postFront, P.layers,
                               std::ldexp(dual->lambda, k));
      // A plan that fits and beats `bound` is this configuration's answer
      // unless the products find a faster one, so `bound` drops to it.
      if (seedLambda >= 0) {
        LayerDual seed(anchors, preFront, block, postFront, P.layers,
                       seedLambda);
        std::vector<Point> parts = seed.getWholePoints();
        Point joined = parts.front();
        for (size_t i = 1; i < parts.size(); ++i)
          joined = concat(joined, parts[i]);
        bestPoint = joined;
        bestTime = joined.time + constantTime;
        bestRank = rank(joined) + constantTime;
        found = true;
        bound = bestTime;
        ++stats.dualSeeds;
      }
    }
    // Whether a point standing for `count` layers entered in carry layout
    // a and left in b can beat `bound` by the dual's prices: it leaves the
    // rest at most limit - m - max(p, peakLB) bytes, so the plan's time is
    // at least t + lambda m + rest - lambda (limit - max(p, peakLB)).
    // `rests`: getRest of `dual` and of each of `moreDuals`, in order.
    auto dualAdmissible = [&](const Point &p, ArrayRef<double> rests) {
      if (!dual)
        return true;
      double room = limit - std::max(p.peak, peakLB);
      auto passes = [&](const LayerDual &d, double rest) {
        return p.time + d.lambda * p.mem + rest + constantTime -
                   d.lambda * room <
               bound + lagrangeSlack(d.lambda);
      };
      if (!passes(*dual, rests[0]))
        return false;
      for (auto [d, rest] : llvm::zip(moreDuals, rests.drop_front()))
        if (!passes(d, rest))
          return false;
      return true;
    };
    auto restsOf = [&](int a, int b, int64_t count,
                       SmallVectorImpl<double> &rests) {
      rests.clear();
      if (!dual)
        return;
      rests.push_back(dual->getRest(a, b, count));
      for (const LayerDual &d : moreDuals)
        rests.push_back(d.getRest(a, b, count));
    };
    // A point standing for `count` layers, with time t, additive memory m
    // and transient p, leaves the rest at most limit - m - max(p, peakLB)
    // bytes, so for each kept lambda the rest costs at least its Lagrangian
    // section bounds minus lambda times that room: the point cannot beat
    // `bound` when t + lambda m + rest_lambda - lambda (limit - max(p,
    // peakLB)) >= bound. (Memory-bound problems: the fronts of the products
    // otherwise grow through the doubling.)
    auto lagrangeAdmissible = [&](const Point &p, int64_t count) {
      if (timeOnly)
        return true;
      for (const SectionBounds &l : lagranges) {
        double rest =
            l.pre.time + (layers - double(count)) * l.layer.time + l.post.time;
        if (p.time + l.lambda * p.mem + rest + constantTime -
                l.lambda * (limit - std::max(p.peak, peakLB)) >=
            bound + lagrangeSlack(l.lambda))
          return false;
      }
      return true;
    };
    // Min-plus product of Pareto matrices (PrimePar Eq. 14); the product
    // stands for `count` layers.
    auto product = [&](const Matrix &A, const Matrix &B, int64_t count) {
      double restT = preTime + (layers - double(count)) * blockTimeLB +
                     postTimeLB;
      double restM =
          preMem + (layers - double(count)) * blockMemLB + postMemLB;
      // B's entries by their first layout, each with its least time, least
      // memory and least transient (the floor test below).
      struct Entry {
        int c;
        const Front *front;
        Point floor;
      };
      std::map<int, std::vector<Entry>> rows;
      for (auto &[bc, f] : B) {
        Point floor{inf, inf, inf, -1};
        for (const Point &pb : f) {
          floor.time = std::min(floor.time, pb.time);
          floor.mem = std::min(floor.mem, pb.mem);
          floor.peak = std::min(floor.peak, pb.peak);
        }
        rows[bc.first].push_back({bc.second, &f, floor});
      }
      Matrix C;
      SmallVector<double, 8> rests;
      for (auto &[ab, fa] : A) {
        if (checkBudget())
          return Matrix{};
        auto it = rows.find(ab.second);
        if (it == rows.end())
          continue;
        for (auto &[c, fb, floor] : it->second) {
          Front *dst = nullptr;
          restsOf(ab.first, c, count, rests);
          // Every test below only grows with the time, memory and
          // transient of the pair, so a point of A that fails one with
          // B's least of each fails it with every point of B.
          for (const Point &pa : fa) {
            Point least = addPoints(pa, floor);
            if (!admissible(least, restT, restM) ||
                !lagrangeAdmissible(least, count) ||
                !dualAdmissible(least, rests))
              continue;
            for (const Point &pb : *fb) {
              Point sum = addPoints(pa, pb);
              if (!admissible(sum, restT, restM) ||
                  !lagrangeAdmissible(sum, count) ||
                  !dualAdmissible(sum, rests))
                continue;
              if (!dst)
                dst = &C[{ab.first, c}];
              // (Its node is written once the product is done, if its
              // front keeps it (most points inserted are dropped by a
              // later one); counted now, as in runSegment. Till then
              // `node` and `cand` hold pa's and pb's nodes.)
              Point np = addPoints(pa, pb);
              np.node = pa.node;
              np.cand = pb.node;
              if (insert(*dst, np))
                ++nodesMade;
            }
          }
        }
      }
      for (auto it = C.begin(); it != C.end();) {
        for (Point &pt : it->second) {
          nodes.push_back({pt.node, pt.cand, -2, -1});
          pt.node = int32_t(nodes.size() - 1);
          pt.cand = -1;
        }
        it = it->second.empty() ? C.erase(it) : std::next(it);
      }
      return C;
    };
    // The layers and the post section under the current `bound`: every
    // plan faster than it is considered (the products drop only what
    // cannot beat it).
    auto solveLayers = [&]() {
      // Repeated doubling: block^layers in O(log layers) products.
      std::optional<Matrix> power;
      int64_t powerCount = 0, baseCount = 1;
      Matrix base = block;
      SmallVector<double, 8> rests;
      if (dual)
        for (auto it = base.begin(); it != base.end();) {
          restsOf(it->first.first, it->first.second, 1, rests);
          erase_if(it->second,
                   [&](const Point &p) { return !dualAdmissible(p, rests); });
          it = it->second.empty() ? base.erase(it) : std::next(it);
        }
      for (int64_t r = P.layers; r > 0; r >>= 1) {
        if (r & 1) {
          powerCount += baseCount;
          power = power ? product(*power, base, powerCount) : base;
        }
        if (r > 1) {
          baseCount *= 2;
          base = product(base, base, baseCount);
        }
        if (overBudget)
          return;
      }
      // Post (unless solved before the products, above).
      if (!postSolved) {
        std::set<int> outs;
        double layersTime = inf, layersMem = inf;
        for (auto &[ab, f] : *power) {
          outs.insert(ab.second);
          for (const Point &pt : f) {
            layersTime = std::min(layersTime, pt.time);
            layersMem = std::min(layersMem, pt.mem);
          }
        }
        postFront = solvePost(std::vector<int>(outs.begin(), outs.end()),
                              preTime + layersTime, preMem + layersMem);
        if (overBudget)
          return;
      }
      for (auto &[ab, f] : *power) {
        auto pre = preFront.find(ab.first);
        auto post = postFront.find(ab.second);
        if (pre == preFront.end() || post == postFront.end())
          continue;
        for (const Point &a : pre->second)
          for (const Point &b : f)
            for (const Point &c : post->second) {
              Point sum = addPoints(addPoints(a, b), c);
              double total = sum.time + constantTime;
              double r = rank(sum) + constantTime;
              if ((timeOnly || sum.mem + sum.peak <= limit) && r < bestRank) {
                Point ab2 = concat(a, b);
                bestPoint = concat(ab2, c);
                bestTime = total;
                bestRank = r;
                found = true;
              }
            }
      }
    };
    if (!dual) {
      solveLayers();
      if (overBudget)
        return budgetError();
    } else {
      // Iterative deepening of the bound: the optimum usually lies just
      // above the dual bound, and the products' fronts shrink with the
      // distance between the bound and it. So the layers are first solved
      // for plans faster than dualValue + delta; a plan found there is the
      // optimum (every faster plan was considered); else delta grows 16-fold
      // up to the seed's bound. Exact; the passes cost a geometric sum.
      const double seedBound = bound;
      double delta =
          std::max((seedBound - dualValue) / 4096, 1e-9 * std::abs(seedBound));
      for (;; delta *= 16) {
        bool last = dualValue + delta >= seedBound;
        bound = last ? seedBound : dualValue + delta;
        solveLayers();
        if (overBudget)
          return budgetError();
        if (!last && found && bestTime < bound)
          ++stats.dualEarlyAnswers;
        if (last || (found && bestTime < bound))
          break;
      }
      bound = seedBound;
    }
  }
  if (!found || bestTime >= givenBound)
    return err("no plan fits in the memory limit");
  std::vector<std::pair<int, int>> choices;
  walk(bestPoint.node, choices);
  const FlatGraph &g = getFlat();
  if (choices.size() != g.ops.size())
    return err("internal error: the DP chose " + Twine(choices.size()) +
               " partitions for " + Twine(g.ops.size()) + " operators");
  Plan plan;
  plan.config = config;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    if (unsigned(choices[i].first) != g.original[i])
      return err("internal error: DP choice order");
    plan.partitions.push_back(
        cands[choices[i].first][choices[i].second].raw->part);
  }
  plan.cost.stepTime = bestTime;
  return plan;
}

Expected<Plan> Instance::solveDP(DPStats *stats, double bound, DPPass pass,
                                 bool *settled) {
  Impl &I = *impl;
  if (settled)
    *settled = true;
  I.stats = {};
  Impl::Borrow borrow(I);
  I.resetNodes();
  I.bound = bound;
  std::optional<Expected<Plan>> plan;
  if (I.smallestMemory > I.limit * (1 + 1e-9)) {
    plan.emplace(err("no plan fits in the memory limit"));
  } else if (!I.options.isCapped()) {
    // Exact: first the time-only relaxation (fronts of one point, memory
    // ignored). It is a lower bound of every plan of this configuration, so
    // where it finds nothing under `bound` nothing does, and where its plan
    // fits in memory that plan is the optimum; only otherwise is the
    // Pareto DP over (time, memory, transient) run.
    // A DPPass::Rest reuses its cheap pass's relaxation (kept in the
    // tables): its time-only optimum is the same under any bound above it.
    uint64_t relaxedStates = 0;
    std::optional<PlanCost> pc; // the relaxed plan's cost (if it ran)
    bool memoryBound = false;
    const Config::PriceFields key = I.config.getPriceFields();
    auto known = I.tables->relaxations.find(key);
    // A try of the Pareto DP: without the layer price and stopped past
    // `blockNodes` nodes from the layer block on (solve(), quickTryNodes;
    // 0: no such limit, and the layer price), and past `nodes` in all. Its
    // answer (counted as the Pareto DP's states and seconds), or nullopt
    // where it passed a limit (counted as an abandoned quick try).
    auto tryPareto = [&](size_t blockNodes,
                         size_t nodes) -> std::optional<Expected<Plan>> {
      I.resetNodes();
      I.quickTryNodes = blockNodes;
      I.nodeLimit = nodes;
      DPStats::Phase phase;
      Expected<Plan> exact = I.measurePhase(phase, [&] { return I.solve(); });
      I.quickTryNodes = 0;
      I.nodeLimit = ~size_t(0);
      if (!exact && I.overQuickTry) {
        I.stats.quickTry += phase;
        consumeError(exact.takeError());
        return std::nullopt;
      }
      I.stats.pareto += phase;
      return std::move(exact);
    };
    // The time-only relaxation, stopped past `limit` nodes (overQuickTry);
    // relaxedStates: the states it visited; firstOnly: whether it stopped
    // at its first plan (which does not fit).
    bool firstOnly = false;
    auto relax = [&](size_t limit) {
      I.timeOnly = true;
      I.nodeLimit = limit;
      llvm::scope_exit restore([&] {
        I.timeOnly = false;
        I.nodeLimit = ~size_t(0);
      });
      uint64_t before = I.stats.statesVisited;
      // First a plan from the layer block's layers within a share of the
      // slack above its least time (SolverOptions::relaxationShare; fewer
      // states), whose time T then bounds the relaxation. Where the
      // relaxation finds nothing under T, no plan that fits is faster
      // than T (the relaxation's tests before and in its DP drop only
      // what cannot fit or beat the bound), and that first plan stands
      // for the relaxation's: where it fits it is the optimum, else T
      // bounds every plan that fits. Where the first plan does not fit,
      // memory binds the relaxation's plans up to T at least, and the rest
      // of the relaxation is not run: the first plan stands for its plan
      // (the reference of the layer price and the priced seed), and the
      // Pareto DP finds whatever faster plan fits (exact; only the
      // relaxation's time, a lower bound of the plans, is not known).
      double givenBound = I.bound;
      std::optional<Plan> first;
      if (I.options.relaxationShare < 1 && std::isfinite(givenBound)) {
        I.resetNodes();
        I.layerShare = I.options.relaxationShare;
        Expected<Plan> quick =
            I.measurePhase(I.stats.relaxation, [&] { return I.solve(); });
        I.layerShare = 1;
        if (quick) {
          Expected<PlanCost> c = evaluate(quick->partitions);
          if (!c)
            return Expected<Plan>(c.takeError());
          if (!c->feasible) {
            firstOnly = true;
            relaxedStates = I.stats.statesVisited - before;
            return quick;
          }
          double t = quick->cost.stepTime;
          I.bound = std::min(I.bound, t + 1e-9 * std::abs(t));
          first = std::move(*quick);
        } else {
          std::string message = toString(quick.takeError());
          if (isSolverFailure(message) && !I.overQuickTry)
            return Expected<Plan>(err(message));
        }
      }
      I.resetNodes();
      Expected<Plan> relaxed =
          I.measurePhase(I.stats.relaxation, [&] { return I.solve(); });
      I.bound = givenBound;
      if (!relaxed && first) {
        std::string message = toString(relaxed.takeError());
        relaxed = isSolverFailure(message) ? Expected<Plan>(err(message))
                                           : Expected<Plan>(std::move(*first));
      }
      relaxedStates = I.stats.statesVisited - before;
      return relaxed;
    };
    // Where memory binds, the layer price alone before the priced seed (and
    // where memory binds the chain bounds, before the relaxation): solve()
    // stops after it.
    // Where it rejects the configuration nothing else runs (no priced
    // seed, no Pareto DP later): its message; else its conclusions are
    // kept for the seed and the Pareto DP (Tables::layerPrices), which do
    // not search again. Only where the bound is close to a lower bound of
    // the configuration, `reference` (SolverOptions::layerPriceFirstSlack):
    // under a looser one its DPs keep many more layers, and the seed
    // usually lowers the bound by more than its conclusions may be reused
    // for.
    auto layerPriceFirst = [&](double reference,
                               uint64_t states) -> std::optional<std::string> {
      if (pass == DPPass::Rest || !I.options.layerPrice ||
          !I.options.layerDual || !std::isfinite(bound) ||
          !is_contained(I.problem.sections, Section::Layer) ||
          I.problem.layers < 2 ||
          bound - reference > I.options.layerPriceFirstSlack * reference)
        return std::nullopt;
      I.resetNodes();
      I.layerPriceStates = states;
      I.layerPriceOnly = true;
      Expected<Plan> priced = I.solve();
      I.layerPriceOnly = false;
      if (priced)
        return std::nullopt;
      std::string message = toString(priced.takeError());
      if (message == kLayerPriceDone)
        return std::nullopt;
      return message;
    };
    std::optional<Expected<Plan>> relaxed;
    if (pass == DPPass::Rest && known != I.tables->relaxations.end()) {
      relaxedStates = known->second.states;
      if (known->second.time >= bound)
        plan.emplace(err("no plan beats the bound"));
      else
        memoryBound = true;
    } else if (pass == DPPass::Cheap && I.options.paretoFirstNodes > 0 &&
               I.options.layerDual && std::isfinite(bound) &&
               I.passesBounds() && I.chainMemoryBinds) {
      // SolverOptions::paretoFirstNodes: where memory binds the chain
      // bounds, first the layer price alone against the chain bounds'
      // plan bound (the relaxation's plan is not known yet; its DPs stop
      // past 4 times the relaxation's first nodes; a configuration it
      // rejects costs it fewer states than the relaxation, which may pass
      // its first nodes without an answer); then the relaxation up to
      // relaxationFirstNodes nodes; past them, the Pareto DP (no layer
      // price) up to paretoFirstNodes, whose answer, where it finishes, is
      // the configuration's; then the relaxation in full.
      std::optional<std::string> rejected =
          layerPriceFirst(I.chainPlanBound, 4 * I.options.relaxationFirstNodes);
      if (!rejected) {
        relaxed.emplace(relax(I.options.relaxationFirstNodes));
        if (!*relaxed && I.overQuickTry) {
          consumeError(relaxed->takeError());
          relaxed.reset();
          ++I.stats.paretoFirstTries;
          if (std::optional<Expected<Plan>> tried = tryPareto(
                  I.options.paretoFirstNodes, I.options.paretoFirstNodes)) {
            ++I.stats.paretoFirstAnswers;
            plan.emplace(std::move(*tried));
          }
        }
      }
      if (rejected && isSolverFailure(*rejected))
        return err(*rejected);
      if (rejected)
        plan.emplace(err(*rejected));
    }
    if (!plan && !memoryBound) {
      if (!relaxed)
        relaxed.emplace(relax(~size_t(0)));
      if (!*relaxed) {
        plan.emplace(relaxed->takeError());
      } else {
        Expected<PlanCost> cost = evaluate((*relaxed)->partitions);
        if (!cost)
          return cost.takeError();
        pc = std::move(*cost);
        if (pc->feasible) {
          plan.emplace(std::move(**relaxed));
        } else {
          memoryBound = true;
          if (pass == DPPass::Cheap)
            I.tables->relaxations[key] = {
                firstOnly ? -std::numeric_limits<double>::infinity()
                          : (*relaxed)->cost.stepTime,
                relaxedStates};
        }
      }
    }
    if (memoryBound && pc) {
      // (Its DPs stop past as many states as the relaxation visited or 4
      // times the relaxation's first nodes, whichever is more: a
      // relaxation stopped at its first plan visited few.)
      std::optional<std::string> rejected = layerPriceFirst(
          pc->stepTime, std::max<uint64_t>(relaxedStates,
                                           4 * I.options.relaxationFirstNodes));
      if (rejected && isSolverFailure(*rejected))
        return err(*rejected);
      if (rejected) {
        memoryBound = false;
        plan.emplace(err(*rejected));
      }
    }
    if (memoryBound) {
      ++I.stats.memoryBoundSolves;
      // A seed for the Pareto DP (SolverOptions::layerDual): the DP with
      // fronts of one point priced time + lambda x additive memory (as
      // cheap as the time-only relaxation) returns plans that trade time
      // for memory; the fastest that fits lowers the bound, and the
      // Pareto DP then looks only for faster plans (exact: where it finds
      // none, the seed is the optimum). lambda starts where saving the
      // relaxed plan's excess memory is worth the time the bound leaves;
      // a plan that does not fit means lambda is too small, one that fits
      // that it is large enough; the next lambda is 4 times the largest
      // too small while none is known large enough, else the geometric
      // mean of the two (at most 6 runs). The runs drop points that cannot
      // fit or beat the bound (the memory test of `admissible`, transient
      // classes, the segments' Lagrangian rests), so they stop at a
      // fitting plan no faster than the last, or at a run with no plan
      // while no lambda is known large enough; once one is, a run with no
      // plan counts as too small (a heuristic: below a fitting lambda its
      // plans are faster, so what it drops is mostly what does not fit).
      std::optional<Plan> seed;
      double seedTime = bound;
      if (pass != DPPass::Rest && pc && I.options.layerDual &&
          std::isfinite(bound) && pc->getMemory() > I.limit) {
        double small = 0, large = std::numeric_limits<double>::infinity();
        double lambda = std::max(bound - pc->stepTime, 1e-12 * bound) /
                        (pc->getMemory() - I.limit);
        for (int tries = 0; tries < 6; ++tries) {
          I.resetNodes();
          I.timeOnly = true;
          I.priceLambda = lambda;
          Expected<Plan> priced =
              I.measurePhase(I.stats.seed, [&] { return I.solve(); });
          I.timeOnly = false;
          I.priceLambda = 0;
          bool fits = false;
          if (!priced) {
            std::string message = toString(priced.takeError());
            if (isSolverFailure(message))
              return err(message);
            if (std::isinf(large))
              break;
          } else {
            Expected<PlanCost> c = evaluate(priced->partitions);
            if (!c)
              return c.takeError();
            fits = c->feasible;
            if (fits) {
              if (c->stepTime >= seedTime)
                break;
              seedTime = c->stepTime;
              priced->cost = std::move(*c);
              seed = std::move(*priced);
            }
          }
          (!fits ? small : large) = lambda;
          if (std::isinf(large))
            lambda = 4 * small;
          else if (small == 0)
            lambda = large / 4;
          else if (large / small > 1.5)
            lambda = std::sqrt(small * large);
          else
            break;
        }
        if (seed)
          ++I.stats.pricedSeeds;
      }
      if (pass == DPPass::Cheap) {
        // The Pareto DP is left to a DPPass::Rest; the seed (if any) is
        // a plan of the configuration, not its optimum.
        if (settled)
          *settled = false;
        if (stats)
          *stats = I.stats;
        if (!seed)
          return err("no plan beats the bound of " + std::to_string(bound) +
                     " s (not settled: the Pareto DP has not run)");
        return std::move(*seed);
      }
      // The Pareto DP, with the layer price search (solve()): DPs of one
      // layer with fronts of one point, few states each but the last
      // (every pair of carry layouts a plan that beats the bound can
      // use), stopping past 4 states per state the relaxation visited or
      // 2^22 states, whichever is more (the relaxation, bounded by its
      // first plan, can visit few). (It was first tried without them up
      // to that many nodes: since the layer price's DPs seek the least
      // price first, that try cost more than it saved on every row of the
      // benchmark.)
      I.bound = seedTime;
      I.layerPriceStates = std::max<size_t>(size_t(1) << 22, 4 * relaxedStates);
      std::optional<Expected<Plan>> tried = tryPareto(0, ~size_t(0));
      assert(tried && "a try without limits answers");
      Expected<Plan> exact = std::move(*tried);
      I.bound = bound;
      if (!exact && seed) {
        std::string message = toString(exact.takeError());
        if (isSolverFailure(message))
          return err(message);
        plan.emplace(std::move(*seed));
      } else {
        plan.emplace(std::move(exact));
      }
    }
  } else {
    plan.emplace(I.solve());
  }
  if (stats)
    *stats = I.stats;
  if (!*plan) {
    // Failures of the solver pass through; every other error is an answer.
    std::string message = toString(plan->takeError());
    if (isSolverFailure(message))
      return err(message);
    if (I.smallestMemory <= I.limit * (1 + 1e-9))
      return err("no plan beats the bound of " + std::to_string(bound) +
                 " s");
    return err("no plan fits in " + std::to_string(I.limit) +
               " bytes per device");
  }
  Expected<PlanCost> pc = evaluate((*plan)->partitions);
  if (!pc)
    return pc.takeError();
  (*plan)->cost = std::move(*pc);
  return std::move(*plan);
}

void Instance::shareGroupPrices(ArrayRef<const Instance *> group) {
  if (group.empty())
    return;
  Tables &t = *group.front()->impl->tables;
  for (const Instance *i : group)
    if (i->impl->tables.get() != &t)
      return;
  t.groupPrices.clear();
  t.groupBounds.reset();
  t.groupMembers.clear();
  for (const Instance *i : group) {
    const Impl &I = *i->impl;
    t.groupMembers.insert(Tables::getPriceKey(I.config, 0));
    if (t.groupPrices.empty()) {
      t.groupPrices.resize(I.cands.size());
      for (auto [op, cs] : llvm::enumerate(I.cands))
        t.groupPrices[op].assign(cs.size(),
                                 std::numeric_limits<double>::infinity());
    }
    for (auto [op, cs] : llvm::enumerate(I.cands))
      for (auto [k, c] : llvm::enumerate(cs))
        t.groupPrices[op][k] = std::min(t.groupPrices[op][k], c.time);
  }
}

double Instance::getLowerBound() const {
  return std::max(impl->timeLB, impl->groupLB);
}

double Instance::getGroupLowerBound() {
  Impl &I = *impl;
  I.groupBoundOnly = true;
  I.resetNodes();
  I.bound = std::numeric_limits<double>::infinity();
  Expected<Plan> stop = I.solve(); // (stops after the group's bound)
  I.groupBoundOnly = false;
  if (!stop)
    consumeError(stop.takeError());
  return getLowerBound();
}

void releaseDPBuffers() {
  HugeVector<Node>().swap(getNodeBuffer());
  SegmentBuffers &b = getSegmentBuffers();
  assert(!b.inUse && "no segment DP runs");
  b = SegmentBuffers();
}

bool Instance::mayBeat(double bound, bool *memoryBinds) {
  Impl &I = *impl;
  if (I.smallestMemory > I.limit * (1 + 1e-9))
    return false;
  I.resetNodes();
  I.bound = bound;
  bool passed = I.passesBounds();
  if (memoryBinds)
    *memoryBinds = I.chainMemoryBinds;
  return passed;
}

bool Instance::dominates(const Instance &other) const {
  const Impl &a = *impl, &b = *other.impl;
  if (a.config.microBatches != b.config.microBatches ||
      a.config.mesh.axes.size() != b.config.mesh.axes.size() ||
      a.cands.size() != b.cands.size() || a.constantTime > b.constantTime ||
      a.limit != b.limit)
    return false;
  for (unsigned k = 0; k < a.config.mesh.axes.size(); ++k)
    if (a.config.mesh.axes[k].size != b.config.mesh.axes[k].size)
      return false;
  for (unsigned i = 0; i < a.cands.size(); ++i) {
    if (a.cands[i].size() != b.cands[i].size())
      return false;
    for (unsigned c = 0; c < a.cands[i].size(); ++c) {
      const Cand &x = a.cands[i][c], &y = b.cands[i][c];
      if (!(x.raw->part == y.raw->part) ||
          x.raw->layouts != y.raw->layouts || x.time > y.time ||
          x.stateBytes + x.actBytes > y.stateBytes + y.actBytes ||
          x.peak > y.peak)
        return false;
    }
  }
  return true;
}

size_t Instance::getTableBytes() const {
  const Tables &t = *impl->tables;
  size_t bytes = t.rawBytes + t.flatBytes + getHeapBytes(t.relayouts) +
                 t.layouts.size() * (2 * sizeof(LayoutCode) + 64);
  for (const Tables::RelayoutMatrix &m : t.relayouts)
    bytes += m.getBytes();
  for (const std::vector<Cand> &c : impl->cands)
    bytes += getHeapBytes(c);
  return bytes;
}

std::shared_ptr<RelayoutCoefficients>
Instance::getRelayoutCoefficients() const {
  return impl->tables->relayoutCoefs;
}

double Instance::getSmallestMemory() const { return impl->smallestMemory; }
double Instance::getMemoryLimit() const { return impl->limit; }
const FlatGraph &Instance::getFlatGraph() const { return impl->getFlat(); }
size_t Instance::getNumCandidates(unsigned op) const {
  return impl->cands[op].size();
}

} // namespace stpar::search

double stpar::search::PlanCost::getStageActivationBytes(
    const cost::ScheduleShape &schedule, int64_t stage) const {
  return activationBytes +
         (cost::getInFlight(schedule, stage) - cost::getInFlight(schedule, 0)) *
             activationBytesPerMicroBatch;
}
