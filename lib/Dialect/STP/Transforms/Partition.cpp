//===- Partition.cpp - planned module -> per-device SPMD program -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-partition (docs/partition.md, docs/spmd-ir.md): every value
// gets a sharding (per tensor dim the grid axes splitting it, plus the axes
// over which it is a partial sum); every op is rewritten with local shapes
// after its operands are re-laid out to the shardings its `stp.spec` asks
// for, or runs replicated on gathered operands when it cannot be split. A
// temporal op (any of PrimePar's three phases) becomes its steps of local
// products with ring shifts and point-to-point transfers between them.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <string>

namespace stpar::stp {
#define GEN_PASS_DEF_PARTITIONPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// Grid axes splitting one tensor dim (or one loop), major first.
using AxisList = SmallVector<shard::GridAxis, 2>;

/// How a value is laid out over the grid.
struct Sharding {
  /// One entry per tensor dim.
  SmallVector<AxisList> dims;
  /// Axes over which the local values are partial results still to be
  /// combined by `kind`.
  AxisList partial;
  shard::ReductionKind kind = shard::ReductionKind::Sum;

  static Sharding replicated(int64_t rank) {
    Sharding s;
    s.dims.resize(rank);
    return s;
  }
  bool operator==(const Sharding &other) const {
    return dims == other.dims && partial == other.partial &&
           (partial.empty() || kind == other.kind);
  }
  bool isReplicated() const {
    return partial.empty() &&
           llvm::all_of(dims, [](const AxisList &a) { return a.empty(); });
  }
};

/// A value of the partitioned program standing for a value of the input.
struct ValueState {
  /// The new value; null while `lazy`.
  Value value;
  Sharding sharding;
  /// Label of the producing op (for plan-step strings).
  std::string producer;
  /// Why the value is a partial result.
  std::string partialReason;
  /// The training-step phase that made the value where it differs from its
  /// op's `stp.phase` (an op making B and G values); empty: the op's.
  std::string phase;
  /// A tensor.empty, a fill of one or a splat constant: created on demand,
  /// directly in the layout a user wants.
  bool lazy = false;
};

/// What the pass does with one op.
enum class PlanKind {
  Linalg,
  Temporal,
  Norm,
  NormStats,
  Attention,
  MoE,
  Layout,
  Lazy,
  Return,
  Replicated
};

/// An operand of a temporal op: its operand number and the two matmul dims
/// (0 = M, 1 = N, 2 = K) it holds, with their tensor dims. In the blocked
/// layout the first is split over the row axis, the second over the column
/// axis.
struct TemporalOperand {
  unsigned operand = 0;
  int64_t matmulDim[2] = {0, 0};
  int64_t tensorDim[2] = {0, 0};
};

/// A temporal phase's input as its last step left it: the layout lists the
/// block (row slice * q + column slice) each device of the grid holds.
struct TemporalStash {
  Sharding sharding;
  SmallVector<int64_t> layout;
  Value value;
};

struct OpPlan {
  PlanKind kind = PlanKind::Replicated;
  /// Required sharding per operand (empty Sharding for non-tensors).
  SmallVector<Sharding> operands;
  /// Sharding of each result.
  SmallVector<Sharding> results;
  /// Linalg: axes splitting each loop (linalg.index of a split loop gets
  /// the block offset added).
  SmallVector<AxisList> loopAxes;
  /// Why the op runs replicated (empty: nothing to report).
  std::string fallback;
  /// Reason for partial results.
  std::string partialReason;
  /// Temporal: the two inputs and the accumulator, the phase (which of
  /// M, N, K the op reduces) and its slice-index rule, the grid axes and the
  /// number of steps.
  SmallVector<TemporalOperand, 3> temporalOperands;
  Phase phase = Phase::Forward;
  AffineMap rule;
  shard::GridAxis rowAxis = 0, colAxis = 0;
  int64_t steps = 1;
  /// NormStats: the first normalized dim.
  int64_t normAxis = 0;
  /// Shardings wanted for values captured by the op's regions (default:
  /// replicated).
  SmallVector<std::pair<Value, Sharding>> captured;
  /// Vocabulary-parallel embedding: the table, its row dim, the axes
  /// splitting the rows.
  Value table;
  int64_t tableRowDim = 0;
  AxisList tableRowAxes;
  /// MoE: the axes splitting the tokens, the experts (expert parallelism,
  /// a subset of the token axes) and each expert's hidden dim.
  AxisList moeTokens, moeExperts, moeHidden;
};

static RankedTensorType getRankedTensor(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

/// Sharding of a value with `rank` dims that follows `loopAxes` through an
/// indexing map; std::nullopt if a split loop reaches a dim through a
/// non-trivial expression.
static std::optional<Sharding> shardingThroughMap(AffineMap map,
                                                  ArrayRef<AxisList> loopAxes) {
  Sharding s = Sharding::replicated(map.getNumResults());
  for (auto [d, expr] : llvm::enumerate(map.getResults())) {
    if (auto dim = dyn_cast<AffineDimExpr>(expr)) {
      s.dims[d] = loopAxes[dim.getPosition()];
      continue;
    }
    if (isa<AffineConstantExpr>(expr))
      continue;
    for (unsigned loop = 0; loop < map.getNumDims(); ++loop)
      if (expr.isFunctionOfDim(loop) && !loopAxes[loop].empty())
        return std::nullopt;
  }
  return s;
}

/// Whether one of `axes` splits an entry of `lists` other than `self`
/// (a grid axis splits at most one loop or dim).
static bool usedElsewhere(ArrayRef<AxisList> lists, size_t self,
                          ArrayRef<shard::GridAxis> axes) {
  return llvm::any_of(llvm::enumerate(lists), [&](auto entry) {
    return entry.index() != self && llvm::any_of(axes, [&](shard::GridAxis a) {
             return llvm::is_contained(entry.value(), a);
           });
  });
}

/// `a + b` element-wise (same types) as a local linalg.generic.
static Value addTensors(OpBuilder &builder, Location loc, Value a, Value b) {
  auto type = cast<RankedTensorType>(a.getType());
  AffineMap id = builder.getMultiDimIdentityMap(type.getRank());
  return linalg::GenericOp::create(
             builder, loc, TypeRange{type}, ValueRange{a}, ValueRange{b},
             ArrayRef<AffineMap>{id, id},
             SmallVector<utils::IteratorType>(type.getRank(),
                                              utils::IteratorType::parallel),
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value sum = arith::AddFOp::create(nb, l, args[0], args[1]);
               linalg::YieldOp::create(nb, l, sum);
             })
      .getResult(0);
}

/// The blocks `experts` of `whole` [E, ...] stacked in that order
/// ([S, ...]; tensor.extract_slice and tensor.concat).
/// One expert's block [1, ...] of `type` [E, ...] at row `at`:
/// extract_slice/insert_slice offsets, sizes and strides.
struct ExpertBlock {
  SmallVector<OpFoldResult> offsets, sizes, strides;
  ExpertBlock(OpBuilder &builder, RankedTensorType type, int64_t at) {
    for (int64_t d = 0; d < type.getRank(); ++d) {
      offsets.push_back(builder.getIndexAttr(d ? 0 : at));
      sizes.push_back(builder.getIndexAttr(d ? type.getDimSize(d) : 1));
      strides.push_back(builder.getIndexAttr(1));
    }
  }
};

static Value selectExperts(OpBuilder &builder, Location loc, Value whole,
                           ArrayRef<int64_t> experts) {
  auto type = cast<RankedTensorType>(whole.getType());
  SmallVector<Value> blocks;
  for (int64_t e : experts) {
    ExpertBlock b(builder, type, e);
    blocks.push_back(tensor::ExtractSliceOp::create(
        builder, loc, whole, b.offsets, b.sizes, b.strides));
  }
  if (blocks.size() == 1)
    return blocks[0];
  return tensor::ConcatOp::create(builder, loc, /*dim=*/0, blocks);
}

/// `whole` [E, ...] with its blocks `experts` replaced by the rows of
/// `part` [S, ...], in order (tensor.insert_slice).
static Value insertExperts(OpBuilder &builder, Location loc, Value whole,
                           Value part, ArrayRef<int64_t> experts) {
  auto type = cast<RankedTensorType>(whole.getType());
  for (auto [i, e] : llvm::enumerate(experts)) {
    ExpertBlock from(builder, cast<RankedTensorType>(part.getType()),
                     int64_t(i)),
        to(builder, type, e);
    Value block =
        experts.size() == 1
            ? part
            : tensor::ExtractSliceOp::create(builder, loc, part, from.offsets,
                                             from.sizes, from.strides)
                  .getResult();
    whole = tensor::InsertSliceOp::create(builder, loc, block, whole,
                                          to.offsets, to.sizes, to.strides);
  }
  return whole;
}

/// Whether `v` is a tensor of zeros (a fill of 0 or a zero splat).
static bool isZeroTensor(Value v) {
  if (auto fill = v.getDefiningOp<linalg::FillOp>())
    return matchPattern(fill.getInputs()[0], m_AnyZeroFloat()) ||
           matchPattern(fill.getInputs()[0], m_Zero());
  return matchPattern(v, m_AnyZeroFloat()) || matchPattern(v, m_Zero());
}

/// Whether `v` is a tensor of ones (the initial value a split product
/// reduction may start each device's block from).
static bool isOneTensor(Value v) {
  if (auto fill = v.getDefiningOp<linalg::FillOp>())
    return matchPattern(fill.getInputs()[0], m_OneFloat()) ||
           matchPattern(fill.getInputs()[0], m_One());
  return matchPattern(v, m_OneFloat()) || matchPattern(v, m_One());
}

class Partitioner {
public:
  Partitioner(ModuleOp module, MeshAttr mesh) : module(module), mesh(mesh) {}

  LogicalResult run();

  int64_t numSplitOps = 0, numFallbackOps = 0, numTemporalOps = 0,
          numCollectives = 0;

private:
  LogicalResult partitionFunc(func::FuncOp func);
  FailureOr<OpPlan> planOp(Operation *op);
  FailureOr<OpPlan> planLinalg(linalg::LinalgOp op, PartitionSpecAttr spec);
  LogicalResult planVocabParallel(linalg::LinalgOp op,
                                  const AxisList &rowAxes, OpPlan &plan);
  FailureOr<OpPlan> planTemporal(linalg::LinalgOp op, PartitionSpecAttr spec,
                                 SmallVector<AxisList> loopAxes);
  FailureOr<OpPlan> planNorm(Operation *op, PartitionSpecAttr spec);
  FailureOr<OpPlan> planAttention(AttentionOp op, PartitionSpecAttr spec);
  FailureOr<OpPlan> planMoE(Operation *op, PartitionSpecAttr spec);
  LogicalResult emitMoE(MoEOp op, const OpPlan &plan);
  /// `counts` [E, 1] with the shadowed experts' rows set to 0: what the
  /// exchange sends (their rows stay on this rank).
  Value withoutShadowed(Location loc, Value counts, ArrayRef<int64_t> shadowed);
  LogicalResult emitMoEGrad(MoEGradOp op, const OpPlan &plan);
  /// The exchanges of an MoE layer's expansion over the expert axes of
  /// `plan` around `runExperts` (the rows an expert rank received, their
  /// counts and the step -> the rows to return): `buffer [E, C, D]` and
  /// `counts [E, 1]` sent to the experts' ranks, the experts, their rows
  /// back; in `groupSize`-device steps (FasterMoE's smart schedule: step
  /// s + 1's dispatch is issued before step s's return) and in two levels
  /// where `intraNodeSize` > 0. The collectives are marked with
  /// `dispatchWhat` and `returnWhat`. Returns the rows back on the tokens'
  /// ranks, `[E, C, D]`.
  Value emitMoESchedule(
      Location loc, const OpPlan &plan, const std::string &label, Value buffer,
      Value counts, int64_t routed, int64_t groupSize, int64_t intraNodeSize,
      function_ref<Value(Value rows, Value rowCounts, int64_t step)> runExperts,
      const std::string &dispatchWhat, const std::string &returnWhat);
  /// What the backward of an stp.moe reuses of its forward expansion: the
  /// routing, the dispatch's slots, the outputs back on the tokens' ranks,
  /// and per exchange step the rows and counts the experts received.
  struct MoEForward {
    Value gates, experts, slots, outputs;
    SmallVector<Value> rows, rowCounts;
    /// Per step, the experts' kept pre-activation products (A, U).
    SmallVector<SmallVector<Value, 2>> hidden;
    int64_t groupSize = 0, intraNodeSize = 0;
    /// FasterMoE's shadowing (Sec. 4.1): the shadowed experts (ascending),
    /// their weights as broadcast to this rank (w_in, [w_mul,] w_out),
    /// this rank's rows and counts of them, and their kept A (and U).
    SmallVector<int64_t> shadowed;
    SmallVector<Value, 3> shadowWeights;
    Value shadowRows, shadowCounts;
    SmallVector<Value, 2> shadowHidden;
  };
  DenseMap<Operation *, MoEForward> moeForwards;
  OpPlan planLayout(Operation *op, const LayoutRule &rule);
  LogicalResult emit(Operation *op, OpPlan &plan);
  void emitTemporal(linalg::LinalgOp op, OpPlan &plan);
  static SmallVector<int64_t>
  getTemporalLayout(const OpPlan &plan, const TemporalOperand &t, int64_t step);
  /// `value` moved so that device d gets the block of device sources[d]
  /// of the temporal grid: a shard.shift when that is a ring shift along
  /// one axis, else an stp.grid_permute; `value` when nothing moves.
  Value emitTemporalTransfer(OpBuilder &b, Location loc, Value value,
                             ArrayRef<int64_t> sources, const OpPlan &plan,
                             const std::string &label, const std::string &what);
  void emitNormStats(Operation *op, OpPlan &plan);

  /// The new value standing for `old` in sharding `to`, re-laid out as
  /// needed; `user` and `what` name the consumer for plan-step strings.
  Value getAs(Value old, const Sharding &to, const std::string &user,
              const std::string &what);
  Value materializeLazy(Value old, const Sharding &to);
  Value viewOfRelayout(Value old, const Sharding &to);
  /// `producerPhase`: the `stp.phase` of the op that made the value (a
  /// partial result is reduced in that phase, see relayout).
  Value relayout(Value value, Sharding cur, const Sharding &to,
                 RankedTensorType global, const ValueState &origin,
                 StringRef producerPhase, const std::string &user,
                 const std::string &what);
  /// The training-step phase of the op being partitioned (`stp.phase`;
  /// "forward" without one), named in the collectives' plan steps.
  std::string currentPhase = "forward";
  void markCollective(Operation *op, const std::string &label,
                      const std::string &phase, const Twine &reason);
  void markCollective(Operation *op, const std::string &label,
                      const Twine &reason);

  /// Axes of a spec loop as grid axes.
  AxisList getLoopAxes(LoopDimAttr loop);
  /// Grid axis of a mesh axis name.
  shard::GridAxis getGridAxis(StringAttr name) {
    return axisOfName.lookup(name.getValue());
  }
  int64_t getGroupSize(ArrayRef<shard::GridAxis> axes) const {
    int64_t size = 1;
    for (shard::GridAxis a : axes)
      size *= gridShape[a];
    return size;
  }
  std::string axesText(ArrayRef<shard::GridAxis> axes) const {
    std::string text;
    for (auto [i, a] : llvm::enumerate(axes))
      text += (i ? "," : "") + axisNames[a];
    return text;
  }
  RankedTensorType getLocalType(RankedTensorType global,
                                const Sharding &s) const;
  bool isValidFor(RankedTensorType global, const Sharding &s) const;
  Value getBlockIndex(Location loc, ArrayRef<shard::GridAxis> axes);
  Value getIndexConstant(Location loc, int64_t value) {
    return arith::ConstantIndexOp::create(builder, loc, value);
  }
  std::string getLabel(Operation *op);
  ArrayAttr getSplitAttr(const Sharding &s);

