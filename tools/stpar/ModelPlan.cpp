//===- ModelPlan.cpp - plan an ONNX model (stpar plan, compile) -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ModelPlan.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Analysis/SearchBridge.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"
#include "stpar/Search/Solver.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;
using stpar::tools::ModelPlanOptions;
using stpar::tools::PlannedModel;
using namespace stpar::tools;

static int fail(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
  return 1;
}

static const double kGiB = double(int64_t(1) << 30);

int stpar::tools::failNoPlan(const SearchResult &r) {
  return fail("no plan fits: the smallest plan found needs " +
              formatv("{0:f3}", r.smallestMemory / kGiB).str() +
              " GiB per device, the limit is " +
              formatv("{0:f3}", r.memoryLimit / kGiB).str() +
              " GiB (short by " +
              formatv("{0:f3}", (r.smallestMemory - r.memoryLimit) / kGiB)
                  .str() +
              " GiB)");
}

/// The baselines beside `bestPlan` (--compare).
void stpar::tools::printComparison(raw_ostream &outs, const Problem &problem,
                            const Cluster &cluster, const EfficiencyModel &eff,
                            const SearchOptions &opts, const Plan &bestPlan) {
  const double gib = kGiB;
  double best = bestPlan.cost.stepTime;
  outs << "comparison (same cost model):\n";
  outs << format("  %-28s %12s %10s %10s  %s\n", "plan", "step ms",
                   "t/t_stpar", "GiB", "configuration");
  auto row = [&](StringRef name, Expected<SearchResult> &r) {
    if (!r) {
      outs << format("  %-28s %12s  %s\n", name.str().c_str(), "error",
                     toString(r.takeError()).c_str());
      r = SearchResult(); // consumed
      return;
    }
    if (!r->best) {
      // No configuration applied at all (e.g. the batch does not divide
      // over the data-parallel ranks) vs. none fitting in memory.
      bool applies = r->configurations > 0 &&
                     std::isfinite(r->smallestMemory);
      outs << format("  %-28s %12s  %s\n", name.str().c_str(),
                     applies ? "no plan fits" : "n/a",
                     applies ? "(memory)"
                             : "(no configuration applies: a split does "
                               "not divide, e.g. the batch)");
      return;
    }
    const Plan &p = *r->best;
    outs << format("  %-28s %12.3f %10.3f %10.3f  %s\n", name.str().c_str(),
                     p.cost.stepTime * 1e3, p.cost.stepTime / best,
                     p.cost.getMemory() / gib, p.label.c_str());
  };
  outs << format("  %-28s %12.3f %10.3f %10.3f\n", "stpar search",
                   best * 1e3, 1.0, bestPlan.cost.getMemory() / gib);
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  spatialOpts.progress = nullptr;
  Expected<SearchResult> spatial = stpar::search::search(problem, cluster, eff, spatialOpts);
  row("spatial-only search", spatial);
  Expected<SearchResult> mega =
      searchMegatron(problem, cluster, eff, false, spatialOpts);
  row("megatron (best grid)", mega);
  Expected<SearchResult> megaSP =
      searchMegatron(problem, cluster, eff, true, spatialOpts);
  row("megatron + seq. parallel", megaSP);
  for (int z = 1; z <= 3; ++z) {
    Expected<SearchResult> zr = searchZeRO(problem, cluster, eff, z);
    row(("zero-" + Twine(z) + " data parallel").str(), zr);
    if (!zr)
      consumeError(zr.takeError());
  }
  for (Expected<SearchResult> *r : {&spatial, &mega, &megaSP})
    if (!*r)
      consumeError(r->takeError());
}

//===----------------------------------------------------------------------===//
// ONNX models
//===----------------------------------------------------------------------===//

namespace {
/// Per flattened operator: the cost of its partition (one micro-batch).
struct OpReport {
  OperatorCost cost;
  /// Seconds per micro-batch from the objective (with input re-layouts).
  double seconds = 0, bytes = 0;
  /// Local bytes of the output and of the first input (collectives).
  double outputBytes = 0, inputBytes = 0, paramBytes = 0;
  std::vector<GradientSync> syncs;
};
} // namespace

