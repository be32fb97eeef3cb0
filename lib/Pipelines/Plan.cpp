//===- Plan.cpp - search a plan for a module (-stp-plan) --------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Pipelines/Plan.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Analysis/SearchBridge.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/MoE.h"
#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"
#include "stpar/Search/Solver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;
using stpar::pipelines::PlanOptions;

static Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

static const double kGiB = double(int64_t(1) << 30);
static const double kMiB = double(1 << 20);

/// `bytes` in the largest binary unit that keeps it >= 1 (B, KiB, MiB,
/// GiB, TiB), with 3 significant decimals from KiB on.
static std::string formatBytes(double bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && std::abs(bytes) >= 1024) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? formatv("{0:f0} B", bytes).str()
                : formatv("{0:f3} {1}", bytes, units[u]).str();
}

std::string stpar::pipelines::describeNoPlan(const SearchResult &r) {
  return "no plan fits: the smallest plan found needs " +
         formatBytes(r.smallestMemory) + " per device, the limit is " +
         formatBytes(r.memoryLimit) + " (short by " +
         formatBytes(r.smallestMemory - r.memoryLimit) + ")";
}

static std::string summarizePlan(const Problem &problem, const FlatGraph &g,
                                 const Plan &plan);

/// The baselines beside `bestPlan` (--compare).
std::vector<stpar::pipelines::ComparisonRow> stpar::pipelines::compareBaselines(
    const Problem &problem, const Cluster &cluster, const EfficiencyModel &eff,
    const SearchOptions &opts, const Plan &bestPlan, StringRef planName) {
  std::vector<ComparisonRow> rows;
  double best = bestPlan.cost.stepTime;
  const FlatGraph flat = flatten(problem);
  auto describe = [&](const Plan &p) {
    return p.label.empty() ? summarizePlan(problem, flat, p) : p.label;
  };
  ComparisonRow first;
  first.name = planName.str();
  first.status = "ok";
  first.configuration = describe(bestPlan);
  first.stepSeconds = best;
  first.relative = 1.0;
  first.memoryBytes = bestPlan.cost.getMemory();
  rows.push_back(std::move(first));
  auto row = [&](StringRef name, Expected<SearchResult> &r) {
    ComparisonRow out;
    out.name = name.str();
    if (!r) {
      out.status = "error";
      out.message = toString(r.takeError());
      r = SearchResult(); // consumed
    } else if (!r->best) {
      // No configuration applied at all (e.g. the batch does not divide
      // over the data-parallel ranks) vs. none fitting in memory.
      bool applies = r->configurations > 0 && std::isfinite(r->smallestMemory);
      out.status = applies ? "no plan fits" : "n/a";
      out.message = applies ? "(memory)"
                            : "(no configuration applies: a split does not "
                              "divide, e.g. the batch)";
    } else {
      const Plan &p = *r->best;
      out.status = "ok";
      out.configuration = describe(p);
      out.stepSeconds = p.cost.stepTime;
      out.relative = p.cost.stepTime / best;
      out.memoryBytes = p.cost.getMemory();
    }
    rows.push_back(std::move(out));
  };
  // The baselines do not inherit a forced Megatron configuration's
  // recomputation setting or grid point.
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  spatialOpts.solver.space.fixed.clear(); // the baselines are unconstrained
  spatialOpts.progress = nullptr;
  spatialOpts.recompute = SearchOptions().recompute;
  spatialOpts.megatron = SearchOptions::MegatronGrid();
  Expected<SearchResult> spatial =
      stpar::search::search(problem, cluster, eff, spatialOpts);
  row("spatial-only search", spatial);
  // FastMoE (He et al. 2021), the system FasterMoE improves on: the same
  // space with a flat all-to-all, no dynamic shadowing and no smart
  // scheduling in every MoE layer.
  if (llvm::any_of(problem.ops, [](const Operator &op) { return op.moe; })) {
    Problem fastMoE = problem;
    for (Operator &op : fastMoE.ops)
      if (op.moe)
        op.moe->shadowing = op.moe->smartSchedule = op.moe->hierarchical =
            false;
    Expected<SearchResult> r =
        stpar::search::search(fastMoE, cluster, eff, spatialOpts);
    row("fastmoe (flat, no shadowing)", r);
  }
  // The Megatron grid as the benchmark searches it: every micro-batch
  // count (recomputation off and on, as spatialOpts).
  SearchOptions megatronOpts = spatialOpts;
  megatronOpts.microBatchChoices = 0;
  Expected<SearchResult> mega =
      searchMegatron(problem, cluster, eff, false, megatronOpts);
  row("megatron (best grid)", mega);
  Expected<SearchResult> megaSP =
      searchMegatron(problem, cluster, eff, true, megatronOpts);
  row("megatron + seq. parallel", megaSP);
  // DeepSpeed's ZeRO data parallelism, searched over the same micro-batch
  // counts (gradient accumulation) and recomputation settings.
  for (int z = 1; z <= 3; ++z) {
    Expected<SearchResult> zr =
        searchZeRO(problem, cluster, eff, z, megatronOpts);
    row(("zero-" + Twine(z) + " data parallel").str(), zr);
  }
  return rows;
}

void stpar::pipelines::printComparisonRows(raw_ostream &outs,
                                           ArrayRef<ComparisonRow> rows) {
  outs << "comparison (same cost model):\n";
  outs << format("  %-28s %12s %10s %10s  %s\n", "plan", "step ms", "t/t_stpar",
                 "GiB", "configuration");
  for (const ComparisonRow &r : rows) {
    if (r.status == "ok")
      outs << format("  %-28s %12.3f %10.3f %10.3f  %s\n", r.name.c_str(),
                     r.stepSeconds * 1e3, r.relative, r.memoryBytes / kGiB,
                     r.configuration.c_str());
    else
      outs << format("  %-28s %12s  %s\n", r.name.c_str(), r.status.c_str(),
                     r.message.c_str());
  }
}

json::Value stpar::pipelines::toJSON(ArrayRef<ComparisonRow> rows) {
  json::Array out;
  for (const ComparisonRow &r : rows)
    out.push_back(json::Object{{"name", r.name},
                               {"status", r.status},
                               {"message", r.message},
                               {"configuration", r.configuration},
                               {"step_seconds", r.stepSeconds},
                               {"relative", r.relative},
                               {"memory_bytes", r.memoryBytes}});
  return out;
}

void stpar::pipelines::printComparison(
    raw_ostream &outs, const Problem &problem, const Cluster &cluster,
    const EfficiencyModel &eff, const SearchOptions &opts, const Plan &bestPlan,
    StringRef planName) {
  printComparisonRows(
      outs, compareBaselines(problem, cluster, eff, opts, bestPlan, planName));
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
  /// What it adds to one device's memory as the plan charges it
  /// (PlanCost::opStateBytes, opActivationBytes).
  double deviceStateBytes = 0, deviceActivationBytes = 0;
  /// Local bytes of the output and of the first input (collectives).
  double outputBytes = 0, inputBytes = 0, paramBytes = 0;
  std::vector<GradientSync> syncs;
};
} // namespace

/// Flattened operator `i` partitioned as `part`, with micro-batch extents.
static Operator getPlannedOp(const FlatGraph &g, const Problem &problem,
                             const Plan &plan, unsigned i,
                             const Partition &part) {
  Operator op = g.ops[i];
  for (LoopDim &l : op.loops)
    if (l.name == problem.batchLoop)
      l.extent /= plan.config.microBatches;
  applyPartition(op, part);
  return op;
}