  /// Micro-batches (docs/partition.md, "Micro-batches"): the forward and
  /// backward ops of a training step (`loopOps`) run in one scf.for over
  /// the micro-batches; the micro-batch index acts as the sequential grid
  /// axis `mbAxis` (the last entry of `gridShape`, not on the device grid),
  /// appended to every batch loop `b` of those ops.
  LogicalResult classifyMicroBatchOps(func::FuncOp func);
  /// Gives the loop the values used after it as iteration arguments: each
  /// is a partial sum over the micro-batches, accumulated.
  LogicalResult finishMicroBatchLoop(Block &body);
  /// True when `op` (of the loop) reads a sum over the micro-batches (or a
  /// value computed after the loop) and nothing that differs between
  /// micro-batches: it then runs once after the loop, on the accumulated
  /// sum (a gradient's further ops: a shared parameter's sum of gradients,
  /// an embedding's scatter of its summed output gradient). Reading both a
  /// sum and a micro-batch's value sets `microBatchError`.
  bool readsMicroBatchSum(Operation &op);
  /// In the micro-batch loop, the split of a loop or dim (`axes`, as the
  /// spec says) that holds data laid out as `data`: the data's axes up to
  /// and including the micro-batch axis (what was split before the loop
  /// cannot change inside it), then the spec's other axes (splits of the
  /// micro-batch's block). `axes` when `data` is not per micro-batch.
  AxisList followMicroBatch(const AxisList &axes, const AxisList &data) const {
    auto at = llvm::find(data, mbAxis);
    if (at == data.end())
      return axes;
    AxisList result(data.begin(), std::next(at));
    for (shard::GridAxis a : axes)
      if (!llvm::is_contained(result, a))
        result.push_back(a);
    return result;
  }
  bool isDefinedInLoop(Value v) {
    return mbLoop && mbLoop.getRegion().isAncestor(v.getParentRegion());
  }
  /// Whether `s` holds one micro-batch (a dim split over `mbAxis`).
  bool holdsMicroBatch(const Sharding &s) const {
    return llvm::any_of(s.dims, [&](const AxisList &axes) {
      return llvm::is_contained(axes, mbAxis);
    });
  }
  /// Whether `s` is a micro-batch's part of a sum over the micro-batches
  /// (what the loop accumulates).
  bool isMicroBatchSum(const Sharding &s) const {
    return !holdsMicroBatch(s) && llvm::is_contained(s.partial, mbAxis) &&
           s.kind == shard::ReductionKind::Sum;
  }
  /// The layout before the loop from which `s` is a slice: each dim's
  /// axes before the micro-batch axis.
  Sharding beforeMicroBatch(Sharding s) const {
    for (AxisList &axes : s.dims)
      axes.erase(llvm::find(axes, mbAxis), axes.end());
    return s;
  }
  /// A re-layout the micro-batch loop cannot do (reported by the op whose
  /// operand needs it): a value is returned so that emission can go on.
  Value failMicroBatch(RankedTensorType local, const Twine &why);
  int64_t microBatches = 1;
  shard::GridAxis mbAxis = -1;
  unsigned numDeviceAxes = 0;
  DenseSet<Operation *> loopOps, afterLoopOps;
  Operation *lastLoopOp = nullptr;
  scf::ForOp mbLoop;
  /// Planning or emitting an op of the loop.
  bool inLoop = false;
  std::optional<std::string> microBatchError;

  ModuleOp module;
  MeshAttr mesh;
  OpBuilder builder{module.getContext()};
  SmallVector<int64_t> gridShape;
  SmallVector<std::string> axisNames;
  llvm::StringMap<shard::GridAxis> axisOfName;
  DenseMap<Value, ValueState> states;
  DenseMap<Value, SmallVector<std::pair<Sharding, Value>>> cache;
  /// Inputs of temporal ops as their last step left them (by input value).
  DenseMap<Value, SmallVector<TemporalStash>> temporalStashes;
  DenseMap<Operation *, unsigned> positions;
  static constexpr StringLiteral kGridName = "grid";
};

} // namespace

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

AxisList Partitioner::getLoopAxes(LoopDimAttr loop) {
  AxisList axes;
  for (StringAttr name : loop.getSplit())
    if (axisOfName.count(name.getValue()))
      axes.push_back(getGridAxis(name));
  // An op of the micro-batch loop runs one micro-batch: the micro-batch
  // axis is the major split of the batch loop (within the loop the op sees
  // the micro-batch as its whole batch, split as the spec says).
  if (inLoop && loop.getName().getValue() == "b")
    axes.insert(axes.begin(), mbAxis);
  return axes;
}

RankedTensorType Partitioner::getLocalType(RankedTensorType global,
                                           const Sharding &s) const {
  SmallVector<int64_t> shape(global.getShape());
  for (auto [d, axes] : llvm::enumerate(s.dims))
    if (!ShapedType::isDynamic(shape[d]))
      shape[d] /= getGroupSize(axes);
  return RankedTensorType::get(shape, global.getElementType(),
                               global.getEncoding());
}

bool Partitioner::isValidFor(RankedTensorType global,
                             const Sharding &s) const {
  if (static_cast<int64_t>(s.dims.size()) != global.getRank())
    return false;
  for (auto [d, axes] : llvm::enumerate(s.dims)) {
    if (axes.empty())
      continue;
    int64_t size = global.getDimSize(d);
    if (ShapedType::isDynamic(size) || size % getGroupSize(axes) != 0)
      return false;
  }
  return true;
}

Value Partitioner::getBlockIndex(Location loc,
                                 ArrayRef<shard::GridAxis> axes) {
  // The micro-batch axis's index is the loop's induction variable.
  AxisList device;
  for (shard::GridAxis a : axes)
    if (a != mbAxis)
      device.push_back(a);
  SmallVector<Value> indices;
  if (!device.empty())
    llvm::append_range(indices, shard::ProcessMultiIndexOp::create(
                                    builder, loc, kGridName, device)
                                    .getResult());
  Value linear;
  unsigned next = 0;
  for (shard::GridAxis a : axes) {
    Value index = a == mbAxis ? mbLoop.getInductionVar() : indices[next++];
    if (!linear) {
      linear = index;
      continue;
    }
    Value scaled = arith::MulIOp::create(builder, loc, linear,
                                         getIndexConstant(loc, gridShape[a]));
    linear = arith::AddIOp::create(builder, loc, scaled, index);
  }
  return linear;
}

std::string Partitioner::getLabel(Operation *op) {
  return getPlanStepLabel(op, positions.lookup(op));
}

ArrayAttr Partitioner::getSplitAttr(const Sharding &s) {
  SmallVector<Attribute> dims;
  for (const AxisList &axes : s.dims) {
    SmallVector<Attribute> entries;
    for (shard::GridAxis a : axes)
      entries.push_back(builder.getI64IntegerAttr(a));
    dims.push_back(builder.getArrayAttr(entries));
  }
  return builder.getArrayAttr(dims);
}

void Partitioner::markCollective(Operation *op, const std::string &label,
                                 const Twine &reason) {
  markCollective(op, label, currentPhase, reason);
}

void Partitioner::markCollective(Operation *op, const std::string &label,
                                 const std::string &phase,
                                 const Twine &reason) {
  op->setAttr(STPDialect::kPlanStepAttrName,
              builder.getStringAttr(label + " " + phase + ": " + reason));
  ++numCollectives;
}

//===----------------------------------------------------------------------===//
// Re-layout
//===----------------------------------------------------------------------===//

Value Partitioner::materializeLazy(Value old, const Sharding &to) {
  Operation *def = old.getDefiningOp();
  auto global = cast<RankedTensorType>(old.getType());
  RankedTensorType local = getLocalType(global, to);
  // Scalar operands (a fill's value) are taken as they are; tensor operands
  // (a fill's tensor.empty) are created afresh by the op's rule.
  SmallVector<Value> operands;
  for (Value v : def->getOperands())
    operands.push_back(isa<ShapedType>(v.getType()) ? Value()
                                                    : states.lookup(v).value);
  Operation *newOp = cast<PartitionableOpInterface>(def).createLocalOp(
      builder, operands, TypeRange{local});
  for (NamedAttribute attr : def->getDiscardableAttrs())
    if (attr.getName() != STPDialect::kSpecAttrName)
      newOp->setAttr(attr.getName(), attr.getValue());
  return newOp->getResult(0);
}

/// When `old` is a view (a reshape; CostKind::View) of a value whose
/// re-layout into what the view maps `to` back to is already made: that
/// re-layout, viewed; else null. The training step's backward reads
/// forward values through new views (the attention backward groups the
/// query heads by key/value head), and would otherwise gather them a second
/// time where the plan charges the forward's gather once.
Value Partitioner::viewOfRelayout(Value old, const Sharding &to) {
  Operation *def = old.getDefiningOp();
  auto view = dyn_cast_or_null<PartitionableOpInterface>(def);
  if (!view || def->getNumOperands() != 1 || def->getNumResults() != 1 ||
      !to.partial.empty() || view.getPartitionRule() != PartitionRule::Layout ||
      view.getCostRule().kind != CostKind::View)
    return {};
  Value source = def->getOperand(0);
  auto sourceType = getRankedTensor(source);
  auto global = getRankedTensor(old);
  if (!sourceType || !global || !isValidFor(global, to))
    return {};
  LayoutRule rule = view.getLayoutRule();
  Sharding from = Sharding::replicated(sourceType.getRank());
  for (auto [r, axes] : llvm::enumerate(to.dims)) {
    if (axes.empty())
      continue;
    int64_t d = r < rule.resultDims.size() ? rule.resultDims[r] : -1;
    if (d < 0 || d >= sourceType.getRank() || !from.dims[d].empty() ||
        llvm::is_contained(rule.wholeDims, d))
      return {};
    from.dims[d] = axes;
  }
  Value current = states.lookup(source).value;
  for (auto &[sharding, value] : cache[source]) {
    if (!(sharding == from) || value == current ||
        (!inLoop && isDefinedInLoop(value)))
      continue;
    Operation *local =
        view.createLocalOp(builder, {value}, {getLocalType(global, to)});
    if (!local)
      return {};
    local->setDiscardableAttrs(def->getDiscardableAttrDictionary());
    local->removeAttr(STPDialect::kSpecAttrName);
    return local->getResult(0);
  }
  return {};
}

Value Partitioner::getAs(Value old, const Sharding &to, const std::string &user,
                         const std::string &what) {
  ValueState &state = states[old];
  auto global = getRankedTensor(old);
  if (!global)
    return state.value;
  // The phase of the op that made `old` (the training step's ops carry
  // it; arguments and the rest are the forward pass).
  // (A copy: `state` lives in `states`, which the re-layout may grow.)
  std::string phase = "forward";
  if (Operation *def = old.getDefiningOp())
    if (auto p = def->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName))
      phase = p.getValue().str();
  if (!state.phase.empty())
    phase = state.phase;
  // (A re-layout made inside the micro-batch loop serves only the loop.)
  for (auto &[sharding, value] : cache[old])
    if (sharding == to && (inLoop || !isDefinedInLoop(value)))
      return value;
  if (!state.lazy && !(state.sharding == to))
    if (Value viewed = viewOfRelayout(old, to)) {
      cache[old].push_back({to, viewed});
      return viewed;
    }
  // A value from before the micro-batch loop: re-laid out once before the
  // loop (collectives and all), then sliced per micro-batch inside it.
  if (inLoop && !state.lazy && !isDefinedInLoop(state.value)) {
    Sharding outer = beforeMicroBatch(to);
    Value before;
    {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPoint(mbLoop);
      inLoop = false;
      before = getAs(old, outer, user, what);
      inLoop = true;
    }
    if (outer == to)
      return before;
    ValueState origin = states[old];
    Value result =
        relayout(before, outer, to, global, origin, phase, user, what);
    cache[old].push_back({to, result});
    return result;
  }
  Value result;
  if (state.lazy) {
    result = materializeLazy(old, to);
  } else {
    result = relayout(state.value, state.sharding, to, global, state, phase,
                      user, what);
  }
  cache[old].push_back({to, result});
  return result;
}

