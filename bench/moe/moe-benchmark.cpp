//===- moe-benchmark.cpp - MoE plans under FasterMoE's model --------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// stpar-bench-moe: MoE transformers (Mixtral-8x7B and a GShard-style top-2
// GPT with 64 experts per layer) on DGX A100 clusters of 16-256 GPUs, with
// uniform and skewed (Zipf) routing. Per row: one search of the whole space
// with every FasterMoE optimization the cost may use (stpar); stpar's plan
// re-costed without dynamic shadowing and without smart scheduling (same
// partitions: each optimization's own effect); a search with none of them
// and a flat all-to-all (FastMoE-style); DeepSpeed-MoE's layout (ZeRO data
// parallelism, experts over gcd(E, devices) data-parallel ranks, flat
// all-to-all). Ratios are the variant's time over stpar's, per MoE layer
// (ms per micro-batch of its operator) or per step. bench/moe/RESULTS.md
// holds the table and its reading.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/MoE.h"
#include "stpar/Search/GPTProblem.h"
#include "stpar/Search/Solver.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace {
struct MoEModel {
  const char *name;
  int64_t layers, hidden, heads, kvHeads, ffn, vocab;
  bool gated;
  int64_t experts, topK, seq;
  /// Sequences per device in the global batch.
  int64_t seqsPerDevice;
  const char *source;
};

const MoEModel kModels[] = {
    {"Mixtral-8x7B", 32, 4096, 32, 8, 14336, 32000, true, 8, 2, 4096, 1,
     "Jiang et al. 2024, Table 1"},
    {"MoE-GPT-64E", 24, 2048, 16, 0, 8192, 51200, false, 64, 2, 2048, 2,
     "GShard-style top-2 (Lepikhin et al. 2021), every FFN an MoE layer"},
};

/// Zipf's law with exponent 1 over the experts: share of expert e is
/// (1 / (e + 1)) / H_E.
std::vector<double> zipf(int64_t experts) {
  std::vector<double> share(experts);
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += share[e] = 1.0 / double(e + 1);
  for (double &s : share)
    s /= sum;
  return share;
}

struct Outcome {
  double step = 0, moe = 0, wall = 0;
  std::string summary;
  bool found = false;
};

/// The first MoE operator's FasterMoE choices and seconds in `plan`.
void describe(const Problem &p, const Plan &plan, Outcome &out) {
  out.found = true;
  out.step = plan.cost.stepTime;
  char buf[256];
  std::string mesh;
  for (const MeshAxis &a : plan.config.mesh.axes)
    mesh += (mesh.empty() ? "" : "x") + std::to_string(a.size);
  std::snprintf(buf, sizeof(buf), "%s m=%lld z=%d", mesh.c_str(),
                (long long)plan.config.microBatches, plan.config.zeroStage);
  out.summary = buf;
  if (!plan.label.empty())
    out.summary = plan.label;
  if (plan.cost.moe.empty())
    return;
  const auto &[i, m] = plan.cost.moe.front();
  out.moe = plan.cost.opSeconds[i];
  std::snprintf(buf, sizeof(buf), "; ep=%lld %s g=%lld shadow=%zu",
                (long long)m.expertParallel, m.hierarchical ? "hier" : "flat",
                (long long)m.groupSize, m.shadowed.size());
  out.summary += buf;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}
} // namespace

