//===- ModelPlan.h - plan an ONNX model (stpar plan, compile) ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The planning front shared by `stpar plan MODEL.onnx` and `stpar compile`:
// import the model (ModelInput.h), then run the planning half of the
// pipeline (stpar/Pipelines/Pipelines.h: -stp-normalize, then -stp-plan or
// -stp-apply-plan) and read plan.json back from the attributes. The search
// itself lives in lib/Pipelines (stpar/Pipelines/Plan.h).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TOOLS_STPAR_MODELPLAN_H
#define STPAR_TOOLS_STPAR_MODELPLAN_H

#include "ModelInput.h"

#include "stpar/Pipelines/Pipelines.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace stpar::tools {

/// A model and how to plan it: the command line's model, dims and the
/// pipeline's options.
struct ModelPlanOptions {
  std::string model;
  std::vector<std::string> dims;
  pipelines::CompilePipelineOptions pipeline;
};

/// A planned model: the imported IR with the plan's attributes, and the
/// plan as JSON (read back from them).
struct PlannedModel {
  AnalyzedModel model;
  int64_t devices = 0;
  llvm::json::Value planJSON = nullptr;
  /// Ops that carry stp.spec.
  unsigned attached = 0;
};

/// Imports the model and runs the planning pipeline: searches a plan (or,
/// with `pipeline.planFile`, applies that plan.json after checking its
/// format and device count). The plan table goes to
/// `options.pipeline.plan.table`. Prints `stpar: error: ...` (or the
/// passes' diagnostics) and returns std::nullopt on failure.
std::optional<PlannedModel> planModel(const ModelPlanOptions &options);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_MODELPLAN_H