Value Partitioner::relayout(Value value, Sharding cur, const Sharding &to,
                            RankedTensorType global, const ValueState &origin,
                            StringRef producerPhase, const std::string &user,
                            const std::string &what) {
  Location loc = value.getLoc();
  MLIRContext *ctx = builder.getContext();
  auto gridRef = FlatSymbolRefAttr::get(ctx, kGridName);
  auto localOf = [&](const Sharding &s) { return getLocalType(global, s); };
  auto dimText = [&](int64_t d, ArrayRef<shard::GridAxis> axes) {
    return "dim " + std::to_string(d) + " over " + axesText(axes);
  };

  // Inside the micro-batch loop only one micro-batch exists: a sum over
  // micro-batches is made by the loop (after it), and nothing gathers them.
  if (llvm::is_contained(cur.partial, mbAxis))
    return failMicroBatch(localOf(to),
                          "the partial sum over micro-batches of the value "
                          "produced by " +
                              origin.producer + " is needed by " + user +
                              " inside the micro-batch loop (only a sum "
                              "that nothing in the loop reads is accumulated)");
  for (auto [d, axes] : llvm::enumerate(cur.dims)) {
    auto at = llvm::find(axes, mbAxis);
    if (at == axes.end())
      continue;
    size_t k = std::distance(axes.begin(), at);
    bool kept = to.dims[d].size() > k &&
                llvm::equal(ArrayRef(axes).take_front(k + 1),
                            ArrayRef(to.dims[d]).take_front(k + 1));
    if (!kept)
      return failMicroBatch(localOf(to),
                            "the value produced by " + origin.producer +
                                " holds one micro-batch, but " + user +
                                " needs it re-laid out across micro-batches (" +
                                dimText(d, axes) + ")");
  }

  // 1. Partial results: reduce-scatter straight into the wanted split when
  //    it is the partial axes appended to one dim, else all-reduce.
  if (!cur.partial.empty()) {
    std::optional<int64_t> scatterDim;
    if (cur.kind == shard::ReductionKind::Sum) {
      for (auto [d, axes] : llvm::enumerate(cur.dims)) {
        AxisList want(axes);
        want.append(cur.partial);
        if (to.dims[d] == want && to.partial.empty()) {
          Sharding next = cur;
          next.dims[d] = want;
          next.partial.clear();
          if (isValidFor(global, next))
            scatterDim = d;
          break;
        }
      }
    }
    // The reduction belongs to the phase that made the value partial, not
    // to the user's: an input gradient's partial sum (a split reduction
    // loop of B) is reduced in B even where the user that needs it whole
    // sums the gradients of a fan-out (grad_sum); a weight gradient's
    // partial sum over the data-parallel axes is its gradient sync wherever
    // it is reduced.
    std::string reducePhase = currentPhase;
    if (producerPhase == "input_grad")
      reducePhase = "input_grad";
    else if (producerPhase == "weight_grad" &&
             currentPhase != "optimizer")
      reducePhase = "grad_sum";
    std::string reason = "partial " +
                         std::string(shard::stringifyReductionKind(cur.kind)) +
                         " over " + axesText(cur.partial) + " (" +
                         origin.partialReason + ")";
    if (scatterDim) {
      Sharding next = cur;
      next.dims[*scatterDim].append(cur.partial);
      next.partial.clear();
      auto op = shard::ReduceScatterOp::create(
          builder, loc, localOf(next), gridRef,
          builder.getDenseI16ArrayAttr(cur.partial), value,
          shard::ReductionKindAttr::get(ctx, cur.kind),
          builder.getIndexAttr(*scatterDim));
      markCollective(op, origin.producer, reducePhase,
                     "reduce-scatter of the " + reason + " into " +
                         dimText(*scatterDim, cur.partial) + " for " + user);
      value = op.getResult();
      cur = next;
    } else {
      auto op = shard::AllReduceOp::create(
          builder, loc, value.getType(), gridRef,
          builder.getDenseI16ArrayAttr(cur.partial), value,
          shard::ReductionKindAttr::get(ctx, cur.kind));
      markCollective(op, origin.producer, reducePhase,
                     "all-reduce of the " + reason);
      value = op.getResult();
      cur.partial.clear();
    }
  }
  if (cur == to)
    return value;

  std::string context = what + " of " + user + " (produced by " +
                        origin.producer + ")";
  // 2. Axes to drop: the part of each dim's list after its common prefix
  //    with the wanted list. A dropped group that another dim wants appended
  //    moves there by all-to-all; otherwise it is gathered.
  unsigned rank = cur.dims.size();
  for (unsigned d1 = 0; d1 < rank; ++d1) {
    unsigned common = 0;
    while (common < cur.dims[d1].size() && common < to.dims[d1].size() &&
           cur.dims[d1][common] == to.dims[d1][common])
      ++common;
    if (common == cur.dims[d1].size())
      continue;
    AxisList drop(cur.dims[d1].begin() + common, cur.dims[d1].end());
    std::optional<unsigned> target;
    for (unsigned d2 = 0; d2 < rank; ++d2) {
      if (d2 == d1)
        continue;
      AxisList want(cur.dims[d2]);
      want.append(drop);
      if (want == to.dims[d2]) {
        target = d2;
        break;
      }
    }
    Sharding next = cur;
    next.dims[d1].resize(common);
    if (target) {
      next.dims[*target].append(drop);
      auto op = shard::AllToAllOp::create(
          builder, loc, localOf(next), gridRef,
          builder.getDenseI16ArrayAttr(drop), value,
          builder.getIndexAttr(*target), builder.getIndexAttr(d1));
      markCollective(op, user,
                     "all-to-all moving the split over " + axesText(drop) +
                         " from dim " + std::to_string(d1) + " to dim " +
                         std::to_string(*target) + " for " + context);
      value = op.getResult();
    } else {
      auto op = shard::AllGatherOp::create(
          builder, loc, localOf(next), gridRef,
          builder.getDenseI16ArrayAttr(drop), value, builder.getIndexAttr(d1));
      markCollective(op, user,
                     "all-gather " + dimText(d1, drop) + " for " + context);
      value = op.getResult();
    }
    cur = next;
  }
  // 3. Axes to add: slice (no communication).
  for (unsigned d = 0; d < rank; ++d) {
    if (cur.dims[d].size() == to.dims[d].size())
      continue;
    AxisList add(to.dims[d].begin() + cur.dims[d].size(), to.dims[d].end());
    Sharding next = cur;
    next.dims[d] = to.dims[d];
    if (llvm::is_contained(add, mbAxis)) {
      // This device's block of this micro-batch: a slice at the block
      // index of the added axes (the micro-batch's is the loop counter).
      RankedTensorType type = localOf(next);
      SmallVector<OpFoldResult> offsets(rank, builder.getIndexAttr(0)), sizes,
          strides(rank, builder.getIndexAttr(1));
      for (int64_t size : type.getShape())
        sizes.push_back(builder.getIndexAttr(size));
      offsets[d] =
          arith::MulIOp::create(builder, loc, getBlockIndex(loc, add),
                                getIndexConstant(loc, type.getDimSize(d)))
              .getResult();
      value = tensor::ExtractSliceOp::create(builder, loc, type, value, offsets,
                                             sizes, strides)
                  .getResult();
      cur = next;
      continue;
    }
    auto op = shard::AllSliceOp::create(builder, loc, localOf(next), value,
                                        kGridName, add, d);
    markCollective(op, user, "all-slice " + dimText(d, add) + " for " + context);
    value = op.getResult();
    cur = next;
  }
  return value;
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

FailureOr<OpPlan> Partitioner::planLinalg(linalg::LinalgOp op,
                                          PartitionSpecAttr spec) {
  OpPlan plan;
  plan.kind = PlanKind::Linalg;
  unsigned numLoops = op.getNumLoops();
  plan.loopAxes.resize(numLoops);
  bool hasExtract = false;
  op->walk([&](tensor::ExtractOp) { hasExtract = true; });
  if (spec) {
    ArrayRef<LoopDimAttr> loops = spec.getLoops();
    bool embedding = hasExtract && loops.size() == numLoops + 1;
    if (loops.size() != numLoops && !embedding)
      return op->emitError() << "stp.spec has " << loops.size()
                             << " loops but the op has " << numLoops
                             << " loops";
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    for (unsigned l = 0; l < numLoops; ++l) {
      LoopDimAttr loop = loops[l];
      if (loop.getPadded())
        return op->emitError() << "padded split of loop '"
                               << loop.getName().getValue()
                               << "' is not supported";
      if (!ShapedType::isDynamic(ranges[l]) && ranges[l] != loop.getExtent())
        return op->emitError()
               << "stp.spec loop '" << loop.getName().getValue()
               << "' has extent " << loop.getExtent()
               << " but the op's loop " << l << " has extent " << ranges[l];
      bool isReduction =
          op.getIteratorTypesArray()[l] == utils::IteratorType::reduction;
      if (isReduction != loop.isReduction())
        return op->emitError()
               << "stp.spec loop '" << loop.getName().getValue() << "' is "
               << (loop.isReduction() ? "a reduction" : "parallel")
               << " but the op's loop " << l << " is not";
      plan.loopAxes[l] = getLoopAxes(loop);
      int64_t pieces = getGroupSize(plan.loopAxes[l]);
      if (loop.getExtent() % pieces != 0) {
        InFlightDiagnostic diag = op->emitError()
                                  << "extent " << loop.getExtent()
                                  << " of loop '" << loop.getName().getValue()
                                  << "' is not divisible by " << pieces;
        if (llvm::is_contained(plan.loopAxes[l], mbAxis))
          diag << " (" << microBatches << " micro-batches of each block)";
        return diag;
      }
    }
    if (embedding && !getLoopAxes(loops.back()).empty()) {
      if (failed(planVocabParallel(op, getLoopAxes(loops.back()), plan)))
        plan.fallback = "split of the table rows (vocabulary-parallel "
                        "embedding) whose body is not a plain row lookup";
    }
  }
  // In the micro-batch loop each loop that indexes an operand's
  // micro-batch dim follows that operand's layout of it.
  if (inLoop) {
    SmallVector<AxisList> adjusted(plan.loopAxes);
    for (OpOperand &operand : op->getOpOperands()) {
      auto it = states.find(operand.get());
      if (it == states.end() || it->second.lazy ||
          !getRankedTensor(operand.get()) ||
          (!op.isDpsInput(&operand) && !op.isDpsInit(&operand)))
        continue;
      AffineMap map = op.getMatchingIndexingMap(&operand);
      for (auto [d, expr] : llvm::enumerate(map.getResults()))
        if (auto dim = dyn_cast<AffineDimExpr>(expr))
          adjusted[dim.getPosition()] = followMicroBatch(
              adjusted[dim.getPosition()], it->second.sharding.dims[d]);
    }
    for (unsigned l = 0; l < numLoops; ++l)
      if (!usedElsewhere(adjusted, l, adjusted[l]))
        plan.loopAxes[l] = adjusted[l];
  }
  if (spec && spec.getTemporal())
    return planTemporal(op, spec, plan.loopAxes);

  auto fail = [&](const Twine &why) -> FailureOr<OpPlan> {
    OpPlan replicated;
    replicated.kind = PlanKind::Replicated;
    replicated.fallback = why.str();
    return replicated;
  };
  if (!plan.fallback.empty())
    return fail(plan.fallback);

  for (OpOperand &operand : op->getOpOperands()) {
    auto type = getRankedTensor(operand.get());
    if (!type || (!op.isDpsInput(&operand) && !op.isDpsInit(&operand))) {
      plan.operands.push_back(Sharding());
      continue;
    }
    AffineMap map = op.getMatchingIndexingMap(&operand);
    std::optional<Sharding> s = shardingThroughMap(map, plan.loopAxes);
    if (!s || !isValidFor(type, *s))
      return fail("operand " + Twine(operand.getOperandNumber()) +
                  " cannot follow the loop splits");
    plan.operands.push_back(*s);
  }

  // Split loops that no output indexes: reductions leave partial results,
  // parallel ones are not supported.
  AxisList partial;
  for (unsigned l = 0; l < numLoops; ++l) {
    if (plan.loopAxes[l].empty())
      continue;
    bool indexedByAll = llvm::all_of(op.getDpsInitsMutable(), [&](OpOperand &o) {
      return op.getMatchingIndexingMap(&o).isFunctionOfDim(l);
    });
    if (indexedByAll)
      continue;
    if (op.getIteratorTypesArray()[l] != utils::IteratorType::reduction)
      return fail("parallel loop " + Twine(l) + " is split but not every "
                  "output indexes it");
    partial.append(plan.loopAxes[l]);
    if (!plan.partialReason.empty())
      plan.partialReason += ", ";
    plan.partialReason += "reduction loop " +
                          (spec ? spec.getLoops()[l].getName().str()
                                : std::to_string(l)) +
                          " split";
  }
  shard::ReductionKind kind = shard::ReductionKind::Sum;
  if (!partial.empty()) {
    std::optional<shard::ReductionKind> combiner = cast<PartitionableOpInterface>(op.getOperation()).getReductionKind();
    if (!combiner)
      return fail(
          "split reduction whose combiner is not a sum, product, max or min");
    kind = *combiner;
    if (kind == shard::ReductionKind::Sum)
      for (OpOperand &init : op.getDpsInitsMutable())
        if (!isZeroTensor(init.get()))
          return fail("split sum reduction into a non-zero initial value");
    if (kind == shard::ReductionKind::Product)
      for (OpOperand &init : op.getDpsInitsMutable())
        if (!isOneTensor(init.get()))
          return fail("split product reduction into an initial value other "
                      "than one");
  }
  if (plan.table) {
    // Rows outside this device's block read as zero: a partial sum.
    if (!partial.empty() || !llvm::all_of(op.getIteratorTypesArray(),
                                          [](utils::IteratorType t) {
                                            return t ==
                                                   utils::IteratorType::parallel;
                                          }))
      return fail("vocabulary-parallel embedding with a reduction");
    partial = plan.tableRowAxes;
    plan.partialReason = "table rows split (vocabulary-parallel embedding)";
  }
  for (OpOperand &init : op.getDpsInitsMutable()) {
    Sharding s = plan.operands[init.getOperandNumber()];
    s.partial = partial;
    s.kind = kind;
    plan.results.push_back(s);
  }
  return plan;
}

/// An embedding whose table rows are split: every tensor.extract in the
/// body reads the same captured table, exactly one of its indices is data
/// (the row; the others come from linalg.index) and its value is yielded
/// directly, so a device can read its block of rows and yield zero for
/// rows it does not hold.
LogicalResult Partitioner::planVocabParallel(linalg::LinalgOp op,
                                             const AxisList &rowAxes,
                                             OpPlan &plan) {
  Value table;
  int64_t rowDim = -1;
  bool ok = true;
  op->walk([&](tensor::ExtractOp extract) {
    if (table && extract.getTensor() != table)
      ok = false;
    table = extract.getTensor();
    int64_t dataIndex = -1;
    for (auto [i, index] : llvm::enumerate(extract.getIndices()))
      if (!index.getDefiningOp<linalg::IndexOp>()) {
        if (dataIndex >= 0)
          ok = false;
        dataIndex = i;
      }
    if (dataIndex < 0 || (rowDim >= 0 && rowDim != dataIndex))
      ok = false;
    rowDim = dataIndex;
    ok &= extract->hasOneUse() &&
          isa<linalg::YieldOp>(*extract->getUsers().begin());
  });
  auto type = table ? getRankedTensor(table) : RankedTensorType();
  if (!ok || !type || rowDim < 0 || op->isAncestor(table.getParentBlock()->getParentOp()) ||
      !type.hasStaticShape() ||
      type.getDimSize(rowDim) % getGroupSize(rowAxes) != 0)
    return failure();
  plan.table = table;
  plan.tableRowDim = rowDim;
  plan.tableRowAxes = rowAxes;
  Sharding s = Sharding::replicated(type.getRank());
  s.dims[rowDim] = rowAxes;
  plan.captured.push_back({table, s});
  return success();
}

FailureOr<OpPlan> Partitioner::planTemporal(linalg::LinalgOp op,
                                            PartitionSpecAttr spec,
                                            SmallVector<AxisList> loopAxes) {
  TemporalAttr temporal = spec.getTemporal();
  OpPlan plan;
  plan.kind = PlanKind::Temporal;
  plan.steps = temporal.getSteps();
  if (!axisOfName.count(temporal.getRowAxis().getValue()) ||
      !axisOfName.count(temporal.getColAxis().getValue()))
    return op->emitError() << "temporal grid axes must be grid axes (not pp)";
  plan.rowAxis = getGridAxis(temporal.getRowAxis());
  plan.colAxis = getGridAxis(temporal.getColAxis());
  auto findLoop = [&](StringAttr name) -> int64_t {
    for (auto [i, loop] : llvm::enumerate(spec.getLoops()))
      if (loop.getName() == name)
        return i;
    return -1;
  };
  // Loops of the matmul dims M, N, K (in that order).
  int64_t loops[3] = {findLoop(temporal.getM()), findLoop(temporal.getN()),
                      findLoop(temporal.getK())};
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      llvm::any_of(loops, [&](int64_t l) {
        return l < 0 || l >= static_cast<int64_t>(op.getNumLoops());
      }))
    return op->emitError() << "temporal primitive on an op that is not a "
                              "two-input one-output contraction";
  if (cast<PartitionableOpInterface>(op.getOperation()).getReductionKind() !=
          shard::ReductionKind::Sum ||
      !op.getBlock()->getOps<linalg::IndexOp>().empty())
    return op->emitError() << "temporal primitive needs a sum of products "
                              "that does not read linalg.index";
  // The phase: which matmul dim the op reduces.
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  int64_t reduced = -1;
  for (int64_t d = 0; d < 3; ++d)
    if (iterators[loops[d]] == utils::IteratorType::reduction)
      reduced = reduced < 0 ? d : 3;
  if (reduced < 0 || reduced > 2)
    return op->emitError() << "temporal primitive needs exactly one of its "
                              "matmul dims to be a reduction loop";
  plan.phase = reduced == 1   ? Phase::Forward
               : reduced == 2 ? Phase::InputGrad
                              : Phase::WeightGrad;
  // Each operand holds two of M, N, K: the inputs the reduced dim, the
  // result the other two. Its canonical layout puts M (else N) on the row
  // axis and the other dim on the column axis.
  SmallVector<OpOperand *> operands{op.getDpsInputOperand(0),
                                    op.getDpsInputOperand(1),
                                    op.getDpsInitOperand(0)};
  unsigned pairsSeen = 0;
  for (auto [i, operand] : llvm::enumerate(operands)) {
    AffineMap map = op.getMatchingIndexingMap(operand);
    TemporalOperand t;
    t.operand = operand->getOperandNumber();
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d < 3; ++d) {
      int64_t pos = -1;
      for (auto [r, expr] : llvm::enumerate(map.getResults()))
        if (auto dim = dyn_cast<AffineDimExpr>(expr);
            dim && dim.getPosition() == loops[d])
          pos = r;
      if (pos >= 0) {
        dims.push_back(d);
        t.tensorDim[dims.size() - 1] = pos;
      } else if (map.isFunctionOfDim(loops[d])) {
        dims.push_back(-1);
      }
    }
    bool isInit = i == 2;
    if (dims.size() != 2 || llvm::is_contained(dims, -1) ||
        llvm::is_contained(dims, reduced) == isInit)
      return op->emitError()
             << "temporal primitive needs O[M, K] += I[M, N] * W[N, K] (or "
                "its gradients) with the spec's matmul dims; operand "
             << t.operand << " does not fit";
    // dims are in M, N, K order: the first goes on the row axis.
    t.matmulDim[0] = dims[0];
    t.matmulDim[1] = dims[1];
    pairsSeen |= 1u << (t.matmulDim[0] + t.matmulDim[1]);
    plan.temporalOperands.push_back(t);
  }
  if (pairsSeen != 0b1110)
    return op->emitError() << "temporal primitive needs its three operands "
                              "to hold different pairs of M, N, K";
  Value a = op->getOperand(plan.temporalOperands[0].operand);
  Value b = op->getOperand(plan.temporalOperands[1].operand);
  Value init = op->getOperand(plan.temporalOperands[2].operand);
  if (a == b || a == init || b == init)
    return op->emitError() << "temporal primitive on repeated operands";

  // Spatial splits as the spec says; the temporal dims additionally over
  // the grid axes (minor: the q slices of a dim are inside its spatial
  // block).
  plan.loopAxes = loopAxes;
  plan.operands.assign(op->getNumOperands(), Sharding());
  for (const TemporalOperand &t : plan.temporalOperands) {
    OpOperand &operand = op->getOpOperand(t.operand);
    std::optional<Sharding> s =
        shardingThroughMap(op.getMatchingIndexingMap(&operand), loopAxes);
    if (s) {
      s->dims[t.tensorDim[0]].push_back(plan.rowAxis);
      s->dims[t.tensorDim[1]].push_back(plan.colAxis);
    }
    if (!s || !isValidFor(getRankedTensor(operand.get()), *s))
      return op->emitError() << "temporal operand " << t.operand
                             << " cannot follow the loop splits";
    plan.operands[t.operand] = *s;
  }
  Sharding result = plan.operands[plan.temporalOperands[2].operand];
  for (unsigned l = 0; l < op.getNumLoops(); ++l)
    if (iterators[l] == utils::IteratorType::reduction &&
        !loopAxes[l].empty()) {
      result.partial.append(loopAxes[l]);
      plan.partialReason = "spatial split of reduction loop " +
                           spec.getLoops()[l].getName().str();
    }
  if (!result.partial.empty() && !isZeroTensor(init))
    return op->emitError() << "temporal primitive with a spatially split "
                              "reduction needs a zero initial value";
  plan.results.push_back(result);
  plan.rule = temporal.getRule(plan.phase);
  // Every operand must be one block per device at every step (PrimePar's
  // rules are; the spec verifier checks the inputs only).
  for (const TemporalOperand &t : plan.temporalOperands)
    for (int64_t step = 0; step < plan.steps; ++step) {
      SmallVector<int64_t> layout = getTemporalLayout(plan, t, step);
      SmallVector<int64_t> sorted(layout);
      llvm::sort(sorted);
      if (llvm::any_of(llvm::enumerate(sorted), [](auto e) {
            return e.value() != static_cast<int64_t>(e.index());
          }))
        return op->emitError()
               << "temporal rule '" << stringifyPhase(plan.phase)
               << "' gives operand " << t.operand
               << " a layout that is not one block per device at step " << step
               << " (not supported)";
    }
  return plan;
}

