//===- Plan.h - search a plan for a module, as -stp-plan does ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The search stage of the pipeline (docs/pipeline.md): an imported module
// (the ONNX importer's output, with the bound dims in `stp.dims`) becomes
// an operator graph (stpar/Analysis/CostModel.h), a search problem
// (stpar/Analysis/SearchBridge.h) and a plan (stpar/Search/Solver.h); the
// plan is written into the module as attributes only (`stp.mesh`,
// `stp.spec`, `stp.plan`, `stp.plan_ops`; docs/plan-format.md, "The plan
// in the IR") through stp::applyPlan. `-stp-plan` runs this; so does
// `stpar plan`/`stpar compile` through the same pass.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_PIPELINES_PLAN_H
#define STPAR_PIPELINES_PLAN_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Search/Solver.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stpar::pipelines {

/// How a plan is searched. The string and number fields are the options of
/// `-stp-plan` (and of `stp-compile-pipeline`); the streams are for C++
/// callers (the driver) only.
struct PlanOptions {
  /// Cluster preset name or JSON file (stpar/Cost/Cluster.h). Required.
  std::string cluster;
  /// Devices to plan for; 0: the product of `mesh` when given, else every
  /// device of the cluster.
  int64_t devices = 0;
  /// Per-device memory limit in bytes; 0: the cluster's HBM capacity.
  double memoryLimit = 0;
  /// search (default), spatial (no temporal primitive), temporal (only
  /// temporal-primitive candidates where any exist), megatron, megatron-sp
  /// (with sequence parallelism), dp (ZeRO-0 data parallelism).
  std::string strategy = "search";
  /// Forced ZeRO stage (0-3) of the data-parallel axes; -1: searched (dp:
  /// 0). Not with the megatron strategies (their baseline is ZeRO 0).
  int zeroStage = -1;
  /// Forced logical mesh shape, major first (no pipeline stages); empty:
  /// searched. For megatron, [a, b] is dp = a, tp = b; [n] is tp = n.
  std::vector<int64_t> mesh;
  /// The mesh as text when it did not parse (-stp-plan then reports it).
  std::string meshText;
  /// The symbolic dim holding the global batch of one step (a key of the
  /// module's `stp.dims`); empty: the one key that contains "batch".
  std::string batchDim;
  /// Exact dynamic programming (no caps on candidates, states and fronts).
  bool exact = false;
  /// A JSON file holding the token distribution over the experts of every
  /// MoE layer (an array of E counts or shares; stpar/Cost/MoE.h,
  /// parseExpertLoad), e.g. measured routing counts; empty: uniform.
  std::string expertLoad;
  /// Partial constraints, "NAME=SPEC" each: operator NAME (the plan table's
  /// name; a layer operator by its first layer's) keeps the partition SPEC
  /// in the table's words (`b{x0} d2{x1}`, `replicated`) and the search
  /// plans the rest (search, spatial and temporal strategies only).
  std::vector<std::string> fixed;
  /// `--explain NAME`: after the table, every candidate partition of that
  /// operator in the chosen plan (the rest kept) with its cost, and why the
  /// chosen one won (`table` must be set).
  std::string explain;
  /// At most this many mesh axes.
  unsigned maxMeshAxes = 3;
  /// Search pipeline stages too, and accept a Megatron-LM configuration
  /// with pp > 1. `stpar compile` turns this off for its search (only the
  /// cpu target emits pipeline stages) and on for a forced configuration.
  bool pipeline = true;
  /// The plan is for the emitted program (`stpar compile`, and `-stp-plan`
  /// without `pipeline`), which recomputes activations fully or not at
  /// all: no selective recomputation.
  std::optional<bool> forProgram;
  bool isForProgram() const { return forProgram.value_or(!pipeline); }
  /// Also cost the baselines (spatial-only search, Megatron with and
  /// without sequence parallelism, ZeRO-1/2/3) and print them after the
  /// table (`table` must be set).
  bool compare = false;
  /// Where the plan table goes (one row per operator, the step breakdown);
  /// null: no table.
  llvm::raw_ostream *table = nullptr;
  /// Where the conversion's and the bridge's approximation notes go, as
  /// `MODEL: note: ...`; null: as remarks on the module.
  llvm::raw_ostream *notes = nullptr;
  /// fp32 training (4-byte activations and weights, the fp32 peak) instead
  /// of mixed precision (`stpar cost --precision fp32`).
  bool fp32 = false;
  /// A progress line on stderr while searching (counting up on a terminal,
  /// one line per search otherwise).
  bool progress = false;
};

/// The strategy names accepted by PlanOptions::strategy, for help texts.
extern const char *const kStrategyHelp;

/// Parses "AxBxC" (or "N") into a mesh shape.
llvm::Expected<std::vector<int64_t>> parseMeshShape(llvm::StringRef text);

/// The symbolic dim holding the global batch among the module's bound dims
/// (`stp.dims`): `batchDim` when given (it must be bound), else the one bound
/// dim whose name contains "batch". Returns its name and value; fails when
/// there is no such dim or its value is below 1. A model without symbolic
/// dims (a static export) plans dim 0 of its first graph input as the batch:
/// the name is then empty and the value that dim's extent (1 when no graph
/// input has a dim).
llvm::Expected<std::pair<std::string, int64_t>>
findBatchDim(mlir::ModuleOp module, llvm::StringRef batchDim);

