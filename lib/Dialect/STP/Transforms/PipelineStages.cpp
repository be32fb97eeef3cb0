//===- PipelineStages.cpp - each pipeline rank runs its stage ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-pipeline-stages: the partitioned training step, which
// every pipeline rank holds whole (-stp-partition keeps `pp` as a grid axis
// no spec splits), becomes one program per pipeline rank inside an
// scf.index_switch on the rank's pp index. A rank runs the ops of its
// stages only, micro-batch by micro-batch in the order of its slot list in
// `stp.pipeline_schedule` (-stp-pipeline-schedule), and a value one stage
// makes and another reads moves by shard.send / shard.recv on the pp axis.
// docs/pipeline-parallel.md, "Stages in the program".
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

#include <map>
#include <tuple>

namespace stpar::stp {
#define GEN_PASS_DEF_PIPELINESTAGESPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// One entry of a rank's slot list: `F<mb>` or `B<mb>`, `.<chunk>` with
/// virtual stages.
struct Slot {
  bool backward = false;
  int64_t microBatch = 0;
  int64_t chunk = 0;
};

std::optional<Slot> parseSlot(StringRef text) {
  Slot slot;
  if (text.consume_front("B"))
    slot.backward = true;
  else if (!text.consume_front("F"))
    return std::nullopt;
  auto [mb, chunk] = text.split('.');
  if (mb.getAsInteger(10, slot.microBatch) || slot.microBatch < 0)
    return std::nullopt;
  if (!chunk.empty() && (chunk.getAsInteger(10, slot.chunk) || slot.chunk < 0))
    return std::nullopt;
  return slot;
}

/// Phases whose ops run in a backward slot (the rest of the micro-batch
/// loop is forward: the model's ops and the loss).
bool isBackwardPhase(Operation *op) {
  auto phase = op->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName);
  return phase && llvm::is_contained({"input_grad", "weight_grad", "grad_sum",
                                      "recompute", "optimizer"},
                                     phase.getValue());
}

/// The values `op` reads: its operands and what its regions use from
/// outside them.
SmallVector<Value> readValues(Operation *op) {
  SmallVector<Value> values(op->getOperands());
  llvm::SetVector<Value> above;
  getUsedValuesDefinedAbove(op->getRegions(), above);
  llvm::append_range(values, above);
  return values;
}

/// Each rank's transfer groups in program order.
using TransferGroups = SmallVector<SmallVector<SmallVector<Operation *>>>;

class Pipeliner {
public:
  Pipeliner(ModuleOp module, func::FuncOp func, DictionaryAttr schedule,
            shard::GridOp grid, int16_t ppAxis)
      : module(module), func(func), schedule(schedule), grid(grid),
        ppAxis(ppAxis), b(func.getContext()) {}

  LogicalResult run();
  int64_t numTransfers = 0;

private:
  LogicalResult readSchedule();
  LogicalResult collectOps();
  LogicalResult assignStages();
  LogicalResult emitRank(unsigned rank, Block *block);
  void orderSends(ArrayRef<Block *> cases);
  void groupTransfers(Block *block, Operation *afterSlots);
  /// Checks the ranks' transfer groups (order, rendezvous) and posts a
  /// receive early where a send would wait forever.
  LogicalResult scheduleTransfers(ArrayRef<Block *> cases);
  LogicalResult checkTransferOrder(const TransferGroups &groups);
  LogicalResult runGroups(TransferGroups &groups,
                          SmallVectorImpl<Operation *> &hoisted);

  /// The virtual stage that makes `v` (a loop result or accumulator: its
  /// update's); none for function arguments and ops recomputed where
  /// needed.
  std::optional<int64_t> stageOfValue(Value v);
  /// The pipeline rank that makes `v` (-1: every rank that needs it).
  int64_t rankOf(Value v);
  bool inLoop(Operation *op) const { return loopSet.contains(op); }
  int64_t contextOf(Value v);
  /// `v` on the rank being emitted, in micro-batch `mb` (-1: outside the
  /// loop): cloned, received or looked up.
  FailureOr<Value> lookup(Value v, int64_t mb);
  FailureOr<Operation *> emitOp(Operation *op, int64_t mb);
  void sendResults(Operation *op, ArrayRef<Value> results, ValueRange mapped,
                   int64_t mb);
  int64_t transferId(Value v, int64_t mb, int64_t to) {
    auto key = std::make_tuple(v.getAsOpaquePointer(), mb, to);
    auto [it, inserted] = transferIds.try_emplace(key, transferIds.size());
    return it->second;
  }
  Value send(Value v, Value local, int64_t to, int64_t id);
  Value recv(Value v, int64_t from, int64_t id);
  IRMapping &mapFor(int64_t mb) { return mb < 0 ? top : perMicroBatch[mb]; }

  ModuleOp module;
  func::FuncOp func;
  DictionaryAttr schedule;
  shard::GridOp grid;
  int16_t ppAxis;
  OpBuilder b;