FailureOr<OpPlan> Partitioner::planNorm(Operation *op,
                                        PartitionSpecAttr spec) {
  OpPlan plan;
  plan.kind = PlanKind::Norm;
  Value input = op->getOperand(0);
  auto type = getRankedTensor(input);
  int64_t axis = cast<NormalizationOpInterface>(op).getNormalizedAxis();
  Sharding in = Sharding::replicated(type.getRank());
  if (spec) {
    if (static_cast<int64_t>(spec.getLoops().size()) != type.getRank())
      return op->emitError() << "stp.spec has " << spec.getLoops().size()
                             << " loops but the input has rank "
                             << type.getRank();
    for (auto [d, loop] : llvm::enumerate(spec.getLoops())) {
      if (loop.getExtent() != type.getDimSize(d))
        return op->emitError()
               << "stp.spec loop '" << loop.getName().getValue()
               << "' has extent " << loop.getExtent() << " but input dim "
               << d << " has size " << type.getDimSize(d);
      if (loop.getPadded())
        return op->emitError() << "padded split of loop '"
                               << loop.getName().getValue()
                               << "' is not supported";
      in.dims[d] = getLoopAxes(loop);
    }
    if (inLoop) {
      Sharding data = states.lookup(input).sharding;
      for (int64_t d = 0; d < type.getRank(); ++d) {
        if (static_cast<int64_t>(data.dims.size()) != type.getRank())
          break;
        AxisList axes = followMicroBatch(in.dims[d], data.dims[d]);
        if (!usedElsewhere(in.dims, d, axes))
          in.dims[d] = axes;
      }
    }
  } else {
    in = states.lookup(input).sharding;
    in.partial.clear();
  }
  if (!isValidFor(type, in))
    in = Sharding::replicated(type.getRank());
  // A split normalized dim keeps its split when scale and bias have exactly
  // the normalized dims (they get the same split) and the element type is a
  // float: the statistics are all-reduced. Otherwise it is gathered.
  bool splitNormalized = false;
  for (int64_t d = axis; d < type.getRank(); ++d)
    splitNormalized |= !in.dims[d].empty();
  bool statsOk = isa<FloatType>(type.getElementType()) && in.partial.empty();
  for (Value operand : op->getOperands().drop_front()) {
    auto t = getRankedTensor(operand);
    statsOk &= t && t.getShape() == type.getShape().drop_front(axis);
  }
  if (splitNormalized && statsOk) {
    plan.kind = PlanKind::NormStats;
    plan.operands.push_back(in);
    Sharding params = Sharding::replicated(type.getRank() - axis);
    for (int64_t d = axis; d < type.getRank(); ++d)
      params.dims[d - axis] = in.dims[d];
    for (unsigned i = 1; i < op->getNumOperands(); ++i)
      plan.operands.push_back(params);
    plan.results.push_back(in);
    plan.normAxis = axis;
    return plan;
  }
  // Normalized dims whole on every device (statistics need no collective).
  for (int64_t d = axis; d < type.getRank(); ++d)
    in.dims[d].clear();
  plan.operands.push_back(in);
  for (Value operand : op->getOperands().drop_front())
    plan.operands.push_back(
        Sharding::replicated(getRankedTensor(operand).getRank()));
  plan.results.push_back(in);
  return plan;
}

/// A normalization whose normalized dims are split: local sums (of x, then
/// of the squared deviations for LayerNorm, of x^2 for RMSNorm) over the
/// normalized dims, all-reduced over their axes, then one elementwise
/// generic computing the normalized output with the local scale and bias.
void Partitioner::emitNormStats(Operation *op, OpPlan &plan) {
  Location loc = op->getLoc();
  std::string label = getLabel(op);
  MLIRContext *ctx = builder.getContext();
  auto norm = cast<NormalizationOpInterface>(op);
  bool layerNorm = norm.isCentered();
  int64_t axis = plan.normAxis;
  float epsilon = norm.getNormEpsilon();
  SmallVector<Value> operands;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    operands.push_back(
        getAs(v, plan.operands[i], label, "operand " + std::to_string(i)));
  Value x = operands[0];
  auto localType = cast<RankedTensorType>(x.getType());
  auto globalType = getRankedTensor(op->getOperand(0));
  Type elem = localType.getElementType();
  int64_t rank = localType.getRank();
  AxisList axes;
  int64_t count = 1;
  for (int64_t d = axis; d < rank; ++d) {
    axes.append(plan.operands[0].dims[d]);
    count *= globalType.getDimSize(d);
  }
  auto statsType = RankedTensorType::get(localType.getShape().take_front(axis),
                                         elem);
  AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  AffineMap lead =
      AffineMap::get(rank, 0, identity.getResults().take_front(axis), ctx);
  AffineMap trail =
      AffineMap::get(rank, 0, identity.getResults().drop_front(axis), ctx);
  SmallVector<utils::IteratorType> reduceIters(rank,
                                               utils::IteratorType::parallel);
  for (int64_t d = axis; d < rank; ++d)
    reduceIters[d] = utils::IteratorType::reduction;
  SmallVector<utils::IteratorType> parallelIters(
      rank, utils::IteratorType::parallel);
  auto constant = [&](OpBuilder &b, Location l, double value) -> Value {
    return arith::ConstantOp::create(b, l, elem, b.getFloatAttr(elem, value));
  };
  Value zero = constant(builder, loc, 0.0);
  auto zeros = [&]() -> Value {
    Value empty = tensor::EmptyOp::create(builder, loc, statsType.getShape(),
                                          elem);
    return linalg::FillOp::create(builder, loc, zero, empty).getResult(0);
  };
  Value countValue = constant(builder, loc, static_cast<double>(count));
  auto allReduce = [&](Value v, StringRef what) -> Value {
    auto reduce = shard::AllReduceOp::create(
        builder, loc, v.getType(), FlatSymbolRefAttr::get(ctx, kGridName),
        builder.getDenseI16ArrayAttr(axes), v,
        shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum));
    markCollective(reduce, label,
                   "all-reduce of the normalization statistics (" + what +
                       ") over " + axesText(axes) + " (normalized dims split)");
    return reduce.getResult();
  };

  // Sum of x (LayerNorm) or of x^2 (RMSNorm).
  Value first =
      linalg::GenericOp::create(
          builder, loc, TypeRange{statsType}, ValueRange{x},
          ValueRange{zeros()}, ArrayRef<AffineMap>{identity, lead},
          reduceIters,
          [&](OpBuilder &b, Location l, ValueRange args) {
            Value term = layerNorm ? args[0]
                                   : arith::MulFOp::create(b, l, args[0],
                                                           args[0])
                                         .getResult();
            Value sum = arith::AddFOp::create(b, l, args[1], term);
            linalg::YieldOp::create(b, l, sum);
          })
          .getResult(0);
  first = allReduce(first, layerNorm ? "sum of x" : "sum of x^2");
  Value second;
  if (layerNorm) {
    second =
        linalg::GenericOp::create(
            builder, loc, TypeRange{statsType}, ValueRange{x, first},
            ValueRange{zeros()},
            ArrayRef<AffineMap>{identity, lead, lead}, reduceIters,
            [&](OpBuilder &b, Location l, ValueRange args) {
              Value mean = arith::DivFOp::create(b, l, args[1], countValue);
              Value d = arith::SubFOp::create(b, l, args[0], mean);
              Value sq = arith::MulFOp::create(b, l, d, d);
              Value sum = arith::AddFOp::create(b, l, args[2], sq);
              linalg::YieldOp::create(b, l, sum);
            })
            .getResult(0);
    second = allReduce(second, "sum of squared deviations");
  }
  SmallVector<Value> inputs{x, first};
  SmallVector<AffineMap> maps{identity, lead};
  if (second) {
    inputs.push_back(second);
    maps.push_back(lead);
  }
  unsigned paramStart = inputs.size();
  for (Value param : ArrayRef<Value>(operands).drop_front()) {
    inputs.push_back(param);
    maps.push_back(trail);
  }
  maps.push_back(identity);
  Value empty = tensor::EmptyOp::create(builder, loc, localType.getShape(),
                                        elem);
  Value eps = constant(builder, loc, epsilon);
  auto result = linalg::GenericOp::create(
      builder, loc, TypeRange{localType}, inputs, ValueRange{empty}, maps,
      parallelIters, [&](OpBuilder &b, Location l, ValueRange args) {
        Value centered = args[0];
        Value meanSquare;
        if (layerNorm) {
          Value mean = arith::DivFOp::create(b, l, args[1], countValue);
          centered = arith::SubFOp::create(b, l, args[0], mean);
          meanSquare = arith::DivFOp::create(b, l, args[2], countValue);
        } else {
          meanSquare = arith::DivFOp::create(b, l, args[1], countValue);
        }
        Value denom = math::SqrtOp::create(
            b, l, arith::AddFOp::create(b, l, meanSquare, eps));
        Value y = arith::DivFOp::create(b, l, centered, denom);
        y = arith::MulFOp::create(b, l, y, args[paramStart]);
        if (args.size() > paramStart + 2)
          y = arith::AddFOp::create(b, l, y, args[paramStart + 1]);
        linalg::YieldOp::create(b, l, y);
      });
  ValueState &state = states[op->getResult(0)];
  state.value = result.getResult(0);
  state.sharding = plan.results[0];
  state.producer = label;
  ++numSplitOps;
}

FailureOr<OpPlan> Partitioner::planAttention(AttentionOp op,
                                             PartitionSpecAttr spec) {
  OpPlan plan;
  plan.kind = PlanKind::Attention;
  auto qType = getRankedTensor(op.getQuery());
  auto kType = getRankedTensor(op.getKey());
  AxisList batch, heads;
  if (spec) {
    ArrayRef<LoopDimAttr> loops = spec.getLoops();
    if (loops.size() < 2 || loops[0].getExtent() != qType.getDimSize(0) ||
        loops[1].getExtent() != qType.getDimSize(1))
      return op->emitError() << "stp.spec loops do not start with the batch "
                                "and head loops of the attention";
    for (LoopDimAttr loop : loops)
      if (loop.getPadded())
        return op->emitError() << "padded split of loop '"
                               << loop.getName().getValue()
                               << "' is not supported";
    batch = getLoopAxes(loops[0]);
    heads = getLoopAxes(loops[1]);
    if (inLoop) {
      AxisList data;
      Sharding q = states.lookup(op.getQuery()).sharding;
      if (!q.dims.empty())
        data = q.dims[0];
      AxisList axes = followMicroBatch(batch, data);
      if (llvm::none_of(axes, [&](shard::GridAxis a) {
            return llvm::is_contained(heads, a);
          }))
        batch = axes;
    }
  }
  if (kType.getDimSize(1) % getGroupSize(heads) != 0) {
    plan.fallback = "key/value heads not divisible by the head split";
    heads.clear();
  }
  auto make = [&](RankedTensorType type) {
    Sharding s = Sharding::replicated(type.getRank());
    s.dims[0] = batch;
    s.dims[1] = heads;
    return s;
  };
  plan.operands.push_back(make(qType));
  plan.operands.push_back(make(kType));
  plan.operands.push_back(make(getRankedTensor(op.getValue())));
  if (Value mask = op.getMask()) {
    auto type = getRankedTensor(mask);
    Sharding s = Sharding::replicated(type.getRank());
    int64_t lead = 4 - type.getRank();
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t full = d + lead;
      if (type.getDimSize(d) == 1)
        continue;
      if (full == 0)
        s.dims[d] = batch;
      if (full == 1)
        s.dims[d] = heads;
    }
    plan.operands.push_back(s);
  }
  plan.results.push_back(make(getRankedTensor(op.getResult())));
  return plan;
}

/// stp.moe (docs/moe.md): loops (tokens, model dim, experts, expert hidden
/// dim) as ConvertToOperators.cpp gives them. Tokens split over their axes;
/// the experts over a subset of those (expert parallelism: each rank of an
/// expert group holds E / P experts and receives their tokens from the
/// group by all-to-all); an expert's hidden dim over other axes (tensor
/// parallelism inside the experts: the output is a partial sum over them).
/// The model dim is never split. Anything else runs replicated, reported.
FailureOr<OpPlan> Partitioner::planMoE(Operation *op, PartitionSpecAttr spec) {
  OpPlan plan;
  plan.kind = PlanKind::MoE;
  auto grad = dyn_cast<MoEGradOp>(op);
  Value tokensValue = grad ? grad.getTokens() : cast<MoEOp>(op).getTokens();
  Value wInValue = grad ? grad.getWIn() : cast<MoEOp>(op).getWIn();
  bool gated = grad ? bool(grad.getWMul()) : bool(cast<MoEOp>(op).getWMul());
  auto tokens = getRankedTensor(tokensValue);
  auto wIn = getRankedTensor(wInValue);
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1),
          e = wIn.getDimSize(0), f = wIn.getDimSize(2);
  if (spec) {
    ArrayRef<LoopDimAttr> loops = spec.getLoops();
    if (loops.size() != 4 || loops[0].getExtent() != n ||
        loops[1].getExtent() != d || loops[2].getExtent() != e ||
        loops[3].getExtent() != f)
      return op->emitError()
             << "stp.spec of an stp.moe must have the loops (tokens " << n
             << ", model dim " << d << ", experts " << e << ", expert hidden "
             << f << ")";
    for (LoopDimAttr loop : loops)
      if (loop.getPadded())
        return op->emitError()
               << "padded split of loop '" << loop.getName().getValue()
               << "' is not supported";
    plan.moeTokens = getLoopAxes(loops[0]);
    plan.moeExperts = getLoopAxes(loops[2]);
    plan.moeHidden = getLoopAxes(loops[3]);
    if (!getLoopAxes(loops[1]).empty())
      plan.fallback = "the model dim of an MoE layer is never split";
  }
  if (inLoop) {
    AxisList data;
    Sharding t = states.lookup(tokensValue).sharding;
    if (!t.dims.empty())
      data = t.dims[0];
    plan.moeTokens = followMicroBatch(plan.moeTokens, data);
  }
  auto overlaps = [](const AxisList &a, const AxisList &b) {
    return llvm::any_of(a, [&](auto x) { return llvm::is_contained(b, x); });
  };
  if (plan.fallback.empty()) {
    if (llvm::any_of(plan.moeExperts, [&](shard::GridAxis a) {
          return !llvm::is_contained(plan.moeTokens, a) || a == mbAxis;
        }))
      plan.fallback = "expert parallelism over axes that do not split the "
                      "tokens (or over micro-batches)";
    else if (overlaps(plan.moeHidden, plan.moeTokens))
      plan.fallback = "the expert hidden dim split over a token axis";
    else if (n % getGroupSize(plan.moeTokens) != 0 ||
             e % getGroupSize(plan.moeExperts) != 0 ||
             f % getGroupSize(plan.moeHidden) != 0)
      plan.fallback = "tokens, experts or expert hidden dim not divisible by "
                      "their split";
  }
  if (!plan.fallback.empty()) {
    plan.moeTokens.clear();
    plan.moeExperts.clear();
    plan.moeHidden.clear();
  }
  Sharding t = Sharding::replicated(2);
  t.dims[0] = plan.moeTokens;
  // The backward's first operand (the forward's result) only ties it to
  // its forward; it is never read.
  if (grad)
    plan.operands.push_back(t);
  plan.operands.push_back(t);
  plan.operands.push_back(Sharding::replicated(2));
  auto weight = [&](int64_t hiddenDim) {
    Sharding w = Sharding::replicated(3);
    w.dims[0] = plan.moeExperts;
    w.dims[hiddenDim] = plan.moeHidden;
    return w;
  };
  plan.operands.push_back(weight(2));
  if (gated)
    plan.operands.push_back(weight(2));
  plan.operands.push_back(weight(1));
  Sharding out = t;
  out.partial = plan.moeHidden;
  if (!grad) {
    plan.results.push_back(out);
    if (!plan.moeHidden.empty())
      plan.partialReason = "expert hidden dim f of the MoE experts split";
    return plan;
  }
  // Backward: dy as the result; the tokens' gradient as the result (partial
  // over the hidden dim's axes), the router's a sum over every token and
  // hidden-dim axis, the experts' weights' a sum over the token axes that
  // replicate them.
  plan.operands.push_back(t);
  plan.results.push_back(out);
  // (Axes of size 1 sum nothing.)
  auto summed = [&](shard::GridAxis a) { return getGroupSize({a}) > 1; };
  Sharding router = Sharding::replicated(2);
  for (const AxisList *axes : {&plan.moeTokens, &plan.moeHidden})
    for (shard::GridAxis a : *axes)
      if (summed(a))
        router.partial.push_back(a);
  plan.results.push_back(router);
  AxisList replicas;
  for (shard::GridAxis a : plan.moeTokens)
    if (!llvm::is_contained(plan.moeExperts, a) && summed(a))
      replicas.push_back(a);
  auto weightGrad = [&](int64_t hiddenDim) {
    Sharding w = weight(hiddenDim);
    w.partial = replicas;
    plan.results.push_back(w);
  };
  weightGrad(2);
  if (gated)
    weightGrad(2);
  weightGrad(1);
  if (!plan.moeHidden.empty())
    plan.partialReason = "expert hidden dim f of the MoE experts split";
  return plan;
}

