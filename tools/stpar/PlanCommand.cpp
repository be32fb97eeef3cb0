//===- PlanCommand.cpp - `stpar plan` ---------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar plan --problem FILE [--devices N] [--memory-limit BYTES]
// [--compare] [--spatial-only] [--exact]`: solves a partition-search
// problem in the text format of docs/search.md and prints the chosen
// partition per operator, the step time and memory; with --compare the
// Megatron grid (with and without sequence parallelism), ZeRO-1/2/3 data
// parallelism and spatial-only search beside it.
//
// `stpar plan MODEL.onnx --cluster C --dim NAME=VALUE ... [--devices N]
// [-o plan.json] [--emit-mlir out.mlir]` imports the model, converts it
// into an operator graph (stpar/Analysis/CostModel.h), bridges that into a
// search problem (stpar/Analysis/SearchBridge.h), searches, and writes the
// plan three ways: a table on stdout, a JSON file (docs/plan-format.md) and
// the IR with `stp.mesh` on the module and `stp.spec` on every planned op.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"
#include "ModelInput.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Analysis/SearchBridge.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Search/Solver.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

static cl::SubCommand planCmd("plan", "Search the partition plan of a problem");
static cl::opt<std::string> planProblem("problem", cl::sub(planCmd),
                                        cl::desc("Problem file (docs/search.md)"));
static cl::opt<std::string> planInput(cl::Positional, cl::Optional,
                                      cl::desc("[<model.onnx>]"),
                                      cl::sub(planCmd));
static cl::list<std::string>
    planDims("dim", cl::sub(planCmd), cl::value_desc("NAME=VALUE"),
             cl::desc("ONNX models: bind a symbolic dim; the batch dim's "
                      "value is the global batch of one step"));
static cl::opt<std::string> planBatchDim(
    "batch-dim", cl::sub(planCmd), cl::value_desc("NAME"),
    cl::desc("ONNX models: the symbolic batch dim (default: the one --dim "
             "whose name contains 'batch')"));
static cl::opt<std::string> planOutput("o", cl::sub(planCmd),
                                       cl::value_desc("plan.json"),
                                       cl::desc("ONNX models: write the plan "
                                                "as JSON (docs/plan-format.md)"));
static cl::opt<std::string>
    planEmitMLIR("emit-mlir", cl::sub(planCmd), cl::value_desc("out.mlir"),
                 cl::desc("ONNX models: write the IR with stp.mesh and "
                          "stp.spec attributes"));
static cl::opt<std::string>
    planCluster("cluster", cl::sub(planCmd),
                cl::desc("Cluster preset or JSON file (default: the "
                         "problem's)"));
static cl::opt<int64_t> planDevices("devices", cl::sub(planCmd), cl::init(0),
                                    cl::desc("Devices (default: the problem's)"));
static cl::opt<double>
    planMemoryLimit("memory-limit", cl::sub(planCmd), cl::init(0),
                    cl::desc("Per-device memory limit in bytes"));
static cl::opt<bool> planCompare("compare", cl::sub(planCmd),
                                 cl::desc("Print the baselines too"));
static cl::opt<bool> planSpatialOnly("spatial-only", cl::sub(planCmd),
                                     cl::desc("Switch the temporal primitive "
                                              "off"));
static cl::opt<bool> planExact("exact", cl::sub(planCmd),
                               cl::desc("No caps on candidates, states and "
                                        "fronts (exact DP)"));
static cl::opt<unsigned> planMaxAxes("max-mesh-axes", cl::sub(planCmd),
                                     cl::init(3),
                                     cl::desc("Most logical mesh axes"));

static int fail(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
  return 1;
}

static SearchOptions makeSearchOptions() {
  SearchOptions opts;
  opts.maxMeshAxes = planMaxAxes;
  opts.solver.space.temporal = !planSpatialOnly;
  if (!planExact) {
    opts.solver.maxCandidates = 24;
    opts.solver.maxStates = 256;
    opts.solver.maxFront = 3;
  }
  bool terminal = sys::Process::StandardErrIsDisplayed();
  if (terminal)
    opts.progress = [](size_t done, size_t total) {
      errs() << "\rsearching: " << done << "/" << total << " configurations";
      if (done == total)
        errs() << "\n";
    };
  return opts;
}

