//===- PlanAttributes.h - partition plans as IR attributes ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A partition plan lives in the IR (docs/plan-format.md, "The plan in the
// IR"):
//   - `stp.mesh = #stp.mesh<...>` on the module: the cluster (restricted to
//     the plan's devices) and the logical mesh;
//   - `stp.spec = #stp.spec<...>` on each planned op;
//   - `stp.plan = {...}` on the module: the plan's summary (every top-level
//     field of plan.json except "operators": times, memory, collectives,
//     gradient sync, search statistics), as a dictionary;
//   - `stp.plan_ops = [{...}, ...]` on each planned op: its records of
//     plan.json's "operators" (one, or three for `stp.attention`) without the
//     first record's "spec", which is the op's `stp.spec`.
// applyPlan writes them from a plan.json value, exportPlan reads them back;
// exportPlan(applyPlan(json)) == json. Operators are found by their stable
// name (stpar/Dialect/STP/IR/OperatorNames.h, the plan's "ir_op"), never by
// position.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_PLANATTRIBUTES_H
#define STPAR_DIALECT_STP_TRANSFORMS_PLANATTRIBUTES_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace stpar::stp {

/// `cluster` restricted to `devices` devices as an attribute; fails when the
/// devices are neither whole nodes nor part of one node.
mlir::FailureOr<ClusterAttr> getClusterAttr(mlir::MLIRContext &context,
                                            const cost::Cluster &cluster,
                                            int64_t devices);

/// The function a plan applies to: `@main`, else the module's only function
/// with a body; null when there is none or several.
mlir::func::FuncOp getPlannedFunction(mlir::ModuleOp module);

/// The mesh axes -stp-partition puts on its shard.grid, in order: every
/// axis but a `pp` of 1 (docs/spmd-ir.md). A grid axis index is a position
/// in this list.
llvm::SmallVector<AxisAttr> getGridAxes(MeshAttr mesh);

/// The pipeline stages of `mesh`: the size of its `pp` axis, 1 without one.
int64_t getPipelineStages(MeshAttr mesh);

/// The mesh entry of the module's plan summary (`stp.plan`'s "mesh":
/// pipeline_stages, micro_batches, interleave, zero_stage, recompute,
/// schedule, ...; docs/plan-format.md); null without a plan.
mlir::DictionaryAttr getPlanMesh(mlir::ModuleOp module);

/// A plan file's "spec" of `spec` (loops with name, extent, reduction,
/// axes[, padded]; temporal with row_axis, col_axis, m, n, k, steps, or
/// null).
llvm::json::Value getSpecJSON(PartitionSpecAttr spec);

/// JSON <-> attributes: null <-> unit, bool <-> BoolAttr, integer <->
/// i64 IntegerAttr, other numbers <-> f64 FloatAttr, string, array <->
/// ArrayAttr, object <-> DictionaryAttr. Exact for every value
/// llvm::json prints (doubles keep all 17 digits).
mlir::Attribute convertJSONToAttr(mlir::MLIRContext *context,
                                  const llvm::json::Value &value);
llvm::json::Value convertAttrToJSON(mlir::Attribute attr);

/// Reads and parses the plan file at `path`. Errors: "cannot read: ..."
/// or "not JSON: ..." (without the path).
llvm::Expected<llvm::json::Value> readPlanFile(llvm::StringRef path);

/// Checks that `plan` is a plan file (format "stpar-plan", version 1) for a
/// positive number of devices, equal to `expected` unless that is 0; returns
/// the plan's device count. Messages as applyPlan's (without the prefix).
llvm::Expected<int64_t> getPlanDevices(const llvm::json::Value &plan,
                                       int64_t expected);

struct ApplyPlanOptions {
  /// The devices the caller expects (0: the plan's).
  int64_t devices = 0;
  /// Prefix of every message (e.g. the plan file's path).
  std::string source;
};

/// Checks `plan` (a plan.json value, docs/plan-format.md) against the
/// module's function and writes it as attributes (see the file comment).
/// Everything is checked before anything is written; any earlier plan's
/// attributes are replaced. Errors name the operator: "SOURCE: operator I
/// ('NAME'): ...". The op-level checks of the `#stp.spec` verifier are
/// emitted as diagnostics on the op. `cluster` is the cluster of the
/// plan's devices (loaded by the caller).
llvm::Error applyPlan(mlir::ModuleOp module, const llvm::json::Value &plan,
                      const cost::Cluster &cluster,
                      const ApplyPlanOptions &options);

/// The plan of the module's attributes as plan.json (the inverse of
/// applyPlan). Ops with `stp.spec` but no `stp.plan_ops` (hand-written IR)
/// get a record with "name", "ir_op" and "spec". Fails when the module has
/// no `stp.mesh`.
llvm::Expected<llvm::json::Value> exportPlan(mlir::ModuleOp module);

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_TRANSFORMS_PLANATTRIBUTES_H