int main(int argc, char **argv) {
  std::string only, loadFile;
  int64_t onlyDevices = 0;
  bool exact = false, plans = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc)
      onlyDevices = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--expert-load") && i + 1 < argc)
      loadFile = argv[++i];
    else if (!std::strcmp(argv[i], "--exact"))
      exact = true;
    else if (!std::strcmp(argv[i], "--plans"))
      plans = true;
    else {
      errs() << "stpar-bench-moe: unknown option '" << argv[i]
             << "'\nusage: stpar-bench-moe [--only NAME] [--devices N] "
                "[--expert-load FILE] [--exact] [--plans]\n";
      return 1;
    }
  }
  std::optional<std::string> loadText;
  if (!loadFile.empty()) {
    ErrorOr<std::unique_ptr<MemoryBuffer>> buf =
        MemoryBuffer::getFile(loadFile);
    if (!buf) {
      errs() << "stpar-bench-moe: " << loadFile << ": "
             << buf.getError().message() << "\n";
      return 1;
    }
    loadText = (*buf)->getBuffer().str();
  }
  EfficiencyModel eff = getDefaultEfficiency();
  std::printf("search: %s; DGX A100 80 GB clusters (dgx-a100-80g-N); ratios "
              "= variant / stpar (> 1: stpar faster)\n",
              exact ? "exact" : "capped (default caps)");
  std::printf("%-13s %5s %-8s | %9s %8s | %7s %7s | %8s %6s %6s | %9s %6s | "
              "%7s | %s\n",
              "model", "devs", "routing", "step ms", "moe ms", "-shadow",
              "-smart", "fastmoe", "x moe", "x step", "ep-only", "x step",
              "wall s", "stpar plan; ep-only plan");
  for (const MoEModel &m : kModels) {
    if (!only.empty() && only != m.name)
      continue;
    std::vector<std::pair<std::string, std::vector<double>>> routings = {
        {"uniform", {}}, {"zipf", zipf(m.experts)}};
    if (loadText) {
      Expected<ExpertLoad> load =
          parseExpertLoad(*loadText, m.experts, loadFile);
      if (!load) {
        errs() << "stpar-bench-moe: " << toString(load.takeError()) << "\n";
        return 1;
      }
      routings = {{"file", load->share}};
    }
    for (int64_t n : {16, 32, 64, 128, 256}) {
      if (onlyDevices && n != onlyDevices)
        continue;
      std::string clusterName = "dgx-a100-80g-" + std::to_string(n / 8);
      Expected<Cluster> cluster = getPreset(clusterName);
      if (!cluster) {
        errs() << toString(cluster.takeError()) << "\n";
        return 1;
      }
      for (const auto &[routingName, load] : routings) {
        auto problem = [&](bool shadow, bool smart, bool hier) {
          TransformerShape s;
          s.model = {m.layers, m.hidden,           m.heads, m.ffn, m.vocab,
                     m.seq,    n * m.seqsPerDevice};
          s.kvHeads = m.kvHeads;
          s.gatedFFN = m.gated;
          s.moe = TransformerShape::MoE{};
          s.moe->experts = m.experts;
          s.moe->topK = m.topK;
          s.moe->load = load;
          s.moe->shadowing = shadow;
          s.moe->smartSchedule = smart;
          s.moe->hierarchical = hier;
          return buildTransformerProblem(s, clusterName, n);
        };
        std::optional<Plan> best;
        auto run = [&](bool shadow, bool smart, bool hier) {
          Outcome out;
          Problem p = problem(shadow, smart, hier);
          SearchOptions opts;
          if (!exact)
            opts.solver.setDefaultCaps();
          auto t0 = std::chrono::steady_clock::now();
          Expected<SearchResult> r = search(p, *cluster, eff, opts);
          out.wall = since(t0);
          if (!r) {
            errs() << "stpar-bench-moe: " << toString(r.takeError()) << "\n";
            std::exit(1);
          }
          if (r->best) {
            describe(p, *r->best, out);
            if (shadow && smart && hier) {
              best = *r->best;
              if (plans)
                printPlan(outs(), p, *r->best);
            }
          }
          return out;
        };
        // stpar's plan re-costed with one optimization taken away: the
        // same partitions, so the difference is that optimization's.
        auto without = [&](bool shadow, bool smart) {
          Outcome out;
          if (!best)
            return out;
          Problem p = problem(shadow, smart, true);
          Expected<std::unique_ptr<Instance>> inst =
              Instance::create(p, *cluster, best->config, eff, {});
          Expected<PlanCost> c = inst ? (*inst)->evaluate(best->partitions)
                                      : Expected<PlanCost>(inst.takeError());
          if (!c) {
            errs() << "stpar-bench-moe: " << toString(c.takeError()) << "\n";
            std::exit(1);
          }
          Plan plan = *best;
          plan.cost = std::move(*c);
          describe(p, plan, out);
          return out;
        };
        Outcome full = run(true, true, true);
        Outcome noShadow = without(false, true);
        Outcome noSmart = without(true, false);
        Outcome fast = run(false, false, false);
        // DeepSpeed-MoE: ZeRO data parallelism with experts over the "ep"
        // axis, flat all-to-all, nothing shadowed or scheduled.
        Outcome ep;
        {
          Problem p = problem(false, false, false);
          SearchOptions opts;
          for (int z : {1, 2, 3}) {
            Expected<SearchResult> r = searchZeRO(p, *cluster, eff, z, opts);
            if (!r) {
              errs() << "stpar-bench-moe: " << toString(r.takeError()) << "\n";
              return 1;
            }
            if (r->best && (!ep.found || r->best->cost.stepTime < ep.step))
              describe(p, *r->best, ep);
          }
        }
        auto ms = [](const Outcome &o, double v) {
          return o.found ? v * 1e3 : NAN;
        };
        auto ratio = [](const Outcome &a, double x, const Outcome &b,
                        double y) {
          return a.found && b.found && y > 0 ? x / y : NAN;
        };
        std::printf(
            "%-13s %5lld %-8s | %9.1f %8.3f | %7.3f %7.3f | %8.1f %6.3f "
            "%6.3f | %9.1f %6.3f | %7.1f | %s; %s\n",
            m.name, (long long)n, routingName.c_str(), ms(full, full.step),
            ms(full, full.moe), ratio(noShadow, noShadow.moe, full, full.moe),
            ratio(noSmart, noSmart.moe, full, full.moe), ms(fast, fast.step),
            ratio(fast, fast.moe, full, full.moe),
            ratio(fast, fast.step, full, full.step), ms(ep, ep.step),
            ratio(ep, ep.step, full, full.step), full.wall + fast.wall,
            full.found ? full.summary.c_str() : "no plan fits",
            ep.found ? ep.summary.c_str() : "no plan fits");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