static Expected<std::vector<OpReport>>
reportOps(const FlatGraph &g, const Problem &problem, const Plan &plan,
          const Cluster &cluster, const EfficiencyModel &eff) {
  std::vector<OpReport> out;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    Operator op = getPlannedOp(g, problem, plan, i, plan.partitions[i]);
    Expected<OperatorCost> c = costOperator(op, plan.config.mesh, cluster, eff);
    if (!c)
      return c.takeError();
    OpReport r{*c};
    r.seconds = i < plan.cost.opSeconds.size() ? plan.cost.opSeconds[i] : 0;
    r.bytes = i < plan.cost.opBytes.size() ? plan.cost.opBytes[i] : 0;
    if (i < plan.cost.opStateBytes.size()) {
      r.deviceStateBytes = plan.cost.opStateBytes[i];
      r.deviceActivationBytes = plan.cost.opActivationBytes[i];
    }
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

static const char *getOperandRoleName(OperandRole role) {
  switch (role) {
  case OperandRole::Input:
    return "input";
  case OperandRole::Parameter:
    return "parameter";
  case OperandRole::Output:
    return "output";
  }
  return "";
}

/// The short name of operand `j` in the table and plan.json: I (a second
/// input I2, ...), W for a parameter, O for the output.
static std::string getTensorTag(const Operator &op, unsigned j) {
  const Operand &o = op.operands[j];
  if (o.role == OperandRole::Parameter)
    return "W";
  if (o.role == OperandRole::Output)
    return "O";
  unsigned inputs = 0;
  for (unsigned k = 0; k <= j && k < op.operands.size(); ++k)
    inputs += op.operands[k].role == OperandRole::Input;
  return inputs > 1 ? "I" + std::to_string(inputs) : "I";
}

static double getCompute(const OperatorCost &c) {
  return c.forward + c.backwardInput + c.backwardWeight;
}

namespace {
/// What a mesh axis does in a plan, from the loops it splits over all
/// operators (axis 0, the pipeline axis, is never split by a partition).
struct PlanAxisRole {
  bool batch = false, experts = false, sequence = false, model = false,
       temporal = false;
  bool any() const { return batch || experts || sequence || model || temporal; }
  /// The field's short name: dp, ep, sp, tp, temporal, dp+tp, ..., or repl
  /// (an axis that splits nothing: its devices compute the same).
  std::string getShortName() const {
    if (temporal)
      return "temporal";
    std::string n;
    auto add = [&](const char *w) {
      n += (n.empty() ? "" : "+") + std::string(w);
    };
    if (batch)
      add("dp");
    if (experts)
      add("ep");
    if (sequence)
      add("sp");
    if (model)
      add("tp");
    return n.empty() ? "repl" : n;
  }
  /// The axis's name by its role, where one role fits: dp, ep, sp, tp, or
  /// t for a temporal primitive's grid axis that splits nothing else;
  /// empty for an axis with mixed roles or none.
  std::string getRoleName() const {
    if (temporal)
      return batch || experts || sequence || model ? "" : "t";
    std::string n = getShortName();
    return n == "repl" || StringRef(n).contains('+') ? "" : n;
  }
};
} // namespace

/// Calls f(axis, loop) for every mesh axis `part` splits a loop over, and
/// f(axis, -1) for the two axes of a temporal primitive's grid.
template <typename F>
static void forEachSplitAxis(const Partition &part, F &&f) {
  if (part.temporal) {
    f(part.temporal->rowAxis, -1);
    f(part.temporal->colAxis, -1);
  }
  for (auto [d, axes] : llvm::enumerate(part.loopAxes))
    for (unsigned a : axes)
      f(a, int(d));
}

/// Per mesh axis of `plan`: the loops it splits. A batch loop is data
/// parallelism, an MoE layer's expert loop expert parallelism, any other
/// loop (heads, hidden, FFN, vocabulary, sequence) tensor parallelism, a
/// temporal primitive's grid its own role.
static std::vector<PlanAxisRole>
getAxisUses(const Problem &problem, const FlatGraph &g, const Plan &plan) {
  std::vector<PlanAxisRole> uses(plan.config.mesh.axes.size());
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Operator &op = g.ops[i];
    forEachSplitAxis(plan.partitions[i], [&](unsigned a, int d) {
      if (a >= uses.size())
        return;
      if (d < 0)
        uses[a].temporal = true;
      else if (size_t(d) >= op.loops.size())
        return;
      else if (op.moe && unsigned(d) == op.moe->expertLoop)
        uses[a].experts = true;
      else if (!problem.batchLoop.empty() &&
               op.loops[d].name == problem.batchLoop)
        uses[a].batch = true;
      else if (!problem.sequenceLoop.empty() &&
               op.loops[d].name == problem.sequenceLoop)
        uses[a].sequence = true;
      else
        uses[a].model = true;
    });
  }
  return uses;
}

/// Renames a searched plan's mesh axes (after axis 0, the pipeline axis)
/// by their roles in `plan` where one role fits (getRoleName): dp, ep, sp,
/// tp, t; two axes of one role become dp0, dp1 (t0, t1 for a temporal
/// grid). An axis with mixed roles or none keeps its search name. The
/// partitions refer to axes by index, so only the names change. Returns
/// the search's names, by axis (what --fix and SpaceOptions::fixed use).
static std::vector<std::string> nameAxesByRole(const Problem &problem,
                                               const FlatGraph &g, Plan &plan) {
  std::vector<MeshAxis> &axes = plan.config.mesh.axes;
  std::vector<std::string> searchNames;
  for (const MeshAxis &a : axes)
    searchNames.push_back(a.name);
  std::vector<PlanAxisRole> uses = getAxisUses(problem, g, plan);
  std::vector<std::string> roles(axes.size());
  for (unsigned a = 1; a < axes.size(); ++a)
    if (axes[a].size > 1)
      roles[a] = uses[a].getRoleName();
  for (unsigned a = 1; a < axes.size(); ++a) {
    if (roles[a].empty())
      continue;
    unsigned same = 0, before = 0;
    for (unsigned b = 1; b < axes.size(); ++b)
      if (roles[b] == roles[a]) {
        ++same;
        before += b < a;
      }
    std::string name = roles[a];
    if (same > 1)
      name += std::to_string(before);
    // Never the name of another axis that keeps its search name.
    if (llvm::any_of(searchNames,
                     [&](const std::string &n) { return n == name; }) &&
        name != searchNames[a])
      continue;
    axes[a].name = name;
  }
  return searchNames;
}

/// "pp=1 dp=2 repl=4 zero-2 m=1": the searched plan in the form of the
/// baselines' configurations (--compare).
static std::string summarizePlan(const Problem &problem, const FlatGraph &g,
                                 const Plan &plan) {
  std::vector<PlanAxisRole> uses = getAxisUses(problem, g, plan);
  const Config &c = plan.config;
  std::string s = "pp=" + std::to_string(c.getStages());
  // A temporal primitive's grid once, as q x q (the grid's two axes).
  std::string grid;
  for (auto [a, axis] : llvm::enumerate(c.mesh.axes))
    if (a > 0 && axis.size > 1) {
      std::string role = uses[a].getShortName();
      if (role != "temporal")
        s += " " + role + "=" + std::to_string(axis.size);
      else
        grid += (grid.empty() ? "" : "x") + std::to_string(axis.size);
    }
  if (!grid.empty())
    s += " temporal=" + grid;
  if (c.zeroStage > 0)
    s += " zero-" + std::to_string(c.zeroStage);
  s += " m=" + std::to_string(c.microBatches);
  if (c.recompute != Recompute::None)
    s +=
        std::string(" recompute=") + stpar::cost::getRecomputeName(c.recompute);
  return s;
}

/// The mesh axes' roles under the plan's mesh line, and a warning for an
/// axis that splits no operator (its devices all compute the same: the
/// device count forced replication).
static void printAxisRoles(raw_ostream &os, ArrayRef<PlanAxisRole> uses,
                           const Mesh &mesh,
                           ArrayRef<std::string> searchNames) {
  // Only where an axis's name does not say its role already (a baseline's
  // dp and tp axes do, and so do a searched plan's axes named by role,
  // which give the search's name that --fix uses).
  std::string line;
  for (auto [a, axis] : llvm::enumerate(mesh.axes)) {
    // An axis of one device has no role (plan.json: "none").
    if (a == 0 || axis.size == 1)
      continue;
    bool renamed = a < searchNames.size() && searchNames[a] != axis.name;
    if (renamed) {
      line += (line.empty() ? " " : ", ") + axis.name + "=" +
              std::to_string(axis.size) + " (" + searchNames[a] + " in --fix)";
      continue;
    }
    if (axis.name == uses[a].getShortName())
      continue;
    line += (line.empty() ? " " : ", ") + axis.name + "=" +
            std::to_string(axis.size) + " " + uses[a].getShortName();
    if (!uses[a].any() && axis.size > 1)
      line +=
          " (its " + std::to_string(axis.size) + " devices compute the same)";
  }
  if (!line.empty())
    os << "axes:" << line << "\n";
  for (auto [a, axis] : llvm::enumerate(mesh.axes))
    if (a > 0 && axis.size > 1 && !uses[a].any())
      os << "warning: mesh axis " << axis.name
         << " splits no operator: " << axis.size
         << " devices compute the same thing (the device count or the "
            "batch forces replication; fewer devices would do as well)\n";
}

