//===- Passes.td - the search pass of the stpar pipeline ---*- tablegen -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_PIPELINES_PASSES_TD
#define STPAR_PIPELINES_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanPass : Pass<"stp-plan", "::mlir::ModuleOp"> {
  let summary = "Search a partition plan and write it into the module";
  let description = [{
    Runs the cost model and the partition search (docs/search.md) on the
    module and writes the chosen plan as attributes only: `stp.mesh` on the
    module (the cluster restricted to the planned devices and the plan's
    mesh), `stp.spec` on every planned op, the plan's summary as `stp.plan`
    on the module (predicted step time in seconds, per-device memory in
    bytes split into states, activations and transient buffers, the
    collectives and ring shifts) and each op's records as `stp.plan_ops`
    (docs/plan-format.md, "The plan in the IR"). `-stp-export-plan` writes
    them out as plan.json; `-stp-apply-plan` reads such a file into the
    same attributes.

    The function is converted into the cost model's operator graph
    (docs/cost-model.md, "The IR route"), the repeated layer is found and
    the search runs over meshes, ZeRO stages, micro-batches and per-operator
    partitions, the PrimePar temporal primitive among them. The global batch
    of one step is read from the module's `stp.dims` (the symbolic dims the
    ONNX importer bound): the entry named by `batch-dim`, else the one whose
    name contains "batch".

    Fails with a diagnostic on the module when the options do not fit the
    cluster (devices it cannot host, a mesh of another size, an unknown
    strategy), when no plan of the strategy applies (a loop does not divide
    over the devices) or when no plan fits the memory limit (with the
    smallest memory found and the shortfall in GiB). Approximations of the
    cost model are reported as remarks.

    Input: a module as `stpar import` (or `stpar-translate --import-onnx`)
    writes it, best after `-stp-normalize`. Output: the same module with the
    attributes above (see `-stp-apply-plan` for their form).
  }];
  let options = [
    Option<"cluster", "cluster", "std::string", /*default=*/"\"\"",
           "Cluster preset or JSON file (required)">,
    Option<"devices", "devices", "int64_t", /*default=*/"0",
           "Devices to plan for (default: the mesh's product, else the "
           "whole cluster)">,
    Option<"strategy", "strategy", "std::string", /*default=*/"\"search\"",
           "search, spatial, temporal, megatron, megatron-sp or dp">,
    Option<"zero", "zero", "int", /*default=*/"-1",
           "Force the ZeRO stage (0-3; default -1: searched, dp: 0)">,
    Option<"memoryLimit", "memory-limit", "double", /*default=*/"0",
           "Per-device memory limit in bytes (default: the device's HBM)">,
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Force the logical mesh shape, e.g. 2x4 (no pipeline stages)">,
    Option<"batchDim", "batch-dim", "std::string", /*default=*/"\"\"",
           "The stp.dims entry holding the global batch (default: the one "
           "whose name contains 'batch')">,
    Option<"exact", "exact", "bool", /*default=*/"false",
           "Exact dynamic programming (no caps)">,
    Option<"expertLoad", "expert-load", "std::string", /*default=*/"\"\"",
           "JSON file: the token distribution over the experts of every MoE "
           "layer (E counts or shares; default: uniform)">,
    Option<"pipeline", "pipeline", "bool", /*default=*/"true",
           "Search pipeline stages too">,
  ];
}

#endif // STPAR_PIPELINES_PASSES_TD
