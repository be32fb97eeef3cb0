//===- search-benchmark.cpp - partition search over model zoo shapes ------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar-bench-search [--protocol full|primepar] [--quick] [--only NAME]
// [--devices N] [--exact | --caps C,S,F] [--progress] [--plans] [--space]
// [--trace] [--search-only] [--layers N] [--no-layer-price]
// [--no-pareto-first] [--no-relaxation-probes]`:
// runs the partition search (exact by default; with PrimePar's protocol
// capped by default, docs/search.md) on PrimePar's models (OPT, Llama-2, BLOOM
// shapes through the transformer builder) on v100-sxm2-32g-4x8 at 4, 8, 16 and
// 32 devices, plus GPT-3 175B on 1024 and 1T on 3072 A100s, and prints one
// table: search time, predicted step time of the chosen plan, of the best
// Megatron grid (with and without sequence parallelism) and of spatial-only
// search, the speedups, peak-memory ratios and predicted MFU (stpar's plan and
// the Megatron grid's). All numbers come from the search objective
// (docs/search.md). `--protocol primepar` runs PrimePar's comparison instead
// (runPrimeParProtocol). `--trace` prints a line per configuration's DP of
// the timed search on stderr (printTrace); `--search-only` (PrimePar's
// protocol) stops each row after the timed search (no baselines), and
// `--layers N` (PrimePar's protocol) runs N layers (at most the model's)
// instead of the largest count that fits under both; `--no-layer-price`,
// `--no-pareto-first` and `--no-relaxation-probes` turn
// SolverOptions::layerPrice, SolverOptions::paretoFirstNodes and
// SearchOptions::probeRelaxations off (ablations). Not a test.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/GPTProblem.h"
#include "stpar/Search/Solver.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace {
struct Model {
  const char *name;
  int64_t layers, hidden, heads, kvHeads, ffn, vocab;
  bool gated;
};

const Model kModels[] = {
    {"OPT-6.7B", 32, 4096, 32, 0, 16384, 50272, false},
    {"OPT-175B", 96, 12288, 96, 0, 49152, 50272, false},
    {"Llama-2-7B", 32, 4096, 32, 0, 11008, 32000, true},
    {"Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, true},
    {"BLOOM-7B1", 30, 4096, 32, 0, 16384, 250880, false},
    {"BLOOM-176B", 70, 14336, 112, 0, 57344, 250880, false},
};

double seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a)
      .count();
}