  int64_t stages = 1, virtualStages = 1, microBatches = 1;
  SmallVector<SmallVector<Slot>> slots;

  scf::ForOp loop;
  SmallVector<Operation *> preOps, loopOps, postOps;
  DenseSet<Operation *> loopSet;
  /// Virtual stage of each op that has one; ops without one are pure and
  /// read no staged value: every rank that needs them computes them.
  DenseMap<Operation *, int64_t> stageOf;
  DenseSet<Operation *> backwardOps;
  /// The pipeline ranks other than its maker's that read each value.
  DenseMap<Value, SmallVector<int64_t, 2>> readers;
  std::map<std::tuple<const void *, int64_t, int64_t>, int64_t> transferIds;

  // The rank being emitted.
  int64_t rank = 0;
  IRMapping top;
  SmallVector<IRMapping> perMicroBatch;
  struct Event {
    bool isSend;
    int64_t id, peer;
    Value value;       // what moves (in the whole-program function)
    Operation *reader; // the op whose copy needed it (null: a result)
  };
  Operation *emitting = nullptr;
  DenseMap<Operation *, Event> events;
  /// Per rank: the first op after its slots that is not a send.
  SmallVector<Operation *> afterSlots;
  int64_t numGroups = 0;
};

LogicalResult Pipeliner::readSchedule() {
  auto integer = [&](StringRef key) -> int64_t {
    auto v = schedule.getAs<IntegerAttr>(key);
    return v ? v.getInt() : -1;
  };
  stages = integer("stages");
  virtualStages = integer("virtual_stages");
  microBatches = integer("micro_batches");
  auto ranks = schedule.getAs<ArrayAttr>("ranks");
  if (stages < 1 || virtualStages < 1 || microBatches < 1 || !ranks ||
      int64_t(ranks.size()) != stages)
    return module.emitError()
           << "-stp-pipeline-stages: stp.pipeline_schedule needs stages, "
              "virtual_stages, micro_batches and one slot list per rank";
  int64_t gridStages = grid.getShape()[ppAxis];
  if (gridStages != stages)
    return module.emitError()
           << "-stp-pipeline-stages: the schedule has " << stages
           << " stages but the grid's pp axis " << gridStages;
  // A forward-only program (no training step) has no micro-batch loop: its
  // batch goes through the stages as one micro-batch, chunk by chunk.
  if (!module->hasAttr(STPDialect::kTrainingAttrName)) {
    microBatches = 1;
    slots.assign(stages, {});
    for (SmallVector<Slot> &list : slots) {
      for (int64_t c = 0; c < virtualStages; ++c)
        list.push_back({false, 0, c});
      for (int64_t c = virtualStages; c-- > 0;)
        list.push_back({true, 0, c});
    }
    return success();
  }
  for (Attribute list : ranks) {
    auto array = dyn_cast<ArrayAttr>(list);
    if (!array)
      return module.emitError() << "-stp-pipeline-stages: a rank's slot list "
                                   "is not an array";
    SmallVector<Slot> &rankSlots = slots.emplace_back();
    for (Attribute entry : array) {
      auto text = dyn_cast<StringAttr>(entry);
      std::optional<Slot> slot =
          text ? parseSlot(text.getValue()) : std::nullopt;
      if (!slot || slot->microBatch >= microBatches ||
          slot->chunk >= virtualStages)
        return module.emitError() << "-stp-pipeline-stages: bad slot " << entry;
      rankSlots.push_back(*slot);
    }
    if (int64_t(rankSlots.size()) != 2 * microBatches * virtualStages)
      return module.emitError()
             << "-stp-pipeline-stages: a rank's list has " << rankSlots.size()
             << " slots, not 2 m v = " << 2 * microBatches * virtualStages;
  }
  return success();
}

LogicalResult Pipeliner::collectOps() {
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    if (op.hasAttr(STPDialect::kMicroBatchLoopAttrName)) {
      if (loop)
        return op.emitError("-stp-pipeline-stages: two micro-batch loops");
      loop = cast<scf::ForOp>(op);
    }
  int64_t trips = 1;
  if (loop) {
    std::optional<int64_t> n =
        loop.getStaticTripCount()
            ? std::optional<int64_t>(loop.getStaticTripCount()->getSExtValue())
            : std::nullopt;
    if (!n)
      return loop.emitError("-stp-pipeline-stages: the micro-batch loop has "
                            "no constant trip count");
    trips = *n;
  }
  if (trips != microBatches)
    return func.emitError()
           << "-stp-pipeline-stages: the schedule has " << microBatches
           << " micro-batches, the training step " << trips
           << " (-stp-training-step micro-batches=)";
  // Without a loop (one micro-batch) every op is the micro-batch's.
  bool after = false;
  for (Operation &op : body.without_terminator()) {
    if (&op == loop.getOperation()) {
      after = true;
      continue;
    }
    if (!loop)
      loopOps.push_back(&op);
    else
      (after ? postOps : preOps).push_back(&op);
  }
  if (loop)
    for (Operation &op : loop.getBody()->without_terminator())
      loopOps.push_back(&op);
  loopSet.insert(loopOps.begin(), loopOps.end());
  return success();
}