/// The devices per node L of the expert group over grid `axes` where
/// BaGuaLu's two-level exchange applies (stp.moe_all_to_all's
/// `intra_node_size`): the group spans several nodes with L > 1 of its
/// members on each, and the members (numbered as `shard` numbers a group,
/// major axis first) w and v share a node exactly when w / L == v / L. 0
/// otherwise.
static int64_t getTwoLevelNodeSize(MeshAttr mesh,
                                   ArrayRef<shard::GridAxis> axes) {
  SmallVector<AxisAttr> grid = getGridAxes(mesh);
  SmallVector<unsigned> index;
  stpar::cost::AxisPlacement group;
  for (shard::GridAxis axis : axes) {
    std::optional<unsigned> i =
        size_t(axis) < grid.size()
            ? mesh.findAxis(grid[axis].getName().getValue())
            : std::nullopt;
    if (!i)
      return 0;
    index.push_back(*i);
    stpar::cost::AxisPlacement one = mesh.getAxisPlacement(*i);
    group.intraNodeSize *= one.intraNodeSize;
    group.interNodeSize *= one.interNodeSize;
    group.regular = group.regular && one.regular;
  }
  int64_t l = group.intraNodeSize;
  if (!group.regular || l < 2 || group.interNodeSize < 2)
    return 0;
  int64_t perNode = mesh.getCluster().getDevicesPerNode();
  // The node of each block of L members (the group holding device 0; the
  // placement is regular, so the others are alike).
  DenseMap<int64_t, int64_t> nodeOfBlock, blockOfNode;
  for (int64_t w = 0, p = group.getSize(); w < p; ++w) {
    int64_t rest = w, offset = 0;
    for (unsigned k = unsigned(index.size()); k-- > 0;) {
      int64_t size = mesh.getAxes()[index[k]].getSize();
      offset += (rest % size) * mesh.getAxisStride(index[k]);
      rest /= size;
    }
    int64_t node = offset / perNode, block = w / l;
    if (nodeOfBlock.try_emplace(block, node).first->second != node ||
        blockOfNode.try_emplace(node, block).first->second != block)
      return 0;
  }
  return l;
}

LogicalResult Partitioner::emitMoE(MoEOp op, const OpPlan &plan) {
  std::string label = getLabel(op);
  Location loc = op.getLoc();
  SmallVector<Value> local;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    local.push_back(
        getAs(v, plan.operands[i], label, "operand " + std::to_string(i)));
  Value tokens = local[0], router = local[1], wIn = local[2],
        wMul = op.getWMul() ? local[3] : Value(), wOut = local.back();
  auto tokensType = getRankedTensor(tokens);
  int64_t n = tokensType.getDimSize(0), d = tokensType.getDimSize(1);
  int64_t e = getRankedTensor(op.getWIn()).getDimSize(0);
  int64_t k = int64_t(op.getTopK());
  int64_t p = getGroupSize(plan.moeExperts);
  Type f32 = tokensType.getElementType();
  Type i64 = builder.getI64Type();
  auto type = [&](ArrayRef<int64_t> shape, Type elem) {
    return RankedTensorType::get(shape, elem);
  };
  // 1. Route this rank's tokens.
  auto route = MoERouteOp::create(builder, loc, type({n, k}, f32),
                                  type({n, k}, i64), tokens, router,
                                  op.getTopKAttr(), op.getNormalizeAttr());
  // 2. Dispatch into one block of C = n rows per expert (no token dropped:
  //    a static bound every rank agrees on).
  int64_t capacity = n;
  auto dispatch = MoEDispatchOp::create(
      builder, loc, type({e, capacity, d}, f32), type({e, 1}, i64),
      type({n, k}, i64), tokens, route.getExperts(), /*weights=*/Value());
  Value buffer = dispatch.getBuffer(), counts = dispatch.getCounts();
  std::string group = axesText(plan.moeExperts);
  int64_t routed = n * k;
  // Smart scheduling (FasterMoE Sec. 4.2) as the plan chose it: the
  // exchange in S = P / g pairwise steps of device groups of g.
  // BaGuaLu's hierarchical all-to-all where the plan chose it and the
  // group spans nodes (regularly: L devices on each of several nodes).
  // FasterMoE's shadowing (Sec. 4.1) of the experts the plan names.
  int64_t groupSize = 0, intraNodeSize = 0;
  SmallVector<int64_t> shadowed;
  if (auto records = op->getAttrOfType<ArrayAttr>(STPDialect::kPlanOpsAttrName))
    if (!records.empty())
      if (auto record = dyn_cast<DictionaryAttr>(records[0]))
        if (auto moe = record.getAs<DictionaryAttr>("moe")) {
          if (auto g = moe.getAs<IntegerAttr>("schedule_group_size"))
            groupSize = g.getInt();
          if (auto a = moe.getAs<StringAttr>("all_to_all");
              a && a.getValue() == "hierarchical")
            intraNodeSize = getTwoLevelNodeSize(mesh, plan.moeExperts);
          if (auto list = moe.getAs<ArrayAttr>("shadowed_experts"))
            for (Attribute a : list) {
              auto index = dyn_cast<IntegerAttr>(a);
              if (!index || index.getInt() < 0 || index.getInt() >= e)
                return op->emitError()
                       << "the plan's shadowed_experts must be expert "
                          "indices in [0, "
                       << e << "), got " << a;
              shadowed.push_back(index.getInt());
            }
        }
  if (groupSize <= 0 || groupSize >= p || p % groupSize != 0)
    groupSize = 0;
  llvm::sort(shadowed);
  shadowed.erase(llvm::unique(shadowed), shadowed.end());
  // (One device per expert group: nothing to shadow.)
  if (p == 1)
    shadowed.clear();
  MoEForward &record = moeForwards[op];
  record.groupSize = groupSize;
  record.intraNodeSize = intraNodeSize;
  record.shadowed = shadowed;
  Value sentCounts = counts;
  if (!shadowed.empty()) {
    // Each shadowed expert's weights come from its owner; its rows stay
    // here (their counts go out as zero) and run on those weights.
    for (Value w : {wIn, wMul, wOut}) {
      if (!w)
        continue;
      auto wType = getRankedTensor(w);
      auto bcast = MoEShadowBroadcastOp::create(
          builder, loc,
          type({int64_t(shadowed.size()), wType.getDimSize(1),
                wType.getDimSize(2)},
               wType.getElementType()),
          w, FlatSymbolRefAttr::get(builder.getContext(), kGridName),
          builder.getDenseI16ArrayAttr(plan.moeExperts),
          builder.getI64IntegerAttr(e), builder.getDenseI64ArrayAttr(shadowed));
      markCollective(bcast, label,
                     "broadcast of the shadowed experts' weights from their "
                     "owners over " +
                         axesText(plan.moeExperts) + " (FasterMoE shadowing, " +
                         std::to_string(shadowed.size()) + " expert(s))");
      record.shadowWeights.push_back(bcast);
    }
    record.shadowRows = selectExperts(builder, loc, buffer, shadowed);
    record.shadowCounts = selectExperts(builder, loc, counts, shadowed);
    sentCounts = withoutShadowed(loc, counts, shadowed);
  }
  // 3. Each expert's used rows to the rank holding it (their counts first,
  //    so receivers know the sizes); 4. the local experts (partial sums
  //    over the expert hidden dim's axes); 5. the results back to the
  //    tokens' ranks, into the dispatched rows. The backward reuses the
  //    rows each step received.
  // A training step's experts keep A (and U) for their backward.
  bool keep = llvm::any_of(
      op->getUsers(), [](Operation *user) { return isa<MoEGradOp>(user); });
  auto expertsOn = [&](Value rows, Value rowCounts, Value in, Value mul,
                       Value out) {
    auto rowsType = cast<RankedTensorType>(rows.getType());
    SmallVector<Type> hidden;
    if (keep)
      hidden.assign(
          mul ? 2 : 1,
          RankedTensorType::get({rowsType.getDimSize(0), rowsType.getDimSize(1),
                                 getRankedTensor(in).getDimSize(2)},
                                rowsType.getElementType()));
    return MoEExpertsOp::create(builder, loc, rows.getType(), hidden, rows,
                                rowCounts, in, mul, out, op.getActivationAttr(),
                                /*bf16_operands=*/UnitAttr());
  };
  Value shadowOutputs;
  auto runExperts = [&](Value rows, Value rowCounts, int64_t step) -> Value {
    if (step == 0 && !shadowed.empty()) {
      // The shadowed experts on this rank's own rows, while the first
      // step's rows travel (FasterMoE: they run with step 0).
      ArrayRef<Value> w = record.shadowWeights;
      auto local = expertsOn(record.shadowRows, record.shadowCounts, w[0],
                             wMul ? w[1] : Value(), w.back());
      shadowOutputs = local.getResult();
      record.shadowHidden.assign(local.getHidden().begin(),
                                 local.getHidden().end());
    }
    record.rows.push_back(rows);
    record.rowCounts.push_back(rowCounts);
    auto experts = expertsOn(rows, rowCounts, wIn, wMul, wOut);
    record.hidden.emplace_back(experts.getHidden().begin(),
                               experts.getHidden().end());
    return experts.getResult();
  };
  Value outputs = emitMoESchedule(
      loc, plan, label, buffer, sentCounts, routed, groupSize, intraNodeSize,
      runExperts,
      "all-to-all dispatching the tokens to their experts over " + group +
          " (expert parallelism; " + std::to_string(routed) +
          " rows per device, buffers of " + std::to_string(capacity) +
          " rows per expert)",
      "all-to-all returning the experts' outputs over " + group +
          " (expert parallelism)");
  if (shadowOutputs)
    outputs = insertExperts(builder, loc, outputs, shadowOutputs, shadowed);
  // 6. Combine with the gates.
  auto combine = MoECombineOp::create(builder, loc, type({n, d}, f32), outputs,
                                      dispatch.getSlots(), route.getExperts(),
                                      route.getGates());
  record.gates = route.getGates();
  record.experts = route.getExperts();
  record.slots = dispatch.getSlots();
  record.outputs = outputs;
  if (!plan.fallback.empty()) {
    combine->setAttr(STPDialect::kFallbackAttrName,
                     builder.getStringAttr(plan.fallback));
    ++numFallbackOps;
  } else if (!plan.results[0].isReplicated() || p > 1) {
    ++numSplitOps;
  }
  ValueState &state = states[op.getResult()];
  state.value = combine.getResult();
  state.sharding = plan.results[0];
  state.producer = label;
  state.partialReason = plan.partialReason;
  return success();
}

Value Partitioner::withoutShadowed(Location loc, Value counts,
                                   ArrayRef<int64_t> shadowed) {
  Type i64 = builder.getI64Type();
  Value zeros = linalg::FillOp::create(
                    builder, loc,
                    ValueRange{arith::ConstantOp::create(
                        builder, loc, builder.getIntegerAttr(i64, 0))},
                    ValueRange{tensor::EmptyOp::create(
                        builder, loc,
                        ArrayRef<int64_t>{int64_t(shadowed.size()), 1}, i64)})
                    .getResult(0);
  return insertExperts(builder, loc, counts, zeros, shadowed);
}

Value Partitioner::emitMoESchedule(
    Location loc, const OpPlan &plan, const std::string &label, Value buffer,
    Value counts, int64_t routed, int64_t groupSize, int64_t intraNodeSize,
    function_ref<Value(Value, Value, int64_t)> runExperts,
    const std::string &dispatchWhat, const std::string &returnWhat) {
  int64_t p = getGroupSize(plan.moeExperts);
  if (p == 1)
    return runExperts(buffer, counts, 0);
  int64_t steps = groupSize ? p / groupSize : 1;
  auto whole = cast<RankedTensorType>(buffer.getType());
  int64_t e = whole.getDimSize(0), c = whole.getDimSize(1);
  Type i64 = builder.getI64Type();
  auto exchange = [&](Value rows, Value rowCounts, Value init,
                      RankedTensorType rowsType, bool reverse, int64_t step) {
    auto countsType = RankedTensorType::get(
        reverse ? ArrayRef<int64_t>{e, 1} : ArrayRef<int64_t>{e / p, p}, i64);
    auto op = MoEAllToAllOp::create(
        builder, loc, rowsType, countsType, rows, rowCounts, init,
        FlatSymbolRefAttr::get(builder.getContext(), kGridName),
        builder.getDenseI16ArrayAttr(plan.moeExperts),
        builder.getI64IntegerAttr(routed),
        reverse ? builder.getUnitAttr() : UnitAttr(),
        builder.getI64IntegerAttr(groupSize), builder.getI64IntegerAttr(step),
        builder.getI64IntegerAttr(intraNodeSize));
    std::string stepText =
        steps > 1 ? ", smart schedule step " + std::to_string(step + 1) +
                        " of " + std::to_string(steps) + " (groups of " +
                        std::to_string(groupSize) + ")"
                  : "";
    if (intraNodeSize)
      stepText += ", hierarchical (" + std::to_string(intraNodeSize) +
                  " devices per node first, then across nodes)";
    markCollective(op, label, (reverse ? returnWhat : dispatchWhat) + stepText);
    return op;
  };
  auto dispatchStep = [&](int64_t s) {
    return exchange(buffer, counts, Value(),
                    RankedTensorType::get({e / p, p * c, whole.getDimSize(2)},
                                          whole.getElementType()),
                    false, s);
  };
  Value back;
  MoEAllToAllOp sent = dispatchStep(0);
  Value done = runExperts(sent.getResultRows(), sent.getResultCounts(), 0);
  Value doneCounts = sent.getResultCounts();
  for (int64_t s = 1; s < steps; ++s) {
    MoEAllToAllOp next = dispatchStep(s);
    back = exchange(done, doneCounts, back, whole, true, s - 1).getResultRows();
    done = runExperts(next.getResultRows(), next.getResultCounts(), s);
    doneCounts = next.getResultCounts();
  }
  return exchange(done, doneCounts, back, whole, true, steps - 1)
      .getResultRows();
}

