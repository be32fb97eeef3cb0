//===- ModelPlan.cpp - plan an ONNX model (stpar plan, compile) -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ModelPlan.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"
#include "stpar/Pipelines/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace llvm;
using stpar::tools::ModelPlanOptions;
using stpar::tools::PlannedModel;

static std::nullopt_t fail(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
  return std::nullopt;
}

std::optional<PlannedModel>
stpar::tools::planModel(const ModelPlanOptions &o) {
  stpar::pipelines::CompilePipelineOptions pipeline = o.pipeline;
  stpar::pipelines::PlanOptions &plan = pipeline.plan;
  if (!pipeline.planFile.empty()) {
    // The file's own checks first: its format and device count.
    Expected<json::Value> parsed = stpar::stp::readPlanFile(pipeline.planFile);
    if (!parsed)
      return fail(pipeline.planFile + ": " + toString(parsed.takeError()));
    Expected<int64_t> devices =
        stpar::stp::getPlanDevices(*parsed, plan.devices);
    if (!devices)
      return fail(pipeline.planFile + ": " + toString(devices.takeError()));
    plan.devices = *devices;
    plan.mesh.clear();
    if (std::optional<StringRef> c = parsed->getAsObject()->getString("cluster"))
      if (!plan.cluster.empty() && *c != plan.cluster)
        errs() << pipeline.planFile
               << ": warning: the plan was made for cluster '" << *c
               << "', planning for '" << plan.cluster << "'\n";
  }
  // The options' own checks before the model is read.
  stpar::cost::Cluster cluster;
  Expected<int64_t> devices = stpar::pipelines::checkPlanOptions(plan, cluster);
  if (!devices)
    return fail(toString(devices.takeError()));

  std::optional<AnalyzedModel> model = importModel(o.model, o.dims);
  if (!model)
    return std::nullopt;
  mlir::ModuleOp module = *model->module;
  mlir::PassManager pm(module.getContext());
  stpar::pipelines::buildPlanningPipeline(pm, pipeline);
  if (mlir::failed(pm.run(module)))
    return std::nullopt;

  PlannedModel out;
  Expected<json::Value> exported = stpar::stp::exportPlan(module);
  if (!exported)
    return fail(toString(exported.takeError()));
  out.planJSON = std::move(*exported);
  module.walk([&](mlir::Operation *op) {
    if (op->hasAttr(stpar::stp::STPDialect::kSpecAttrName))
      ++out.attached;
  });
  if (const json::Object *root = out.planJSON.getAsObject())
    out.devices = root->getInteger("devices").value_or(0);
  out.model = std::move(*model);
  return out;
}