int64_t Pipeliner::contextOf(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return loop && arg.getOwner() == loop.getBody() ? 0 : -1;
  return inLoop(v.getDefiningOp()) ? 0 : -1;
}

std::optional<int64_t> Pipeliner::stageOfValue(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (!loop || arg.getOwner() != loop.getBody() || arg.getArgNumber() == 0)
      return std::nullopt;
    // An accumulator: made where its update is.
    unsigned j = arg.getArgNumber() - 1;
    Value next = loop.getBody()->getTerminator()->getOperand(j);
    return stageOfValue(next == v ? loop.getInitArgs()[j] : next);
  }
  Operation *def = v.getDefiningOp();
  if (def == loop.getOperation())
    return stageOfValue(loop.getBody()->getTerminator()->getOperand(
        cast<OpResult>(v).getResultNumber()));
  auto it = stageOf.find(def);
  return it == stageOf.end() ? std::nullopt
                             : std::optional<int64_t>(it->second);
}

int64_t Pipeliner::rankOf(Value v) {
  std::optional<int64_t> stage = stageOfValue(v);
  return stage ? *stage % stages : -1;
}

LogicalResult Pipeliner::assignStages() {
  int64_t total = stages * virtualStages;
  // The plan's records: the layer (or the section before or after the
  // layers) of every planned op.
  int64_t layers = 0;
  SmallVector<Operation *> all(preOps);
  llvm::append_range(all, loopOps);
  llvm::append_range(all, postOps);
  auto recordOf = [](Operation *op) -> DictionaryAttr {
    auto records = op->getAttrOfType<ArrayAttr>(STPDialect::kPlanOpsAttrName);
    return records && !records.empty() ? dyn_cast<DictionaryAttr>(records[0])
                                       : DictionaryAttr();
  };
  for (Operation *op : all)
    if (DictionaryAttr record = recordOf(op))
      if (auto layer = record.getAs<IntegerAttr>("layer"))
        layers = std::max(layers, layer.getInt() + 1);
  if (layers < total || layers % total)
    return func.emitError() << "-stp-pipeline-stages: the " << layers
                            << " layers of the plan do not divide into "
                            << total << " stages (pp " << stages
                            << " x virtual stages " << virtualStages << ")";
  int64_t perStage = layers / total;
  llvm::StringMap<int64_t> byName;
  for (Operation *op : all)
    if (DictionaryAttr record = recordOf(op)) {
      auto section = record.getAs<StringAttr>("section");
      auto layer = record.getAs<IntegerAttr>("layer");
      int64_t stage = 0;
      if (section && section.getValue() == "post")
        stage = total - 1;
      else if (layer && layer.getInt() >= 0)
        stage = layer.getInt() / perStage;
      stageOf[op] = stage;
      if (auto name = record.getAs<StringAttr>("ir_op"))
        if (!name.getValue().empty())
          byName.try_emplace(name.getValue(), stage);
    }
  // Ops named after a planned op (its recomputation, collectives the
  // partitioner made for it) or a gradient of one (`<op>/grad0`).
  // (Not the ops that read the micro-batch loop's accumulators or
  // results: the accumulations and the collectives on the sums carry the
  // loop's location; they follow the gradient they add.)
  auto accumulates = [&](Operation *op) {
    return loop && llvm::any_of(op->getOperands(), [&](Value v) {
             if (auto arg = dyn_cast<BlockArgument>(v))
               return arg.getOwner() == loop.getBody();
             return v.getDefiningOp() == loop.getOperation();
           });
  };
  // Nor the sums of an activation's gradients (`<op>/grad_sum`): they run
  // where the gradients are, the readers' stage, so that one sum moves.
  auto sumsGradients = [&](Operation *op) {
    return inLoop(op) &&
           StringRef(getNodeName(op->getLoc())).ends_with("/grad_sum");
  };
  for (Operation *op : all) {
    if (stageOf.count(op) || accumulates(op) || sumsGradients(op))
      continue;
    std::string node = getNodeName(op->getLoc());
    StringRef name = node;
    auto it = byName.find(name);
    if (it == byName.end())
      it = byName.find(name.rsplit('/').first);
    if (it != byName.end())
      stageOf[op] = it->second;
  }
  // The rest follow what they read (the latest stage); pure ops that read
  // no staged value are recomputed where needed; others go to their first
  // reader's stage.
  // (Not through the accumulators: an accumulation follows its gradient.)
  SmallVector<Operation *> pending;
  for (Operation *op : all) {
    if (stageOf.count(op))
      continue;
    std::optional<int64_t> stage;
    for (Value v : readValues(op))
      if (!isa<BlockArgument>(v))
        if (std::optional<int64_t> s = stageOfValue(v))
          stage = std::max(stage.value_or(0), *s);
    if (stage)
      stageOf[op] = *stage;
    else if (!isMemoryEffectFree(op))
      pending.push_back(op);
  }
  for (Operation *op : llvm::reverse(pending)) {
    std::optional<int64_t> stage;
    for (Operation *user : op->getUsers()) {
      while (user && !loopSet.contains(user) &&
             user->getBlock() != &func.getBody().front())
        user = user->getParentOp();
      auto it = user ? stageOf.find(user) : stageOf.end();
      if (it != stageOf.end())
        stage = std::min(stage.value_or(total - 1), it->second);
    }
    stageOf[op] = stage.value_or(0);
  }
  // Backward slots: the gradient phases and whatever reads their values.
  for (Operation *op : loopOps) {
    bool backward = isBackwardPhase(op);
    for (Value v : readValues(op))
      if (Operation *def = v.getDefiningOp())
        backward |= backwardOps.contains(def);
    if (backward)
      backwardOps.insert(op);
  }
  // Who reads what across ranks.
  for (Operation *op : all) {
    auto it = stageOf.find(op);
    if (it == stageOf.end())
      continue;
    int64_t reader = it->second % stages;
    for (Value v : readValues(op)) {
      // An accumulator read on another rank than its update's: the
      // program would need its value after each micro-batch there.
      if (auto arg = dyn_cast<BlockArgument>(v))
        if (loop && arg.getOwner() == loop.getBody() &&
            arg.getArgNumber() > 0 && rankOf(v) >= 0 && rankOf(v) != reader)
          return op->emitError()
                 << "-stp-pipeline-stages: reads an accumulator of the "
                    "micro-batch loop that pipeline rank "
                 << rankOf(v) << " updates, on rank " << reader
                 << " (not supported)";
      int64_t maker = rankOf(v);
      if (isa<BlockArgument>(v) || maker < 0 || maker == reader)
        continue;
      SmallVector<int64_t, 2> &list = readers[v];
      if (!llvm::is_contained(list, reader))
        list.push_back(reader);
    }
  }
  return success();
}