/// The backward of an stp.moe (docs/moe.md, "Training"), routed like its
/// forward expansion, whose routing, slots, returned outputs and received
/// rows it reuses: on the tokens' ranks the gates' gradient
/// (stp.moe_gate_grad) and dy dispatched times the gates; the rows to the
/// experts' ranks (the forward's exchange steps); the experts' backward
/// on the rows they received in the forward; the rows' gradient back;
/// combined without gates; plus the router's backward.
LogicalResult Partitioner::emitMoEGrad(MoEGradOp op, const OpPlan &plan) {
  std::string label = getLabel(op);
  Location loc = op.getLoc();
  auto found = moeForwards.find(op.getForward().getDefiningOp());
  if (found == moeForwards.end())
    return op->emitError() << "stp.moe_grad: its forward stp.moe was not "
                              "partitioned before it";
  const MoEForward &fwd = found->second;
  int64_t p = getGroupSize(plan.moeExperts);
  int64_t groupSize = fwd.groupSize;
  int64_t steps = groupSize ? p / groupSize : 1;
  if (int64_t(fwd.rows.size()) != steps)
    return op->emitError() << "stp.moe_grad: its plan (" << p
                           << " devices per expert group) differs from its "
                              "forward's";
  SmallVector<Value> local;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    local.push_back(i == 0 ? Value()
                           : getAs(v, plan.operands[i], label,
                                   "operand " + std::to_string(i)));
  Value tokens = local[1], router = local[2], wIn = local[3],
        wMul = op.getWMul() ? local[4] : Value(),
        wOut = local[local.size() - 2], dy = local.back();
  auto tokensType = getRankedTensor(tokens);
  int64_t n = tokensType.getDimSize(0), d = tokensType.getDimSize(1);
  int64_t e = getRankedTensor(op.getWIn()).getDimSize(0);
  int64_t k = int64_t(op.getTopK());
  Type f32 = tokensType.getElementType();
  Type i64 = builder.getI64Type();
  auto type = [&](ArrayRef<int64_t> shape, Type elem) {
    return RankedTensorType::get(shape, elem);
  };
  auto add = [&](Value a, Value b) { return addTensors(builder, loc, a, b); };
  // 1. The gates' gradient and dy times the gates, on the tokens' ranks.
  auto gateGrad = MoEGateGradOp::create(
      builder, loc, type({n, k}, f32), fwd.outputs, fwd.slots, fwd.experts, dy);
  int64_t capacity = n;
  auto dispatch = MoEDispatchOp::create(
      builder, loc, type({e, capacity, d}, f32), type({e, 1}, i64),
      type({n, k}, i64), dy, fwd.experts, fwd.gates);
  // 2. The experts' backward on the rows they received in the forward,
  //    through the forward's exchange steps.
  SmallVector<Value> dWeights;
  auto expertsGrad = [&](Value rows, Value dOut, Value rowCounts, Value in,
                         Value mul, Value out, ValueRange hidden) {
    SmallVector<Type> types{dOut.getType(), in.getType()};
    if (mul)
      types.push_back(mul.getType());
    types.push_back(out.getType());
    return MoEExpertsGradOp::create(builder, loc, types, rows, dOut, rowCounts,
                                    in, mul, out, hidden,
                                    op.getActivationAttr(),
                                    /*bf16_operands=*/UnitAttr());
  };
  // FasterMoE's shadowing: the shadowed experts' rows stay here, as in
  // the forward; their backward runs on the broadcast weights.
  const ArrayRef<int64_t> shadowed = fwd.shadowed;
  Value dShadowRows, sentCounts = dispatch.getCounts();
  MoEExpertsGradOp shadowGrad;
  if (!shadowed.empty()) {
    dShadowRows = selectExperts(builder, loc, dispatch.getBuffer(), shadowed);
    sentCounts = withoutShadowed(loc, dispatch.getCounts(), shadowed);
  }
  auto runExperts = [&](Value dOut, Value, int64_t step) -> Value {
    if (step == 0 && !shadowed.empty()) {
      ArrayRef<Value> w = fwd.shadowWeights;
      shadowGrad =
          expertsGrad(fwd.shadowRows, dShadowRows, fwd.shadowCounts, w[0],
                      wMul ? w[1] : Value(), w.back(), fwd.shadowHidden);
    }
    auto ex = expertsGrad(fwd.rows[step], dOut, fwd.rowCounts[step], wIn, wMul,
                          wOut, fwd.hidden[step]);
    SmallVector<Value> ws{ex.getDWIn()};
    if (wMul)
      ws.push_back(ex.getDWMul());
    ws.push_back(ex.getDWOut());
    if (dWeights.empty())
      dWeights = ws;
    else
      for (auto [sum, w] : llvm::zip(dWeights, ws))
        sum = add(sum, w);
    return ex.getDRows();
  };
  std::string group = axesText(plan.moeExperts);
  Value rowGrads = emitMoESchedule(
      loc, plan, label, dispatch.getBuffer(), sentCounts, n * k, groupSize,
      fwd.intraNodeSize, runExperts,
      "all-to-all dispatching the output gradient to the experts over " +
          group + " (expert parallelism, backward)",
      "all-to-all returning the tokens' gradient over " + group +
          " (expert parallelism, backward)");
  if (shadowGrad) {
    // The shadowed experts' rows' gradients join the returned ones; their
    // weight gradients (this rank's tokens' share) go to their owners.
    rowGrads =
        insertExperts(builder, loc, rowGrads, shadowGrad.getDRows(), shadowed);
    SmallVector<Value> partials{shadowGrad.getDWIn()};
    if (wMul)
      partials.push_back(shadowGrad.getDWMul());
    partials.push_back(shadowGrad.getDWOut());
    for (auto [sum, partial] : llvm::zip(dWeights, partials)) {
      auto reduce = MoEShadowReduceOp::create(
          builder, loc, sum.getType(), partial, sum,
          FlatSymbolRefAttr::get(builder.getContext(), kGridName),
          builder.getDenseI16ArrayAttr(plan.moeExperts),
          builder.getI64IntegerAttr(e), builder.getDenseI64ArrayAttr(shadowed));
      markCollective(reduce, label,
                     "reduce of the shadowed experts' weight gradients to "
                     "their owners over " +
                         group + " (FasterMoE shadowing, " +
                         std::to_string(shadowed.size()) + " expert(s))");
      sum = reduce.getResult();
    }
  }
  // 3. Each token's rows' gradients summed (no gates: dy carried them),
  //    plus the router's backward.
  Value ones =
      linalg::FillOp::create(builder, loc,
                             ValueRange{arith::ConstantOp::create(
                                 builder, loc, builder.getFloatAttr(f32, 1.0))},
                             ValueRange{tensor::EmptyOp::create(
                                 builder, loc, ArrayRef<int64_t>{n, k}, f32)})
          .getResult(0);
  Value dExperts = MoECombineOp::create(builder, loc, type({n, d}, f32),
                                        rowGrads, fwd.slots, fwd.experts, ones)
                       .getResult();
  auto routeGrad = MoERouteGradOp::create(
      builder, loc, type({n, d}, f32), router.getType(), tokens, router,
      fwd.experts, gateGrad.getResult(), op.getNormalizeAttr());
  SmallVector<Value> results{add(dExperts, routeGrad.getDTokens()),
                             routeGrad.getDRouter()};
  llvm::append_range(results, dWeights);
  if (!plan.fallback.empty()) {
    routeGrad->setAttr(STPDialect::kFallbackAttrName,
                       builder.getStringAttr(plan.fallback));
    ++numFallbackOps;
  } else if (p > 1 || !plan.moeTokens.empty()) {
    ++numSplitOps;
  }
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    ValueState &state = states[result];
    state.value = results[i];
    state.sharding = plan.results[i];
    state.producer = label;
    // The op makes B (the tokens' gradient) and G (the router's and the
    // experts' weights' gradients).
    if (i > 0)
      state.phase = "weight_grad";
    if (!plan.results[i].partial.empty())
      state.partialReason =
          i == 0 ? plan.partialReason
                 : "the MoE layer's parameter gradients (router, experts) "
                   "summed over each rank's tokens";
  }
  return success();
}

/// An op that follows an operand's layout (PartitionableOpInterface's
/// LayoutRule): the leading operand keeps its splits except on the dims
/// that must be whole, that no result dim takes, or whose size differs in
/// another tensor of the same rank; result 0's dims take the splits of the
/// leading operand's dims they map to (where their size divides).
OpPlan Partitioner::planLayout(Operation *op, const LayoutRule &rule) {
  OpPlan plan;
  plan.kind = PlanKind::Layout;
  auto type = getRankedTensor(op->getOperand(0));
  int64_t rank = type.getRank();
  auto layoutOf = [&](Value v) {
    Sharding s = states.lookup(v).sharding;
    s.partial.clear();
    return s;
  };
  Sharding cur = layoutOf(op->getOperand(0));
  if (rule.firstSplitOperandLeads) {
    // (a scatter into a fresh replicated tensor follows its split updates)
    cur = Sharding::replicated(rank);
    for (Value operand : op->getOperands()) {
      Sharding s = layoutOf(operand);
      if (static_cast<int64_t>(s.dims.size()) == rank && !s.isReplicated()) {
        cur = s;
        break;
      }
    }
  }
  // In the micro-batch loop an operand holding one micro-batch leads (the
  // others are from before the loop and can be sliced to it).
  if (inLoop)
    for (Value operand : op->getOperands()) {
      Sharding s = layoutOf(operand);
      if (static_cast<int64_t>(s.dims.size()) == rank && holdsMicroBatch(s)) {
        cur = s;
        break;
      }
    }
  if (static_cast<int64_t>(cur.dims.size()) != rank)
    cur = Sharding::replicated(rank);
  for (int64_t d : rule.wholeDims)
    if (d >= 0 && d < rank)
      cur.dims[d].clear();
  SmallVector<bool> taken(rank, false);
  for (int64_t d : rule.resultDims)
    if (d >= 0 && d < rank)
      taken[d] = true;
  for (int64_t d = 0; d < rank; ++d)
    if (!taken[d])
      cur.dims[d].clear();
  SmallVector<Value> values(op->getOperands());
  values.append(op->result_begin(), op->result_end());
  for (Value v : values)
    if (auto t = getRankedTensor(v); t && t.getRank() == rank)
      for (int64_t d = 0; d < rank; ++d)
        if (t.getDimSize(d) != type.getDimSize(d))
          cur.dims[d].clear();

  auto resultType = getRankedTensor(op->getResult(0));
  auto outFor = [&](Sharding &in) {
    Sharding out = Sharding::replicated(resultType.getRank());
    for (auto [r, d] : llvm::enumerate(rule.resultDims)) {
      if (d < 0 || d >= rank || in.dims[d].empty())
        continue;
      int64_t size = resultType.getDimSize(r);
      if (ShapedType::isDynamic(size) || size % getGroupSize(in.dims[d]) != 0) {
        in.dims[d].clear();
        continue;
      }
      out.dims[r] = in.dims[d];
    }
    return out;
  };
  Sharding out = outFor(cur);
  bool valid = true;
  for (Value v : op->getOperands())
    if (auto t = getRankedTensor(v); t && t.getRank() == rank)
      valid &= isValidFor(t, cur);
  for (Value v : op->getResults())
    if (auto t = getRankedTensor(v); t && t.getRank() == resultType.getRank())
      valid &= isValidFor(t, out);
  if (!valid) {
    cur = Sharding::replicated(rank);
    out = Sharding::replicated(resultType.getRank());
  }
  for (Value v : op->getOperands()) {
    auto t = getRankedTensor(v);
    plan.operands.push_back(!t                    ? Sharding()
                            : t.getRank() == rank ? cur
                                                  : Sharding::replicated(
                                                        t.getRank()));
  }
  for (Value v : op->getResults()) {
    auto t = getRankedTensor(v);
    plan.results.push_back(
        !t ? Sharding()
        : t.getRank() == resultType.getRank()
            ? out
            : Sharding::replicated(t.getRank()));
  }
  return plan;
}

FailureOr<OpPlan> Partitioner::planOp(Operation *op) {
  auto spec = op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName);
  auto partitionable = dyn_cast<PartitionableOpInterface>(op);
  PartitionRule rule = partitionable ? partitionable.getPartitionRule()
                                     : PartitionRule::Unsupported;
  OpPlan plan;
  switch (rule) {
  case PartitionRule::Lazy:
    plan.kind = PlanKind::Lazy;
    return plan;
  case PartitionRule::Terminator:
    plan.kind = PlanKind::Return;
    return plan;
  case PartitionRule::Loops:
    return planLinalg(cast<linalg::LinalgOp>(op), spec);
  case PartitionRule::Norm:
    return planNorm(op, spec);
  case PartitionRule::Attention:
    return planAttention(cast<AttentionOp>(op), spec);
  case PartitionRule::MoE:
    return planMoE(op, spec);
  case PartitionRule::Layout:
    return planLayout(op, partitionable.getLayoutRule());
  case PartitionRule::Replicated:
  case PartitionRule::Unsupported:
    break;
  }
  plan.kind = PlanKind::Replicated;
  bool hasTensor = llvm::any_of(op->getResultTypes(), [](Type t) {
    return isa<ShapedType>(t);
  });
  if (spec || (hasTensor && rule == PartitionRule::Unsupported))
    plan.fallback = "no local rule for this op";
  return plan;
}

//===----------------------------------------------------------------------===//
// Emission
//===----------------------------------------------------------------------===//

SmallVector<int64_t> Partitioner::getTemporalLayout(const OpPlan &plan,
                                                    const TemporalOperand &t,
                                                    int64_t step) {
  int64_t q = plan.steps;
  SmallVector<int64_t> blocks(q * q);
  for (int64_t r = 0; r < q; ++r)
    for (int64_t c = 0; c < q; ++c) {
      std::array<int64_t, 3> s = evaluateTemporalRule(plan.rule, r, c, step, q);
      blocks[r * q + c] = s[t.matmulDim[0]] * q + s[t.matmulDim[1]];
    }
  return blocks;
}

/// For each device of the q x q grid, the device holding (in layout `from`)
/// the block it needs (in layout `to`); layouts list a block per device.
static SmallVector<int64_t> getSources(ArrayRef<int64_t> from,
                                       ArrayRef<int64_t> to) {
  SmallVector<int64_t> sources(to.size());
  for (auto [d, block] : llvm::enumerate(to))
    sources[d] = llvm::find(from, block) - from.begin();
  return sources;
}

static bool isIdentity(ArrayRef<int64_t> sources) {
  return llvm::all_of(llvm::enumerate(sources), [](auto e) {
    return e.value() == static_cast<int64_t>(e.index());
  });
}

Value Partitioner::emitTemporalTransfer(OpBuilder &b, Location loc, Value value,
                                        ArrayRef<int64_t> sources,
                                        const OpPlan &plan,
                                        const std::string &label,
                                        const std::string &what) {
  if (isIdentity(sources))
    return value;
  int64_t q = plan.steps;
  MLIRContext *ctx = b.getContext();
  auto gridRef = FlatSymbolRefAttr::get(ctx, kGridName);
  // A translation (every device receives from (r + dr, c + dc))?
  int64_t dr = sources[0] / q, dc = sources[0] % q;
  bool translation = true;
  for (int64_t r = 0; r < q; ++r)
    for (int64_t c = 0; c < q; ++c)
      translation &= sources[r * q + c] == ((r + dr) % q) * q + (c + dc) % q;
  auto signedOffset = [&](int64_t d) { return d > q / 2 ? d - q : d; };
  auto offsetText = [&](StringRef var, int64_t d) {
    d = signedOffset(d);
    return (var +
            (d > 0   ? "+"
             : d < 0 ? "-"
                     : "") +
            (d ? std::to_string(std::abs(d)) : std::string()))
        .str();
  };
  Operation *transfer;
  std::string how;
  if (translation && (dr == 0 || dc == 0)) {
    shard::GridAxis axis = dr == 0 ? plan.colAxis : plan.rowAxis;
    int64_t offset = -signedOffset(dr == 0 ? dc : dr);
    transfer = shard::ShiftOp::create(
        b, loc, value.getType(), gridRef, b.getDenseI16ArrayAttr({axis}), value,
        b.getIndexAttr(axis), b.getI64IntegerAttr(offset), b.getUnitAttr());
    how = "ring shift along " + axesText(axis);
  } else {
    transfer = GridPermuteOp::create(
        b, loc, value, gridRef,
        b.getDenseI16ArrayAttr({plan.rowAxis, plan.colAxis}),
        b.getDenseI64ArrayAttr(sources));
    how = translation ? "diagonal point-to-point transfer over " +
                            axesText({plan.rowAxis, plan.colAxis})
                      : "point-to-point permutation over " +
                            axesText({plan.rowAxis, plan.colAxis});
  }
  std::string from = translation ? " (receive from (" + offsetText("r", dr) +
                                       ", " + offsetText("c", dc) + "))"
                                 : "";
  markCollective(transfer, label, "temporal " + what + ": " + how + from);
  return transfer->getResult(0);
}

