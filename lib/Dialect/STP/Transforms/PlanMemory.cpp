//===- PlanMemory.cpp - one arena per rank (-stp-plan-memory) ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-plan-memory: a static memory plan for the per-rank
// program. Every buffer the program holds (function arguments and the
// tensor results of ops that make a new tensor) gets a lifetime in the
// order of the function body's ops and a byte offset in one arena, placed
// greedily by size so that buffers whose lifetimes overlap never share
// bytes. The rules are in Passes.td; docs/emitted-code.md, "Memory".
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/Collectives.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"

#include <algorithm>

namespace stpar::stp {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// Arena offsets are multiples of this (bytes): enough for any element type
/// and for coalesced device accesses.
constexpr int64_t kAlignment = 256;

/// One buffer: its size and lifetime [start, end] in steps (the index of
/// the top-level op of the function body; arguments start at -1).
struct Buffer {
  int64_t bytes = 0;
  int64_t start = 0, end = 0;
  bool argument = false;
  int64_t offset = -1;
};

/// Bytes of one element as the emitted programs store it.
int64_t getElementBytes(Type type) {
  if (type.isIndex())
    return 8;
  unsigned bits = type.getIntOrFloatBitWidth();
  return bits <= 8 ? 1 : bits / 8;
}

int64_t getBufferBytes(RankedTensorType type) {
  int64_t elements = std::max<int64_t>(type.getNumElements(), 1);
  return elements * getElementBytes(type.getElementType());
}

bool isView(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
             tensor::ReshapeOp>(op);
}

class MemoryPlanner {
public:
  explicit MemoryPlanner(func::FuncOp func) : func(func) {}

  /// Plans the function's buffers and writes the attributes.
  LogicalResult run();

private:
  unsigned newBuffer(int64_t bytes, int64_t start, bool argument = false) {
    buffers.push_back({bytes, start, start, argument, -1});
    return buffers.size() - 1;
  }
  LogicalResult defineBlock(Block &block);
  void place();

  func::FuncOp func;
  std::vector<Buffer> buffers;
  /// The buffers a value lives in (a view: its source's; a loop result or
  /// carried value: every buffer it may be on some step).
  DenseMap<Value, SmallVector<unsigned, 2>> bufferOf;
  /// Per op result with a buffer: the buffer (and the odd-step one).
  DenseMap<Value, std::pair<int64_t, int64_t>> ownBuffers;
  /// The step of each top-level op.
  DenseMap<Operation *, int64_t> steps;
  int64_t numSteps = 0;
};

int64_t getStep(const DenseMap<Operation *, int64_t> &steps, Operation *op,
                Operation *funcOp) {
  // The step of the op or of its closest ancestor that has one (a
  // top-level op, or an op of a pipeline rank's case).
  while (op && op != funcOp && !steps.count(op))
    op = op->getParentOp();
  auto it = steps.find(op);
  return it == steps.end() ? 0 : it->second;
}

LogicalResult MemoryPlanner::defineBlock(Block &block) {
  for (Operation &op : block) {
    int64_t step = getStep(steps, &op, func);
    if (auto loop = dyn_cast<scf::ForOp>(op)) {
      for (auto [init, arg] :
           llvm::zip(loop.getInitArgs(), loop.getRegionIterArgs()))
        bufferOf[arg] = bufferOf.lookup(init);
      if (failed(defineBlock(*loop.getBody())))
        return failure();
      auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
      for (auto [index, carried] : llvm::enumerate(yield.getOperands())) {
        // A value made in this loop and carried to the next step gets a
        // second buffer for odd steps.
        SmallVector<unsigned, 2> carriedBuffers = bufferOf.lookup(carried);
        auto own = ownBuffers.find(carried);
        if (own != ownBuffers.end() && loop->isAncestor(carried.getDefiningOp()) &&
            own->second.second < 0) {
          unsigned odd = newBuffer(buffers[own->second.first].bytes, step);
          own->second.second = odd;
          carriedBuffers.push_back(odd);
        } else if (own != ownBuffers.end() && own->second.second >= 0) {
          carriedBuffers.push_back(own->second.second);
        }
        Value arg = loop.getRegionIterArgs()[index];
        SmallVector<unsigned, 2> &argBuffers = bufferOf[arg];
        for (unsigned b : carriedBuffers)
          if (!llvm::is_contained(argBuffers, b))
            argBuffers.push_back(b);
        // A copy first: inserting the result's entry may rehash the map
        // and leave `argBuffers` dangling.
        SmallVector<unsigned, 2> resultBuffers = argBuffers;
        bufferOf[loop.getResult(index)] = std::move(resultBuffers);
      }
      continue;
    }
    if (auto sw = dyn_cast<scf::IndexSwitchOp>(op)) {
      // The pipeline ranks' programs (-stp-pipeline-stages): a result is
      // what the running case yields, so it lives in any of their buffers.
      for (Region &region : sw->getRegions())
        if (failed(defineBlock(region.front())))
          return failure();
      for (unsigned i = 0; i < sw.getNumResults(); ++i) {
        SmallVector<unsigned, 2> all;
        for (Region &region : sw->getRegions())
          for (unsigned b :
               bufferOf.lookup(region.front().getTerminator()->getOperand(i)))
            if (!llvm::is_contained(all, b))
              all.push_back(b);
        bufferOf[sw.getResult(i)] = std::move(all);
      }
      continue;
    }
    for (Value result : op.getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type)
        continue;
      if (!type.hasStaticShape())
        return op.emitError("cannot plan the memory of a dynamically shaped "
                            "tensor");
      if (isView(&op)) {
        bufferOf[result] = bufferOf.lookup(op.getOperand(0));
        continue;
      }
      unsigned b = newBuffer(getBufferBytes(type), step);
      bufferOf[result] = {b};
      ownBuffers[result] = {b, -1};
    }
    // Nested regions other than loops (linalg payloads) hold scalars only.
  }
  return success();
}