/// The operator of `problem`, partitioned, with micro-batch extents.
static Operator getPlannedOp(const FlatGraph &g, const Problem &problem,
                             const Plan &plan, unsigned i) {
  Operator op = g.ops[i];
  for (LoopDim &l : op.loops)
    if (l.name == problem.batchLoop)
      l.extent /= plan.config.microBatches;
  applyPartition(op, plan.partitions[i]);
  return op;
}

static Expected<std::vector<OpReport>>
reportOps(const FlatGraph &g, const Problem &problem, const Plan &plan,
          const Cluster &cluster, const EfficiencyModel &eff) {
  std::vector<OpReport> out;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    Operator op = getPlannedOp(g, problem, plan, i);
    Expected<OperatorCost> c = costOperator(op, plan.config.mesh, cluster, eff);
    if (!c)
      return c.takeError();
    OpReport r;
    r.cost = *c;
    r.seconds = i < plan.cost.opSeconds.size() ? plan.cost.opSeconds[i] : 0;
    r.bytes = i < plan.cost.opBytes.size() ? plan.cost.opBytes[i] : 0;
    for (const Operand &o : op.operands) {
      double b = getLocalElements(op, o, plan.config.mesh) * o.elementBytes;
      if (o.role == OperandRole::Output && r.outputBytes == 0)
        r.outputBytes = b;
      else if (o.role == OperandRole::Input && r.inputBytes == 0)
        r.inputBytes = b;
      else if (o.role == OperandRole::Parameter)
        r.paramBytes += b;
    }
    r.syncs = getGradientSyncs(op, plan.config.mesh, 0u);
    out.push_back(std::move(r));
  }
  return out;
}

static double getCompute(const OperatorCost &c) {
  return c.forward + c.backwardInput + c.backwardWeight;
}

/// The table: one row per planned operator (layers folded), a summary per
/// layer kind, then the step breakdown.
static void printONNXTable(raw_ostream &os, const Problem &problem,
                           const FlatGraph &g, const Plan &plan,
                           ArrayRef<OpReport> reports) {
  const Mesh &mesh = plan.config.mesh;
  os << "mesh";
  for (const MeshAxis &a : mesh.axes)
    os << " " << a.name << "=" << a.size;
  os << ", micro-batches " << plan.config.microBatches << ", ZeRO stage "
     << plan.config.zeroStage
     << (plan.config.recompute ? ", recomputation" : "") << "\n";
  os << "times per micro-batch in ms (layer rows: one layer), memory in MiB\n";
  os << format("  %-30s %-10s %-44s %9s %9s %9s %9s\n", "operator", "kind",
               "partition", "compute", "comm", "exposed", "memory");
  const double mib = double(1 << 20);
  struct Kind {
    double compute = 0, comm = 0, exposed = 0, bytes = 0;
    unsigned ops = 0;
  };
  std::vector<std::pair<std::string, Kind>> kinds;
  auto kindOf = [&](const std::string &k) -> Kind & {
    for (auto &e : kinds)
      if (e.first == k)
        return e.second;
    kinds.push_back({k, Kind()});
    return kinds.back().second;
  };
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const OpReport &r = reports[i];
    double compute = getCompute(r.cost);
    double comm = std::max(0.0, r.seconds - compute);
    Kind &k = kindOf(g.ops[i].layerKind.empty() ? "other" : g.ops[i].layerKind);
    k.compute += compute;
    k.comm += comm;
    k.exposed += comm;
    k.bytes += r.bytes;
    ++k.ops;
    if (g.layerOf[i] > 0)
      continue;
    std::string name = g.ops[i].name;
    if (g.layerOf[i] == 0) {
      name = problem.ops[g.original[i]].name;
      if (problem.layers > 1)
        name += " x" + std::to_string(problem.layers);
    }
    if (name.size() > 30)
      name = name.substr(0, 27) + "...";
    os << format("  %-30s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n",
                 name.c_str(), g.ops[i].layerKind.c_str(),
                 describePartition(g.ops[i], plan.partitions[i], mesh).c_str(),
                 compute * 1e3, comm * 1e3, comm * 1e3, r.bytes / mib);
  }
  os << "by layer kind (all layers, per micro-batch):\n";
  Kind total;
  for (auto &[name, k] : kinds) {
    os << format("  %-30s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n",
                 name.c_str(), "", (std::to_string(k.ops) + " operators").c_str(),
                 k.compute * 1e3, k.comm * 1e3, k.exposed * 1e3,
                 k.bytes / mib);
    total.compute += k.compute;
    total.comm += k.comm;
    total.exposed += k.exposed;
    total.bytes += k.bytes;
    total.ops += k.ops;
  }
  os << format("  %-30s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n", "total", "",
               (std::to_string(total.ops) + " operators").c_str(),
               total.compute * 1e3, total.comm * 1e3, total.exposed * 1e3,
               total.bytes / mib);
  printPlanTotals(os, plan.cost);
}