void Partitioner::emitTemporal(linalg::LinalgOp op, OpPlan &plan) {
  Location loc = op->getLoc();
  std::string label = getLabel(op);
  int64_t q = plan.steps;
  const TemporalOperand &acc = plan.temporalOperands[2];

  // Names in the phase's terms (F: I, W -> O; B: dO, W -> dI; G: I, dO -> dW).
  auto nameOf = [&](const TemporalOperand &t) -> std::string {
    unsigned pair = t.matmulDim[0] + t.matmulDim[1];
    std::string base = pair == 1 ? "I" : pair == 3 ? "W" : "O";
    bool gradient = plan.phase != Phase::Forward && (&t == &acc || base == "O");
    return (gradient ? "d" : "") + base;
  };
  std::string phaseText = plan.phase == Phase::Forward     ? "forward"
                          : plan.phase == Phase::InputGrad ? "input gradient"
                                                           : "weight gradient";

  IRMapping mapping;
  SetVector<Value> above;
  getUsedValuesDefinedAbove(op->getRegions(), above);
  for (Value v : above)
    mapping.map(v, getAs(v, Sharding::replicated(
                                getRankedTensor(v) ? getRankedTensor(v).getRank()
                                                   : 0),
                         label, "captured value"));

  SmallVector<int64_t> canonical(q * q);
  for (int64_t i = 0; i < q * q; ++i)
    canonical[i] = i;

  // The inputs at step 0: a buffer another phase of this layer left in
  // exactly that layout (F's stashed I for G, F's W for B, B's dO for G),
  // else the blocked layout moved into it.
  SmallVector<Value, 3> bufs;
  for (unsigned i = 0; i < 2; ++i) {
    const TemporalOperand &t = plan.temporalOperands[i];
    Value old = op->getOperand(t.operand);
    const Sharding &sharding = plan.operands[t.operand];
    SmallVector<int64_t> layout = getTemporalLayout(plan, t, 0);
    Value found;
    for (const TemporalStash &stash : temporalStashes.lookup(old))
      if (stash.sharding == sharding && stash.layout == layout)
        found = stash.value;
    if (!found)
      found = emitTemporalTransfer(
          builder, loc, getAs(old, sharding, label, nameOf(t)),
          getSources(canonical, layout), plan, label,
          phaseText + " start: " + nameOf(t) + " from its blocked layout");
    bufs.push_back(found);
  }
  Value initOld = op->getOperand(acc.operand);
  Value init = getAs(initOld, plan.operands[acc.operand], label, nameOf(acc));
  if (!isZeroTensor(initOld))
    init = emitTemporalTransfer(
        builder, loc, init,
        getSources(canonical, getTemporalLayout(plan, acc, 0)), plan, label,
        phaseText + " start: " + nameOf(acc) + " from its blocked layout");
  bufs.push_back(init);

  // Transitions between steps: where each operand's next block comes from.
  SmallVector<std::array<SmallVector<int64_t>, 3>> transitions;
  for (int64_t t = 0; t + 1 < q; ++t) {
    std::array<SmallVector<int64_t>, 3> sources;
    for (unsigned i = 0; i < 3; ++i)
      sources[i] =
          getSources(getTemporalLayout(plan, plan.temporalOperands[i], t),
                     getTemporalLayout(plan, plan.temporalOperands[i], t + 1));
    transitions.push_back(sources);
  }
  auto compute = [&](OpBuilder &b, Value in0, Value in1, Value into) {
    // A fresh copy of the mapping per clone: cloning records the region's
    // block arguments in it.
    IRMapping local = mapping;
    Operation *step = b.clone(*op, local);
    step->removeAttr(STPDialect::kSpecAttrName);
    step->setOperand(plan.temporalOperands[0].operand, in0);
    step->setOperand(plan.temporalOperands[1].operand, in1);
    step->setOperand(acc.operand, into);
    step->getResult(0).setType(into.getType());
    return step->getResult(0);
  };
  auto moveInputs = [&](OpBuilder &b, Location l, ArrayRef<Value> cur,
                        const std::array<SmallVector<int64_t>, 3> &next) {
    SmallVector<Value, 2> moved;
    for (unsigned i = 0; i < 2; ++i) {
      Value v = emitTemporalTransfer(b, l, cur[i], next[i], plan, label,
                                     phaseText + " step: next block of " +
                                         nameOf(plan.temporalOperands[i]));
      if (Operation *def = v.getDefiningOp(); def && v != cur[i])
        def->setAttr(STPDialect::kDoubleBufferAttrName, b.getUnitAttr());
      moved.push_back(v);
    }
    return moved;
  };

  // Leading steps whose transitions are all the same: one scf.for (each
  // iteration starts the next step's transfers, then computes).
  int64_t loopSteps = 0;
  while (loopSteps + 1 < q && transitions[loopSteps] == transitions[0])
    ++loopSteps;
  if (loopSteps < 2)
    loopSteps = 0;
  if (loopSteps > 0) {
    const auto &next = transitions[0];
    auto loop = scf::ForOp::create(
        builder, loc, getIndexConstant(loc, 0),
        getIndexConstant(loc, loopSteps), getIndexConstant(loc, 1),
        ValueRange{bufs[2], bufs[0], bufs[1]},
        [&](OpBuilder &b, Location l, Value, ValueRange args) {
          SmallVector<Value, 2> moved =
              moveInputs(b, l, {args[1], args[2]}, next);
          Value out = compute(b, args[1], args[2], args[0]);
          out = emitTemporalTransfer(b, l, out, next[2], plan, label,
                                     phaseText + " step: partial " +
                                         nameOf(acc) + " to its next owner");
          scf::YieldOp::create(b, l, ValueRange{out, moved[0], moved[1]});
        });
    bufs = {loop.getResult(1), loop.getResult(2), loop.getResult(0)};
  }
  // The remaining steps, unrolled. A partial result that moves at a
  // transition (G's last step) is sent while the next step computes into
  // fresh zeros, then added (PrimePar Section 3.3).
  Value moving;
  for (int64_t t = loopSteps; t < q; ++t) {
    const std::array<SmallVector<int64_t>, 3> *next =
        t + 1 < q ? &transitions[t] : nullptr;
    SmallVector<Value, 2> moved{bufs[0], bufs[1]};
    if (next)
      moved = moveInputs(builder, loc, {bufs[0], bufs[1]}, *next);
    Value into = bufs[2];
    if (moving) {
      auto type = cast<RankedTensorType>(moving.getType());
      Value empty = tensor::EmptyOp::create(builder, loc, type.getShape(),
                                            type.getElementType());
      Value zero = arith::ConstantOp::create(
          builder, loc, builder.getZeroAttr(type.getElementType()));
      into = linalg::FillOp::create(builder, loc, ValueRange{zero},
                                    ValueRange{empty})
                 .getResult(0);
    }
    Value out = compute(builder, bufs[0], bufs[1], into);
    if (moving) {
      out = addTensors(builder, loc, moving, out);
      moving = nullptr;
    }
    if (next && !isIdentity((*next)[2])) {
      moving = emitTemporalTransfer(builder, loc, out, (*next)[2], plan, label,
                                    phaseText + " last step: partial " +
                                        nameOf(acc) + " to its final owner");
      out = nullptr;
    }
    bufs = {moved[0], moved[1], out};
  }
  // The inputs as the last step left them, for a later phase of the layer.
  for (unsigned i = 0; i < 2; ++i) {
    const TemporalOperand &t = plan.temporalOperands[i];
    temporalStashes[op->getOperand(t.operand)].push_back(
        {plan.operands[t.operand], getTemporalLayout(plan, t, q - 1), bufs[i]});
  }
  // The result back in its blocked layout.
  Value result = emitTemporalTransfer(
      builder, loc, bufs[2],
      getSources(getTemporalLayout(plan, acc, q - 1), canonical), plan, label,
      phaseText + " end: " + nameOf(acc) + " to its blocked layout");
  ValueState &state = states[op->getResult(0)];
  state.value = result;
  state.sharding = plan.results[0];
  state.producer = label;
  state.partialReason = plan.partialReason;
  ++numTemporalOps;
}

LogicalResult Partitioner::emit(Operation *op, OpPlan &plan) {
  std::string label = getLabel(op);
  switch (plan.kind) {
  case PlanKind::Lazy: {
    ValueState &state = states[op->getResult(0)];
    state.lazy = true;
    state.sharding = Sharding::replicated(
        getRankedTensor(op->getResult(0)).getRank());
    state.producer = label;
    return success();
  }
  case PlanKind::Return: {
    SmallVector<Value> values;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      values.push_back(getAs(
          v,
          Sharding::replicated(getRankedTensor(v) ? getRankedTensor(v).getRank()
                                                  : 0),
          "return", "result " + std::to_string(i)));
    func::ReturnOp::create(builder, op->getLoc(), values);
    return success();
  }
  case PlanKind::Temporal:
    emitTemporal(cast<linalg::LinalgOp>(op), plan);
    return success();
  case PlanKind::NormStats:
    emitNormStats(op, plan);
    return success();
  case PlanKind::MoE:
    if (auto grad = dyn_cast<MoEGradOp>(op))
      return emitMoEGrad(grad, plan);
    return emitMoE(cast<MoEOp>(op), plan);
  case PlanKind::Layout: {
    // Ops whose attributes hold global shapes are rebuilt for the local
    // block; the others are cloned below.
    SmallVector<Value> operands;
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      operands.push_back(
          getAs(v, plan.operands[i], label, "operand " + std::to_string(i)));
    SmallVector<Type> resultTypes;
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      resultTypes.push_back(
          getRankedTensor(result)
              ? Type(getLocalType(getRankedTensor(result), plan.results[i]))
              : result.getType());
    Operation *newOp = cast<PartitionableOpInterface>(op).createLocalOp(
        builder, operands, resultTypes);
    if (!newOp)
      break;
    newOp->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    newOp->removeAttr(STPDialect::kSpecAttrName);
    for (auto [i, result] : llvm::enumerate(op->getResults())) {
      ValueState &state = states[result];
      state.value = newOp->getResult(i);
      state.sharding = plan.results[i];
      state.producer = label;
    }
    ++numSplitOps;
    return success();
  }
  case PlanKind::Replicated: {
    // Report only where the plan or the operands' layouts are overridden.
    bool overrides =
        op->hasAttr(STPDialect::kSpecAttrName) ||
        llvm::any_of(op->getOperands(), [&](Value v) {
          auto it = states.find(v);
          return it != states.end() && !it->second.lazy &&
                 !it->second.sharding.isReplicated();
        });
    if (!overrides)
      plan.fallback.clear();
    plan.operands.clear();
    plan.results.clear();
    for (Value v : op->getOperands())
      plan.operands.push_back(Sharding::replicated(
          getRankedTensor(v) ? getRankedTensor(v).getRank() : 0));
    for (Value v : op->getResults())
      plan.results.push_back(Sharding::replicated(
          getRankedTensor(v) ? getRankedTensor(v).getRank() : 0));
    break;
  }
  case PlanKind::Linalg:
  case PlanKind::Norm:
  case PlanKind::Attention:
    break;
  }

  // Generic path: re-layout the operands, clone, set local result types.
  SmallVector<Value> operands;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    operands.push_back(
        getAs(v, plan.operands[i], label, "operand " + std::to_string(i)));
  SetVector<Value> above;
  getUsedValuesDefinedAbove(op->getRegions(), above);
  IRMapping mapping;
  for (Value v : above) {
    Sharding wanted = Sharding::replicated(
        getRankedTensor(v) ? getRankedTensor(v).getRank() : 0);
    for (auto &[value, sharding] : plan.captured)
      if (value == v)
        wanted = sharding;
    mapping.map(v, getAs(v, wanted, label, "captured value"));
  }
  Operation *newOp = builder.clone(*op, mapping);
  newOp->setOperands(operands);
  newOp->removeAttr(STPDialect::kSpecAttrName);
  for (auto [i, result] : llvm::enumerate(newOp->getResults()))
    if (auto type = getRankedTensor(result))
      result.setType(getLocalType(type, plan.results[i]));

  // linalg.index of a split loop: add the block offset.
  if (plan.kind == PlanKind::Linalg) {
    SmallVector<int64_t> ranges =
        cast<linalg::LinalgOp>(op).getStaticLoopRanges();
    SmallVector<linalg::IndexOp> indices;
    newOp->walk([&](linalg::IndexOp index) { indices.push_back(index); });
    for (linalg::IndexOp index : indices) {
      const AxisList &axes = plan.loopAxes[index.getDim()];
      if (axes.empty())
        continue;
      int64_t local = ranges[index.getDim()] / getGroupSize(axes);
      Value offset = arith::MulIOp::create(
          builder, index.getLoc(), getBlockIndex(index.getLoc(), axes),
          getIndexConstant(index.getLoc(), local));
      OpBuilder inner(index->getContext());
      inner.setInsertionPointAfter(index);
      Value global = arith::AddIOp::create(inner, index.getLoc(),
                                           index.getResult(), offset);
      index.getResult().replaceAllUsesExcept(global,
                                             global.getDefiningOp());
    }
    // Vocabulary-parallel lookups: local row = row - block offset; rows
    // outside the block read row 0 and yield zero.
    SmallVector<tensor::ExtractOp> extracts;
    if (plan.table)
      newOp->walk([&](tensor::ExtractOp e) { extracts.push_back(e); });
    Value rowOffset;
    int64_t rowsLocal = 0;
    if (!extracts.empty()) {
      Location loc = op->getLoc();
      rowsLocal = getRankedTensor(plan.table).getDimSize(plan.tableRowDim) /
                  getGroupSize(plan.tableRowAxes);
      rowOffset = arith::MulIOp::create(
          builder, loc, getBlockIndex(loc, plan.tableRowAxes),
          getIndexConstant(loc, rowsLocal));
    }
    for (tensor::ExtractOp extract : extracts) {
      Location loc = extract.getLoc();
      OpBuilder inner(extract);
      Value row = extract.getIndices()[plan.tableRowDim];
      Value local = arith::SubIOp::create(inner, loc, row, rowOffset);
      Value zeroIndex = arith::ConstantIndexOp::create(inner, loc, 0);
      Value limit = arith::ConstantIndexOp::create(inner, loc, rowsLocal);
      Value above = arith::CmpIOp::create(inner, loc, arith::CmpIPredicate::sge,
                                          local, zeroIndex);
      Value below = arith::CmpIOp::create(inner, loc, arith::CmpIPredicate::slt,
                                          local, limit);
      Value inBlock = arith::AndIOp::create(inner, loc, above, below);
      Value clamped =
          arith::SelectOp::create(inner, loc, inBlock, local, zeroIndex);
      extract.getIndicesMutable()[plan.tableRowDim].assign(clamped);
      inner.setInsertionPointAfter(extract);
      Type elem = extract.getType();
      Value zero = arith::ConstantOp::create(inner, loc, elem,
                                             inner.getZeroAttr(elem));
      Value value = arith::SelectOp::create(inner, loc, inBlock,
                                            extract.getResult(), zero);
      extract.getResult().replaceAllUsesExcept(value, value.getDefiningOp());
    }
    // The offsets were created after the clone; keep them before it.
    if (!indices.empty() || !extracts.empty())
      newOp->moveBefore(builder.getInsertionBlock(),
                        builder.getInsertionPoint());
  }
  if (!plan.fallback.empty()) {
    newOp->setAttr(STPDialect::kFallbackAttrName,
                   builder.getStringAttr(plan.fallback));
    ++numFallbackOps;
  } else if (llvm::any_of(plan.results, [](const Sharding &sharding) {
               return !sharding.isReplicated();
             })) {
    ++numSplitOps;
  }
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    ValueState &state = states[result];
    state.value = newOp->getResult(i);
    state.sharding = plan.results[i];
    state.producer = label;
    state.partialReason = plan.partialReason;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Micro-batches
//===----------------------------------------------------------------------===//

Value Partitioner::failMicroBatch(RankedTensorType local, const Twine &why) {
  if (!microBatchError)
    microBatchError = why.str();
  return tensor::EmptyOp::create(builder, builder.getUnknownLoc(),
                                 local.getShape(), local.getElementType());
}

/// True when `op` reads (directly or in its regions) a value of `set`.
static bool readsAny(Operation &op, const DenseSet<Value> &set) {
  if (llvm::any_of(op.getOperands(), [&](Value v) { return set.contains(v); }))
    return true;
  SetVector<Value> above;
  getUsedValuesDefinedAbove(op.getRegions(), above);
  return llvm::any_of(above, [&](Value v) { return set.contains(v); });
}

LogicalResult Partitioner::classifyMicroBatchOps(func::FuncOp func) {
  Block &body = func.getBody().front();
  // The ops that read both a parameter and the data (transitively) are the
  // per-micro-batch work: the forward pass, the loss and the backward pass.
  // Ops of the data alone (labels, the loss's token count, masks) run once
  // on the device's whole batch before the loop; ops of the parameters
  // alone (ZeRO-3's gathers, weight layouts) before it too.
  DenseSet<Value> onParam, onData;
  for (BlockArgument arg : body.getArguments())
    (func.getArgAttr(arg.getArgNumber(), STPDialect::kParamAttrName) ? onParam
                                                                     : onData)
        .insert(arg);
  DenseSet<Operation *> both;
  for (Operation &op : body.without_terminator()) {
    bool p = readsAny(op, onParam), x = readsAny(op, onData);
    for (Value r : op.getResults()) {
      if (p)
        onParam.insert(r);
      if (x)
        onData.insert(r);
    }
    if (p && x)
      both.insert(&op);
  }
  // After the loop: the optimizer. Ops of the loop that read a sum over
  // the micro-batches move after it too (decided while emitting, see
  // readsMicroBatchSum).
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (!both.contains(&op))
      continue;
    auto phase = op.getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName);
    if (phase && phase.getValue() == "optimizer") {
      afterLoopOps.insert(&op);
      continue;
    }
    loopOps.insert(&op);
    if (!lastLoopOp)
      lastLoopOp = &op;
  }
  if (loopOps.empty())
    return func.emitError()
           << "micro-batches = " << microBatches
           << ": no op of the training step reads both a parameter and the "
              "data, so there is nothing to run per micro-batch";
  return success();
}