/// The table: one row per planned operator (layers folded), a summary per
/// layer kind, then the step breakdown.
static void printONNXTable(raw_ostream &os, const Problem &problem,
                           const FlatGraph &g, const Plan &plan,
                           ArrayRef<OpReport> reports,
                           ArrayRef<std::string> searchNames) {
  const Mesh &mesh = plan.config.mesh;
  printPlanConfig(os, plan.config);
  std::vector<PlanAxisRole> uses = getAxisUses(problem, g, plan);
  printAxisRoles(os, uses, mesh, searchNames);
  // A searched plan in the baselines' form (theirs is the strategy line).
  if (plan.label.empty())
    os << "summary: " << summarizePlan(problem, g, plan) << "\n";
  // Full names: the prefix every operator shares (up to a '/') is printed
  // once and left out of the rows, and the column is as wide as the
  // longest name (never truncated).
  // A row's name: a layer operator once, as layer 0's, marked xL.
  auto rowName = [&](unsigned i) {
    if (g.layerOf[i] != 0)
      return g.ops[i].name;
    std::string name = problem.ops[g.original[i]].name;
    if (problem.layers > 1)
      name += " x" + std::to_string(problem.layers);
    return name;
  };
  std::vector<std::string> names;
  for (unsigned i = 0; i < g.ops.size(); ++i)
    if (g.layerOf[i] <= 0)
      names.push_back(rowName(i));
  size_t prefix = names.empty() ? 0 : names.front().size();
  for (const std::string &n : names) {
    size_t k = 0;
    while (k < prefix && k < n.size() && n[k] == names.front()[k])
      ++k;
    prefix = k;
  }
  prefix =
      names.empty() ? 0 : names.front().rfind('/', prefix ? prefix - 1 : 0);
  if (prefix == std::string::npos || prefix == 0)
    prefix = 0;
  else
    ++prefix; // keep the '/' in the prefix
  if (prefix > 0)
    os << "operators below " << names.front().substr(0, prefix) << "\n";
  int width = 30;
  for (const std::string &n : names)
    width = std::max<int>(width, int(n.size() - prefix));
  os << "times per micro-batch in ms (layer rows: one layer); memory: MiB "
        "it adds to one device (its share of the model states and saved "
        "activations, as the step charges them); under each row the "
        "layout of its tensors (I inputs, W parameters, O output)\n";
  os << format("  %-*s %-10s %-44s %9s %9s %9s %9s\n", width, "operator",
               "kind", "partition", "compute", "comm", "exposed", "memory");
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
    double bytes = r.deviceStateBytes + r.deviceActivationBytes;
    k.bytes += bytes;
    ++k.ops;
    if (g.layerOf[i] > 0)
      continue;
    std::string name = rowName(i);
    name = name.substr(std::min(prefix, name.size()));
    // Replicated compute: axes that split other operators but not this one.
    std::string partition =
        describePartition(g.ops[i], plan.partitions[i], mesh);
    std::vector<bool> used(mesh.axes.size(), false);
    forEachSplitAxis(plan.partitions[i], [&](unsigned a, int) {
      if (a < used.size())
        used[a] = true;
    });
    std::string repl;
    for (auto [a, axis] : llvm::enumerate(mesh.axes))
      if (a > 0 && axis.size > 1 && uses[a].any() && !used[a])
        repl += (repl.empty() ? "" : ",") + axis.name;
    if (!repl.empty() && partition != "replicated")
      partition += " repl{" + repl + "}";
    os << format("  %-*s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n", width,
                 name.c_str(), g.ops[i].layerKind.c_str(), partition.c_str(),
                 compute * 1e3, comm * 1e3, comm * 1e3, bytes / mib);
    std::string layouts;
    for (unsigned j = 0; j < g.ops[i].operands.size(); ++j)
      layouts += (layouts.empty() ? "" : " ") + getTensorTag(g.ops[i], j) +
                 describeLayout(g.ops[i], plan.partitions[i], mesh, j);
    os << "    " << layouts << "\n";
  }
  os << "by layer kind (all layers, per micro-batch):\n";
  Kind total;
  for (auto &[name, k] : kinds) {
    os << format("  %-*s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n", width,
                 name.c_str(), "",
                 (std::to_string(k.ops) + " operators").c_str(),
                 k.compute * 1e3, k.comm * 1e3, k.exposed * 1e3, k.bytes / mib);
    total.compute += k.compute;
    total.comm += k.comm;
    total.exposed += k.exposed;
    total.bytes += k.bytes;
    total.ops += k.ops;
  }
  os << format("  %-*s %-10s %-44s %9.4f %9.4f %9.4f %9.3f\n", width, "total",
               "", (std::to_string(total.ops) + " operators").c_str(),
               total.compute * 1e3, total.comm * 1e3, total.exposed * 1e3,
               total.bytes / mib);
  // How the memory column adds up to the memory per device.
  const PlanCost &pc = plan.cost;
  os << format("memory per device: the total row's %.3f MiB (model states "
               "%.3f + saved activations %.3f) + transient %.3f MiB (the "
               "largest operator's workspace, held once) = %.3f MiB\n",
               total.bytes / mib, pc.stateBytes / mib, pc.activationBytes / mib,
               pc.transientBytes / mib, pc.getMemory() / mib);
  // MoE layers: FasterMoE's choices (the first layer's when layers fold).
  for (const auto &[i, m] : plan.cost.moe) {
    if (g.layerOf[i] > 0)
      continue;
    std::string name = g.ops[i].name;
    if (g.layerOf[i] == 0 && problem.layers > 1)
      name = problem.ops[g.original[i]].name + " x" +
             std::to_string(problem.layers);
    printMoELine(os, name, g.ops[i], m);
  }
  printPlanTotals(os, plan.cost, plan.config);
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
    json::Object loop{{"name", l.name},
                      {"extent", l.extent},
                      {"reduction", l.kind == LoopKind::Reduction},
                      {"axes", std::move(axes)}};
    if (op.moe && d == op.moe->expertLoop)
      loop["experts"] = true;
    loops.push_back(std::move(loop));
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