/// The affine slice rules of the temporal primitive as text (PrimePar).
static const char *const kTemporalRules[3] = {
    "(r, r + c + t, c)", "(r, r + c - 1, c + t)",
    "(r + t, r + c - 1 + d, c - 1 + d)"};

static json::Object specJSON(const Operator &op, const Partition &part,
                             const Mesh &mesh) {
  json::Array loops;
  for (auto [d, l] : llvm::enumerate(op.loops)) {
    json::Array axes;
    for (unsigned a : part.loopAxes[d])
      axes.push_back(mesh.axes[a].name);
    loops.push_back(json::Object{{"name", l.name},
                                 {"extent", l.extent},
                                 {"reduction", l.kind == LoopKind::Reduction},
                                 {"axes", std::move(axes)}});
  }
  json::Object spec{{"loops", std::move(loops)}};
  if (part.temporal) {
    const TemporalPrimitive &t = *part.temporal;
    spec["temporal"] = json::Object{
        {"row_axis", mesh.axes[t.rowAxis].name},
        {"col_axis", mesh.axes[t.colAxis].name},
        {"m", op.loops[t.mDim].name},
        {"n", op.loops[t.nDim].name},
        {"k", op.loops[t.kDim].name},
        {"steps", mesh.axes[t.rowAxis].size}};
  } else {
    spec["temporal"] = nullptr;
  }
  return spec;
}