template <typename... Ts> std::string sformat(const char *fmt, Ts... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

/// "geo-mean speedup over BASELINE at 32 devices: ..." (nothing when no
/// model has a 32-device row).
void printGeoMean(ArrayRef<double> speedups, StringRef baseline) {
  if (speedups.empty())
    return;
  double logSum = 0;
  for (double s : speedups)
    logSum += std::log(s);
  outs() << "geo-mean speedup over " << baseline << " at 32 devices: "
         << format("%.3f (%zu models)\n",
                   std::exp(logSum / double(speedups.size())), speedups.size());
}

/// Operators (one layer's, plus pre and post) using the temporal primitive.
unsigned countTemporal(const Problem &p, const Plan &plan) {
  unsigned n = 0;
  FlatGraph g = flatten(p);
  for (unsigned i = 0; i < g.ops.size(); ++i)
    if (plan.partitions[i].temporal && g.layerOf[i] <= 0)
      ++n;
  return n;
}

/// "pp x mesh m=.. [vp=..] z=.. [rc] t=..".
std::string describePlan(const Problem &p, const Plan &plan) {
  std::string desc;
  for (const auto &a : plan.config.mesh.axes)
    desc += (desc.empty() ? "" : "x") + std::to_string(a.size);
  return desc + " m=" + std::to_string(plan.config.microBatches) +
         (plan.config.interleave > 1
              ? " vp=" + std::to_string(plan.config.interleave)
              : std::string()) +
         " z=" + std::to_string(plan.config.zeroStage) +
         (plan.config.recompute == Recompute::Full        ? " rc"
          : plan.config.recompute == Recompute::Selective ? " rc=sel"
                                                          : "") +
         " t=" + std::to_string(countTemporal(p, plan));
}

TransformerShape makeShape(const Model &m, int64_t layers, int64_t seq,
                           int64_t batch) {
  TransformerShape shape;
  shape.model = {layers, m.hidden, m.heads, m.ffn, m.vocab, seq, batch};
  shape.kvHeads = m.kvHeads;
  shape.gatedFFN = m.gated;
  return shape;
}

/// A plan's step time in PrimePar's Fig. 9 categories (PlanCost's
/// breakdown), milliseconds; the temporal ring split into transfers not
/// hidden, start-ups and alignments.
struct Breakdown {
  double compute, collectives, ringExposed, ringStartup, ringAlignment,
      redistribution, syncOpt, total;
};

Breakdown getBreakdown(const PlanCost &c) {
  return {c.compute * 1e3,
          (c.collectives + c.relayoutReductions) * 1e3,
          c.ring.exposed * 1e3,
          c.ring.startup * 1e3,
          c.ring.alignment * 1e3,
          (c.relayout - c.relayoutReductions) * 1e3,
          (c.exposedSync + c.optimizer) * 1e3,
          c.stepTime * 1e3};
}

/// One line per configuration's DP on stderr (`--trace`): the
/// configuration, its lower bound and the bound it ran under, its wall time
/// and where the time went (DPStats's phases: states / seconds), and its
/// answer.
void printTrace(const ConfigurationTrace &t) {
  std::string config;
  raw_string_ostream os(config);
  printPlanConfig(os, t.config);
  config = StringRef(config).rtrim().str();
  const DPStats &s = t.stats;
  std::string phases;
  auto phase = [&](const char *name, const DPStats::Phase &p) {
    if (p.states > 0 || p.seconds > 0)
      phases += sformat(" %s %.2fM/%.2fs", name, p.states / 1e6, p.seconds);
  };
  phase("relaxation", s.relaxation);
  phase("seed", s.seed);
  phase("layer-price", s.layerPrice);
  phase("quick-try", s.quickTry);
  phase("pareto", s.pareto);
  if (s.droppedAnchors)
    phases += sformat(" (%llu carry layouts dropped)",
                      (unsigned long long)s.droppedAnchors);
  const char *pass = t.capped                  ? "(capped) "
                     : t.retry                 ? "(retry) "
                     : t.pass == DPPass::Cheap ? "(cheap) "
                     : t.pass == DPPass::Rest  ? "(rest) "
                                               : "";
  std::string answer =
      t.stepTime ? sformat("plan %.1f ms", *t.stepTime * 1e3) : t.message;
  if (!t.settled)
    answer = "memory binds, Pareto DP later; priced seed " +
             (t.stepTime ? answer : std::string("none"));
  errs() << format("trace: %s%s | lower bound %.1f ms, bound %.1f ms | "
                   "%.3f s, %.2fM states:",
                   pass, config.c_str(), t.lowerBound * 1e3, t.bound * 1e3,
                   t.seconds, s.statesVisited / 1e6)
         << phases << " | " << answer << "\n";
}

/// Protocol (1) of issue 12, PrimePar's (ASPLOS'24 Sec. 6.1): the six
/// models at 4, 8, 16, 32 V100s of the PrimePar testbed, no pipeline, no
/// ZeRO; stpar searches spatial partitions and the temporal primitive,
/// Megatron is the best data x tensor grid (Megatron's tensor parallelism as
/// PrimePar ran it: no sequence parallelism). Both may recompute and
/// accumulate gradients over micro-batches. A model that does not fit whole
/// under both runs with the largest layer count that does.
int runPrimeParProtocol(const std::string &only, int64_t onlyDevices,
                        const SolverOptions &caps, bool plans, bool trace,
                        bool searchOnly, int64_t fixedLayers,
                        bool relaxationProbes) {
  const char *clusterName = "v100-sxm2-32g-4x8";
  Expected<Cluster> cluster = getPreset(clusterName);
  if (!cluster) {
    errs() << toString(cluster.takeError()) << "\n";
    return 1;
  }
  EfficiencyModel eff = getDefaultEfficiency();
  eff.dtype = DType::FP16;
  SearchOptions opts;
  opts.maxMeshAxes = 3;
  opts.pipeline = false;
  opts.zeroStages = {0};
  opts.microBatchChoices = 0;
  opts.solver = caps;
  opts.probeRelaxations = relaxationProbes;
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  SearchOptions forcedOpts = opts;
  forcedOpts.solver.space.onlyTemporal = true;
  forcedOpts.squareMeshesOnly = true;
  // (Below: its exact DP may pass the memory budget.)
  forcedOpts.retryOverBudget = false;
  SearchOptions megatronOpts = opts;
  megatronOpts.solver = SolverOptions();

  outs() << "PrimePar's protocol (ASPLOS'24 Sec. 6.1) on " << clusterName
         << ": no pipeline, ZeRO 0; Megatron = best dp x tp grid without "
            "sequence parallelism\n";
  outs() << "caps: candidates/op " << opts.solver.maxCandidates << ", states "
         << opts.solver.maxStates << ", front " << opts.solver.maxFront
         << " (0 = exact), mesh axes <= " << opts.maxMeshAxes << "\n";
  outs() << format("%-12s %5s %7s %7s %10s %10s %10s %6s %6s %6s %6s  %s\n",
                   "model", "devs", "layers", "wall s", "plan ms", "megatron",
                   "spatial", "x mega", "x spat", "mem/mg", "col/mg",
                   "plan (mesh, micro-batches, ZeRO, recompute, "
                   "temporal ops); megatron; forced temporal");
  struct Row {
    std::string name;
    int64_t devices, layers;
    Breakdown plan, megatron;
    std::optional<Breakdown> forced;
    bool forcedCapped = false;
  };
  std::vector<Row> rows;
  std::vector<double> speedups32;
  for (const Model &m : kModels)
    for (int64_t n : {4, 8, 16, 32}) {
      if (!only.empty() && !StringRef(m.name).contains(only))
        continue;
      if (onlyDevices && n != onlyDevices)
        continue;
      int64_t batch = 2 * n, seq = 2048;
      auto problemFor = [&](int64_t layers) {
        return buildTransformerProblem(makeShape(m, layers, seq, batch),
                                       clusterName, n);
      };
      // Largest layer count under which both stpar and the Megatron grid
      // find a plan (memory grows with the layers).
      auto fits = [&](int64_t layers) -> Expected<bool> {
        Problem p = problemFor(layers);
        Expected<SearchResult> a = search(p, *cluster, eff, opts);
        if (!a)
          return a.takeError();
        if (!a->best)
          return false;
        Expected<SearchResult> b =
            searchMegatron(p, *cluster, eff, false, megatronOpts);
        if (!b)
          return b.takeError();
        return b->best.has_value();
      };
      int64_t layers = m.layers;
      if (fixedLayers > 0) {
        layers = std::min(fixedLayers, m.layers);
      } else {
        Expected<bool> whole = fits(layers);
        if (!whole) {
          errs() << toString(whole.takeError()) << "\n";
          return 1;
        }
        if (!*whole) {
          int64_t lo = 0, hi = m.layers; // fits(lo) (or lo = 0), !fits(hi)
          while (hi - lo > 1) {
            int64_t mid = (lo + hi) / 2;
            Expected<bool> f = fits(mid);
            if (!f) {
              errs() << toString(f.takeError()) << "\n";
              return 1;
            }
            (*f ? lo : hi) = mid;
          }
          layers = lo;
        }
      }
      if (layers == 0) {
        outs() << format("%-12s %5lld %7s  not even one layer fits under "
                         "both\n",
                         m.name, (long long)n, "0");
        continue;
      }
      Problem p = problemFor(layers);
      SearchOptions timedOpts = opts;
      if (trace)
        timedOpts.trace = printTrace;
      auto t0 = std::chrono::steady_clock::now();
      Expected<SearchResult> best = search(p, *cluster, eff, timedOpts);
      double wall = seconds(t0);
      if (searchOnly) {
        if (!best) {
          errs() << "error: " << m.name << " at " << n
                 << " devices: " << toString(best.takeError()) << "\n";
          return 1;
        }
        outs() << format("%-12s %5lld %7lld %7.3f ", m.name, (long long)n,
                         (long long)layers, wall)
               << (best->best
                       ? sformat("%10.1f  %s", best->best->cost.stepTime * 1e3,
                                 describePlan(p, *best->best).c_str())
                       : std::string("no plan"))
               << sformat("; %zu solved, %zu retried, %zu of %zu probes "
                          "raised a lower bound\n",
                          best->solvedConfigurations,
                          best->retriedConfigurations, best->raisedBounds,
                          best->boundProbes);
        outs().flush();
        continue;
      }
      Expected<SearchResult> spatial = search(p, *cluster, eff, spatialOpts);
      Expected<SearchResult> mega =
          searchMegatron(p, *cluster, eff, false, megatronOpts);
      // The forced baseline is the hardest problem of the row (every linear
      // temporal, a wide gap between its fastest plans and those that
      // fit): where its exact DP passes the memory budget, the row keeps
      // the capped forced plan (48/4096/3, the capped table's caps) and
      // says so, without retrying the configuration under a lower bound
      // (each try can take minutes).
      Expected<SearchResult> forced = search(p, *cluster, eff, forcedOpts);
      bool forcedCapped = false;
      if (!forced && !forcedOpts.solver.isCapped()) {
        std::string message = toString(forced.takeError());
        if (!isSolverFailure(message)) {
          forced = createStringError(inconvertibleErrorCode(), message);
        } else {
          SearchOptions capped = forcedOpts;
          capped.solver.maxCandidates = 48;
          capped.solver.maxStates = 4096;
          capped.solver.maxFront = 3;
          forced = search(p, *cluster, eff, capped);
          forcedCapped = true;
        }
      }
      for (Expected<SearchResult> *r : {&best, &spatial, &mega, &forced})
        if (!*r) {
          errs() << "error: " << m.name << " at " << n
                 << " devices: " << toString(r->takeError()) << "\n";
          return 1;
        }
      if (!best->best || !spatial->best || !mega->best) {
        errs() << "error: " << m.name << " at " << n << " devices, " << layers
               << " layers: no "
               << (!best->best      ? "stpar"
                   : !spatial->best ? "spatial-only"
                                    : "Megatron")
               << " plan fits although the layer count was chosen to fit\n";
        return 1;
      }
      const PlanCost &c = best->best->cost, &mc = mega->best->cost;
      double speedup = mc.stepTime / c.stepTime;
      if (n == 32)
        speedups32.push_back(speedup);
      Row row{m.name,           n,  layers,      getBreakdown(c),
              getBreakdown(mc), {}, forcedCapped};
      std::string desc = describePlan(p, *best->best) + "; megatron " +
                         mega->best->label + "; forced ";
      if (forced->best) {
        row.forced = getBreakdown(forced->best->cost);
        desc += describePlan(p, *forced->best) +
                sformat(" %.1f ms", forced->best->cost.stepTime * 1e3) +
                (forcedCapped ? " (capped: its exact DP passed the memory "
                                "budget)"
                              : "");
      } else {
        desc += "does not fit";
      }
      rows.push_back(row);
      std::string layerText =
          std::to_string(layers) + "/" + std::to_string(m.layers);
      outs() << format("%-12s %5lld %7s %7.3f %10.1f %10.1f %10.1f %6.3f "
                       "%6.3f %6.3f %6.3f  %s\n",
                       m.name, (long long)n, layerText.c_str(), wall,
                       c.stepTime * 1e3, mc.stepTime * 1e3,
                       spatial->best->cost.stepTime * 1e3, speedup,
                       spatial->best->cost.stepTime / c.stepTime,
                       c.getMemory() / mc.getMemory(),
                       row.megatron.collectives > 0
                           ? row.plan.collectives / row.megatron.collectives
                           : NAN,
                       desc.c_str());
      if (plans) {
        printPlan(outs(), p, *best->best);
        outs() << "megatron:\n";
        printPlan(outs(), p, *mega->best);
        if (forced->best) {
          outs() << "forced temporal:\n";
          printPlan(outs(), p, *forced->best);
        }
        outs() << "\n";
      }
      outs().flush();
    }
  if (searchOnly)
    return 0;
  printGeoMean(speedups32, "the best Megatron dp x tp grid");
  // Where the time goes (PrimePar Fig. 9's categories), and for plans
  // without the temporal primitive the term that makes it lose when forced
  // onto every linear layer (largest increase over the chosen plan).
  outs() << "\nbreakdown, ms per step: compute; collectives (in operators "
            "+ partial-sum reductions); temporal ring: transfers not hidden "
            "behind compute, start-ups, alignments (skew, re-layouts around "
            "the steps); redistribution; exposed grad sync + optimizer\n";
  outs() << format("%-12s %5s %-9s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n",
                   "model", "devs", "plan", "compute", "collect.", "ring-exp",
                   "ring-st", "ring-al", "redistr.", "sync+opt", "total",
                   "forced temporal loses on");
  for (const Row &r : rows) {
    auto line = [&](const char *which, const Breakdown &b,
                    const std::string &note) {
      outs() << format("%-12s %5lld %-9s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f "
                       "%9.1f %9.1f  %s\n",
                       r.name.c_str(), (long long)r.devices, which, b.compute,
                       b.collectives, b.ringExposed, b.ringStartup,
                       b.ringAlignment, b.redistribution, b.syncOpt, b.total,
                       note.c_str());
    };
    line("stpar", r.plan, "");
    line("megatron", r.megatron, "");
    if (!r.forced)
      continue;
    const Breakdown &f = *r.forced, &b = r.plan;
    std::pair<double, const char *> deltas[] = {
        {f.compute - b.compute, "compute"},
        {f.collectives - b.collectives, "collectives"},
        {f.ringExposed - b.ringExposed, "ring not hidden"},
        {f.ringStartup - b.ringStartup, "ring start-ups"},
        {f.ringAlignment - b.ringAlignment, "ring alignment"},
        {f.redistribution - b.redistribution, "redistribution"},
        {f.syncOpt - b.syncOpt, "sync+opt"}};
    auto worst = std::max_element(
        std::begin(deltas), std::end(deltas),
        [](const auto &x, const auto &y) { return x.first < y.first; });
    std::string note = f.total <= b.total * (1 + 1e-9)
                           ? "(ties or wins)"
                           : sformat("%s +%.1f ms of +%.1f ms", worst->second,
                                     worst->first, f.total - b.total);
    line(r.forcedCapped ? "forced-tc" : "forced-t", f,
         note + (r.forcedCapped ? " (forced plan capped)" : ""));
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  bool quick = false, progress = false, plans = false, space = false;
  bool trace = false, searchOnly = false, noLayerPrice = false;
  bool noParetoFirst = false, noRelaxationProbes = false;
  // The DP's caps: candidates per operator, states per step, front points
  // (0 = exact).
  // Default: exact for the full protocol, the default caps for PrimePar's
  // (whose exact search finishes only its 7B rows, not all of them:
  // bench/search/RESULTS.md).
  std::optional<SolverOptions> capsOption;
  SolverOptions caps;
  std::string only, protocol = "full";
  int64_t onlyDevices = 0, fixedLayers = 0;
  // A positive integer option's value, or an error naming it.
  auto positive = [&](const char *option, const char *text, int64_t &value) {
    if (StringRef(text).getAsInteger(10, value) || value <= 0) {
      errs() << "stpar-bench-search: " << option
             << " expects a positive integer, got '" << text << "'\n";
      return false;
    }
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--exact"))
      capsOption = SolverOptions();
    else if (!std::strcmp(argv[i], "--caps") && i + 1 < argc) {
      capsOption.emplace();
      SolverOptions &caps = *capsOption;
      SmallVector<StringRef> parts;
      StringRef(argv[++i]).split(parts, ',');
      if (parts.size() != 3 || parts[0].getAsInteger(10, caps.maxCandidates) ||
          parts[1].getAsInteger(10, caps.maxStates) ||
          parts[2].getAsInteger(10, caps.maxFront)) {
        errs() << "stpar-bench-search: --caps expects C,S,F (candidates, "
                  "states, front points; non-negative integers, 0 = "
                  "uncapped), got '"
               << argv[i] << "'\n";
        return 1;
      }
    } else if (!std::strcmp(argv[i], "--progress"))
      progress = true;
    else if (!std::strcmp(argv[i], "--plans"))
      plans = true;
    else if (!std::strcmp(argv[i], "--space"))
      space = true;
    else if (!std::strcmp(argv[i], "--trace"))
      trace = true;
    else if (!std::strcmp(argv[i], "--search-only"))
      searchOnly = true;
    else if (!std::strcmp(argv[i], "--no-layer-price"))
      noLayerPrice = true;
    else if (!std::strcmp(argv[i], "--no-pareto-first"))
      noParetoFirst = true;
    else if (!std::strcmp(argv[i], "--no-relaxation-probes"))
      noRelaxationProbes = true;
    else if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) {
      if (!positive("--layers", argv[++i], fixedLayers))
        return 1;
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) {
      if (!positive("--devices", argv[++i], onlyDevices))
        return 1;
    } else if (!std::strcmp(argv[i], "--protocol") && i + 1 < argc)
      protocol = argv[++i];
    else {
      errs()
          << "stpar-bench-search: unknown option '" << argv[i]
          << "'\nusage: stpar-bench-search [--protocol full|primepar] "
             "[--quick] [--only NAME] [--devices N] [--exact | --caps C,S,F] "
             "[--progress] [--plans] [--space] [--trace] "
             "[--search-only] [--layers N] [--no-layer-price] "
             "[--no-pareto-first] [--no-relaxation-probes]\n";
      return 1;
    }
  }
  if (capsOption)
    caps = *capsOption;
  else if (protocol == "primepar")
    caps.setDefaultCaps();
  caps.layerPrice = !noLayerPrice;
  if (noParetoFirst)
    caps.paretoFirstNodes = 0;
  if (protocol == "primepar")
    return runPrimeParProtocol(only, onlyDevices, caps, plans, trace,
                               searchOnly, fixedLayers, !noRelaxationProbes);
  if (protocol != "full") {
    errs() << "stpar-bench-search: unknown protocol '" << protocol
           << "' (full or primepar)\n";
    return 1;
  }
  EfficiencyModel eff = getDefaultEfficiency();
  struct Run {
    const Model *model;
    std::string cluster;
    int64_t devices, seq, batch;
    /// SearchOptions::microBatchChoices of the search.
    unsigned microBatchChoices;
  };
  std::vector<Run> runs;
  for (const Model &m : kModels)
    for (int64_t n : {4, 8, 16, 32})
      runs.push_back({&m, "v100-sxm2-32g-4x8", n, 2048, 2 * n, 0});
  static const Model gpt3{"GPT-3-175B", 96, 12288, 96, 0, 49152, 51200, false};
  static const Model gpt1t{"GPT-1T", 128, 25600, 160, 0, 102400, 51200, false};
  runs.push_back({&gpt3, "dgx-a100-80g-128", 1024, 2048, 1536, 0});
  runs.push_back({&gpt1t, "dgx-a100-80g-384", 3072, 2048, 3072, 0});
  // The same two on DGX H100 (same node count; NVLink 4 and 8 x 400 Gb/s
  // NDR per node: docs/cluster-format.md), and the 7B GPT-style model on
  // four DGX H100 nodes.
  runs.push_back({&kModels[0], "dgx-h100-4", 32, 2048, 64, 0});
  runs.push_back({&gpt3, "dgx-h100-128", 1024, 2048, 1536, 0});
  runs.push_back({&gpt1t, "dgx-h100-384", 3072, 2048, 3072, 0});

  SearchOptions opts;
  opts.maxMeshAxes = 3;
  // Micro-batch counts: the Megatron grid (cheap: no DP) tries every
  // p * 2^i dividing the batch, as Megatron runs use up to batch / dp
  // micro-batches; so does the search, on every row (the 1024- and
  // 3072-device rows tried m in {p, 2p, 4p} only until the exact search
  // became fast enough).
  SearchOptions megatronOpts = opts;
  megatronOpts.microBatchChoices = 0;
  opts.solver = caps;
  opts.probeRelaxations = !noRelaxationProbes;
  if (quick)
    opts.maxMeshAxes = 2;
  if (space)
    outs() << "candidate partitions per operator (smallest-largest over the "
              "meshes; no pipeline, one micro-batch)\n";
  else
    outs() << "caps: candidates/op " << opts.solver.maxCandidates << ", states "
           << opts.solver.maxStates << ", front " << opts.solver.maxFront
           << " (0 = exact), mesh axes <= " << opts.maxMeshAxes << "\n"
           << format("%-12s %5s %7s %7s %10s %10s %10s %10s %6s %6s %6s "
                     "%6s %6s %5s %5s %5s %11s  %s\n",
                     "model", "devs", "wall s", "cpu s", "plan ms", "megatron",
                     "zero-3", "spatial", "x mega", "x z3", "x spat", "mem/mg",
                     "mem/sp", "mfu", "mfu_m", "mfu_z", "configs",
                     "plan (pp x mesh, micro-batches, ZeRO, "
                     "recompute, temporal ops)");
  std::vector<double> speedups32, speedupsZ3;
  for (const Run &r : runs) {
    if (!only.empty() && !StringRef(r.model->name).contains(only))
      continue;
    if (onlyDevices && r.devices != onlyDevices)
      continue;
    Expected<Cluster> cluster = getPreset(r.cluster);
    if (!cluster) {
      errs() << toString(cluster.takeError()) << "\n";
      return 1;
    }
    // V100 has no bf16: compute in fp16 there.
    eff.dtype = cluster->device.bf16 > 0 ? DType::BF16 : DType::FP16;
    Problem p = buildTransformerProblem(
        makeShape(*r.model, r.model->layers, r.seq, r.batch), r.cluster,
        r.devices);
    if (space) {
      // The per-operator partition space (docs/search.md): candidates of
      // each operator, smallest-largest over the meshes of 1, 2 and 3 axes
      // (no pipeline, one micro-batch), temporal primitive included.
      for (unsigned axes = 1; axes <= 3; ++axes) {
        std::vector<std::pair<size_t, size_t>> range(p.ops.size(),
                                                     {SIZE_MAX, 0});
        size_t meshes = 0;
        for (const std::vector<int64_t> &shape :
             enumerateMeshShapes(r.devices, 3)) {
          if (shape.size() != axes)
            continue;
          Config c;
          c.mesh = makeSearchMesh(1, shape);
          Expected<std::unique_ptr<Instance>> inst =
              Instance::create(p, *cluster, c, eff, SolverOptions());
          if (!inst) {
            errs() << toString(inst.takeError()) << "\n";
            return 1;
          }
          ++meshes;
          for (unsigned o = 0; o < p.ops.size(); ++o) {
            size_t n = (*inst)->getNumCandidates(o);
            range[o] = {std::min(range[o].first, n),
                        std::max(range[o].second, n)};
          }
        }
        if (!meshes)
          continue;
        outs() << format("%-12s %5lld  %u-axis meshes (%zu):", r.model->name,
                         (long long)r.devices, axes, meshes);
        for (unsigned o = 0; o < p.ops.size(); ++o)
          outs() << " " << p.ops[o].name << " " << range[o].first
                 << (range[o].first == range[o].second
                         ? std::string()
                         : "-" + std::to_string(range[o].second));
        outs() << "\n";
      }
      continue;
    }
    SearchOptions timedOpts = opts;
    timedOpts.microBatchChoices = r.microBatchChoices;
    if (trace)
      timedOpts.trace = printTrace;
    if (progress)
      timedOpts.progress = [&](size_t done, size_t total) {
        errs() << "\r" << r.model->name << " " << r.devices << ": " << done
               << "/" << total;
      };
    auto t0 = std::chrono::steady_clock::now();
    std::clock_t c0 = std::clock();
    Expected<SearchResult> best = search(p, *cluster, eff, timedOpts);
    double searchTime = seconds(t0);
    double searchCPU = double(std::clock() - c0) / CLOCKS_PER_SEC;
    if (progress)
      errs() << "\n";
    SearchOptions spatialOpts = opts;
    spatialOpts.microBatchChoices = r.microBatchChoices;
    spatialOpts.solver.space.temporal = false;
    Expected<SearchResult> spatial = search(p, *cluster, eff, spatialOpts);
    // Megatron-LM as it is run: with and without sequence parallelism and
    // the distributed optimizer (ZeRO-1 over dp); DeepSpeed: ZeRO-3 data
    // parallelism with gradient accumulation and activation checkpointing.
    std::vector<Expected<SearchResult>> megas;
    for (int z : {0, 1})
      for (bool sp : {false, true}) {
        SearchOptions o = megatronOpts;
        o.megatron.zeroStage = z;
        megas.push_back(searchMegatron(p, *cluster, eff, sp, o));
      }
    Expected<SearchResult> zero3 =
        searchZeRO(p, *cluster, eff, 3, megatronOpts);
    bool failed = !best || !spatial || !zero3;
    for (Expected<SearchResult> &m : megas)
      failed |= !m;
    if (failed) {
      errs() << "error\n";
      consumeError(best.takeError());
      consumeError(spatial.takeError());
      consumeError(zero3.takeError());
      for (Expected<SearchResult> &m : megas)
        consumeError(m.takeError());
      return 1;
    }
    auto ms = [](const SearchResult &s) {
      return s.best ? s.best->cost.stepTime * 1e3 : NAN;
    };
    const Plan *megaPlan = nullptr;
    for (Expected<SearchResult> &m : megas)
      if ((*m).best &&
          (!megaPlan || (*m).best->cost.stepTime < megaPlan->cost.stepTime))
        megaPlan = &*(*m).best;
    double megaBest = megaPlan ? megaPlan->cost.stepTime * 1e3 : NAN;
    double speedup = megaBest / ms(*best);
    // Model FLOPs per step, Megatron's convention (Narayanan et al., SC'21,
    // Sec. 5.1: F, dX and dW of every contraction, no recomputation):
    // 3 x the forward FLOPs of the problem's matmuls, batch per step. MFU =
    // model FLOPs / (step time * devices * peak FLOP/s of the dtype).
    double modelFlops = 0;
    FlatGraph flat = flatten(p);
    for (const Operator &op : flat.ops) {
      if (op.kind != OpKind::MatMul)
        continue;
      double points = 1;
      for (const LoopDim &l : op.loops)
        points *= double(l.extent);
      modelFlops += 3 * op.flopsPerPoint * points;
    }
    double peak = cluster->device.getPeak(eff.dtype);
    auto mfu = [&](double stepMs) {
      return modelFlops / (stepMs * 1e-3 * double(r.devices) * peak);
    };
    double memRatio = best->best && megaPlan
                          ? best->best->cost.getMemory() /
                                megaPlan->cost.getMemory()
                          : NAN;
    double memSpatial = best->best && spatial->best
                            ? best->best->cost.getMemory() /
                                  spatial->best->cost.getMemory()
                            : NAN;
    std::string desc = "no plan fits";
    if (best->best) {
      desc = describePlan(p, *best->best);
    } else {
      char buf[96];
      std::snprintf(buf, sizeof(buf), " (smallest %.1f GiB > %.1f GiB)",
                    best->smallestMemory / double(1 << 30),
                    best->memoryLimit / double(1 << 30));
      desc += buf;
    }
    // With pipeline stages: the schedule the cost model charges
    // (cost/PipelineSchedule.h) and its predicted bubble.
    auto schedule = [](const Plan &plan) {
      const Config &c = plan.config;
      if (c.getStages() < 2)
        return std::string();
      ScheduleShape shape = c.getSchedule();
      std::string kind = getScheduleName(shape.kind).str();
      if (shape.virtualStages > 1)
        kind += " v=" + std::to_string(shape.virtualStages);
      return sformat(" [%s, bubble %.1f ms = %.1f%% of the step]", kind.c_str(),
                     plan.cost.bubble * 1e3,
                     100 * plan.cost.bubble / plan.cost.stepTime);
    };
    if (best->best)
      desc += schedule(*best->best);
    if (megaPlan)
      desc += "; megatron " + megaPlan->label + schedule(*megaPlan);
    if (zero3->best)
      desc += "; deepspeed " + zero3->best->label;
    if (r.devices == 32 && r.cluster == "v100-sxm2-32g-4x8" &&
        std::isfinite(speedup))
      speedups32.push_back(speedup);
    if (r.devices == 32 && r.cluster == "v100-sxm2-32g-4x8" &&
        std::isfinite(ms(*zero3) / ms(*best)))
      speedupsZ3.push_back(ms(*zero3) / ms(*best));
    std::string configs = std::to_string(best->solvedConfigurations) + "/" +
                          std::to_string(best->configurations);
    outs() << format("%-12s %5lld %7.3f %7.3f %10.1f %10.1f %10.1f %10.1f "
                     "%6.3f %6.3f %6.3f %6.3f %6.3f %5.3f %5.3f %5.3f %11s  "
                     "%s\n",
                     r.model->name, (long long)r.devices, searchTime, searchCPU,
                     ms(*best), megaBest, ms(*zero3), ms(*spatial), speedup,
                     ms(*zero3) / ms(*best), ms(*spatial) / ms(*best), memRatio,
                     memSpatial, mfu(ms(*best)), mfu(megaBest), mfu(ms(*zero3)),
                     configs.c_str(), desc.c_str());
    if (plans && best->best) {
      printPlan(outs(), p, *best->best);
      outs() << "\n";
    }
    outs().flush();
  }
  printGeoMean(speedups32, "the best Megatron grid (V100)");
  printGeoMean(speedupsZ3, "DeepSpeed ZeRO-3 data parallelism (V100)");
  return 0;
}