Value Pipeliner::send(Value v, Value local, int64_t to, int64_t id) {
  Location loc = v.getLoc();
  auto type = cast<RankedTensorType>(local.getType());
  Value payload = local;
  // shard.send takes a tensor of rank >= 1.
  if (type.getRank() == 0)
    payload = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({1}, type.getElementType()), local,
        ArrayRef<ReassociationIndices>{});
  auto op = shard::SendOp::create(b, loc, payload.getType(), grid.getSymName(),
                                  ArrayRef<int16_t>{ppAxis}, payload,
                                  ArrayRef<int64_t>{to}, ValueRange{});
  op->setAttr(STPDialect::kTransferAttrName, b.getI64IntegerAttr(id));
  // "<label> <phase>: <reason>" as the partitioner writes it: the value's
  // node and the phase that made it (-stp-check-communication).
  Operation *def = v.getDefiningOp();
  auto phase = def ? def->getAttrOfType<StringAttr>(STPDialect::kPhaseAttrName)
                   : nullptr;
  std::string node = getNodeName(loc);
  // (After the micro-batch loop, a gradient goes to the rank that updates
  // its parameter: a gradient sync.)
  bool afterLoop =
      def && loop &&
      (def == loop.getOperation() ||
       (def->getBlock() == loop->getBlock() && loop->isBeforeInBlock(def)));
  std::string phaseName = afterLoop ? "grad_sum"
                          : phase && phase.getValue() != "loss"
                              ? phase.getValue().str()
                          : def && backwardOps.contains(def) ? "input_grad"
                                                             : "forward";
  op->setAttr(STPDialect::kPlanStepAttrName,
              b.getStringAttr((node.empty() ? "pipeline" : node) + " " +
                              phaseName +
                              ": pipeline transfer to the stage of rank " +
                              std::to_string(to)));
  events[op] = {true, id, to, v, nullptr};
  ++numTransfers;
  return op.getResult();
}

Value Pipeliner::recv(Value v, int64_t from, int64_t id) {
  Location loc = v.getLoc();
  auto tensorType = cast<RankedTensorType>(v.getType());
  RankedTensorType wire =
      tensorType.getRank() == 0
          ? RankedTensorType::get({1}, tensorType.getElementType())
          : tensorType;
  Value empty =
      tensor::EmptyOp::create(b, loc, wire.getShape(), wire.getElementType());
  auto op = shard::RecvOp::create(b, loc, wire, grid.getSymName(),
                                  ArrayRef<int16_t>{ppAxis}, empty,
                                  b.getDenseI64ArrayAttr({from}), ValueRange{});
  op->setAttr(STPDialect::kTransferAttrName, b.getI64IntegerAttr(id));
  op->setAttr(STPDialect::kPlanStepAttrName,
              b.getStringAttr("pipeline: from the stage of rank " +
                              std::to_string(from)));
  events[op] = {false, id, from, v, emitting};
  Value result = op.getResult();
  if (tensorType.getRank() == 0)
    result = tensor::CollapseShapeOp::create(b, loc, tensorType, result,
                                             ArrayRef<ReassociationIndices>{});
  return result;
}