static json::Value planJSON(StringRef model, const Cluster &cluster,
                            const Problem &problem, const FlatGraph &g,
                            const stpar::analysis::BridgedProblem &bridged,
                            const stpar::analysis::OperatorGraph &graph,
                            const stpar::stp::OperatorNames &irNames,
                            const SearchResult &result,
                            ArrayRef<OpReport> reports) {
  const Plan &plan = *result.best;
  const Mesh &mesh = plan.config.mesh;
  json::Array axes;
  for (const MeshAxis &a : mesh.axes)
    axes.push_back(json::Object{{"name", a.name}, {"size", a.size}});
  json::Array ops, collectives, transfers, syncs;
  double phase[3] = {0, 0, 0}, comm[2] = {0, 0};
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Operator &op = g.ops[i];
    const Partition &part = plan.partitions[i];
    const OpReport &r = reports[i];
    const auto &gop = graph.ops[bridged.graphOpOfFlat[i]];
    json::Object spec = specJSON(op, part, mesh);
    json::Object phases;
    const char *names[3] = {"forward", "input_grad", "weight_grad"};
    double secs[3] = {r.cost.forward, r.cost.backwardInput,
                      r.cost.backwardWeight};
    for (unsigned k = 0; k < 3; ++k) {
      json::Object ph{{"seconds", secs[k]}};
      if (part.temporal)
        ph["slice_rule"] = kTemporalRules[k];
      phases[names[k]] = std::move(ph);
      phase[k] += secs[k];
    }
    comm[0] += r.cost.forwardComm;
    comm[1] += r.cost.backwardComm;
    // The IR op by its stable name (never its position).
    std::string irOp;
    if (gop.sourceOp >= 0 && size_t(gop.sourceOp) < irNames.getOps().size())
      irOp = irNames.getName(irNames.getOps()[gop.sourceOp]).str();
    ops.push_back(json::Object{
        {"name", op.name},
        {"ir_op", irOp},
        {"kind", getOpKindName(op.kind)},
        {"layer_kind", op.layerKind},
        {"layer", g.layerOf[i]},
        {"section", getSectionName(g.sections[i])},
        {"spec", std::move(spec)},
        {"phases", std::move(phases)},
        {"seconds_per_micro_batch", r.seconds},
        {"compute_seconds", getCompute(r.cost)},
        {"comm_seconds", std::max(0.0, r.seconds - getCompute(r.cost))},
        {"memory_bytes", r.bytes},
        {"transient_bytes", r.cost.transientBytes}});
    if (r.cost.forwardComm > 0)
      collectives.push_back(json::Object{{"op", op.name},
                                         {"phase", "forward"},
                                         {"kind", "all-reduce"},
                                         {"bytes", r.outputBytes},
                                         {"seconds", r.cost.forwardComm}});
    if (r.cost.backwardComm > 0)
      collectives.push_back(json::Object{{"op", op.name},
                                         {"phase", "input_grad"},
                                         {"kind", "all-reduce"},
                                         {"bytes", r.inputBytes},
                                         {"seconds", r.cost.backwardComm}});
    if (part.temporal) {
      int64_t q = mesh.axes[part.temporal->rowAxis].size;
      transfers.push_back(json::Object{
          {"op", op.name},
          {"kind", "ring-shift"},
          {"steps_per_phase", q},
          {"bytes_per_step", (r.inputBytes + r.paramBytes) / double(q)},
          {"overlapped", true}});
    }
    for (const GradientSync &s : r.syncs) {
      json::Array sa;
      for (unsigned a : s.axes)
        sa.push_back(mesh.axes[a].name);
      syncs.push_back(json::Object{{"op", op.name},
                                   {"parameter", s.parameter},
                                   {"bytes", s.bytes},
                                   {"axes", std::move(sa)}});
    }
  }
  json::Array notes;
  for (const std::string &n : bridged.notes)
    notes.push_back(n);
  const PlanCost &c = plan.cost;
  return json::Object{
      {"format", "stpar-plan"},
      {"version", 1},
      {"model", model},
      {"cluster", cluster.name},
      {"devices", problem.devices},
      {"mesh",
       json::Object{{"axes", std::move(axes)},
                    {"pipeline_stages", plan.config.getStages()},
                    {"micro_batches", plan.config.microBatches},
                    {"zero_stage", plan.config.zeroStage},
                    {"recompute", plan.config.recompute}}},
      {"search", json::Object{{"configurations", int64_t(result.configurations)},
                              {"exact", result.stats.isExact()},
                              {"layers", problem.layers}}},
      {"operators", std::move(ops)},
      {"collectives", std::move(collectives)},
      {"transfers", std::move(transfers)},
      {"gradient_sync", std::move(syncs)},
      {"memory",
       json::Object{{"states", c.stateBytes},
                    {"activations", c.activationBytes},
                    {"transient", c.transientBytes},
                    {"total", c.getMemory()},
                    {"limit", result.memoryLimit}}},
      {"times",
       json::Object{{"step", c.stepTime},
                    {"pipeline", c.pipeline},
                    {"bubble", c.bubble},
                    {"relayout", c.relayout},
                    {"exposed_sync", c.exposedSync},
                    {"optimizer", c.optimizer},
                    {"phases_per_micro_batch",
                     json::Object{{"forward", phase[0]},
                                  {"input_grad", phase[1]},
                                  {"weight_grad", phase[2]},
                                  {"forward_comm", comm[0]},
                                  {"backward_comm", comm[1]}}}}},
      {"notes", std::move(notes)}};
}