static json::Value
planJSON(StringRef model, const Cluster &cluster, const Problem &problem,
         const FlatGraph &g, const stpar::analysis::BridgedProblem &bridged,
         const stpar::analysis::OperatorGraph &graph,
         const stpar::stp::OperatorNames &irNames, const SearchResult &result,
         ArrayRef<OpReport> reports, ArrayRef<PlannedCommunication> planned,
         ArrayRef<std::string> searchNames) {
  const Plan &plan = *result.best;
  const Mesh &mesh = plan.config.mesh;
  json::Array axes;
  std::vector<PlanAxisRole> uses = getAxisUses(problem, g, plan);
  for (auto [k, a] : llvm::enumerate(mesh.axes)) {
    json::Object axis{{"name", a.name},
                      {"size", a.size},
                      {"role", k == 0        ? std::string("pp")
                               : a.size == 1 ? std::string("none")
                                             : uses[k].getShortName()}};
    if (k < searchNames.size() && searchNames[k] != a.name)
      axis["search_name"] = searchNames[k];
    axes.push_back(std::move(axis));
  }
  json::Array ops, collectives, transfers, syncs;
  double phase[3] = {0, 0, 0}, comm[2] = {0, 0};
  // Operators are named after the graph operator each flat operator stands
  // for (layer k's own ONNX node, not the folded layer's `name#k`), made
  // unique as the problem's names are (".1", ".2" for the operators of one
  // IR op); their parameters likewise.
  llvm::StringSet<> usedNames;
  std::vector<std::string> opNames;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const std::string &base = graph.ops[bridged.graphOpOfFlat[i]].op.name;
    std::string name = base;
    for (unsigned k = 1; !usedNames.insert(name).second; ++k)
      name = base + "." + std::to_string(k);
    opNames.push_back(std::move(name));
  }
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Operator &op = g.ops[i];
    const Partition &part = plan.partitions[i];
    const OpReport &r = reports[i];
    const auto &gop = graph.ops[bridged.graphOpOfFlat[i]];
    const std::string &opName = opNames[i];
    // An operand under the name of the tensor that layer copy reads.
    auto operandName = [&](unsigned j) {
      return j < gop.op.operands.size() ? gop.op.operands[j].name
                                        : op.operands[j].name;
    };
    auto parameterName = [&](StringRef flatName) {
      for (auto [j, o] : llvm::enumerate(op.operands))
        if (o.role == OperandRole::Parameter && o.name == flatName)
          return operandName(j);
      return flatName.str();
    };
    json::Array tensors;
    for (auto [j, o] : llvm::enumerate(op.operands)) {
      json::Array shape;
      for (unsigned d : o.dims)
        shape.push_back(d < op.loops.size() ? op.loops[d].extent : 0);
      tensors.push_back(
          json::Object{{"name", operandName(j)},
                       {"role", getOperandRoleName(o.role)},
                       {"shape", std::move(shape)},
                       {"layout", describeLayout(op, part, mesh, j)},
                       {"tag", getTensorTag(op, unsigned(j))}});
    }
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
    json::Object entry{
        {"name", opName},
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
        {"device_state_bytes", r.deviceStateBytes},
        {"device_activation_bytes", r.deviceActivationBytes},
        {"transient_bytes", r.cost.transientBytes},
        {"tensors", std::move(tensors)}};
    if (const auto &m = r.cost.moe) {
      // FasterMoE's model of the layer (docs/plan-format.md).
      int64_t experts = op.moe ? op.loops[op.moe->expertLoop].extent : 0;
      json::Array tokens, shadowed;
      for (double t : m->expertTokens)
        tokens.push_back(t);
      for (int64_t e : m->shadowed)
        shadowed.push_back(e);
      entry["moe"] = json::Object{
          {"experts", experts},
          {"expert_parallel", m->expertParallel},
          {"experts_per_device",
           experts / std::max<int64_t>(1, m->expertParallel)},
          {"all_to_all", m->hierarchical ? "hierarchical" : "flat"},
          {"schedule_group_size", m->groupSize},
          {"shadowed_experts", std::move(shadowed)},
          {"tokens_per_expert", std::move(tokens)},
          {"max_device_tokens", m->maxWorkerTokens},
          {"dropped_tokens", m->droppedTokens},
          {"busiest_nvlink_bytes_per_dispatch", m->intraNodeLinkBytes},
          {"busiest_network_bytes_per_dispatch", m->interNodeLinkBytes}};
    }
    ops.push_back(std::move(entry));
    if (r.cost.forwardComm > 0)
      collectives.push_back(json::Object{{"op", opName},
                                         {"phase", "forward"},
                                         {"kind", "all-reduce"},
                                         {"bytes", r.outputBytes},
                                         {"seconds", r.cost.forwardComm}});
    if (r.cost.backwardComm > 0)
      collectives.push_back(json::Object{{"op", opName},
                                         {"phase", "input_grad"},
                                         {"kind", "all-reduce"},
                                         {"bytes", r.inputBytes},
                                         {"seconds", r.cost.backwardComm}});
    if (part.temporal) {
      int64_t q = mesh.axes[part.temporal->rowAxis].size;
      transfers.push_back(json::Object{
          {"op", opName},
          {"kind", "ring-shift"},
          {"steps_per_phase", q - 1},
          {"bytes_per_step", (r.inputBytes + r.paramBytes) / double(q)},
          {"overlapped", true}});
    }
    for (const GradientSync &s : r.syncs) {
      json::Array sa;
      for (unsigned a : s.axes)
        sa.push_back(mesh.axes[a].name);
      syncs.push_back(json::Object{{"op", opName},
                                   {"parameter", parameterName(s.parameter)},
                                   {"bytes", s.bytes},
                                   {"axes", std::move(sa)}});
    }
  }
  // Everything the objective charges as communication, by the operator the
  // program's stp.plan_step names (`-stp-check-communication`).
  json::Array communication;
  for (const PlannedCommunication &p : planned) {
    const auto &gop = graph.ops[bridged.graphOpOfFlat[p.op]];
    int sourceOp = gop.sourceOp;
    if (p.viewPosition >= 0 && size_t(p.viewOperand) < gop.tensors.size()) {
      // Issued at a view on the way into the operand (the chain of views
      // back to the producer's output, the first one reading it first).
      std::vector<unsigned> chain =
          graph.getViewChain(gop.tensors[p.viewOperand]);
      if (size_t(p.viewPosition) < chain.size())
        sourceOp = graph.views[chain[p.viewPosition]].sourceOp;
    }
    // The gradient of an input from an unplanned operator is gathered for
    // that operator's backward: the program names the producer
    // (Operand::gatherGradient).
    if (p.comm.kind == Collective::AllGather && p.comm.operand >= 0 &&
        size_t(p.comm.operand) < gop.tensors.size() &&
        g.ops[p.op].operands[p.comm.operand].gatherGradient) {
      int producer =
          graph.tensors[graph.getViewRoot(gop.tensors[p.comm.operand])]
              .producerOp;
      if (producer >= 0)
        sourceOp = graph.ops[producer].sourceOp;
    }
    std::string irOp, label, reader;
    if (sourceOp >= 0 && size_t(sourceOp) < irNames.getOps().size()) {
      mlir::Operation *source = irNames.getOps()[sourceOp];
      irOp = irNames.getName(source).str();
      label = stpar::stp::getPlanStepLabel(source, unsigned(sourceOp));
    }
    if (p.reader >= 0) {
      int readerOp = graph.ops[bridged.graphOpOfFlat[p.reader]].sourceOp;
      if (readerOp >= 0 && size_t(readerOp) < irNames.getOps().size())
        reader = stpar::stp::getPlanStepLabel(irNames.getOps()[readerOp],
                                              unsigned(readerOp));
    }
    json::Array names;
    bool intra = false, inter = false;
    for (unsigned a : p.comm.axes) {
      names.push_back(mesh.axes[a].name);
      AxisPlacement at = mesh.getPlacement(a, cluster.devicesPerNode);
      intra |= at.crossesIntraNode() && at.regular;
      inter |= at.crossesInterNode() || !at.regular;
    }
    const char *link = intra && inter ? "intra+inter-node"
                       : inter        ? "inter-node"
                       : intra        ? "intra-node"
                                      : "none";
    communication.push_back(json::Object{
        {"op", opNames[p.op]},
        {"ir_op", irOp},
        {"label", label},
        {"phase", p.source == "gradient sync"
                      ? "grad_sum"
                      : getPhaseName(p.comm.phase).str()},
        {"kind", getCollectiveName(p.comm.kind).str()},
        {"axes", std::move(names)},
        {"bytes", p.comm.bytes},
        {"element_bytes", p.comm.elementBytes},
        {"count", p.comm.count},
        {"per_micro_batch", p.comm.perMicroBatch},
        {"sent_bytes", getSentBytes(p.comm, mesh)},
        {"source", p.source},
        {"what", p.comm.what},
        {"reader", reader},
        {"link", link},
        {"seconds", p.comm.count * getMultiAxisCollectiveTime(
                                       p.comm.kind, p.comm.bytes, p.comm.axes,
                                       mesh, cluster)}});
  }
  json::Array notes;
  for (const std::string &n : bridged.notes)
    notes.push_back(n);
  const PlanCost &c = plan.cost;
  // Each pipeline stage's memory: its own micro-batches in flight (the
  // totals are the first stage's).
  json::Array stageMemory;
  stpar::cost::ScheduleShape schedule = plan.config.getSchedule();
  for (int64_t s = 0; s < schedule.stages && schedule.stages > 1; ++s) {
    stageMemory.push_back(json::Object{
        {"stage", s},
        {"in_flight", stpar::cost::getInFlight(schedule, s)},
        {"activations", c.getStageActivationBytes(schedule, s)},
        {"total", c.getStageMemory(schedule, s)}});
  }
  return json::Object{
      {"format", "stpar-plan"},
      {"version", 1},
      {"producer",
       json::Object{{"name", "stpar"}, {"version", STPAR_PLAN_PRODUCER}}},
      {"model", model},
      {"summary", summarizePlan(problem, g, plan)},
      {"cluster", cluster.name},
      {"topology",
       json::Object{{"nodes", cluster.nodes},
                    {"devices_per_node", cluster.devicesPerNode},
                    {"device", cluster.device.name},
                    {"hbm_capacity", cluster.device.hbmCapacity},
                    {"intra_node_bandwidth", cluster.intraNode.bandwidth},
                    {"inter_node_bandwidth", cluster.interNode.bandwidth}}},
      {"devices", problem.devices},
      {"mesh",
       json::Object{
           {"axes", std::move(axes)},
           {"pipeline_stages", plan.config.getStages()},
           {"micro_batches", plan.config.microBatches},
           {"zero_stage", plan.config.zeroStage},
           {"recompute", plan.config.recompute == stpar::cost::Recompute::Full},
           {"recompute_mode",
            stpar::cost::getRecomputeName(plan.config.recompute)},
           {"interleave", plan.config.interleave},
           {"overlap_grad_sync", plan.config.overlapGradSync},
           {"schedule", getScheduleName(plan.config.getSchedule().kind)}}},
      {"search",
       json::Object{{"configurations", int64_t(result.configurations)},
                    {"exact", result.stats.isExact()},
                    {"layers", problem.layers}}},
      {"operators", std::move(ops)},
      {"collectives", std::move(collectives)},
      {"transfers", std::move(transfers)},
      {"gradient_sync", std::move(syncs)},
      {"communication", std::move(communication)},
      {"memory", json::Object{{"states", c.stateBytes},
                              {"activations", c.activationBytes},
                              {"transient", c.transientBytes},
                              {"total", c.getMemory()},
                              {"limit", result.memoryLimit},
                              {"stages", std::move(stageMemory)}}},
      {"times",
       json::Object{{"step", c.stepTime},
                    {"pipeline", c.pipeline},
                    {"bubble", c.bubble},
                    {"relayout", c.relayout},
                    {"breakdown",
                     json::Object{{"compute", c.compute},
                                  {"collectives", c.collectives},
                                  {"relayout_reductions", c.relayoutReductions},
                                  {"ring_not_hidden", c.ring.exposed},
                                  {"ring_startup", c.ring.startup},
                                  {"ring_alignment", c.ring.alignment}}},
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

const char *const stpar::pipelines::kStrategyHelp =
    "How the plan is chosen: search (default), spatial (no temporal "
    "primitive), temporal (temporal primitive wherever it applies), "
    "megatron, megatron-sp (with sequence parallelism), dp (data "
    "parallelism), or one Megatron-LM configuration "
    "megatron:tp=T,pp=P,dp=D[,mb=M][,gb=G][,vp=V][,sp=0|1]"
    "[,recompute=none|selective|full][,zero=Z][,distopt=0|1][,overlap=0|1]"
    "[,schedule=1f1b|gpipe] "
    "(docs/plan-format.md)";

Expected<std::vector<int64_t>> stpar::pipelines::parseMeshShape(StringRef text) {
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

SearchOptions stpar::pipelines::makeSearchOptions(unsigned maxMeshAxes,
                                              bool exact, bool progress) {
  SearchOptions opts;
  opts.maxMeshAxes = maxMeshAxes;
  if (!exact)
    opts.solver.setDefaultCaps();
  // On a terminal one line counts up and ends with a newline; otherwise
  // (a log file) the phase is said once.
  if (progress && sys::Process::StandardErrIsDisplayed())
    opts.progress = [](size_t done, size_t total) {
      errs() << "\rsearching: " << done << "/" << total << " configurations";
      if (done == total)
        errs() << "\n";
    };
  else if (progress)
    opts.progress = [](size_t done, size_t total) {
      if (done == 0)
        errs() << "searching: " << total << " configurations\n";
    };
  return opts;
}

Expected<int64_t> stpar::pipelines::checkPlanOptions(const PlanOptions &o,
                                                     Cluster &cluster) {
  static const char *const known[] = {"search",   "spatial",     "temporal",
                                      "megatron", "megatron-sp", "dp"};
  std::optional<stpar::analysis::IRStrategy> grid;
  if (StringRef(o.strategy).starts_with("megatron:")) {
    Expected<stpar::analysis::IRStrategy> parsed =
        stpar::analysis::parseIRStrategy(o.strategy);
    if (!parsed)
      return parsed.takeError();
    grid = *parsed;
    if (!o.mesh.empty())
      return makeError("--strategy " + o.strategy +
                       " gives the grid (dp, tp, pp); drop --mesh");
    if (grid->megatron.interleave > 1 && grid->megatron.pp < 2)
      return makeError("megatron: vp=" + Twine(grid->megatron.interleave) +
                       " needs pipeline stages (pp >= 2)");
  } else if (!is_contained(known, o.strategy)) {
    return makeError("unknown --strategy '" + o.strategy + "' (" +
                     kStrategyHelp + ")");
  }
  if (!o.fixed.empty() && o.strategy != "search" && o.strategy != "spatial" &&
      o.strategy != "temporal")
    return makeError("--fix constrains a search (--strategy search, spatial "
                     "or temporal), not --strategy " +
                     o.strategy);
  for (const std::string &f : o.fixed)
    if (!StringRef(f).contains('=') || StringRef(f).starts_with("=") ||
        StringRef(f).ends_with("="))
      return makeError("--fix '" + f +
                       "': expected NAME=SPEC, e.g. "
                       "'/h.0/mlp/fc/MatMul=b{x0} d2{x1}'");
  // A spec names axes as the search does (x0, x1, ...); the role names a
  // plan shows (dp, tp, ...) exist only once the plan is chosen.
  for (const std::string &f : o.fixed) {
    StringRef spec = StringRef(f).split('=').second;
    size_t open = spec.find_first_of("{(");
    while (open != StringRef::npos) {
      size_t close = spec.find_first_of("}:", open);
      StringRef inside = spec.slice(open + 1, close);
      SmallVector<StringRef> names;
      inside.split(names, ',');
      for (StringRef n : names) {
        n = n.trim();
        if (!n.empty() && !n.starts_with("x") && n != "pp")
          return makeError(
              "--fix '" + f + "': axis '" + n +
              "' is not a search axis; --fix names them x0, x1, ... (a "
              "plan names an axis by its role, dp, tp, ..., only once it "
              "is chosen; the table's axes: line gives each its search "
              "name)");
      }
      open = close == StringRef::npos ? close : spec.find_first_of("{(", close);
    }
  }
  if (o.cluster.empty())
    return makeError("no cluster given (--cluster, or cluster= of -stp-plan)");
  Expected<Cluster> loaded = loadCluster(o.cluster);
  if (!loaded)
    return loaded.takeError();
  cluster = std::move(*loaded);
  int64_t meshDevices = 1;
  for (int64_t s : o.mesh) {
    if (s < 1)
      return makeError("mesh sizes must be >= 1");
    meshDevices *= s;
  }
  // Devices: --devices, else the --mesh product (or the megatron: grid's),
  // else the whole cluster.
  if (grid)
    meshDevices = grid->megatron.tp * grid->megatron.pp * grid->megatron.dp;
  int64_t devices = o.devices > 0             ? o.devices
                    : !o.mesh.empty() || grid ? meshDevices
                                              : cluster.getNumDevices();
  if (grid && meshDevices != devices)
    return makeError(
        "--strategy " + o.strategy + " has tp*pp*dp = " + Twine(meshDevices) +
        " devices but the plan is for " + Twine(devices) + " (--devices)");
  if (devices > cluster.getNumDevices())
    return makeError("the cluster '" + cluster.name + "' has " +
                     Twine(cluster.getNumDevices()) +
                     " devices; it cannot host " + Twine(devices));
  if (devices > cluster.devicesPerNode && devices % cluster.devicesPerNode)
    return makeError("the cluster '" + cluster.name + "' has " +
                     Twine(cluster.devicesPerNode) +
                     " devices per node; it cannot host " + Twine(devices) +
                     " devices as whole nodes or part of one node");
  if (!o.mesh.empty() && meshDevices != devices)
    return makeError("--mesh has " + Twine(meshDevices) +
                     " devices but the plan is for " + Twine(devices) +
                     " (--devices)");
  return devices;
}

Expected<std::pair<std::string, int64_t>>
stpar::pipelines::findBatchDim(mlir::ModuleOp module, StringRef batchDim) {
  auto dims = module->getAttrOfType<mlir::DictionaryAttr>(
      stpar::stp::STPDialect::kDimsAttrName);
  std::optional<mlir::NamedAttribute> found;
  if (!batchDim.empty()) {
    if (dims)
      found = dims.getNamed(batchDim);
    if (!found)
      return makeError("--batch-dim " + batchDim + ": not bound with --dim " +
                       batchDim + "=VALUE");
  } else if (!dims || dims.empty()) {
    // A model without symbolic dims: dim 0 of its first graph input is
    // planned as the batch (convertToOperatorGraph marks dim 0 of every
    // graph input of that extent).
    for (auto f : module.getOps<mlir::func::FuncOp>()) {
      if (f.isExternal())
        continue;
      for (mlir::BlockArgument arg : f.getArguments()) {
        if (f.getArgAttr(arg.getArgNumber(), "stp.param"))
          continue;
        auto type = dyn_cast<mlir::RankedTensorType>(arg.getType());
        if (type && type.getRank() > 0 && type.hasStaticShape())
          return std::make_pair(std::string(), type.getDimSize(0));
      }
    }
    // No graph input with a dim: nothing is planned as the batch.
    return std::make_pair(std::string(), int64_t(1));
  } else {
    unsigned count = 0;
    for (mlir::NamedAttribute d : dims.getValue())
      if (StringRef(d.getName().getValue().lower()).contains("batch")) {
        found = d;
        ++count;
      }
    if (count != 1)
      return makeError(Twine(count == 0 ? "no" : "more than one") +
                       " bound --dim name contains 'batch'; name the batch "
                       "dim with --batch-dim NAME");
  }
  int64_t batch = cast<mlir::IntegerAttr>(found->getValue()).getInt();
  if (batch < 1)
    return makeError("--dim " + found->getName().getValue() +
                     ": the batch size must be >= 1");
  return std::make_pair(found->getName().str(), batch);
}

/// `--explain NAME`: every candidate partition of one operator (all its
/// layer copies together) in the chosen plan, the rest kept, costed by the
/// objective: step time, the operator's own compute and collectives per
/// micro-batch, the plan's re-layout time and memory per device; then why
/// the chosen one won.
static Error explainOperator(raw_ostream &os, StringRef name,
                             const Problem &problem, const FlatGraph &g,
                             const Plan &plan, const Cluster &cluster,
                             const EfficiencyModel &eff,
                             const SpaceOptions &space) {
  auto it = llvm::find_if(problem.ops,
                          [&](const Operator &o) { return o.name == name; });
  if (it == problem.ops.end())
    return makeError("--explain: no operator '" + name + "'");
  unsigned op = unsigned(it - problem.ops.begin());
  std::vector<unsigned> copies;
  for (unsigned i = 0; i < g.ops.size(); ++i)
    if (g.original[i] == op)
      copies.push_back(i);
  if (copies.empty())
    return makeError("--explain: '" + name + "' is not in the plan");
  const Mesh &mesh = plan.config.mesh;
  Expected<std::unique_ptr<Instance>> inst =
      Instance::create(problem, cluster, plan.config, eff, SolverOptions());
  if (!inst)
    return inst.takeError();
  double limit = (*inst)->getMemoryLimit();
  struct Row {
    std::string words;
    double step = 0, compute = 0, collectives = 0, relayout = 0, memory = 0;
    bool chosen = false;
  };
  std::vector<Row> rows;
  const Partition &chosen = plan.partitions[copies.front()];
  // Every candidate, also where --fix kept the operator to one.
  SpaceOptions all = space;
  bool fixed =
      llvm::any_of(space.fixed, [&](const auto &f) { return f.first == name; });
  all.fixed.clear();
  for (const Partition &cand :
       enumeratePartitions(problem.ops[op], mesh, all)) {
    std::vector<Partition> parts = plan.partitions;
    for (unsigned i : copies)
      parts[i] = cand;
    Expected<PlanCost> pc = (*inst)->evaluate(parts);
    if (!pc)
      return pc.takeError();
    Expected<OperatorCost> c =
        costOperator(getPlannedOp(g, problem, plan, copies.front(), cand), mesh,
                     cluster, eff);
    if (!c)
      return c.takeError();
    Row r;
    r.words = describePartition(problem.ops[op], cand, mesh);
    r.step = pc->stepTime;
    r.compute = getCompute(*c);
    r.collectives = c->forwardComm + c->backwardComm;
    r.relayout = pc->relayout;
    r.memory = pc->getMemory();
    r.chosen = cand == chosen;
    rows.push_back(std::move(r));
  }
  llvm::stable_sort(rows,
                    [](const Row &a, const Row &b) { return a.step < b.step; });
  os << "explain " << name << " (" << copies.size() << " cop"
     << (copies.size() == 1 ? "y" : "ies")
     << " in the plan, all changed together; the rest of the plan kept): "
     << rows.size() << " candidate partitions on mesh";
  for (const MeshAxis &a : mesh.axes)
    os << " " << a.name << "=" << a.size;
  os << "\n";
  os << "times in ms (compute and collectives: the operator's own, per "
        "micro-batch; re-layout: the whole plan's), memory per device in "
        "MiB\n";
  os << format("  %-44s %10s %9s %9s %11s %9s %9s\n", "partition", "step",
               "vs chosen", "compute", "collectives", "re-layout", "memory");
  const Row *pick = nullptr;
  for (const Row &r : rows)
    if (r.chosen)
      pick = &r;
  const unsigned shown = 12;
  for (auto [k, r] : llvm::enumerate(rows)) {
    if (k >= shown && !r.chosen)
      continue;
    double rel = pick && pick->step > 0 ? r.step / pick->step - 1 : 0;
    os << format("%s %-44s %10.4f %+8.1f%% %9.4f %11.4f %9.4f %9.3f%s\n",
                 r.chosen ? "*" : " ", r.words.c_str(), r.step * 1e3, rel * 100,
                 r.compute * 1e3, r.collectives * 1e3, r.relayout * 1e3,
                 r.memory / kMiB,
                 r.memory > limit ? "  over the memory limit" : "");
  }
  if (rows.size() > shown)
    os << "  (" << rows.size() - shown << " slower candidates not shown)\n";
  if (!pick)
    return Error::success();
  if (fixed) {
    os << "why: * is the partition --fix gave it\n";
    return Error::success();
  }
  // Why: the fastest candidate that fits, or what the search traded.
  const Row *fastestFit = nullptr;
  for (const Row &r : rows)
    if (r.memory <= limit) {
      fastestFit = &r;
      break;
    }
  if (fastestFit == pick || (fastestFit && fastestFit->step >= pick->step)) {
    const Row *next = nullptr;
    for (const Row &r : rows)
      if (&r != pick && r.memory <= limit) {
        next = &r;
        break;
      }
    os << "why: * is the fastest candidate that fits in memory";
    if (next && next->step <= pick->step * (1 + 1e-9))
      os << "; " << next->words
         << " ties with it (the search keeps the first it finds)";
    else if (next)
      os << format("; the runner-up, %s, takes %.1f%% longer",
                   next->words.c_str(), (next->step / pick->step - 1) * 100);
    if (rows.front().memory > limit && &rows.front() != pick)
      os << format("; %s would be faster but needs %.3f GiB per device "
                   "(limit %.3f GiB)",
                   rows.front().words.c_str(), rows.front().memory / kGiB,
                   limit / kGiB);
    os << "\n";
  } else if (fastestFit) {
    os << format("why: changing this operator alone to %s would save "
                 "%.1f%%: the capped search (docs/search.md) kept fewer "
                 "candidates; --exact searches all of them\n",
                 fastestFit->words.c_str(),
                 (1 - fastestFit->step / pick->step) * 100);
  }
  return Error::success();
}

Error stpar::pipelines::planModule(mlir::ModuleOp module,
                                   const PlanOptions &o) {
  Cluster cluster;
  Expected<int64_t> devicesOr = checkPlanOptions(o, cluster);
  if (!devicesOr)
    return devicesOr.takeError();
  int64_t devices = *devicesOr;
  mlir::func::FuncOp func;
  for (auto f : module.getOps<mlir::func::FuncOp>())
    if (!f.isExternal()) {
      if (func)
        return makeError("the module has more than one function with a body");
      func = f;
    }
  if (!func)
    return makeError("the module has no function with a body");
  Expected<std::pair<std::string, int64_t>> batchDim =
      findBatchDim(module, o.batchDim);
  if (!batchDim)
    return batchDim.takeError();
  int64_t batch = batchDim->second;
  std::string model = stpar::stp::getFileName(module.getLoc());
  if (model.empty())
    model = "module";

  stpar::analysis::ConversionOptions conversion;
  conversion.batchSize = batch;
  conversion.fp32 = o.fp32;
  mlir::FailureOr<stpar::analysis::OperatorGraph> graph =
      stpar::analysis::convertToOperatorGraph(func, conversion);
  if (mlir::failed(graph))
    return makeError("the model cannot be costed (see the errors above)");
  if (!o.expertLoad.empty()) {
    // The routing histogram of every MoE layer (FasterMoE's model input).
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
        llvm::MemoryBuffer::getFile(o.expertLoad, /*IsText=*/true);
    if (!file)
      return makeError("cannot read the expert load '" + o.expertLoad +
                       "': " + file.getError().message());
    bool any = false;
    for (stpar::analysis::GraphOperator &gop : graph->ops) {
      if (!gop.op.moe)
        continue;
      any = true;
      int64_t experts = gop.op.loops[gop.op.moe->expertLoop].extent;
      Expected<ExpertLoad> load =
          parseExpertLoad((*file)->getBuffer(), experts, o.expertLoad);
      if (!load)
        return makeError("MoE layer '" + gop.op.name +
                         "': " + toString(load.takeError()));
      gop.op.moe->load = std::move(load->share);
    }
    if (!any)
      return makeError("--expert-load '" + o.expertLoad +
                       "' given, but the model has no MoE layer (stp.moe)");
  }
  if (graph->ops.empty()) {
    module.getContext()->getOrLoadDialect<stpar::stp::STPDialect>();
    // Every output is a graph input, a constant or a view of one: there is
    // nothing to partition, and every device holds every value.
    std::string text = "the model has no operator to plan (its outputs are "
                       "graph inputs, constants or views of them): every "
                       "device runs the whole program";
    if (o.notes)
      *o.notes << model << ": note: " << text << "\n";
    else
      mlir::emitRemark(module.getLoc()) << text;
    json::Object mesh{
        {"axes", json::Array{json::Object{{"name", "x0"}, {"size", devices}}}},
        {"micro_batches", 1},
        {"zero_stage", 0}};
    json::Value trivial = json::Object{{"format", "stpar-plan"},
                                       {"version", 1},
                                       {"model", model},
                                       {"cluster", cluster.name},
                                       {"devices", devices},
                                       {"mesh", std::move(mesh)},
                                       {"operators", json::Array()}};
    if (raw_ostream *table = o.table)
      *table << "model " << model << " (0 operators) on " << devices
             << " devices of " << cluster.name
             << ": nothing to plan, every device runs the whole program\n";
    return stpar::stp::applyPlan(module, trivial, cluster,
                                 stpar::stp::ApplyPlanOptions());
  }
  Expected<stpar::analysis::BridgedProblem> bridged =
      stpar::analysis::buildSearchProblem(*graph, sys::path::stem(model),
                                          o.cluster, devices);
  if (!bridged)
    return bridged.takeError();
  Problem &problem = bridged->problem;
  if (o.memoryLimit > 0)
    problem.memoryLimit = o.memoryLimit;
  auto note = [&](const std::string &text) {
    if (o.notes)
      *o.notes << model << ": note: " << text << "\n";
    else
      mlir::emitRemark(module.getLoc()) << text;
  };
  for (const std::string &text : graph->notes)
    note(text);
  for (const std::string &text : bridged->notes)
    note(text);

  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster.device.bf16 <= 0)
    eff.dtype = DType::FP16;
  if (o.fp32)
    eff.dtype = DType::FP32;
  if (o.zeroStage < -1 || o.zeroStage > 3)
    return makeError("ZeRO stage " + Twine(o.zeroStage) +
                     " does not exist (0, 1, 2 or 3)");
  bool megatronGrid = StringRef(o.strategy).starts_with("megatron:");
  bool megatron =
      megatronGrid || o.strategy == "megatron" || o.strategy == "megatron-sp";
  if (o.zeroStage >= 0 && megatron)
    return makeError(megatronGrid
                         ? "--strategy " + o.strategy +
                               ": give the ZeRO stage as zero= in it"
                         : "the '" + o.strategy +
                               "' baseline has no ZeRO stage to force (it is "
                               "ZeRO 0); use dp, search, spatial or temporal, "
                               "or megatron:...,zero=Z");
  SearchOptions opts = makeSearchOptions(o.maxMeshAxes, o.exact, o.progress);
  bool sequenceParallel = o.strategy == "megatron-sp";
  if (megatronGrid) {
    // One Megatron-LM configuration. The bound batch dim is the global
    // batch of one step; mb (sequences per micro-batch and data-parallel
    // rank) sets the micro-batches, m = batch / (mb * dp), default 1.
    Expected<stpar::analysis::IRStrategy> parsed =
        stpar::analysis::parseIRStrategy(o.strategy);
    if (!parsed)
      return parsed.takeError();
    const MegatronStrategy &m = parsed->megatron;
    int64_t layers = int64_t(graph->layers.size());
    if (m.pp > 1 && (problem.layers < 2 || problem.layers % m.pp))
      return makeError(
          "megatron: pp=" + Twine(m.pp) + " must divide the " + Twine(layers) +
          " transformer layers found in the model (the search's pipeline "
          "stages hold equal blocks of repeated layers" +
          (problem.layers < 2 ? "; the layers were not folded into one" : "") +
          ")");
    if (m.interleave > 1 && problem.layers % (m.pp * m.interleave))
      return makeError("megatron: vp=" + Twine(m.interleave) +
                       ": pp*vp = " + Twine(m.pp * m.interleave) +
                       " must divide the " + Twine(layers) +
                       " transformer layers (each device holds vp equal "
                       "chunks of layers)");
    if (m.pp > 1 && !o.pipeline)
      return makeError("megatron: pp=" + Twine(m.pp) +
                       ": this plan is made without pipeline stages (the "
                       "emitted program has none yet); `stpar plan` costs "
                       "pipelined configurations");
    if (parsed->globalBatch && *parsed->globalBatch != batch)
      return makeError("megatron: gb=" + Twine(*parsed->globalBatch) +
                       " but the bound batch dim (the global batch of one "
                       "step) is " +
                       Twine(batch));
    int64_t mb = parsed->microBatchGiven ? m.mb : batch / m.dp;
    if (mb < 1 || batch % (mb * m.dp))
      return makeError("megatron: the batch " + Twine(batch) +
                       " is not a multiple of mb*dp = " +
                       Twine(std::max<int64_t>(mb, 1) * m.dp));
    opts.megatron.tp = m.tp;
    opts.megatron.pp = m.pp;
    opts.megatron.dp = m.dp;
    opts.megatron.microBatches = batch / (mb * m.dp);
    if (m.interleave > 1 && opts.megatron.microBatches % m.pp)
      return makeError("megatron: vp=" + Twine(m.interleave) + " needs the " +
                       Twine(opts.megatron.microBatches) +
                       " micro-batches (batch / (mb * dp)) to be a multiple "
                       "of pp=" +
                       Twine(m.pp));
    opts.megatron.zeroStage = m.zeroStage;
    if (m.recompute == cost::Recompute::Selective && o.isForProgram())
      return makeError("megatron: recompute=selective: the emitted program "
                       "recomputes fully or not at all (use recompute=full "
                       "or none); `stpar plan` costs selective "
                       "recomputation");
    opts.megatron.interleave = m.interleave;
    opts.megatron.overlapGradSync = m.overlapGradSync;
    opts.megatron.gpipe = m.gpipe;
    opts.recompute = {m.recompute};
    sequenceParallel = m.sequenceParallel;
  }
  if (o.zeroStage >= 0)
    opts.zeroStages = {o.zeroStage};
  opts.solver.space.temporal = o.strategy != "spatial";
  opts.solver.space.onlyTemporal = o.strategy == "temporal";
  for (const std::string &f : o.fixed) {
    // At the first '=' (a temporal partition holds "m=.. n=.. k=..").
    auto [name, spec] = StringRef(f).split('=');
    opts.solver.space.fixed.push_back({name.trim().str(), spec.trim().str()});
  }
  if (!o.mesh.empty())
    opts.meshShapes = {o.mesh};
  if (!o.pipeline)
    opts.pipeline = false;
  // The training step recomputes fully or not at all.
  if (o.isForProgram())
    llvm::erase(opts.recompute, stpar::cost::Recompute::Selective);
  // The Megatron baseline follows its splits through the graph's views
  // (the bridged problem keeps no edge through a reshape or transpose).
  const stpar::analysis::OperatorGraph &graphRef = *graph;
  const std::vector<unsigned> &graphOpOf = bridged->graphOpOfFlat;
  // Why a Megatron grid point did not apply (for the error when none does).
  std::string megatronWhy;
  opts.megatronPartitions =
      [&graphRef, &graphOpOf, &problem, &megatronWhy](
          const FlatGraph &flat, const Mesh &mesh,
          bool sp) -> Expected<std::optional<std::vector<Partition>>> {
    const unsigned kTP = 2;
    if (flat.ops.size() != graphOpOf.size())
      return makeError("internal: flattened operators and graph operators "
                       "differ");
    Expected<stpar::analysis::MegatronLoops> loops =
        stpar::analysis::chooseMegatronLoops(graphRef, mesh.axes[kTP].size, sp);
    if (!loops) {
      megatronWhy = toString(loops.takeError());
      return std::nullopt;
    }
    std::vector<Partition> parts;
    for (auto [i, op] : llvm::enumerate(flat.ops))
      parts.push_back(makeMegatronPartition(op, problem.batchLoop,
                                            loops->tpLoop[graphOpOf[i]], mesh));
    return std::optional<std::vector<Partition>>(std::move(parts));
  };
  // --explain names an operator of the problem (checked before searching).
  if (!o.explain.empty() && llvm::none_of(problem.ops, [&](const Operator &op) {
        return op.name == o.explain;
      }))
    return makeError("--explain: no planned operator is named '" + o.explain +
                     "' (the plan table's names; a layer operator by its "
                     "first layer's name)");
  Expected<SearchResult> result =
      megatron ? searchMegatron(problem, cluster, eff, sequenceParallel, opts)
      : o.strategy == "dp"
          ? searchZeRO(problem, cluster, eff, std::max(o.zeroStage, 0), o.mesh)
          : stpar::search::search(problem, cluster, eff, opts);
  if (!result)
    return result.takeError();
  if (!result->best) {
    if (result->configurations == 0 || !std::isfinite(result->smallestMemory))
      return makeError(
          "no '" + o.strategy + "' plan applies to " + Twine(devices) +
          " devices" + (o.mesh.empty() ? "" : " on the given --mesh") +
          (megatronWhy.empty() ? " (e.g. the batch " + Twine(batch) +
                                     " or another loop does not divide over "
                                     "the devices)"
                               : " (" + Twine(megatronWhy) + ")"));
    return makeError(describeNoPlan(*result));
  }
  // A searched plan's axes are named by their roles (dp, tp, ...) from
  // here on: in the table, plan.json and the IR.
  FlatGraph g = flatten(problem);
  std::vector<std::string> searchNames;
  if (result->best->label.empty())
    searchNames = nameAxesByRole(problem, g, *result->best);
  const Plan &plan = *result->best;
  // The Megatron plan's operators that stay replicated across tp, and why
  // (warnings; also in the plan's "warnings").
  json::Array warnings;
  if (megatron && plan.config.mesh.axes.size() == 3 &&
      plan.config.mesh.axes[2].size > 1) {
    Expected<stpar::analysis::MegatronLoops> loops =
        stpar::analysis::chooseMegatronLoops(
            *graph, plan.config.mesh.axes[2].size, sequenceParallel);
    if (loops)
      for (const std::string &text : loops->warnings) {
        if (o.notes)
          *o.notes << model << ": warning: " << text << "\n";
        else
          mlir::emitWarning(module.getLoc()) << text;
        warnings.push_back(text);
      }
    else
      consumeError(loops.takeError());
  }
  if (g.ops.size() != bridged->graphOpOfFlat.size())
    return makeError("internal: flattened operators and graph operators "
                     "differ");
  Expected<std::vector<OpReport>> reports =
      reportOps(g, problem, plan, cluster, eff);
  if (!reports)
    return reports.takeError();

  if (raw_ostream *table = o.table) {
    *table << "model " << model << " (" << graph->ops.size()
           << " operators, " << problem.ops.size() << " planned"
           << (problem.layers > 1 ||
                       llvm::is_contained(problem.sections, Section::Layer)
                   ? " with a layer block x" + std::to_string(problem.layers)
                   : std::string())
           << ") on " << devices << " devices of " << cluster.name << "\n";
    *table << "batch " << batch << " sequences per step; ";
    if (o.strategy == "search" || o.strategy == "spatial" ||
        o.strategy == "temporal")
      *table << "searched " << result->configurations << " configurations"
             << (result->stats.isExact() ? " (exact DP)" : " (capped DP)");
    else
      *table << "strategy " << o.strategy << " (" << plan.label << ")";
    if (o.strategy != "search")
      *table << ", --strategy " << o.strategy;
    *table << "\n";
    printONNXTable(*table, problem, g, plan, *reports, searchNames);
    if (!o.explain.empty())
      if (Error e = explainOperator(*table, o.explain, problem, g, plan,
                                    cluster, eff, opts.solver.space))
        return e;
  }

  // The plan goes into the IR as attributes (PlanAttributes.h); plan.json
  // is read back from them.
  stpar::stp::OperatorNames irNames(func.getBody().front());
  Expected<std::unique_ptr<Instance>> inst =
      Instance::create(problem, cluster, plan.config, eff, SolverOptions());
  if (!inst)
    return inst.takeError();
  Expected<std::vector<PlannedCommunication>> planned =
      (*inst)->getCommunication(plan.partitions);
  if (!planned)
    return planned.takeError();
  // The objective's cost split as `stpar cost` prints it (memory against
  // the device capacity, also where a lifted limit let the plan through).
  Expected<StepBreakdown> step = (*inst)->getBreakdown(plan.partitions);
  if (!step)
    return step.takeError();
  step->deviceCapacity = double(cluster.device.hbmCapacity);
  step->fitsMemory = step->peakMemory.getTotal() <= step->deviceCapacity;
  json::Value searched =
      planJSON(model, cluster, problem, g, *bridged, *graph, irNames, *result,
               *reports, *planned, searchNames);
  {
    json::Object &root = *searched.getAsObject();
    root["step"] = toJSON(*step);
    root["warnings"] = std::move(warnings);
    root["graph"] = json::Object{{"operators", int64_t(graph->ops.size())},
                                 {"layers", int64_t(graph->layers.size())},
                                 {"parameters", graph->getParameterCount()},
                                 {"batch", batch}};
  }
  std::vector<ComparisonRow> comparison;
  if (o.compare) {
    comparison = compareBaselines(
        problem, cluster, eff, opts, plan,
        o.strategy == "search" ? "stpar search" : "--strategy " + o.strategy);
    (*searched.getAsObject())["compare"] = toJSON(comparison);
  }
  if (Error error = stpar::stp::applyPlan(module, searched, cluster,
                                          stpar::stp::ApplyPlanOptions()))
    return error;
  if (o.compare && o.table)
    printComparisonRows(*o.table, comparison);
  return Error::success();
}
