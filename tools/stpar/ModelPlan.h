//===- ModelPlan.h - plan an ONNX model (stpar plan, compile) ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The planning front shared by `stpar plan MODEL.onnx` and `stpar compile`:
// import and analyse the model (ModelInput.h), search a plan with one of the
// strategies below (or read one from a plan.json file), print the table,
// build the JSON plan (docs/plan-format.md) and attach `stp.mesh` /
// `stp.spec` to the IR.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TOOLS_STPAR_MODELPLAN_H
#define STPAR_TOOLS_STPAR_MODELPLAN_H

#include "ModelInput.h"

#include "stpar/Cost/Cluster.h"
#include "stpar/Search/Solver.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace stpar::tools {

/// How the plan is chosen (`--strategy`).
///   search      the spatial-temporal search (default)
///   spatial     the search without the temporal primitive (Alpa-like)
///   temporal    the search, keeping only temporal-primitive candidates for
///               the operators that have any (a plan to exercise it)
///   megatron    Megatron tensor parallelism (best grid), no sequence
///               parallelism; megatron-sp with it
///   dp          pure data parallelism over all devices (ZeRO stage 0)
struct ModelPlanOptions {
  std::string model;
  std::vector<std::string> dims;
  std::string batchDim;
  std::string cluster;
  /// 0: all devices of the cluster.
  int64_t devices = 0;
  /// Bytes per device; 0: the cluster's HBM capacity.
  double memoryLimit = 0;
  std::string strategy = "search";
  /// Forced logical mesh shape (major first), no pipeline stages; empty:
  /// searched. For megatron, [a, b] is dp = a, tp = b; [n] is tp = n.
  std::vector<int64_t> mesh;
  bool exact = false;
  bool compare = false;
  unsigned maxMeshAxes = 3;
  /// Print search progress on stderr (when it is a terminal).
  bool progress = false;
  /// Search without pipeline stages (stpar compile: the partition pass does
  /// not split pipeline stages yet).
  bool noPipeline = false;
};

/// A planned model: the imported IR with `stp.mesh` and `stp.spec`, and the
/// plan as JSON.
struct PlannedModel {
  AnalyzedModel model;
  int64_t devices = 0;
  llvm::json::Value planJSON = nullptr;
  /// Ops that carry stp.spec.
  unsigned attached = 0;
};

/// Prints "no plan fits" with the smallest memory found and the shortfall;
/// returns 1.
int failNoPlan(const search::SearchResult &r);

/// The baselines beside `bestPlan` (--compare): spatial-only search,
/// Megatron with and without sequence parallelism, ZeRO-1/2/3.
void printComparison(llvm::raw_ostream &os, const search::Problem &problem,
                     const cost::Cluster &cluster,
                     const cost::EfficiencyModel &eff,
                     const search::SearchOptions &opts,
                     const search::Plan &bestPlan);

/// The search options both `stpar plan` routes start from: at most
/// `maxMeshAxes` mesh axes, the DP's caps unless `exact` (24 candidates per
/// operator, 256 states, 3 points per front; docs/search.md), and a
/// progress line on stderr when `progress` and stderr is a terminal.
search::SearchOptions makeSearchOptions(unsigned maxMeshAxes, bool exact,
                                        bool progress);

/// The strategy names accepted by --strategy, for help texts.
extern const char *const kStrategyHelp;

/// Parses "AxBxC" (or "N") into a mesh shape; fails on anything else.
llvm::Expected<std::vector<int64_t>> parseMeshShape(llvm::StringRef text);

/// Imports and plans the model; writes the plan table (and with
/// `options.compare` the baselines) to `table`. Prints `stpar: error: ...`
/// and returns std::nullopt on failure (no plan fits, unknown strategy,
/// devices the cluster cannot host, ...).
std::optional<PlannedModel> planModel(const ModelPlanOptions &options,
                                      llvm::raw_ostream &table);

/// Imports the model and applies the plan of `planPath` (a plan.json of
/// `stpar plan -o`): checks the file's format, that its device count equals
/// `options.devices` (when given) and that each operator's spec fits the IR
/// op named `ir_op` (docs/plan-format.md, "Operator names": loop count and
/// extents, mesh axes), then writes it into the IR (stp::applyPlan). Everything is checked before anything
/// is attached; errors name the operator. Returns std::nullopt after
/// printing the error.
std::optional<PlannedModel> loadPlannedModel(const ModelPlanOptions &options,
                                             llvm::StringRef planPath);

/// A plan file (docs/plan-format.md) as a table: its mesh, step time and
/// memory, then one row per operator with its partition in words and the
/// file's time and memory. For `stpar compile --plan`'s plan.txt.
void printPlanFile(llvm::raw_ostream &os, const llvm::json::Value &plan,
                   llvm::StringRef path);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_MODELPLAN_H