/// Writes `plan` into the model's IR (applyPlan), verifies it and fills
/// `out` (devices, attached, planJSON read back from the IR).
static bool attachPlan(stpar::tools::AnalyzedModel &model,
                       const json::Value &plan, const Cluster &cluster,
                       const stpar::stp::ApplyPlanOptions &options,
                       PlannedModel &out) {
  mlir::ModuleOp module = *model.module;
  if (Error error = stpar::stp::applyPlan(module, plan, cluster, options)) {
    fail(toString(std::move(error)));
    return false;
  }
  // The dialect's verifier checks the specs against the mesh with the op's
  // location.
  if (mlir::failed(mlir::verify(module))) {
    fail((options.source.empty() ? "internal: the planned IR"
                                 : options.source + ": the plan") +
         " does not fit the model (see the errors above)");
    return false;
  }
  Expected<json::Value> exported = stpar::stp::exportPlan(module);
  if (!exported) {
    fail(toString(exported.takeError()));
    return false;
  }
  out.planJSON = std::move(*exported);
  out.attached = 0;
  module.walk([&](mlir::Operation *op) {
    if (op->hasAttr(stpar::stp::STPDialect::kSpecAttrName))
      ++out.attached;
  });
  if (const json::Object *root = out.planJSON.getAsObject())
    out.devices = root->getInteger("devices").value_or(0);
  return true;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

const char *const stpar::tools::kStrategyHelp =
    "How the plan is chosen: search (default), spatial (no temporal "
    "primitive), temporal (temporal primitive wherever it applies), "
    "megatron, megatron-sp (with sequence parallelism), dp (data "
    "parallelism)";

Expected<std::vector<int64_t>> stpar::tools::parseMeshShape(StringRef text) {
  std::vector<int64_t> shape;
  SmallVector<StringRef> parts;
  text.split(parts, 'x');
  for (StringRef p : parts) {
    int64_t v = 0;
    if (p.getAsInteger(10, v) || v < 1)
      return createStringError(inconvertibleErrorCode(),
                               "bad mesh shape '" + text +
                                   "' (expected sizes joined by 'x', e.g. "
                                   "2x4)");
    shape.push_back(v);
  }
  return shape;
}

SearchOptions stpar::tools::makeSearchOptions(unsigned maxMeshAxes,
                                              bool exact, bool progress) {
  SearchOptions opts;
  opts.maxMeshAxes = maxMeshAxes;
  if (!exact) {
    opts.solver.maxCandidates = 24;
    opts.solver.maxStates = 256;
    opts.solver.maxFront = 3;
  }
  if (progress && sys::Process::StandardErrIsDisplayed())
    opts.progress = [](size_t done, size_t total) {
      errs() << "\rsearching: " << done << "/" << total << " configurations";
      if (done == total)
        errs() << "\n";
    };
  return opts;
}

namespace {
/// Common front of planModel and loadPlannedModel: cluster, devices,
/// import.
struct Front {
  Cluster cluster;
  int64_t devices = 0;
  std::optional<stpar::tools::AnalyzedModel> model;
};
} // namespace

static std::optional<Front> openModel(const ModelPlanOptions &o) {
  if (o.cluster.empty()) {
    fail("--cluster is required with a model");
    return std::nullopt;
  }
  Expected<Cluster> cluster = loadCluster(o.cluster);
  if (!cluster) {
    fail(toString(cluster.takeError()));
    return std::nullopt;
  }
  Front f;
  f.cluster = std::move(*cluster);
  int64_t meshDevices = 1;
  for (int64_t s : o.mesh)
    meshDevices *= s;
  // Devices: --devices, else the --mesh product, else the whole cluster.
  f.devices = o.devices > 0    ? o.devices
              : !o.mesh.empty() ? meshDevices
                                : f.cluster.getNumDevices();
  if (f.devices > f.cluster.getNumDevices()) {
    fail("the cluster '" + f.cluster.name + "' has " +
         Twine(f.cluster.getNumDevices()) + " devices; it cannot host " +
         Twine(f.devices));
    return std::nullopt;
  }
  if (f.devices > f.cluster.devicesPerNode &&
      f.devices % f.cluster.devicesPerNode) {
    fail("the cluster '" + f.cluster.name + "' has " +
         Twine(f.cluster.devicesPerNode) +
         " devices per node; it cannot host " + Twine(f.devices) +
         " devices as whole nodes or part of one node");
    return std::nullopt;
  }
  if (!o.mesh.empty()) {
    int64_t product = 1;
    for (int64_t s : o.mesh)
      product *= s;
    if (product != f.devices) {
      fail("--mesh has " + Twine(product) + " devices but the plan is for " +
           Twine(f.devices) + " (--devices)");
      return std::nullopt;
    }
  }
  f.model = stpar::tools::importForAnalysis(o.model, o.dims, o.batchDim,
                                            stpar::analysis::ConversionOptions());
  if (!f.model)
    return std::nullopt;
  return f;
}

std::optional<PlannedModel>
stpar::tools::planModel(const ModelPlanOptions &o, raw_ostream &table) {
  static const char *const known[] = {"search",   "spatial",     "temporal",
                                      "megatron", "megatron-sp", "dp"};
  if (!is_contained(known, o.strategy)) {
    fail("unknown --strategy '" + o.strategy + "' (" + kStrategyHelp + ")");
    return std::nullopt;
  }
  std::optional<Front> front = openModel(o);
  if (!front)
    return std::nullopt;
  Cluster &cluster = front->cluster;
  int64_t devices = front->devices;
  AnalyzedModel &model = *front->model;
  stpar::analysis::OperatorGraph *graph = &model.graph;
  Expected<stpar::analysis::BridgedProblem> bridged =
      stpar::analysis::buildSearchProblem(*graph, sys::path::stem(o.model),
                                          o.cluster, devices);
  if (!bridged) {
    fail(o.model + ": " + toString(bridged.takeError()));
    return std::nullopt;
  }
  Problem &problem = bridged->problem;
  if (o.memoryLimit > 0)
    problem.memoryLimit = o.memoryLimit;
  for (const std::string &note : graph->notes)
    errs() << o.model << ": note: " << note << "\n";
  for (const std::string &note : bridged->notes)
    errs() << o.model << ": note: " << note << "\n";

  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster.device.bf16 <= 0)
    eff.dtype = DType::FP16;
  SearchOptions opts = makeSearchOptions(o.maxMeshAxes, o.exact, o.progress);
  opts.solver.space.temporal = o.strategy != "spatial";
  opts.solver.space.onlyTemporal = o.strategy == "temporal";
  if (!o.mesh.empty())
    opts.meshShapes = {o.mesh};
  if (o.noPipeline)
    opts.pipeline = false;
  Expected<SearchResult> result =
      o.strategy == "megatron" || o.strategy == "megatron-sp"
          ? searchMegatron(problem, cluster, eff, o.strategy == "megatron-sp",
                           opts)
      : o.strategy == "dp" ? searchZeRO(problem, cluster, eff, 0, o.mesh)
                           : stpar::search::search(problem, cluster, eff, opts);
  if (!result) {
    fail(toString(result.takeError()));
    return std::nullopt;
  }
  if (!result->best) {
    if (result->configurations == 0 ||
        !std::isfinite(result->smallestMemory))
      fail("no '" + o.strategy + "' plan applies to " + Twine(devices) +
           " devices" + (o.mesh.empty() ? "" : " on the given --mesh") +
           " (e.g. the batch " + Twine(model.batch) +
           " or another loop does not divide over the devices)");
    else
      failNoPlan(*result);
    return std::nullopt;
  }
  const Plan &plan = *result->best;
  FlatGraph g = flatten(problem);
  if (g.ops.size() != bridged->graphOpOfFlat.size()) {
    fail("internal: flattened operators and graph operators differ");
    return std::nullopt;
  }
  Expected<std::vector<OpReport>> reports =
      reportOps(g, problem, plan, cluster, eff);
  if (!reports) {
    fail(toString(reports.takeError()));
    return std::nullopt;
  }

  table << "model " << o.model << " (" << graph->ops.size() << " operators, "
        << problem.ops.size() << " planned"
        << (problem.layers > 1 ||
                    llvm::is_contained(problem.sections, Section::Layer)
                ? " with a layer block x" + std::to_string(problem.layers)
                : std::string())
        << ") on " << devices << " devices of " << cluster.name << "\n";
  table << "batch " << model.batch << " sequences per step; ";
  if (o.strategy == "search" || o.strategy == "spatial" ||
      o.strategy == "temporal")
    table << "searched " << result->configurations << " configurations"
          << (result->stats.isExact() ? " (exact DP)" : " (capped DP)");
  else
    table << "strategy " << o.strategy << " (" << plan.label << ")";
  if (o.strategy != "search")
    table << ", --strategy " << o.strategy;
  table << "\n";
  printONNXTable(table, problem, g, plan, *reports);

  PlannedModel out;
  // The plan goes into the IR as attributes; plan.json is read back from
  // them (stpar/Dialect/STP/Transforms/PlanAttributes.h).
  stpar::stp::OperatorNames irNames(model.func.getBody().front());
  json::Value searched = planJSON(o.model, cluster, problem, g, *bridged,
                                  *graph, irNames, *result, *reports);
  if (!attachPlan(model, searched, cluster, stpar::stp::ApplyPlanOptions(),
                  out))
    return std::nullopt;
  if (o.compare)
    printComparison(table, problem, cluster, eff, opts, plan);
  out.model = std::move(model);
  return out;
}

