//===- PipelineSchedule.cpp - the plan's pipeline schedule as IR -*- C++
//-*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-pipeline-schedule: the schedule of the plan's pipeline
// stages as explicit per-rank slot lists (cost/PipelineSchedule.h builds
// them) in the module attribute `stp.pipeline_schedule`, with the bubble
// and the micro-batches in flight that the cost model charges for it.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Cost/PipelineSchedule.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace stpar::stp {
#define GEN_PASS_DEF_PIPELINESCHEDULEPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;
namespace cost = stpar::cost;

namespace {
struct PipelineSchedulePass
    : public stpar::stp::impl::PipelineSchedulePassBase<PipelineSchedulePass> {
  using PipelineSchedulePassBase::PipelineSchedulePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Location loc = module.getLoc();
    // The plan's pipeline (stp.plan's mesh entry), where an option does not
    // override it.
    DictionaryAttr planMesh = getPlanMesh(module);
    auto choose = [&](int64_t option, StringRef key) -> std::optional<int64_t> {
      if (option >= 0)
        return option;
      if (planMesh)
        if (auto value = planMesh.getAs<IntegerAttr>(key))
          return value.getInt();
      return std::nullopt;
    };
    std::optional<int64_t> p = choose(stages, "pipeline_stages");
    if (ifPipelined && p.value_or(1) <= 1)
      return;
    std::optional<int64_t> m = choose(microBatches, "micro_batches");
    std::optional<int64_t> v = choose(virtualStages, "interleave");
    if (!p || !m) {
      emitError(loc) << "-stp-pipeline-schedule: the module has no plan "
                        "with pipeline_stages and micro_batches (stp.plan's "
                        "mesh) and the options give none (stages=, "
                        "micro-batches=)";
      return signalPassFailure();
    }
    cost::ScheduleShape shape;
    shape.stages = *p;
    shape.microBatches = *m;
    shape.virtualStages = v.value_or(1);
    // The kind: the option, else the plan's `schedule`, else by the
    // virtual stages.
    std::string kindName = kind;
    if (kindName.empty() && planMesh)
      if (auto planKind = planMesh.getAs<StringAttr>("schedule"))
        kindName = planKind.getValue().str();
    if (kindName.empty()) {
      shape.kind = shape.virtualStages > 1 ? cost::ScheduleKind::Interleaved
                                           : cost::ScheduleKind::OneFOneB;
    } else if (auto k = cost::parseScheduleKind(kindName)) {
      shape.kind = *k;
    } else {
      emitError(loc) << "-stp-pipeline-schedule: unknown kind '" << kindName
                     << "' (gpipe, 1f1b or interleaved)";
      return signalPassFailure();
    }
    auto lists = cost::buildSchedule(shape);
    if (!lists) {
      emitError(loc) << "-stp-pipeline-schedule: "
                     << llvm::toString(lists.takeError());
      return signalPassFailure();
    }
    // The lists must run: every slot's inputs come from slots that can run
    // before it.
    auto run = cost::simulateSchedule(shape, *lists, 1.0, 2.0);
    if (!run) {
      emitError(loc) << "-stp-pipeline-schedule: internal error: "
                     << llvm::toString(run.takeError());
      return signalPassFailure();
    }
    Builder b(module.getContext());
    bool chunks = shape.virtualStages > 1;
    SmallVector<Attribute> ranks;
    for (const auto &list : *lists) {
      SmallVector<Attribute> slots;
      for (const cost::ScheduleSlot &slot : list)
        slots.push_back(b.getStringAttr(slot.str(chunks)));
      ranks.push_back(b.getArrayAttr(slots));
    }
    SmallVector<Attribute> inFlight;
    for (int64_t r = 0; r < shape.stages; ++r)
      inFlight.push_back(b.getF64FloatAttr(cost::getInFlight(shape, r)));
    NamedAttribute fields[] = {
        b.getNamedAttr("kind",
                       b.getStringAttr(cost::getScheduleName(shape.kind))),
        b.getNamedAttr("stages", b.getI64IntegerAttr(shape.stages)),
        b.getNamedAttr("micro_batches",
                       b.getI64IntegerAttr(shape.microBatches)),
        b.getNamedAttr("virtual_stages",
                       b.getI64IntegerAttr(shape.virtualStages)),
        b.getNamedAttr("ranks", b.getArrayAttr(ranks)),
        b.getNamedAttr("bubble_slots",
                       b.getF64FloatAttr(cost::getBubbleSlots(shape))),
        b.getNamedAttr("in_flight", b.getArrayAttr(inFlight))};
    module->setAttr(STPDialect::kPipelineScheduleAttrName,
                    b.getDictionaryAttr(fields));
  }
};
} // namespace
