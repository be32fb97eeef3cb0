//===- Passes.h - the search pass of the stpar pipeline ---------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_PIPELINES_PASSES_H
#define STPAR_PIPELINES_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace stpar::pipelines {

struct PlanOptions;

#define GEN_PASS_DECL
#include "stpar/Pipelines/Passes.h.inc"

/// -stp-plan with every option, the table and notes streams included (the
/// driver's route).
std::unique_ptr<mlir::Pass> createPlanPass(const PlanOptions &options);

#define GEN_PASS_REGISTRATION
#include "stpar/Pipelines/Passes.h.inc"

} // namespace stpar::pipelines

#endif // STPAR_PIPELINES_PASSES_H