std::optional<PlannedModel>
stpar::tools::loadPlannedModel(const ModelPlanOptions &o, StringRef planPath) {
  auto bad = [&](const Twine &message) -> std::optional<PlannedModel> {
    fail(planPath + ": " + message);
    return std::nullopt;
  };
  Expected<json::Value> parsed = stpar::stp::readPlanFile(planPath);
  if (!parsed)
    return bad(toString(parsed.takeError()));
  Expected<int64_t> planDevices =
      stpar::stp::getPlanDevices(*parsed, o.devices);
  if (!planDevices)
    return bad(toString(planDevices.takeError()));
  const json::Object *root = parsed->getAsObject();
  ModelPlanOptions withDevices = o;
  withDevices.devices = *planDevices;
  withDevices.mesh.clear();
  // The rest (mesh, operators, specs) is checked by applyPlan.
  if (std::optional<StringRef> c = root->getString("cluster"))
    if (!o.cluster.empty() && *c != o.cluster)
      errs() << planPath << ": warning: the plan was made for cluster '" << *c
             << "', planning for '" << o.cluster << "'\n";
  std::optional<Front> front = openModel(withDevices);
  if (!front)
    return std::nullopt;
  AnalyzedModel &model = *front->model;
  stpar::stp::ApplyPlanOptions options;
  options.devices = *planDevices;
  options.source = planPath.str();
  PlannedModel out;
  if (!attachPlan(model, *parsed, front->cluster, options, out))
    return std::nullopt;
  out.model = std::move(model);
  return out;
}