bool Partitioner::readsMicroBatchSum(Operation &op) {
  SmallVector<Value> read(op.getOperands());
  SetVector<Value> above;
  getUsedValuesDefinedAbove(op.getRegions(), above);
  read.append(above.begin(), above.end());
  bool sum = false, perMicroBatch = false;
  for (Value v : read) {
    Operation *def = v.getDefiningOp();
    if (def && afterLoopOps.contains(def)) {
      sum = true;
      continue;
    }
    auto it = states.find(v);
    if (it == states.end() || it->second.lazy || !it->second.value ||
        !isDefinedInLoop(it->second.value))
      continue;
    if (isMicroBatchSum(it->second.sharding))
      sum = true;
    else
      perMicroBatch = true;
  }
  if (sum && perMicroBatch) {
    // Reads both: it can run neither in the loop (a sum exists only after
    // it) nor after it (a micro-batch's value does not).
    if (!microBatchError)
      microBatchError = "it reads both a sum over the micro-batches and a "
                        "value of one micro-batch";
    return false;
  }
  return sum;
}

LogicalResult Partitioner::finishMicroBatchLoop(Block &body) {
  // The loop's values read after it, in program order.
  SmallVector<Value> escaping;
  for (Operation &op : body) {
    if (!loopOps.contains(&op))
      continue;
    for (Value r : op.getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *user) {
            return !loopOps.contains(body.findAncestorOpInBlock(*user));
          }))
        escaping.push_back(r);
  }
  SmallVector<Value> inits, sums;
  SmallVector<Sharding> outside;
  builder.setInsertionPoint(mbLoop);
  for (Value v : escaping) {
    ValueState &state = states[v];
    const Sharding &s = state.sharding;
    if (!isMicroBatchSum(s)) {
      Operation *def = v.getDefiningOp();
      return def->emitError()
             << "micro-batches = " << microBatches << ": '" << state.producer
             << "' is used after the micro-batch loop but is not a sum over "
                "the micro-batches (only gradients and the loss may leave "
                "the loop)";
    }
    auto type = cast<RankedTensorType>(state.value.getType());
    Location loc = v.getLoc();
    Value empty = tensor::EmptyOp::create(builder, loc, type.getShape(),
                                          type.getElementType());
    Value zero = arith::ConstantOp::create(
        builder, loc, builder.getZeroAttr(type.getElementType()));
    inits.push_back(linalg::FillOp::create(builder, loc, ValueRange{zero},
                                           ValueRange{empty})
                        .getResult(0));
    sums.push_back(state.value);
    Sharding after = s;
    llvm::erase(after.partial, mbAxis);
    outside.push_back(after);
  }
  IRRewriter rewriter(builder);
  FailureOr<LoopLikeOpInterface> grown =
      cast<LoopLikeOpInterface>(mbLoop.getOperation())
          .replaceWithAdditionalYields(
              rewriter, inits, /*replaceInitOperandUsesInLoop=*/false,
              [&](OpBuilder &b, Location loc, ArrayRef<BlockArgument> acc) {
                SmallVector<Value> next;
                for (auto [sum, value] : llvm::zip(acc, sums)) {
                  auto type = cast<RankedTensorType>(value.getType());
                  AffineMap id = b.getMultiDimIdentityMap(type.getRank());
                  next.push_back(
                      linalg::GenericOp::create(
                          b, loc, TypeRange{type}, ValueRange{value},
                          ValueRange{sum}, ArrayRef<AffineMap>{id, id},
                          SmallVector<utils::IteratorType>(
                              type.getRank(), utils::IteratorType::parallel),
                          [&](OpBuilder &nb, Location l, ValueRange args) {
                            linalg::YieldOp::create(
                                nb, l,
                                ValueRange{arith::AddFOp::create(nb, l, args[0],
                                                                 args[1])});
                          })
                          .getResult(0));
                }
                return next;
              });
  if (failed(grown))
    return mbLoop.emitError() << "cannot add the micro-batch sums to the loop";
  mbLoop = cast<scf::ForOp>(grown->getOperation());
  for (auto [i, v] : llvm::enumerate(escaping)) {
    ValueState &state = states[v];
    state.value = mbLoop.getResult(i);
    state.sharding = outside[i];
  }
  // Re-layouts made inside the loop are not visible after it.
  for (auto &[old, entries] : cache)
    llvm::erase_if(entries,
                   [&](auto &entry) { return isDefinedInLoop(entry.second); });
  for (auto &[old, stashes] : temporalStashes)
    llvm::erase_if(stashes, [&](TemporalStash &stash) {
      return isDefinedInLoop(stash.value);
    });
  builder.setInsertionPointAfter(mbLoop);
  inLoop = false;
  return success();
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult Partitioner::partitionFunc(func::FuncOp func) {
  if (func.isExternal())
    return success();
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "only single-block functions are partitioned";
  Block &body = func.getBody().front();
  states.clear();
  cache.clear();
  temporalStashes.clear();
  positions.clear();
  for (auto [i, op] : llvm::enumerate(body))
    positions[&op] = i;

  loopOps.clear();
  afterLoopOps.clear();
  lastLoopOp = nullptr;
  mbLoop = nullptr;
  inLoop = false;
  microBatchError.reset();
  bool training = module->hasAttr(STPDialect::kTrainingAttrName);
  if (training && microBatches > 1 && failed(classifyMicroBatchOps(func)))
    return failure();

  // Arguments: the sharding the first user with a plan wants (a user in
  // the micro-batch loop: the layout it is sliced from, its dims holding
  // micro-batches whole); a graph input (not a parameter) replicated when
  // its users want different ones, so that each slices its own without
  // communication (the plan costs graph inputs as free in any layout).
  SmallVector<Sharding> argShardings;
  for (BlockArgument arg : body.getArguments()) {
    auto type = getRankedTensor(arg);
    Sharding chosen = Sharding::replicated(type ? type.getRank() : 0);
    if (type) {
      // Users in program order: direct operands and values captured by a
      // top-level op's regions (embedding tables).
      SmallVector<std::pair<Operation *, OpOperand *>> uses;
      for (OpOperand &use : arg.getUses())
        if (Operation *top = body.findAncestorOpInBlock(*use.getOwner()))
          uses.push_back({top, &use});
      llvm::stable_sort(uses, [&](auto &a, auto &b) {
        return positions[a.first] < positions[b.first];
      });
      bool parameter = static_cast<bool>(
          func.getArgAttr(arg.getArgNumber(), STPDialect::kParamAttrName));
      SmallVector<Sharding> wants;
      for (auto [user, use] : uses) {
        if (!user->hasAttr(STPDialect::kSpecAttrName)) {
          // An op without a plan runs replicated (an embedding read with
          // constant indices, a slice of a rotary table): a parameter it
          // reads first is stored whole, not in the layout of a later
          // user (the optimizer's ZeRO shard) and gathered for it.
          if (parameter && !isa<func::ReturnOp>(user))
            wants.push_back(Sharding::replicated(type.getRank()));
          continue;
        }
        inLoop = loopOps.contains(user);
        FailureOr<OpPlan> plan = planOp(user);
        bool userInLoop = inLoop;
        inLoop = false;
        if (failed(plan))
          return failure();
        if (plan->kind == PlanKind::Lazy)
          continue;
        if (plan->kind == PlanKind::Replicated) {
          wants.push_back(Sharding::replicated(type.getRank()));
          continue;
        }
        std::optional<Sharding> wanted;
        if (use->getOwner() == user) {
          wanted = plan->operands[use->getOperandNumber()];
        } else {
          // A captured value is read whole unless the plan says otherwise
          // (OpPlan::captured; an embedding table read replicated).
          wanted = Sharding::replicated(type.getRank());
          for (auto &[value, sharding] : plan->captured)
            if (value == arg)
              wanted = sharding;
        }
        if (wanted && userInLoop)
          wanted = beforeMicroBatch(*wanted);
        if (wanted && wanted->partial.empty() && isValidFor(type, *wanted))
          wants.push_back(*wanted);
      }
      // (Parameters arrive as their first user's blocks: the plan costs a
      // parameter's layout with the operator reading it.)
      if (!wants.empty() &&
          (parameter || llvm::all_of(wants, [&](const Sharding &w) {
             return w == wants[0];
           })))
        chosen = wants[0];
    }
    argShardings.push_back(chosen);
  }

  // The new function: local argument types, replicated results.
  SmallVector<Type> argTypes;
  for (auto [arg, s] : llvm::zip(body.getArguments(), argShardings))
    argTypes.push_back(getRankedTensor(arg) ? Type(getLocalType(
                                                  getRankedTensor(arg), s))
                                            : arg.getType());
  auto funcType = builder.getFunctionType(argTypes, func.getResultTypes());
  builder.setInsertionPoint(func);
  auto newFunc = func::FuncOp::create(builder, func.getLoc(), func.getName(),
                                      funcType);
  newFunc->setAttrs(func->getAttrs());
  newFunc.setFunctionType(funcType);
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    SmallVector<NamedAttribute> attrs(function_interface_impl::getArgAttrs(func, i));
    if (getRankedTensor(func.getArgument(i)))
      attrs.push_back(builder.getNamedAttr(STPDialect::kSplitAttrName,
                                           getSplitAttr(argShardings[i])));
    newFunc.setArgAttrs(i, attrs);
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    SmallVector<NamedAttribute> attrs(function_interface_impl::getResultAttrs(func, i));
    if (auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[i]))
      attrs.push_back(builder.getNamedAttr(
          STPDialect::kSplitAttrName,
          getSplitAttr(Sharding::replicated(type.getRank()))));
    newFunc.setResultAttrs(i, attrs);
  }
  Block *newBody = newFunc.addEntryBlock();
  for (auto [oldArg, newArg, s] :
       llvm::zip(body.getArguments(), newBody->getArguments(), argShardings)) {
    ValueState &state = states[oldArg];
    state.value = newArg;
    state.sharding = s;
    auto name = func.getArgAttrOfType<StringAttr>(oldArg.getArgNumber(),
                                                  STPDialect::kNameAttrName);
    state.producer = name ? name.str()
                          : ("argument " + Twine(oldArg.getArgNumber())).str();
  }

  builder.setInsertionPointToEnd(newBody);
  auto fail = [&]() {
    newFunc.erase();
    return failure();
  };
  auto emitOne = [&](Operation &op) -> LogicalResult {
    // The phase the collectives inserted for this op belong to (the
    // training step's ops carry it; the rest is the forward pass).
    if (auto phase = op.getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName))
      currentPhase = phase.str();
    else if (training && isa<func::ReturnOp>(op))
      currentPhase = "result";
    else
      currentPhase = "forward";
    FailureOr<OpPlan> plan = planOp(&op);
    if (failed(plan) || failed(emit(&op, *plan)))
      return failure();
    if (microBatchError)
      return op.emitError()
             << "micro-batches = " << microBatches << ": " << *microBatchError;
    return success();
  };
  // Without micro-batches every op is emitted in order. With them, from the
  // first op of the loop to its last: the loop's ops go into it, ops after
  // the loop wait for its end, and the others go before it.
  SmallVector<Operation *> deferred;
  bool looping = false;
  for (Operation &op : body) {
    if (!mbLoop && loopOps.contains(&op)) {
      Location loc = op.getLoc();
      mbLoop = scf::ForOp::create(builder, loc, getIndexConstant(loc, 0),
                                  getIndexConstant(loc, microBatches),
                                  getIndexConstant(loc, 1));
      mbLoop->setAttr(STPDialect::kMicroBatchLoopAttrName,
                      builder.getUnitAttr());
      mbLoop->setAttr(STPDialect::kPlanStepAttrName,
                      builder.getStringAttr(
                          "micro-batches: forward and backward of each of " +
                          std::to_string(microBatches) +
                          " micro-batches, gradients accumulated"));
      looping = true;
    }
    if (!looping) {
      if (failed(emitOne(op)))
        return fail();
      continue;
    }
    if (afterLoopOps.contains(&op)) {
      deferred.push_back(&op);
    } else if (loopOps.contains(&op) && readsMicroBatchSum(op)) {
      loopOps.erase(&op);
      afterLoopOps.insert(&op);
      deferred.push_back(&op);
    } else if (microBatchError) {
      op.emitError() << "micro-batches = " << microBatches << ": "
                     << *microBatchError;
      return fail();
    } else if (loopOps.contains(&op)) {
      builder.setInsertionPoint(mbLoop.getBody()->getTerminator());
      inLoop = true;
      LogicalResult ok = emitOne(op);
      inLoop = false;
      if (failed(ok))
        return fail();
    } else {
      builder.setInsertionPoint(mbLoop);
      if (failed(emitOne(op)))
        return fail();
    }
    if (&op != lastLoopOp)
      continue;
    looping = false;
    if (failed(finishMicroBatchLoop(body)))
      return fail();
    for (Operation *after : deferred)
      if (failed(emitOne(*after)))
        return fail();
  }
  newFunc->moveBefore(func);
  func.erase();
  return success();
}

LogicalResult Partitioner::run() {
  // Grid: every mesh axis but a pp of 1. No spec splits over pp, so every
  // op runs replicated over it: each pipeline rank holds the whole program
  // on its stage's sub-grid until -stp-pipeline-stages keeps only its
  // stage's part (docs/pipeline-parallel.md).
  for (AxisAttr axis : getGridAxes(mesh)) {
    axisOfName[axis.getName().getValue()] = gridShape.size();
    axisNames.push_back(axis.getName().str());
    gridShape.push_back(axis.getSize());
  }
  // One device (a mesh of pp = 1 only): the upstream grid needs an axis, so
  // it gets one of size 1 that no spec names.
  if (gridShape.empty()) {
    axisNames.push_back("single");
    gridShape.push_back(1);
  }
  numDeviceAxes = gridShape.size();
  // Micro-batches: a training step's micro_batches (-stp-training-step).
  if (auto training =
          module->getAttrOfType<DictionaryAttr>(STPDialect::kTrainingAttrName))
    if (auto m = training.getAs<IntegerAttr>("micro_batches"))
      microBatches = m.getInt();
  if (microBatches < 1)
    return module.emitError()
           << "micro_batches must be at least 1, got " << microBatches;
  if (microBatches > 1) {
    mbAxis = gridShape.size();
    axisNames.push_back("mb");
    gridShape.push_back(microBatches);
  }
  if (module.lookupSymbol(kGridName))
    return module.emitError() << "symbol @" << kGridName
                              << " already exists (partitioned twice?)";
  if (llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp f) {
        bool hasCall = false;
        f.walk([&](func::CallOp) { hasCall = true; });
        return hasCall;
      }))
    return module.emitError() << "calls are not partitioned; inline first";
  builder.setInsertionPointToStart(module.getBody());
  shard::GridOp::create(builder, module.getLoc(),
                        builder.getStringAttr(kGridName),
                        builder.getDenseI64ArrayAttr(
                            ArrayRef(gridShape).take_front(numDeviceAxes)));
  for (func::FuncOp func :
       llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
    if (failed(partitionFunc(func)))
      return failure();
  module->setAttr(STPDialect::kPartitionedAttrName, builder.getUnitAttr());
  return success();
}

namespace {
struct PartitionPass
    : public stpar::stp::impl::PartitionPassBase<PartitionPass> {
  void getDependentDialects(DialectRegistry &registry) const override {
    PartitionPassBase::getDependentDialects(registry);
    registerPartitionableOpModels(registry);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkPartitionableOpModels(&getContext(), module.getLoc())))
      return signalPassFailure();
    auto mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
    if (!mesh) {
      emitError(module.getLoc()) << "module has no '" << STPDialect::kMeshAttrName
                         << "' attribute (run stpar plan --emit-mlir)";
      return signalPassFailure();
    }
    Partitioner partitioner(module, mesh);
    if (failed(partitioner.run()))
      return signalPassFailure();
    numSplitOps += partitioner.numSplitOps;
    numFallbackOps += partitioner.numFallbackOps;
    numTemporalOps += partitioner.numTemporalOps;
    numCollectives += partitioner.numCollectives;
  }
};
} // namespace