/// Checks `options` without a model: a known strategy, the cluster (loaded
/// into `cluster`), and that it can host the devices (whole nodes or part of
/// one) and that `mesh` multiplies to them. Returns the device count.
llvm::Expected<int64_t> checkPlanOptions(const PlanOptions &options,
                                         cost::Cluster &cluster);

/// Searches a plan for the one function with a body in `module` and writes
/// it into the module (stp::applyPlan; the verifier then checks every spec).
/// Errors: the checks of checkPlanOptions; no `stp.dims` entry for the batch;
/// dynamic shapes; "no plan fits" with the smallest memory found and the
/// shortfall in GiB; no plan of the strategy applies to the devices.
llvm::Error planModule(mlir::ModuleOp module, const PlanOptions &options);

/// The search options both plan routes start from: at most `maxMeshAxes`
/// mesh axes, the DP's caps unless `exact` (24 candidates per operator, 256
/// states, 3 points per front; docs/search.md), and with `progress` a
/// progress line on stderr (on a terminal it counts up and ends with a
/// newline; otherwise `searching: N configurations` once).
search::SearchOptions makeSearchOptions(unsigned maxMeshAxes, bool exact,
                                        bool progress);

/// "no plan fits: the smallest plan found needs X GiB per device, the
/// limit is Y GiB (short by Z GiB)".
std::string describeNoPlan(const search::SearchResult &result);

/// One row of the comparison with the baselines (`--compare`).
struct ComparisonRow {
  /// "stpar search", "spatial-only search", "megatron (best grid)", ...
  std::string name;
  /// "ok", "error" (`message` says why), "no plan fits" (memory) or "n/a"
  /// (no configuration applies, e.g. the batch does not divide).
  std::string status;
  std::string message;
  /// The configuration in the baselines' form (`pp=1 dp=2 tp=4 zero-2 m=1`).
  std::string configuration;
  /// Step time (seconds), relative to the first row's, memory per device
  /// (bytes); 0 unless status is "ok".
  double stepSeconds = 0, relative = 0, memoryBytes = 0;
};

/// The plan `bestPlan` (named `planName`: the searched plan, or the
/// strategy that forced it) first, then the baselines in the same
/// objective: spatial-only search, Megatron's grid with and without
/// sequence parallelism, ZeRO-1/2/3 data parallelism (docs/plan-format.md).
std::vector<ComparisonRow> compareBaselines(const search::Problem &problem,
                                            const cost::Cluster &cluster,
                                            const cost::EfficiencyModel &eff,
                                            const search::SearchOptions &opts,
                                            const search::Plan &bestPlan,
                                            llvm::StringRef planName);

/// The rows as the table prints them ("comparison (same cost model):").
void printComparisonRows(llvm::raw_ostream &os,
                         llvm::ArrayRef<ComparisonRow> rows);

/// The rows as plan.json's `compare` array.
llvm::json::Value toJSON(llvm::ArrayRef<ComparisonRow> rows);

/// compareBaselines, then printComparisonRows.
void printComparison(llvm::raw_ostream &os, const search::Problem &problem,
                     const cost::Cluster &cluster,
                     const cost::EfficiencyModel &eff,
                     const search::SearchOptions &opts,
                     const search::Plan &bestPlan,
                     llvm::StringRef planName = "stpar search");

/// A plan file (docs/plan-format.md) as a table: its mesh, step time and
/// memory, then one row per operator with its partition in words and the
/// file's time and memory. `path` names the plan in the heading.
void printPlanFile(llvm::raw_ostream &os, const llvm::json::Value &plan,
                   llvm::StringRef path);

/// An operator's partition in words from its plan-file entry's `spec`
/// (`b{x0} h{x1}`, `temporal(x0,x1: m=.. n=.. k=..)`, `replicated`); the
/// table's form.
std::string describeSpec(const llvm::json::Object *spec);

/// What changed from plan file `a` to plan file `b` (`stpar plan diff`,
/// docs/plan-format.md "plan diff"): the settings that differ (model,
/// cluster, devices, mesh, summary), the step time and per-device memory
/// (seconds, bytes; a, b, delta), the operators matched by name whose
/// partition differs (with their seconds-per-micro-batch delta) or that
/// only one plan has, and the collectives grouped by (operator, phase,
/// kind, mesh axes) whose bytes sent per device differ. Errors: a file
/// that is not a plan of schema version 1, or lacks `mesh`, `times`,
/// `memory` or `operators`.
llvm::Expected<llvm::json::Value> diffPlans(const llvm::json::Value &a,
                                            llvm::StringRef pathA,
                                            const llvm::json::Value &b,
                                            llvm::StringRef pathB);

/// The plan file `plan` (docs/plan-format.md) as one self-contained HTML
/// page (inline CSS and SVG, no script, no network): header with the
/// summary, the mesh over the cluster's nodes (`topology`), one training
/// step as a timeline and memory per device against capacity (`step`), the
/// `compare` rows, and every operator's tensors cut over the mesh, grouped
/// by layer with repeated layers folded. Missing keys leave their section
/// out or empty.
void writePlanHTML(llvm::raw_ostream &os, const llvm::json::Value &plan);

/// The diff of diffPlans as text for people.
void printPlanDiff(llvm::raw_ostream &os, const llvm::json::Value &diff);

} // namespace stpar::pipelines

#endif // STPAR_PIPELINES_PLAN_H