void stpar::tools::printPlanFile(raw_ostream &os, const json::Value &plan,
                                 StringRef path) {
  const json::Object *root = plan.getAsObject();
  if (!root)
    return;
  os << "plan " << path << " (read back; times and memory as the file "
     << "states them)\n";
  if (const json::Object *mesh = root->getObject("mesh")) {
    os << "mesh";
    if (const json::Array *axes = mesh->getArray("axes"))
      for (const json::Value &a : *axes)
        if (const json::Object *ao = a.getAsObject())
          os << " " << ao->getString("name").value_or("?") << "="
             << ao->getInteger("size").value_or(0);
    os << ", micro-batches " << mesh->getInteger("micro_batches").value_or(1)
       << ", ZeRO stage " << mesh->getInteger("zero_stage").value_or(0)
       << "\n";
  }
  if (const json::Object *times = root->getObject("times"))
    os << format("step time %.3f ms", times->getNumber("step").value_or(0) * 1e3);
  if (const json::Object *memory = root->getObject("memory"))
    os << format(", memory per device %.3f GiB",
                 memory->getNumber("total").value_or(0) / kGiB);
  os << "\n";
  os << format("  %-40s %-10s %-44s %12s %10s\n", "operator", "kind",
               "partition", "ms/micro-b", "MiB");
  const json::Array *ops = root->getArray("operators");
  if (!ops)
    return;
  for (const json::Value &v : *ops) {
    const json::Object *op = v.getAsObject();
    if (!op)
      continue;
    std::string words;
    const json::Object *spec = op->getObject("spec");
    if (const json::Array *loops = spec ? spec->getArray("loops") : nullptr)
      for (const json::Value &lv : *loops) {
        const json::Object *l = lv.getAsObject();
        const json::Array *axes = l ? l->getArray("axes") : nullptr;
        if (!axes || axes->empty())
          continue;
        words += (words.empty() ? "" : " ") +
                 l->getString("name").value_or("?").str() + "{";
        for (auto [i, a] : llvm::enumerate(*axes))
          words += (i ? "," : "") + a.getAsString().value_or("?").str();
        words += "}";
      }
    if (const json::Object *t = spec ? spec->getObject("temporal") : nullptr)
      words += (words.empty() ? "" : " ") + ("temporal(" +
               t->getString("row_axis").value_or("?") + "," +
               t->getString("col_axis").value_or("?") + ": m=" +
               t->getString("m").value_or("?") + " n=" +
               t->getString("n").value_or("?") + " k=" +
               t->getString("k").value_or("?") + ")").str();
    if (words.empty())
      words = "replicated";
    std::string name = op->getString("name").value_or("?").str();
    os << format("  %-40s %-10s %-44s %12.4f %10.3f\n", name.c_str(),
                 op->getString("layer_kind").value_or("").str().c_str(),
                 words.c_str(),
                 op->getNumber("seconds_per_micro_batch").value_or(0) * 1e3,
                 op->getNumber("memory_bytes").value_or(0) / (1 << 20));
  }
}