FailureOr<Value> Pipeliner::lookup(Value v, int64_t mb) {
  int64_t context = contextOf(v) < 0 ? -1 : mb;
  if (Value mapped = mapFor(context).lookupOrNull(v))
    return mapped;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (context < 0)
      return v; // a function argument
    Value result;
    if (arg.getArgNumber() == 0) {
      result = arith::ConstantIndexOp::create(b, arg.getLoc(), context);
    } else {
      unsigned j = arg.getArgNumber() - 1;
      FailureOr<Value> prev =
          context == 0 ? lookup(loop.getInitArgs()[j], -1)
                       : lookup(loop.getBody()->getTerminator()->getOperand(j),
                                context - 1);
      if (failed(prev))
        return failure();
      result = *prev;
    }
    mapFor(context).map(v, result);
    return result;
  }
  Operation *def = v.getDefiningOp();
  int64_t maker = rankOf(v);
  if (maker >= 0 && maker != rank) {
    Value received = recv(v, maker, transferId(v, context, rank));
    mapFor(context).map(v, received);
    return received;
  }
  if (def == loop.getOperation()) {
    unsigned j = cast<OpResult>(v).getResultNumber();
    FailureOr<Value> last = lookup(
        loop.getBody()->getTerminator()->getOperand(j), microBatches - 1);
    if (failed(last))
      return failure();
    top.map(v, *last);
    return *last;
  }
  if (maker >= 0)
    return def->emitError()
           << "-stp-pipeline-stages: internal error: read before its slot "
              "on pipeline rank "
           << rank;
  // Recomputed where needed.
  if (failed(emitOp(def, context)))
    return failure();
  return mapFor(context).lookup(v);
}

FailureOr<Operation *> Pipeliner::emitOp(Operation *op, int64_t mb) {
  Operation *outer = emitting;
  emitting = op;
  auto restore = llvm::make_scope_exit([&] { emitting = outer; });
  IRMapping mapping;
  for (Value v : readValues(op)) {
    FailureOr<Value> local = lookup(v, mb);
    if (failed(local))
      return failure();
    mapping.map(v, *local);
  }
  Operation *copy = b.clone(*op, mapping);
  auto it = stageOf.find(op);
  if (it != stageOf.end())
    copy->setAttr(STPDialect::kStageAttrName, b.getI64IntegerAttr(it->second));
  IRMapping &map = mapFor(inLoop(op) ? mb : -1);
  for (auto [from, to] : llvm::zip(op->getResults(), copy->getResults()))
    map.map(from, to);
  sendResults(op, SmallVector<Value>(op->getResults()), copy->getResults(),
              inLoop(op) ? mb : -1);
  return copy;
}

void Pipeliner::sendResults(Operation *op, ArrayRef<Value> results,
                            ValueRange mapped, int64_t mb) {
  for (auto [v, local] : llvm::zip(results, mapped)) {
    auto it = readers.find(v);
    if (it == readers.end())
      continue;
    for (int64_t to : it->second)
      send(v, local, to, transferId(v, mb, to));
  }
}

LogicalResult Pipeliner::emitRank(unsigned r, Block *block) {
  rank = r;
  top = IRMapping();
  perMicroBatch.assign(microBatches, IRMapping());
  b.setInsertionPointToEnd(block);
  auto mine = [&](Operation *op) {
    auto it = stageOf.find(op);
    return it != stageOf.end() && it->second % stages == rank;
  };
  for (Operation *op : preOps)
    if (mine(op) && failed(emitOp(op, -1)))
      return failure();
  for (const Slot &slot : slots[r]) {
    int64_t stage = slot.chunk * stages + r;
    for (Operation *op : loopOps) {
      auto it = stageOf.find(op);
      if (it == stageOf.end() || it->second != stage ||
          backwardOps.contains(op) != slot.backward)
        continue;
      if (failed(emitOp(op, slot.microBatch)))
        return failure();
    }
  }
  Operation *lastSlotOp = block->empty() ? nullptr : &block->back();
  // The accumulated results other ranks read after the loop.
  if (loop)
    for (Value result : loop.getResults())
      if (rankOf(result) == rank && readers.count(result)) {
        FailureOr<Value> local = lookup(result, -1);
        if (failed(local))
          return failure();
        sendResults(loop, {result}, ValueRange{*local}, -1);
      }
  for (Operation *op : postOps)
    if (mine(op) && failed(emitOp(op, -1)))
      return failure();
  // The function's results: a rank returns those it computes.
  Operation *ret = func.getBody().front().getTerminator();
  SmallVector<Value> results;
  for (Value v : ret->getOperands()) {
    int64_t maker = rankOf(v);
    if (maker < 0 || maker == rank) {
      // (Without a loop the results are the one micro-batch's values.)
      FailureOr<Value> local = lookup(v, microBatches - 1);
      if (failed(local))
        return failure();
      results.push_back(*local);
      continue;
    }
    auto type = cast<RankedTensorType>(v.getType());
    results.push_back(tensor::EmptyOp::create(b, v.getLoc(), type.getShape(),
                                              type.getElementType()));
  }
  scf::YieldOp::create(b, ret->getLoc(), results);
  // Where the ops after the slots begin (sends aside: they may move).
  Operation *next = lastSlotOp ? lastSlotOp->getNextNode() : &block->front();
  while (isa<shard::SendOp>(next))
    next = next->getNextNode();
  afterSlots[r] = next;
  return success();
}

