//===- PlanCommand.cpp - `stpar plan --problem FILE` ------------*- C++ -*-===//
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
// parallelism and spatial-only search beside it. `stpar plan MODEL.onnx`
// (through the importer) is not wired yet.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "stpar/Cost/Cluster.h"
#include "stpar/Search/Solver.h"

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
                                        cl::Required,
                                        cl::desc("Problem file (docs/search.md)"));
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

static int runPlan() {
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
  auto start = std::chrono::steady_clock::now();
  Expected<SearchResult> result = search(*problem, *cluster, eff, opts);
  if (!result)
    return fail(toString(result.takeError()));
  double searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double gib = double(int64_t(1) << 30);
  if (!result->best)
    return fail("no plan fits: the smallest plan found needs " +
                formatv("{0:f3}", result->smallestMemory / gib).str() +
                " GiB per device, the limit is " +
                formatv("{0:f3}", result->memoryLimit / gib).str() +
                " GiB (short by " +
                formatv("{0:f3}",
                        (result->smallestMemory - result->memoryLimit) / gib)
                    .str() +
                " GiB)");
  outs() << "problem " << problem->name << " on " << problem->devices
         << " devices of " << cluster->name << "\n";
  outs() << "searched " << result->configurations << " configurations"
         << (result->stats.isExact() ? " (exact DP)" : " (capped DP)")
         << "\n";
  (void)searchSeconds;
  printPlan(outs(), *problem, *result->best);
  if (!planCompare)
    return 0;
  double best = result->best->cost.stepTime;
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
                   best * 1e3, 1.0, result->best->cost.getMemory() / gib);
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  spatialOpts.progress = nullptr;
  Expected<SearchResult> spatial = search(*problem, *cluster, eff, spatialOpts);
  row("spatial-only search", spatial);
  Expected<SearchResult> mega =
      searchMegatron(*problem, *cluster, eff, false, spatialOpts);
  row("megatron (best grid)", mega);
  Expected<SearchResult> megaSP =
      searchMegatron(*problem, *cluster, eff, true, spatialOpts);
  row("megatron + seq. parallel", megaSP);
  for (int z = 1; z <= 3; ++z) {
    Expected<SearchResult> zr = searchZeRO(*problem, *cluster, eff, z);
    row(("zero-" + Twine(z) + " data parallel").str(), zr);
    if (!zr)
      consumeError(zr.takeError());
  }
  for (Expected<SearchResult> *r : {&spatial, &mega, &megaSP})
    if (!*r)
      consumeError(r->takeError());
  return 0;
}

static stpar::tools::CommandRegistration reg(planCmd, runPlan);
