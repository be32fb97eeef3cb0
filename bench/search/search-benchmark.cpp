//===- search-benchmark.cpp - partition search over model zoo shapes ------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar-bench-search [--quick] [--only NAME] [--devices N] [--exact]
// [--progress] [--plans]`: runs the partition
// search on PrimePar's models (OPT, Llama-2, BLOOM shapes through the
// transformer builder) on v100-sxm2-32g-4x8 at 4, 8, 16 and 32 devices,
// plus GPT-3 175B on 1024 and 1T on 3072 A100s, and prints one table:
// search time, predicted step time of the chosen plan, of the best Megatron
// grid (with and without sequence parallelism) and of spatial-only search,
// the speedups, peak-memory ratios and predicted MFU (stpar's plan and the
// Megatron grid's). All numbers come from the search
// objective (docs/search.md). Not a test.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/GPTProblem.h"
#include "stpar/Search/Solver.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

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
} // namespace

int main(int argc, char **argv) {
  bool quick = false, exact = false, progress = false, plans = false;
  std::string only;
  int64_t onlyDevices = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--exact"))
      exact = true;
    else if (!std::strcmp(argv[i], "--progress"))
      progress = true;
    else if (!std::strcmp(argv[i], "--plans"))
      plans = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc)
      onlyDevices = std::atoll(argv[++i]);
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
  runs.push_back({&gpt3, "dgx-a100-80g-128", 1024, 2048, 1536, 3});
  runs.push_back({&gpt1t, "dgx-a100-80g-384", 3072, 2048, 3072, 3});

  SearchOptions opts;
  opts.maxMeshAxes = 3;
  // Micro-batch counts: the Megatron grid (cheap: no DP) tries every
  // p * 2^i dividing the batch, as Megatron runs use up to batch / dp
  // micro-batches; so does the search on the V100 rows. On the 1024- and
  // 3072-device rows the search tries m in {p, 2p, 4p} only (p = 1:
  // gradient accumulation 1, 2, 4) to stay within its time budget, so
  // there the baseline has the larger pipeline space.
  SearchOptions megatronOpts = opts;
  megatronOpts.microBatchChoices = 0;
  if (!exact) {
    opts.solver.maxCandidates = 24;
    opts.solver.maxStates = 256;
    opts.solver.maxFront = 3;
  }
  if (quick)
    opts.maxMeshAxes = 2;
  outs() << "caps: candidates/op " << opts.solver.maxCandidates
         << ", states " << opts.solver.maxStates << ", front "
         << opts.solver.maxFront << " (0 = exact), mesh axes <= "
         << opts.maxMeshAxes << "\n";
  outs() << format("%-12s %5s %7s %7s %10s %10s %10s %6s %6s %6s %6s "
                   "%5s %5s %11s  %s\n",
                   "model", "devs", "wall s", "cpu s", "plan ms", "megatron",
                   "spatial", "x mega", "x spat", "mem/mg", "mem/sp", "mfu",
                   "mfu_m", "configs",
                   "plan (pp x mesh, micro-batches, ZeRO, "
                   "recompute, temporal ops)");
  std::vector<double> speedups32;
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
    TransformerShape shape;
    shape.model = {r.model->layers, r.model->hidden, r.model->heads,
                   r.model->ffn,    r.model->vocab,  r.seq,
                   r.batch};
    shape.kvHeads = r.model->kvHeads;
    shape.gatedFFN = r.model->gated;
    Problem p = buildTransformerProblem(shape, r.cluster, r.devices);
    SearchOptions timedOpts = opts;
    timedOpts.microBatchChoices = r.microBatchChoices;
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
    Expected<SearchResult> mega =
        searchMegatron(p, *cluster, eff, false, megatronOpts);
    Expected<SearchResult> megaSP =
        searchMegatron(p, *cluster, eff, true, megatronOpts);
    if (!best || !spatial || !mega || !megaSP) {
      errs() << "error\n";
      consumeError(best.takeError());
      consumeError(spatial.takeError());
      consumeError(mega.takeError());
      consumeError(megaSP.takeError());
      return 1;
    }
    auto ms = [](const SearchResult &s) {
      return s.best ? s.best->cost.stepTime * 1e3 : NAN;
    };
    double megaBest = std::fmin(ms(*mega), ms(*megaSP));
    const Plan *megaPlan =
        !mega->best ? (megaSP->best ? &*megaSP->best : nullptr)
        : !megaSP->best ? &*mega->best
        : (mega->best->cost.stepTime <= megaSP->best->cost.stepTime
               ? &*mega->best
               : &*megaSP->best);
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
      const Plan &plan = *best->best;
      desc = "";
      for (const auto &a : plan.config.mesh.axes)
        desc += (desc.empty() ? "" : "x") + std::to_string(a.size);
      unsigned temporalOps = 0;
      FlatGraph g = flatten(p);
      for (unsigned i = 0; i < g.ops.size(); ++i)
        if (plan.partitions[i].temporal && g.layerOf[i] <= 0)
          ++temporalOps;
      desc += " m=" + std::to_string(plan.config.microBatches) +
              " z=" + std::to_string(plan.config.zeroStage) +
              (plan.config.recompute ? " rc" : "") +
              " t=" + std::to_string(temporalOps);
    } else {
      char buf[96];
      std::snprintf(buf, sizeof(buf), " (smallest %.1f GiB > %.1f GiB)",
                    best->smallestMemory / double(1 << 30),
                    best->memoryLimit / double(1 << 30));
      desc += buf;
    }
    if (megaPlan)
      desc += "; megatron " + megaPlan->label;
    if (r.devices == 32 && std::isfinite(speedup))
      speedups32.push_back(speedup);
    std::string configs = std::to_string(best->solvedConfigurations) + "/" +
                          std::to_string(best->configurations);
    outs() << format("%-12s %5lld %7.3f %7.3f %10.1f %10.1f %10.1f %6.3f "
                     "%6.3f %6.3f %6.3f %5.3f %5.3f %11s  %s\n",
                     r.model->name, (long long)r.devices, searchTime, searchCPU,
                     ms(*best), megaBest, ms(*spatial), speedup,
                     ms(*spatial) / ms(*best), memRatio, memSpatial,
                     mfu(ms(*best)), mfu(megaBest), configs.c_str(),
                     desc.c_str());
    if (plans && best->best) {
      printPlan(outs(), p, *best->best);
      outs() << "\n";
    }
    outs().flush();
  }
  if (!speedups32.empty()) {
    double logSum = 0;
    for (double s : speedups32)
      logSum += std::log(s);
    outs() << format("geo-mean speedup over the best Megatron grid at 32 "
                     "devices: %.3f (%zu models)\n",
                     std::exp(logSum / double(speedups32.size())),
                     speedups32.size());
  }
  return 0;
}
