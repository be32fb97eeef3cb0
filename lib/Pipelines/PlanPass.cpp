//===- PlanPass.cpp - -stp-plan ---------------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Pipelines/Passes.h"
#include "stpar/Pipelines/Plan.h"

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace stpar::pipelines {
#define GEN_PASS_DEF_PLANPASS
#include "stpar/Pipelines/Passes.h.inc"
} // namespace stpar::pipelines

using namespace mlir;
using namespace stpar::pipelines;

namespace {
struct PlanPass : public stpar::pipelines::impl::PlanPassBase<PlanPass> {
  using Base::Base;

  /// The driver's route: every option, streams included.
  explicit PlanPass(const PlanOptions &options) : streams(options) {
    cluster = options.cluster;
    devices = options.devices;
    strategy = options.strategy;
    zero = options.zeroStage;
    memoryLimit = options.memoryLimit;
    std::string shape;
    for (int64_t s : options.mesh)
      shape += (shape.empty() ? "" : "x") + std::to_string(s);
    mesh = options.meshText.empty() ? shape : options.meshText;
    batchDim = options.batchDim;
    exact = options.exact;
    expertLoad = options.expertLoad;
    pipeline = options.pipeline;
  }

  void getDependentDialects(DialectRegistry &registry) const override {
    PlanPassBase::getDependentDialects(registry);
    stpar::stp::registerPartitionableOpModels(registry);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    PlanOptions o = streams;
    o.cluster = cluster;
    o.devices = devices;
    o.strategy = strategy;
    o.zeroStage = zero;
    o.memoryLimit = memoryLimit;
    o.mesh.clear();
    if (!mesh.empty()) {
      llvm::Expected<std::vector<int64_t>> shape = parseMeshShape(mesh);
      if (!shape) {
        emitError(module.getLoc()) << llvm::toString(shape.takeError());
        return signalPassFailure();
      }
      o.mesh = std::move(*shape);
    }
    o.batchDim = batchDim;
    o.exact = exact;
    o.expertLoad = expertLoad;
    o.pipeline = pipeline;
    if (llvm::Error error = planModule(module, o)) {
      // At the module's location, without printing the module.
      emitError(module.getLoc()) << llvm::toString(std::move(error));
      return signalPassFailure();
    }
  }

  /// Table, notes, comparison and progress of the driver's route.
  PlanOptions streams;
};
} // namespace

std::unique_ptr<Pass>
stpar::pipelines::createPlanPass(const PlanOptions &options) {
  return std::make_unique<PlanPass>(options);
}