void Pipeliner::orderSends(ArrayRef<Block *> cases) {
  // NCCL matches two ranks' transfers by order: a send that its receiver
  // takes later than another waits after that one.
  std::map<std::pair<int64_t, int64_t>, SmallVector<int64_t>> receiveOrder;
  DenseMap<int64_t, Operation *> sendOf;
  for (auto [r, block] : llvm::enumerate(cases))
    for (Operation &op : *block)
      if (auto it = events.find(&op); it != events.end())
        if (!it->second.isSend)
          receiveOrder[{it->second.peer, int64_t(r)}].push_back(it->second.id);
  for (auto &[op, e] : events)
    if (e.isSend)
      sendOf[e.id] = op;
  for (auto &[pair, ids] : receiveOrder) {
    Operation *prev = nullptr;
    for (int64_t id : ids) {
      Operation *op = sendOf.lookup(id);
      if (!op)
        continue;
      if (prev && op->isBeforeInBlock(prev))
        op->moveAfter(prev);
      prev = op;
    }
  }
}

void Pipeliner::groupTransfers(Block *block, Operation *afterSlots) {
  // A send waits for the rank's next receive and goes in one group with
  // it; sends with no receive after them in the slots (or after the slots)
  // go as one group at the end of the slots (or of the case).
  SmallVector<Operation *> sends;
  auto issue = [&](ArrayRef<Operation *> ops, Operation *before) {
    if (ops.empty())
      return;
    Attribute group = b.getI64IntegerAttr(numGroups++);
    for (Operation *op : ops) {
      if (op != before)
        op->moveBefore(before);
      op->setAttr(STPDialect::kTransferGroupAttrName, group);
    }
  };
  for (Operation &op : llvm::make_early_inc_range(*block)) {
    if (&op == afterSlots || op.hasTrait<OpTrait::IsTerminator>()) {
      issue(sends, &op);
      sends.clear();
    }
    if (isa<shard::SendOp>(op)) {
      sends.push_back(&op);
    } else if (isa<shard::RecvOp>(op)) {
      sends.push_back(&op);
      issue(sends, &op);
      sends.clear();
    }
  }
}

LogicalResult Pipeliner::checkTransferOrder(const TransferGroups &groups) {
  // NCCL matches a pair of ranks' sends and receives by order: rank r's
  // sends to q come in the order q receives them (orderSends).
  std::map<std::pair<int64_t, int64_t>, SmallVector<const Event *>> sent,
      received;
  for (int64_t r = 0; r < stages; ++r)
    for (auto &group : groups[r])
      for (Operation *op : group) {
        const Event &e = events[op];
        (e.isSend ? sent[{r, e.peer}] : received[{e.peer, r}]).push_back(&e);
      }
  for (auto &[pair, list] : sent) {
    SmallVector<const Event *> &other = received[pair];
    for (auto [s, rcv] : llvm::zip(list, other))
      if (s->id != rcv->id)
        return mlir::emitError(rcv->value.getLoc())
               << "-stp-pipeline-stages: internal error: pipeline rank "
               << pair.second << " receives transfer " << rcv->id
               << " from rank " << pair.first << " where that rank sends "
               << s->id << " (NCCL matches them by order)";
    if (list.size() != other.size())
      return mlir::emitError(list.front()->value.getLoc())
             << "-stp-pipeline-stages: internal error: rank " << pair.first
             << " sends " << list.size() << " transfers to rank " << pair.second
             << ", which receives " << other.size();
  }
  return success();
}