void MemoryPlanner::place() {
  std::vector<unsigned> order(buffers.size());
  for (unsigned i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    if (buffers[a].bytes != buffers[b].bytes)
      return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].start < buffers[b].start;
  });
  std::vector<unsigned> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (unsigned id : order) {
    Buffer &buffer = buffers[id];
    busy.clear();
    for (unsigned other : placed) {
      const Buffer &o = buffers[other];
      if (o.start <= buffer.end && buffer.start <= o.end)
        busy.push_back({o.offset, o.offset + o.bytes});
    }
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [begin, end] : busy) {
      if (offset + buffer.bytes <= begin)
        break;
      offset = std::max(offset, (end + kAlignment - 1) / kAlignment *
                                    kAlignment);
    }
    buffer.offset = offset;
    placed.push_back(id);
  }
}

LogicalResult MemoryPlanner::run() {
  Block &body = func.getBody().front();
  // One step per top-level op; the cases of a top-level scf.index_switch
  // (one pipeline rank's program each) are laid one after the other, so a
  // case reuses the bytes of the cases before it.
  for (Operation &op : body) {
    steps[&op] = numSteps++;
    if (auto sw = dyn_cast<scf::IndexSwitchOp>(op))
      for (Region &region : sw->getRegions())
        for (Operation &inner : region.front())
          steps[&inner] = numSteps++;
  }
  SmallVector<int64_t> argOffsets;
  SmallVector<int> argBuffer(func.getNumArguments(), -1);
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      continue;
    if (!type.hasStaticShape())
      return func.emitError("cannot plan the memory of a dynamically shaped "
                            "argument");
    unsigned b = newBuffer(getBufferBytes(type), -1, /*argument=*/true);
    buffers[b].end = numSteps;
    bufferOf[arg] = {b};
    argBuffer[arg.getArgNumber()] = b;
  }
  if (failed(defineBlock(body)))
    return failure();

  // Lifetimes: every use of a buffer (through any view) extends it.
  func.walk([&](Operation *op) {
    int64_t step = isa<func::ReturnOp>(op) && op->getParentOp() == func
                       ? numSteps
                       : getStep(steps, op, func);
    for (Value operand : op->getOperands()) {
      auto it = bufferOf.find(operand);
      if (it == bufferOf.end())
        continue;
      for (unsigned b : it->second)
        buffers[b].end = std::max(buffers[b].end, step);
    }
  });
  // A value carried by a loop lives as long as the loop's results.
  func.walk([&](scf::ForOp loop) {
    int64_t end = getStep(steps, loop, func);
    for (Value result : loop.getResults())
      for (unsigned b : bufferOf.lookup(result))
        end = std::max(end, buffers[b].end);
    for (Value result : loop.getResults())
      for (unsigned b : bufferOf.lookup(result))
        buffers[b].end = std::max(buffers[b].end, end);
  });
  // A collective reads its input until the program waits for its result:
  // at the result's first use; a result nothing reads where stp.waits waits
  // for it (-stp-schedule-collectives: after a pipeline transfer group),
  // else at the end of its block. Latest first, so that a chain of
  // collectives extends transitively.
  SmallVector<Operation *> collectives;
  DenseMap<int64_t, int64_t> waitStep;
  func.walk([&](Operation *op) {
    if (isCollective(op))
      collectives.push_back(op);
    if (auto waits =
            op->getAttrOfType<DenseI64ArrayAttr>(STPDialect::kWaitsAttrName))
      for (int64_t done : waits.asArrayRef())
        waitStep[done] = getStep(steps, op, func);
  });
  for (Operation *op : llvm::reverse(collectives)) {
    int64_t until = getStep(steps, op, func);
    auto events =
        op->getAttrOfType<DenseI64ArrayAttr>(STPDialect::kEventsAttrName);
    for (Value result : op->getResults()) {
      for (unsigned b : bufferOf.lookup(result))
        until = std::max(until, buffers[b].end);
      if (!result.use_empty())
        continue;
      auto waited = events && events.size() == 2 ? waitStep.find(events[1])
                                                 : waitStep.end();
      until =
          std::max(until, waited != waitStep.end()
                              ? waited->second
                              : getStep(steps, &op->getBlock()->back(), func));
    }
    // (results nothing reads are waited for at the end: they live as long)
    for (Value result : op->getResults())
      if (result.use_empty())
        for (unsigned b : bufferOf.lookup(result))
          buffers[b].end = std::max(buffers[b].end, until);
    for (Value operand : op->getOperands())
      for (unsigned b : bufferOf.lookup(operand))
        buffers[b].end = std::max(buffers[b].end, until);
  }

  place();

  // The attributes.
  MLIRContext *ctx = func.getContext();
  func.walk([&](Operation *op) {
    op->removeAttr(STPDialect::kBuffersAttrName);
    op->removeAttr(STPDialect::kOddBuffersAttrName);
    SmallVector<int64_t> even, odd;
    bool any = false, anyOdd = false;
    for (Value result : op->getResults()) {
      auto it = ownBuffers.find(result);
      int64_t e = -1, o = -1;
      if (it != ownBuffers.end()) {
        e = buffers[it->second.first].offset;
        if (it->second.second >= 0)
          o = buffers[it->second.second].offset;
      }
      any |= e >= 0;
      anyOdd |= o >= 0;
      even.push_back(e);
      odd.push_back(o);
    }
    if (any)
      op->setAttr(STPDialect::kBuffersAttrName,
                  DenseI64ArrayAttr::get(ctx, even));
    if (anyOdd)
      op->setAttr(STPDialect::kOddBuffersAttrName,
                  DenseI64ArrayAttr::get(ctx, odd));
  });
  int64_t arena = 0, arguments = 0, unshared = 0;
  for (const Buffer &b : buffers) {
    arena = std::max(arena, b.offset + b.bytes);
    unshared += b.bytes;
    if (b.argument)
      arguments += b.bytes;
  }
  for (int b : argBuffer)
    argOffsets.push_back(b < 0 ? -1 : buffers[b].offset);
  // The most intermediate bytes live at one step.
  std::vector<int64_t> delta(numSteps + 2, 0);
  for (const Buffer &b : buffers)
    if (!b.argument) {
      delta[std::max<int64_t>(b.start, 0)] += b.bytes;
      delta[std::min<int64_t>(b.end, numSteps) + 1] -= b.bytes;
    }
  int64_t livePeak = 0, live = 0;
  for (int64_t d : delta)
    livePeak = std::max(livePeak, live += d);
  Builder b(ctx);
  func->setAttr(STPDialect::kArgBuffersAttrName,
                DenseI64ArrayAttr::get(ctx, argOffsets));
  func->setAttr(STPDialect::kArenaAttrName,
                b.getDictionaryAttr({
                    b.getNamedAttr("arena", b.getI64IntegerAttr(arena)),
                    b.getNamedAttr("arguments", b.getI64IntegerAttr(arguments)),
                    b.getNamedAttr("buffers", b.getI64IntegerAttr(unshared)),
                    b.getNamedAttr("live_peak", b.getI64IntegerAttr(livePeak)),
                }));
  return success();
}

struct PlanMemoryPass
    : public stpar::stp::impl::PlanMemoryPassBase<PlanMemoryPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (failed(MemoryPlanner(func).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
