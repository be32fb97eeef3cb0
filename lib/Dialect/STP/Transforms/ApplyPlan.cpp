//===- ApplyPlan.cpp - plan files to and from IR attributes -----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-apply-plan (plan.json -> attributes) and -stp-export-plan
// (attributes -> plan.json) over PlanAttributes.h.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

namespace stpar::stp {
#define GEN_PASS_DEF_APPLYPLANPASS
#define GEN_PASS_DEF_EXPORTPLANPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar;
using namespace stpar::stp;

namespace {
struct ApplyPlanPass
    : public stpar::stp::impl::ApplyPlanPassBase<ApplyPlanPass> {
  using ApplyPlanPassBase::ApplyPlanPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (planFile.empty()) {
      emitError(module.getLoc(), "-stp-apply-plan needs a plan file: "
                       "-stp-apply-plan=\"plan=plan.json\"");
      return signalPassFailure();
    }
    llvm::Expected<llvm::json::Value> plan = readPlanFile(planFile);
    if (!plan) {
      emitError(module.getLoc()) << planFile << ": "
                         << llvm::toString(plan.takeError());
      return signalPassFailure();
    }
    std::string clusterName = cluster;
    if (clusterName.empty())
      if (const llvm::json::Object *root = plan->getAsObject())
        clusterName = root->getString("cluster").value_or("").str();
    llvm::Expected<cost::Cluster> loaded = cost::loadCluster(clusterName);
    if (!loaded) {
      emitError(module.getLoc()) << planFile << ": the plan's cluster: "
                         << llvm::toString(loaded.takeError())
                         << " (give it with cluster=...)";
      return signalPassFailure();
    }
    ApplyPlanOptions options;
    options.devices = devices;
    options.source = planFile;
    if (llvm::Error error = applyPlan(module, *plan, *loaded, options)) {
      emitError(module.getLoc()) << llvm::toString(std::move(error));
      return signalPassFailure();
    }
  }
};

struct ExportPlanPass
    : public stpar::stp::impl::ExportPlanPassBase<ExportPlanPass> {
  using ExportPlanPassBase::ExportPlanPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::Expected<llvm::json::Value> plan = exportPlan(module);
    if (!plan) {
      emitError(module.getLoc()) << llvm::toString(plan.takeError());
      return signalPassFailure();
    }
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file =
        openOutputFile(output, &error);
    if (!file) {
      emitError(module.getLoc()) << error;
      return signalPassFailure();
    }
    file->os() << llvm::formatv("{0:2}", *plan) << "\n";
    file->keep();
    markAllAnalysesPreserved();
  }
};
} // namespace