LogicalResult Pipeliner::runGroups(TransferGroups &groups,
                                   SmallVectorImpl<Operation *> &hoisted) {
  // Rendezvous: a transfer completes while both ranks' current groups hold
  // it; a rank moves on when all of its current group has completed. Where
  // every rank waits and a send waits for a receive that its rank posts in
  // a later group, that receive (with the ones from the same rank before
  // it, to keep their order) moves into the rank's current group: a
  // receive may be posted early, a send not (its value is not made yet).
  SmallVector<size_t> at(stages, 0);
  DenseSet<int64_t> done;
  auto current = [&](int64_t r) -> ArrayRef<Operation *> {
    return at[r] < groups[r].size() ? ArrayRef(groups[r][at[r]])
                                    : ArrayRef<Operation *>();
  };
  auto heldByPeer = [&](const Event &e) {
    return llvm::any_of(current(e.peer), [&](Operation *op) {
      const Event &other = events[op];
      return other.id == e.id && other.isSend != e.isSend;
    });
  };
  // Runs the groups until no rank can move on.
  auto advance = [&] {
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t r = 0; r < stages; ++r)
        for (Operation *op : current(r))
          if (heldByPeer(events[op]))
            done.insert(events[op].id);
      for (int64_t r = 0; r < stages; ++r)
        while (at[r] < groups[r].size() &&
               llvm::all_of(current(r), [&](Operation *op) {
                 return done.contains(events[op].id);
               })) {
          ++at[r];
          progress = true;
        }
    }
  };
  // Moves rank q's receives from r, up to transfer `id`, into its current
  // group; false if there are none.
  auto postEarly = [&](int64_t q, int64_t r, int64_t id) {
    SmallVector<Operation *> moved;
    bool found = false;
    for (size_t g = at[q] + 1; g < groups[q].size() && !found; ++g)
      llvm::erase_if(groups[q][g], [&](Operation *op) {
        const Event &e = events[op];
        if (found || e.isSend || e.peer != r)
          return false;
        moved.push_back(op);
        found = e.id == id;
        return true;
      });
    llvm::erase_if(groups[q], [](auto &group) { return group.empty(); });
    llvm::append_range(groups[q][at[q]], moved);
    llvm::append_range(hoisted, moved);
    return !moved.empty();
  };
  for (bool repaired = true; repaired;) {
    advance();
    repaired = false;
    for (int64_t r = 0; r < stages; ++r)
      for (Operation *op : SmallVector<Operation *>(current(r))) {
        const Event &e = events[op];
        if (e.isSend && !done.contains(e.id) && at[e.peer] < groups[e.peer].size())
          repaired |= postEarly(e.peer, r, e.id);
      }
  }
  for (int64_t r = 0; r < stages; ++r) {
    if (at[r] == groups[r].size())
      continue;
    const Event &e = events[*llvm::find_if(current(r), [&](Operation *op) {
      return !done.contains(events[op].id);
    })];
    InFlightDiagnostic diag =
        mlir::emitError(e.value.getLoc())
        << "-stp-pipeline-stages: pipeline rank " << r << " waits forever to "
        << (e.isSend ? "send transfer " : "receive transfer ") << e.id
        << (e.isSend ? " to rank " : " from rank ") << e.peer
        << " (the schedule and the stages deadlock)";
    if (Operation *def = e.value.getDefiningOp())
      diag.attachNote(def->getLoc())
          << "the value of " << def->getName() << ", stage "
          << stageOf.lookup(def)
          << (backwardOps.contains(def) ? " (backward)" : " (forward)");
    if (e.reader)
      diag.attachNote(e.reader->getLoc())
          << "read by " << e.reader->getName() << ", stage "
          << stageOf.lookup(e.reader)
          << (backwardOps.contains(e.reader) ? " (backward)" : " (forward)");
    return diag;
  }
  return success();
}

LogicalResult Pipeliner::scheduleTransfers(ArrayRef<Block *> cases) {
  // Each rank's groups in program order.
  TransferGroups groups(stages);
  for (auto [r, block] : llvm::enumerate(cases)) {
    Attribute last;
    for (Operation &op : *block) {
      if (!events.count(&op))
        continue;
      Attribute group = op.getAttr(STPDialect::kTransferGroupAttrName);
      if (group != last)
        groups[r].emplace_back();
      groups[r].back().push_back(&op);
      last = group;
    }
  }
  SmallVector<Operation *> hoisted;
  if (failed(checkTransferOrder(groups)) || failed(runGroups(groups, hoisted)))
    return failure();
  // A receive posted early goes at the end of its new group (in the order
  // of the moves: after the group's receives from the same rank), its
  // buffer (tensor.empty) before the group.
  DenseMap<Operation *, SmallVector<Operation *> *> groupOf;
  for (auto &rankGroups : groups)
    for (auto &group : rankGroups)
      for (Operation *op : group)
        groupOf[op] = &group;
  DenseSet<Operation *> unplaced(hoisted.begin(), hoisted.end());
  for (Operation *recv : hoisted) {
    unplaced.erase(recv);
    Operation *first = nullptr, *last = nullptr;
    for (Operation *op : *groupOf[recv]) {
      if (op == recv || unplaced.contains(op))
        continue;
      if (!first || op->isBeforeInBlock(first))
        first = op;
      if (!last || last->isBeforeInBlock(op))
        last = op;
    }
    if (Operation *buffer = recv->getOperand(0).getDefiningOp())
      if (buffer->hasOneUse() && first->isBeforeInBlock(buffer))
        buffer->moveBefore(first);
    recv->moveAfter(last);
    recv->setAttr(STPDialect::kTransferGroupAttrName,
                  last->getAttr(STPDialect::kTransferGroupAttrName));
  }
  return success();
}