static const double kGiB = double(int64_t(1) << 30);

static int failNoPlan(const SearchResult &r) {
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
static void printComparison(const Problem &problem, const Cluster &cluster,
                            const EfficiencyModel &eff,
                            const SearchOptions &opts, const Plan &bestPlan) {
  const double gib = kGiB;
  double best = bestPlan.cost.stepTime;
  outs() << "comparison (same cost model):\n";
  outs() << format("  %-28s %12s %10s %10s  %s\n", "plan", "step ms",
                   "t/t_stpar", "GiB", "configuration");
  auto row = [&](StringRef name, Expected<SearchResult> &r) {
    if (!r || !r->best) {
      outs() << format("  %-28s %12s\n", name.str().c_str(), "no plan fits");
      return;
    }
    const Plan &p = *r->best;
    outs() << format("  %-28s %12.3f %10.3f %10.3f  %s\n", name.str().c_str(),
                     p.cost.stepTime * 1e3, p.cost.stepTime / best,
                     p.cost.getMemory() / gib, p.label.c_str());
  };
  outs() << format("  %-28s %12.3f %10.3f %10.3f\n", "stpar search",
                   best * 1e3, 1.0, bestPlan.cost.getMemory() / gib);
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  spatialOpts.progress = nullptr;
  Expected<SearchResult> spatial = search(problem, cluster, eff, spatialOpts);
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

static int runONNX();

static int runPlan() {
  if (planInput.empty() == planProblem.empty())
    return fail("give either MODEL.onnx or --problem FILE");
  if (!planInput.empty())
    return runONNX();
  if (!planDims.empty() || !planOutput.empty() || !planEmitMLIR.empty())
    return fail("--dim, -o and --emit-mlir apply to ONNX models only");
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFileOrSTDIN(planProblem);
  if (!buffer)
    return fail("cannot read '" + planProblem + "'");
  Expected<Problem> problem =
      parseProblem((*buffer)->getBuffer(), planProblem);
  if (!problem)
    return fail(toString(problem.takeError()));
  if (!planCluster.empty())
    problem->cluster = planCluster;
  if (planDevices > 0)
    problem->devices = planDevices;
  if (planMemoryLimit > 0)
    problem->memoryLimit = planMemoryLimit;
  if (problem->cluster.empty())
    return fail("no cluster: give --cluster or a 'cluster' line");
  Expected<Cluster> cluster = loadCluster(problem->cluster);
  if (!cluster)
    return fail(toString(cluster.takeError()));
  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster->device.bf16 <= 0)
    eff.dtype = DType::FP16;
  SearchOptions opts = makeSearchOptions();
  auto start = std::chrono::steady_clock::now();
  Expected<SearchResult> result = search(*problem, *cluster, eff, opts);
  if (!result)
    return fail(toString(result.takeError()));
  double searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (!result->best)
    return failNoPlan(*result);
  outs() << "problem " << problem->name << " on " << problem->devices
         << " devices of " << cluster->name << "\n";
  outs() << "searched " << result->configurations << " configurations"
         << (result->stats.isExact() ? " (exact DP)" : " (capped DP)")
         << "\n";
  (void)searchSeconds;
  printPlan(outs(), *problem, *result->best);
  if (!planCompare)
    return 0;
  printComparison(*problem, *cluster, eff, opts, *result->best);
  return 0;
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
    ops.push_back(json::Object{
        {"name", op.name},
        {"ir_op", gop.op.name},
        {"ir_position", gop.sourceOp},
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

/// `cluster` restricted to `devices` devices, as an attribute; fails when
/// they are not whole nodes or part of one node.
static FailureOr<stpar::stp::ClusterAttr>
getClusterAttr(mlir::MLIRContext &ctx, const Cluster &c, int64_t devices) {
  using namespace stpar::stp;
  int64_t perNode = std::min(devices, c.devicesPerNode);
  if (devices % perNode)
    return failure();
  auto opt = [](double v) -> std::optional<F64Value> {
    if (v <= 0)
      return std::nullopt;
    return F64Value(v);
  };
  DeviceAttr dev = DeviceAttr::get(&ctx, F64Value(c.device.fp32),
                                   opt(c.device.tf32), opt(c.device.fp16),
                                   opt(c.device.bf16), c.device.hbmCapacity,
                                   F64Value(c.device.hbmBandwidth));
  LinkAttr intra = LinkAttr::get(&ctx, F64Value(c.intraNode.bandwidth),
                                 F64Value(c.intraNode.latency));
  LinkAttr inter = LinkAttr::get(&ctx, F64Value(c.interNode.bandwidth),
                                 F64Value(c.interNode.latency));
  return ClusterAttr::get(&ctx, c.name, devices / perNode, perNode, dev, intra,
                          inter);
}

/// Writes stp.mesh on the module and stp.spec on every planned op.
static unsigned attachSpecs(mlir::ModuleOp module, mlir::func::FuncOp func,
                            stpar::stp::ClusterAttr clusterAttr,
                            const FlatGraph &g, const Plan &plan,
                            const stpar::analysis::BridgedProblem &bridged,
                            const stpar::analysis::OperatorGraph &graph) {
  using namespace stpar::stp;
  mlir::MLIRContext *ctx = module.getContext();
  const Mesh &mesh = plan.config.mesh;
  SmallVector<AxisAttr> axes;
  for (const MeshAxis &a : mesh.axes)
    axes.push_back(AxisAttr::get(ctx, mlir::StringAttr::get(ctx, a.name),
                                 a.size));
  MeshAttr meshAttr = MeshAttr::get(ctx, clusterAttr, axes);
  module->setAttr(STPDialect::kMeshAttrName, meshAttr);
  std::vector<mlir::Operation *> irOps;
  for (mlir::Operation &op : func.getBody().front())
    irOps.push_back(&op);
  unsigned attached = 0;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    int pos = graph.ops[bridged.graphOpOfFlat[i]].sourceOp;
    if (pos < 0 || unsigned(pos) >= irOps.size())
      continue;
    mlir::Operation *irOp = irOps[pos];
    // stp.attention stands for three operators: its spec is the first's.
    if (irOp->hasAttr(STPDialect::kSpecAttrName))
      continue;
    const Operator &op = g.ops[i];
    const Partition &part = plan.partitions[i];
    SmallVector<LoopDimAttr> loops;
    for (auto [d, l] : llvm::enumerate(op.loops)) {
      SmallVector<mlir::StringAttr> split;
      for (unsigned a : part.loopAxes[d])
        split.push_back(mlir::StringAttr::get(ctx, mesh.axes[a].name));
      loops.push_back(LoopDimAttr::get(
          ctx, mlir::StringAttr::get(ctx, l.name), l.extent,
          l.kind == stpar::cost::LoopKind::Reduction ? stpar::stp::LoopKind::Reduction
                                        : stpar::stp::LoopKind::Parallel,
          split, false));
    }
    TemporalAttr temporal;
    if (part.temporal) {
      const TemporalPrimitive &t = *part.temporal;
      temporal = TemporalAttr::get(
          ctx, mesh.axes[t.rowAxis].name, mesh.axes[t.colAxis].name,
          op.loops[t.mDim].name, op.loops[t.nDim].name,
          op.loops[t.kDim].name, mesh.axes[t.rowAxis].size);
    }
    irOp->setAttr(STPDialect::kSpecAttrName,
                  PartitionSpecAttr::get(ctx, meshAttr, loops, temporal));
    ++attached;
  }
  return attached;
}

static int runONNX() {
  if (planCluster.empty())
    return fail("--cluster is required with a model");
  Expected<Cluster> cluster = loadCluster(planCluster);
  if (!cluster)
    return fail(toString(cluster.takeError()));
  int64_t devices = planDevices > 0 ? int64_t(planDevices)
                                    : cluster->getNumDevices();
  if (devices > cluster->getNumDevices())
    return fail("the cluster '" + cluster->name + "' has " +
                Twine(cluster->getNumDevices()) +
                " devices; it cannot host " + Twine(devices));
  if (devices > cluster->devicesPerNode && devices % cluster->devicesPerNode)
    return fail("the cluster '" + cluster->name + "' has " +
                Twine(cluster->devicesPerNode) +
                " devices per node; it cannot host " + Twine(devices) +
                " devices as whole nodes or part of one node");
  std::optional<stpar::tools::AnalyzedModel> model =
      stpar::tools::importForAnalysis(planInput, planDims, planBatchDim,
                                      stpar::analysis::ConversionOptions());
  if (!model)
    return 1;
  stpar::analysis::OperatorGraph *graph = &model->graph;
  mlir::func::FuncOp func = model->func;
  mlir::OwningOpRef<mlir::ModuleOp> &module = model->module;
  mlir::MLIRContext &context = *model->context;
  int64_t batch = model->batch;
  Expected<stpar::analysis::BridgedProblem> bridged =
      stpar::analysis::buildSearchProblem(*graph,
                                          sys::path::stem(planInput),
                                          planCluster, devices);
  if (!bridged)
    return fail(planInput + ": " + toString(bridged.takeError()));
  Problem &problem = bridged->problem;
  if (planMemoryLimit > 0)
    problem.memoryLimit = planMemoryLimit;
  for (const std::string &note : graph->notes)
    errs() << planInput << ": note: " << note << "\n";
  for (const std::string &note : bridged->notes)
    errs() << planInput << ": note: " << note << "\n";

  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster->device.bf16 <= 0)
    eff.dtype = DType::FP16;
  SearchOptions opts = makeSearchOptions();
  Expected<SearchResult> result = search(problem, *cluster, eff, opts);
  if (!result)
    return fail(toString(result.takeError()));
  if (!result->best)
    return failNoPlan(*result);
  const Plan &plan = *result->best;
  FlatGraph g = flatten(problem);
  if (g.ops.size() != bridged->graphOpOfFlat.size())
    return fail("internal: flattened operators and graph operators differ");
  Expected<std::vector<OpReport>> reports =
      reportOps(g, problem, plan, *cluster, eff);
  if (!reports)
    return fail(toString(reports.takeError()));

  outs() << "model " << planInput << " (" << graph->ops.size()
         << " operators, " << problem.ops.size() << " planned"
         << (problem.layers > 1 || llvm::is_contained(problem.sections,
                                                      Section::Layer)
                 ? " with a layer block x" + std::to_string(problem.layers)
                 : std::string())
         << ") on " << devices << " devices of " << cluster->name << "\n";
  outs() << "batch " << batch << " sequences per step; searched "
         << result->configurations << " configurations"
         << (result->stats.isExact() ? " (exact DP)" : " (capped DP)")
         << "\n";
  printONNXTable(outs(), problem, g, plan, *reports);

  if (!planOutput.empty()) {
    std::error_code ec;
    ToolOutputFile file(planOutput, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + planOutput + "': " + ec.message());
    file.os() << formatv("{0:2}",
                         planJSON(planInput, *cluster, problem, g, *bridged,
                                  *graph, *result, *reports))
              << "\n";
    file.keep();
  }
  if (!planEmitMLIR.empty()) {
    mlir::FailureOr<stpar::stp::ClusterAttr> clusterAttr =
        getClusterAttr(context, *cluster, devices);
    if (mlir::failed(clusterAttr))
      return fail("cannot express " + Twine(devices) + " devices of '" +
                  cluster->name + "' as a mesh");
    unsigned attached =
        attachSpecs(*module, func, *clusterAttr, g, plan, *bridged, *graph);
    if (mlir::failed(mlir::verify(*module)))
      return fail("internal: the planned IR does not verify");
    std::error_code ec;
    ToolOutputFile file(planEmitMLIR, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + planEmitMLIR + "': " + ec.message());
    module->print(file.os());
    file.os() << "\n";
    file.keep();
    outs().flush(); // keep the table and the note apart when both are piped
    errs() << planInput << ": note: " << attached
           << " op(s) carry stp.spec\n";
  }
  if (planCompare)
    printComparison(problem, *cluster, eff, opts, plan);
  return 0;
}

static stpar::tools::CommandRegistration reg(planCmd, runPlan);