LogicalResult Pipeliner::run() {
  if (failed(readSchedule()) || failed(collectOps()) || failed(assignStages()))
    return failure();
  for (Type type : func.getResultTypes())
    if (!isa<RankedTensorType>(type))
      return func.emitError() << "-stp-pipeline-stages: result type " << type
                              << " is not a ranked tensor";
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  b.setInsertionPoint(ret);
  Location loc = func.getLoc();
  Value index = shard::ProcessMultiIndexOp::create(
                    b, loc, grid.getSymName(),
                    ArrayRef<shard::GridAxis>{shard::GridAxis(ppAxis)})
                    .getResult()[0];
  SmallVector<int64_t> cases;
  for (int64_t r = 0; r < stages; ++r)
    cases.push_back(r);
  auto sw = scf::IndexSwitchOp::create(b, loc, func.getResultTypes(), index,
                                       cases, stages);
  afterSlots.assign(stages, nullptr);
  SmallVector<Block *> caseBlocks;
  for (int64_t r = 0; r < stages; ++r) {
    caseBlocks.push_back(&sw.getCaseRegions()[r].emplaceBlock());
    if (failed(emitRank(r, caseBlocks.back())))
      return failure();
  }
  orderSends(caseBlocks);
  for (int64_t r = 0; r < stages; ++r)
    groupTransfers(caseBlocks[r], afterSlots[r]);
  // The default region never runs (the index is a pp rank).
  b.setInsertionPointToEnd(&sw.getDefaultRegion().emplaceBlock());
  SmallVector<Value> empties;
  for (Type type : func.getResultTypes()) {
    auto t = cast<RankedTensorType>(type);
    empties.push_back(
        tensor::EmptyOp::create(b, loc, t.getShape(), t.getElementType()));
  }
  scf::YieldOp::create(b, loc, empties);
  if (failed(scheduleTransfers(caseBlocks)))
    return failure();
  // (Receives moved into earlier groups may have emptied some.)
  DenseSet<Attribute> groupIds;
  sw.walk([&](Operation *op) {
    if (Attribute id = op->getAttr(STPDialect::kTransferGroupAttrName))
      groupIds.insert(id);
  });
  // Which rank returns each result.
  for (auto [i, v] : llvm::enumerate(ret->getOperands()))
    if (int64_t maker = rankOf(v); maker >= 0)
      func.setResultAttr(i, STPDialect::kPipelineRankAttrName,
                         b.getI64IntegerAttr(maker));
  ret->setOperands(sw.getResults());
  // The whole-program ops are now copied into the ranks' cases.
  SmallVector<Operation *> old(preOps);
  if (loop)
    old.push_back(loop);
  llvm::append_range(old, postOps);
  for (Operation *op : llvm::reverse(old)) {
    op->dropAllUses();
    op->erase();
  }
  func->setAttr(
      STPDialect::kPipelineAttrName,
      b.getDictionaryAttr({
          b.getNamedAttr("grid_axis", b.getI64IntegerAttr(ppAxis)),
          b.getNamedAttr("stages", b.getI64IntegerAttr(stages)),
          b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(virtualStages)),
          b.getNamedAttr("micro_batches", b.getI64IntegerAttr(microBatches)),
          b.getNamedAttr("transfers", b.getI64IntegerAttr(numTransfers)),
          b.getNamedAttr("transfer_groups",
                         b.getI64IntegerAttr(groupIds.size())),
      }));
  return success();
}

struct PipelineStagesPass
    : public stpar::stp::impl::PipelineStagesPassBase<PipelineStagesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
    if (!mesh || getPipelineStages(mesh) <= 1)
      return; // nothing to split
    if (!module->hasAttr(STPDialect::kPartitionedAttrName)) {
      module.emitError() << "-stp-pipeline-stages runs on the partitioned "
                            "program (after -stp-partition)";
      return signalPassFailure();
    }
    auto schedule = module->getAttrOfType<DictionaryAttr>(
        STPDialect::kPipelineScheduleAttrName);
    if (!schedule) {
      module.emitError() << "-stp-pipeline-stages: the module has no "
                            "stp.pipeline_schedule (run "
                            "-stp-pipeline-schedule first)";
      return signalPassFailure();
    }
    auto grids = llvm::to_vector(module.getOps<shard::GridOp>());
    if (grids.size() != 1) {
      module.emitError() << "-stp-pipeline-stages: expected one shard.grid";
      return signalPassFailure();
    }
    int16_t ppAxis = 0;
    while (getGridAxes(mesh)[ppAxis].getName().getValue() != "pp")
      ++ppAxis;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Pipeliner pipeliner(module, func, schedule, grids.front(), ppAxis);
      if (failed(pipeliner.run()))
        return signalPassFailure();
      numTransfers += pipeliner.numTransfers;
    }
  }
};
} // namespace
