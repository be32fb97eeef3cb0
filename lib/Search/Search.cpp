//===- Search.cpp - outer search, baselines, plan printing ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The outer choice (pipeline depth, logical mesh, micro-batches, ZeRO
// stage) around the DP, and the baselines costed by the same objective.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/MegatronRule.h"
#include "stpar/Search/Solver.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Parallel.h"

#include <chrono>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

using namespace llvm;
using namespace stpar::cost;

namespace stpar::search {

/// "" for none, else " recompute" (full) or " recompute=selective".
static std::string getRecomputeLabel(Recompute r) {
  if (r == Recompute::None)
    return "";
  if (r == Recompute::Full)
    return " recompute";
  return std::string(" recompute=") + getRecomputeName(r);
}

static Error err(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

static int64_t getBatchExtent(const Problem &p) {
  if (p.batchLoop.empty())
    return 0;
  for (const LoopDim &l : p.ops.front().loops)
    if (l.name == p.batchLoop)
      return l.extent;
  return 0;
}

static bool hasLayers(const Problem &p) {
  return is_contained(p.sections, Section::Layer);
}

/// Model chunks per device to try at pipeline depth p with m micro-batches:
/// 1 without stages, else each v of `choices` with p * v dividing the
/// layers (v > 1 only when p divides m, as Megatron-LM requires).
static std::vector<int64_t> getInterleaveChoices(const Problem &p,
                                                 int64_t stages,
                                                 int64_t microBatches,
                                                 ArrayRef<int64_t> choices) {
  if (stages <= 1)
    return {1};
  std::vector<int64_t> out;
  for (int64_t v : choices)
    if (v == 1 ||
        (v > 1 && p.layers % (stages * v) == 0 && microBatches % stages == 0))
      out.push_back(v);
  if (out.empty())
    out.push_back(1);
  return out;
}

/// Pipeline depths and micro-batch counts to try: for every depth p
/// dividing the devices and the layers, m = p * 2^i (i < microBatchChoices,
/// or every i when it is 0) dividing the batch. For p = 1, m > 1 is gradient
/// accumulation (one micro-batch in flight: less activation memory).
static std::vector<std::pair<int64_t, int64_t>>
getPipelineChoices(const Problem &p, int64_t devices, bool pipeline,
                   unsigned microBatchChoices) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t batch = getBatchExtent(p);
  if (batch == 0)
    return {{1, 1}};
  for (int64_t s = 1; s <= devices; ++s) {
    if (devices % s || p.layers % s)
      continue;
    if (s > 1 && (!pipeline || !hasLayers(p)))
      break;
    for (unsigned i = 0; microBatchChoices == 0 || i < microBatchChoices;
         ++i) {
      int64_t m = s << i;
      if (m > batch)
        break;
      if (batch % m == 0)
        out.push_back({s, m});
    }
  }
  return out;
}

/// Whether two axes of `shape` have the same size >= 2 (a q x q square for
/// the temporal primitive).
static bool hasSquare(ArrayRef<int64_t> shape) {
  for (size_t a = 0; a < shape.size(); ++a)
    for (size_t b = a + 1; b < shape.size(); ++b)
      if (shape[a] == shape[b] && shape[a] >= 2)
        return true;
  return false;
}

static void keepBest(SearchResult &r, Plan plan) {
  if (!r.best || plan.cost.stepTime < r.best->cost.stepTime)
    r.best = std::move(plan);
}

/// Axis sizes of the configuration's mesh, the pipeline axis first.
static std::vector<int64_t> getMeshShape(const Config &c) {
  std::vector<int64_t> shape;
  for (const MeshAxis &a : c.mesh.axes)
    shape.push_back(a.size);
  return shape;
}

namespace {
/// What the branch and bound needs of a configuration before solving it
/// (Instance::getLowerBound, getSmallestMemory, getMemoryLimit, and
/// whether another configuration of its group dominates it); the same in
/// every pass of a search, whatever its caps.
struct ConfigSummary {
  double lowerBound, smallestMemory, memoryLimit;
  bool dominated;
};

/// The partition tables of a search (Instance::create's `sameTables`), one
/// per configuration group (mesh shape and micro-batch count) and space,
/// kept across the search's passes for the groups whose configurations are
/// solved: the capped seed search, the exact pass and the temporal pass
/// solve mostly the same configurations and build their tables (every
/// partition costed, the re-layout cache filled by the DPs) once, as long
/// as all of them fit in `budget` bytes; beyond it the least recently used
/// are dropped (and rebuilt when needed again). The tables that forming a
/// group builds are not kept: most groups are never solved (their bounds
/// reject them), and keeping every group's tables made the search's memory
/// grow to hundreds of megabytes, paid for in page faults (OPT-6.7B on 32
/// V100s: 300 MB resident, 66,000 page faults, 1.34 s; without: 100 MB,
/// 17,000, 1.0 s).
class TableCache {
public:
  static constexpr size_t budget = size_t(1) << 30;
  const Instance *find(const Config &c, const SpaceOptions &space) {
    auto it = reps.find(getKey(c, space));
    if (it == reps.end())
      return nullptr;
    it->second.lastUse = ++clock;
    return it->second.rep.get();
  }
  /// The re-layout coefficients of the configuration's mesh shape, kept
  /// for the whole search (every group on the mesh shares them,
  /// Instance::create).
  std::shared_ptr<RelayoutCoefficients>
  findCoefficients(const Config &c) const {
    auto it = coefficients.find(getMeshShape(c));
    return it == coefficients.end() ? nullptr : it->second;
  }
  void keepCoefficients(const Config &c,
                        std::shared_ptr<RelayoutCoefficients> k) {
    if (k)
      coefficients.try_emplace(getMeshShape(c), std::move(k));
  }
  void keep(const Config &c, const SpaceOptions &space,
            std::unique_ptr<Instance> rep) {
    reps.try_emplace(getKey(c, space), Entry{std::move(rep), ++clock});
    // The tables grow while configurations are solved: measured here.
    size_t total = 0;
    for (const auto &[key, entry] : reps)
      total += entry.rep->getTableBytes();
    while (total > budget && reps.size() > 1) {
      auto lru = reps.begin();
      for (auto it = reps.begin(); it != reps.end(); ++it)
        if (it->second.lastUse < lru->second.lastUse)
          lru = it;
      total -= std::min(total, lru->second.rep->getTableBytes());
      reps.erase(lru);
    }
  }

  const ConfigSummary *findSummary(const Config &c,
                                   const SpaceOptions &space) const {
    auto it = summaries.find({getKey(c, space), c.getPriceFields()});
    return it == summaries.end() ? nullptr : &it->second;
  }
  void keepSummary(const Config &c, const SpaceOptions &space,
                   ConfigSummary s) {
    summaries.try_emplace({getKey(c, space), c.getPriceFields()}, s);
  }

private:
  using Key = std::tuple<std::vector<int64_t>, int64_t, bool, unsigned, bool,
                         std::vector<std::pair<std::string, std::string>>>;
  /// Kept for the whole search (a few dozen bytes per configuration); the
  /// configuration's fields beyond its tables' key are Config's price fields.
  std::map<std::pair<Key, Config::PriceFields>, ConfigSummary> summaries;
  static Key getKey(const Config &c, const SpaceOptions &space) {
    return {getMeshShape(c), c.microBatches,     space.temporal,
            space.firstAxis, space.onlyTemporal, space.fixed};
  }
  struct Entry {
    std::unique_ptr<Instance> rep;
    uint64_t lastUse = 0;
  };
  std::map<Key, Entry> reps;
  uint64_t clock = 0;
  std::map<std::vector<int64_t>, std::shared_ptr<RelayoutCoefficients>>
      coefficients;
};
} // namespace

/// Drops the configurations whose mesh offers a fixed operator
/// (SpaceOptions::fixed) no candidate of its fixed partition. Errors: a
/// name that is no operator of the problem, or no configuration left.
static Error applyFixedPartitions(const Problem &problem,
                                  const SpaceOptions &space,
                                  std::vector<Config> &configs) {
  if (space.fixed.empty())
    return Error::success();
  std::vector<const Operator *> ops;
  for (const auto &[name, spec] : space.fixed) {
    auto it = llvm::find_if(problem.ops, [&, &name = name](const Operator &o) {
      return o.name == name;
    });
    if (it == problem.ops.end())
      return err("--fix: no planned operator is named '" + name +
                 "' (the plan table's names; a layer operator by its first "
                 "layer's name)");
    ops.push_back(&*it);
  }
  size_t before = configs.size();
  llvm::erase_if(configs, [&](const Config &c) {
    return llvm::any_of(ops, [&](const Operator *op) {
      return enumeratePartitions(*op, c.mesh, space).empty();
    });
  });
  if (configs.empty() && before > 0) {
    std::string list;
    for (const auto &[name, spec] : space.fixed)
      list += (list.empty() ? "" : ", ") + name + "=" + spec;
    return err("--fix: no configuration offers " + list +
               " (partitions as the plan table writes them, over the "
               "search's axes x0, x1, ...: a plan names an axis by its role, "
               "dp, tp, ..., and its axes: line gives the search's name; "
               "--mesh fixes their sizes)");
  }
  return Error::success();
}

static Expected<SearchResult>
searchWith(const Problem &problem, const Cluster &cluster,
           const EfficiencyModel &eff, const SearchOptions &options,
           const Plan *incumbent, TableCache &cache);

Expected<SearchResult> search(const Problem &problem, const Cluster &cluster,
                              const EfficiencyModel &eff,
                              const SearchOptions &options) {
  return search(problem, cluster, eff, options, nullptr);
}

Expected<SearchResult> search(const Problem &problem, const Cluster &cluster,
                              const EfficiencyModel &eff,
                              const SearchOptions &options,
                              const Plan *incumbent) {
  TableCache cache;
  // (The DPs' buffers are kept from one configuration to the next, and
  // freed when the search ends.)
  llvm::scope_exit release([] { releaseDPBuffers(); });
  return searchWith(problem, cluster, eff, options, incumbent, cache);
}

static Expected<SearchResult>
searchWith(const Problem &problem, const Cluster &cluster,
           const EfficiencyModel &eff, const SearchOptions &options,
           const Plan *incumbent, TableCache &cache) {
  if (problem.devices > cluster.getNumDevices())
    return err("the cluster '" + cluster.name + "' has " +
               Twine(cluster.getNumDevices()) + " devices; it cannot host " +
               Twine(problem.devices));
  SearchResult result;
  result.smallestMemory = std::numeric_limits<double>::infinity();
  bool capped = options.solver.isCapped();
  if (incumbent)
    result.best = *incumbent;
  if (options.seedBound && options.branchAndBound && !capped) {
    SearchOptions capped = options;
    capped.solver.setDefaultCaps();
    capped.progress = nullptr;
    // Only its bound is used: the temporal pass of a capped search (a
    // heuristic for capped results) adds nothing the exact pass misses.
    capped.temporalPass = false;
    Expected<SearchResult> seed =
        searchWith(problem, cluster, eff, capped, incumbent, cache);
    if (!seed)
      return seed.takeError();
    if (seed->best)
      keepBest(result, std::move(*seed->best));
  }
  std::vector<Config> configs;
  for (auto [stages, m] : getPipelineChoices(problem, problem.devices,
                                              options.pipeline,
                                              options.microBatchChoices))
    for (const std::vector<int64_t> &shape :
         options.meshShapes.empty()
             ? enumerateMeshShapes(problem.devices / stages,
                                   options.maxMeshAxes)
             : (stages == 1 ? options.meshShapes
                            : std::vector<std::vector<int64_t>>{}))
      for (Recompute rc : options.recompute)
        for (int64_t v :
             getInterleaveChoices(problem, stages, m, options.interleave))
          for (int z : options.zeroStages) {
            if (rc != Recompute::None && !hasLayers(problem))
              continue;
            if (options.squareMeshesOnly && !hasSquare(shape))
              continue;
            Config c;
            c.mesh = makeSearchMesh(stages, shape);
            c.microBatches = m;
            c.zeroStage = z;
            c.recompute = rc;
            c.interleave = v;
            configs.push_back(std::move(c));
          }
  // Partial constraints: only configurations whose mesh offers every fixed
  // operator its partition.
  if (Error e = applyFixedPartitions(problem, options.solver.space, configs))
    return std::move(e);
  result.configurations = configs.size();
  // Branch and bound over the configurations (exact): every configuration
  // gets a lower bound of its objective and its exact smallest memory from
  // its candidate tables alone; they are solved in increasing bound order,
  // each DP only for plans faster than the best so far, and the loop stops
  // at the first bound that cannot beat it. Configurations that cannot fit
  // are never solved.
  // Configurations that differ only in the ZeRO stage or recomputation
  // share their partition tables (Instance::create's `sameTables`); one
  // whose every candidate costs at least as much time and memory as under
  // another of them (e.g. ZeRO 1 vs 2 when the objective charges both the
  // same traffic) has no better plan and is dropped (exact).
  std::vector<std::pair<double, size_t>> order;
  auto sameExceptZeRO = [&](size_t a, size_t b) {
    const Config &x = configs[a], &y = configs[b];
    if (x.mesh.axes.size() != y.mesh.axes.size() ||
        x.microBatches != y.microBatches)
      return false;
    for (size_t k = 0; k < x.mesh.axes.size(); ++k)
      if (x.mesh.axes[k].size != y.mesh.axes[k].size)
        return false;
    return true;
  };
  const SpaceOptions &space = options.solver.space;
  auto addToOrder = [&](size_t i, const ConfigSummary &s) {
    result.memoryLimit = s.memoryLimit;
    result.smallestMemory = std::min(result.smallestMemory, s.smallestMemory);
    if (s.dominated)
      ++result.dominatedConfigurations;
    else if (s.smallestMemory <= s.memoryLimit * (1 + 1e-9))
      order.push_back({s.lowerBound, i});
  };
  // The groups [first, end) no pass of this search has summarized yet.
  std::vector<std::pair<size_t, size_t>> toForm;
  for (size_t first = 0; first < configs.size();) {
    size_t end = first + 1;
    while (end < configs.size() && sameExceptZeRO(first, end))
      ++end;
    bool known = true;
    for (size_t i = first; i < end && known; ++i)
      known = cache.findSummary(configs[i], space) != nullptr;
    if (!known)
      toForm.push_back({first, end});
    first = end;
  }
  // Forming a group costs every partition (its tables) and every candidate
  // of each of its configurations, independently per group, so groups are
  // formed in parallel (llvm::parallelFor), each keeping only its
  // configurations' summaries. Groups of one mesh shape share the re-layout
  // coefficients, which forming fills (the group bounds' re-layouts), so
  // each shape is one task that forms its groups in turn (one group's
  // tables alive per thread); the tasks go to the threads as they free up,
  // the shapes of most axes (most partitions) first. (No pass has kept
  // tables for a group it has not summarized: tables are kept only for
  // configurations solved, and those have their summaries.)
  struct Formed {
    std::vector<ConfigSummary> summaries;
    std::optional<std::string> error;
  };
  auto form = [&](size_t first, size_t end, Formed &f,
                  std::shared_ptr<RelayoutCoefficients> &coefficients) {
    std::vector<std::unique_ptr<Instance>> group;
    for (size_t i = first; i < end; ++i) {
      Expected<std::unique_ptr<Instance>> inst = Instance::create(
          problem, cluster, configs[i], eff, options.solver,
          group.empty() ? nullptr : group.front().get(), coefficients);
      if (!inst) {
        f.error = toString(inst.takeError());
        return;
      }
      group.push_back(std::move(*inst));
    }
    coefficients = group.front()->getRelayoutCoefficients();
    std::vector<const Instance *> members;
    std::vector<bool> dominated(group.size(), false);
    for (size_t j = 0; j < group.size(); ++j) {
      for (size_t i = 0; i < group.size() && !dominated[j]; ++i)
        if (i != j && group[i]->dominates(*group[j]) &&
            (i < j || !group[j]->dominates(*group[i])))
          dominated[j] = true;
      if (!dominated[j])
        members.push_back(group[j].get());
    }
    Instance::shareGroupPrices(members);
    for (size_t j = 0; j < group.size(); ++j) {
      double lowerBound = dominated[j] ? group[j]->getLowerBound()
                                       : group[j]->getGroupLowerBound();
      f.summaries.push_back({lowerBound, group[j]->getSmallestMemory(),
                             group[j]->getMemoryLimit(), dominated[j]});
    }
  };
  // The groups to form, by mesh shape (in order of first appearance).
  struct ShapeTask {
    std::vector<size_t> groups; // indices into toForm
    std::shared_ptr<RelayoutCoefficients> coefficients;
  };
  std::vector<ShapeTask> tasks;
  {
    std::map<std::vector<int64_t>, size_t> taskOf;
    for (size_t k = 0; k < toForm.size(); ++k) {
      const Config &c = configs[toForm[k].first];
      auto [it, ins] = taskOf.try_emplace(getMeshShape(c), tasks.size());
      if (ins)
        tasks.push_back({{}, cache.findCoefficients(c)});
      tasks[it->second].groups.push_back(k);
    }
  }
  llvm::stable_sort(tasks, [&](const ShapeTask &a, const ShapeTask &b) {
    return configs[toForm[a.groups.front()].first].mesh.axes.size() >
           configs[toForm[b.groups.front()].first].mesh.axes.size();
  });
  std::vector<Formed> formed(toForm.size());
  llvm::parallelFor(0, tasks.size(), [&](size_t t) {
    for (size_t k : tasks[t].groups) {
      form(toForm[k].first, toForm[k].second, formed[k], tasks[t].coefficients);
      if (formed[k].error)
        return;
    }
  });
  for (size_t k = 0; k < toForm.size(); ++k)
    if (formed[k].error)
      return err(*formed[k].error);
  for (const ShapeTask &t : tasks)
    cache.keepCoefficients(configs[toForm[t.groups.front()].first],
                           t.coefficients);
  for (size_t k = 0; k < toForm.size(); ++k) {
    auto [first, end] = toForm[k];
    for (size_t i = first; i < end; ++i)
      cache.keepSummary(configs[i], space, formed[k].summaries[i - first]);
  }
  for (size_t i = 0; i < configs.size(); ++i)
    addToOrder(i, *cache.findSummary(configs[i], space));
  llvm::stable_sort(order, [](const auto &a, const auto &b) {
    return a.first < b.first;
  });
  const double inf = std::numeric_limits<double>::infinity();
  // One total for the whole search: the temporal pass's configurations
  // (those with a q x q square) count after this pass's.
  bool secondPass = options.temporalPass && capped &&
                    options.solver.space.temporal &&
                    !options.solver.space.onlyTemporal;
  size_t squares = 0;
  if (secondPass)
    for (const Config &c : configs) {
      std::vector<int64_t> shape;
      for (const MeshAxis &a : llvm::drop_begin(c.mesh.axes))
        shape.push_back(a.size);
      squares += hasSquare(shape);
    }
  // Every configuration counts (as in result.configurations): dominated
  // ones and ones that cannot fit are done before any is solved.
  size_t total = configs.size() + squares;
  size_t skipped = configs.size() - order.size();
  if (options.progress)
    options.progress(0, total);
  size_t reported = 0;
  if (options.progress && skipped > 0 && skipped < total)
    options.progress(reported = skipped, total);
  // One configuration's instance, its tables from the cache.
  auto getInstance = [&](size_t i) -> Expected<std::unique_ptr<Instance>> {
    const Instance *same = cache.find(configs[i], options.solver.space);
    Expected<std::unique_ptr<Instance>> inst =
        Instance::create(problem, cluster, configs[i], eff, options.solver,
                         same, cache.findCoefficients(configs[i]));
    if (inst && !same) {
      // Dropped from the cache (its bound): kept again for the group's
      // other configurations.
      Expected<std::unique_ptr<Instance>> rep = Instance::create(
          problem, cluster, configs[i], eff, options.solver, inst->get());
      if (!rep)
        return rep.takeError();
      cache.keep(configs[i], options.solver.space, std::move(*rep));
    }
    return inst;
  };
  // One configuration's DP under `bound`.
  auto solveConfig = [&](size_t i, double bound, double lowerBound, bool retry,
                         DPPass pass, bool *settled) -> Expected<Plan> {
    Expected<std::unique_ptr<Instance>> inst = getInstance(i);
    if (!inst)
      return inst.takeError();
    DPStats stats;
    auto start = std::chrono::steady_clock::now();
    Expected<Plan> plan = (*inst)->solveDP(&stats, bound, pass, settled);
    std::chrono::duration<double> wall =
        std::chrono::steady_clock::now() - start;
    result.stats += stats;
    if (options.trace) {
      ConfigurationTrace t;
      t.config = configs[i];
      t.lowerBound = lowerBound;
      t.bound = bound;
      t.seconds = wall.count();
      t.stats = stats;
      t.retry = retry;
      t.capped = options.solver.isCapped();
      t.pass = pass;
      t.settled = !settled || *settled;
      if (plan) {
        t.stepTime = plan->cost.stepTime;
        options.trace(t);
        return plan;
      }
      t.message = toString(plan.takeError());
      options.trace(t);
      return err(t.message);
    }
    return plan;
  };
  // Whether a configuration's pre-DP tests leave room for a plan under
  // `bound` (Instance::mayBeat).
  auto probeConfig = [&](size_t i, double bound,
                         bool *memoryBinds) -> Expected<bool> {
    Expected<std::unique_ptr<Instance>> inst = getInstance(i);
    if (!inst)
      return inst.takeError();
    return (*inst)->mayBeat(bound, memoryBinds);
  };
  auto currentBound = [&] {
    return result.best && options.branchAndBound ? result.best->cost.stepTime
                                                 : inf;
  };
  // A configuration whose DP passed its memory budget under some bound is
  // set aside and solved again after the others, whose plans may lower the
  // bound (a lower bound prunes more of its states). Exact: it is dropped
  // only when its lower bound cannot beat the bound, and the search fails
  // when it passes the budget under a bound no lower than before.
  struct Deferred {
    double lowerBound;
    size_t config;
    double failedBound; // the bound its last DP passed the budget under
    std::string message;
  };
  std::vector<Deferred> deferred;
  // Keeps `plan` (or its "no plan" answer); false with `message` set for
  // a failure of the solver.
  auto answer = [&](Expected<Plan> plan, std::string &message) {
    if (plan) {
      keepBest(result, std::move(*plan));
      return true;
    }
    // Only "no plan fits / beats the bound" is an answer; a failure of
    // the solver (an internal error of the tables, the DP's memory
    // budget) must not silently drop a configuration.
    message = toString(plan.takeError());
    return !isSolverFailure(message);
  };
  // Keeps a configuration's answer, or sets it aside past the memory
  // budget; the failure's message otherwise.
  auto settle = [&](Expected<Plan> plan, size_t i, double lowerBound,
                    double bound) -> std::optional<std::string> {
    std::string message;
    if (answer(std::move(plan), message))
      return std::nullopt;
    if (!isBudgetFailure(message) || !options.branchAndBound ||
        !options.retryOverBudget)
      return message;
    deferred.push_back({lowerBound, i, bound, message});
    return std::nullopt;
  };
  size_t done = skipped;
  auto reportDone = [&] {
    if (options.progress && ++done < total)
      options.progress(reported = done, total);
  };
  // The cheap passes first (SearchOptions::cheapFirst), then the Pareto
  // DPs of the configurations they did not settle.
  bool cheapFirst = options.cheapFirst && options.branchAndBound && !capped;
  std::vector<std::pair<double, size_t>> unsettled;
  // (A min-heap by lower bound: probes raise and reinsert them.)
  std::vector<std::pair<double, size_t>> queue(order.begin(), order.end());
  auto later = [](const std::pair<double, size_t> &a,
                  const std::pair<double, size_t> &b) { return a > b; };
  std::make_heap(queue.begin(), queue.end(), later);
  auto requeue = [&](double lowerBound, size_t i) {
    queue.push_back({lowerBound, i});
    std::push_heap(queue.begin(), queue.end(), later);
  };
  // A cheap pass's plan that is not the configuration's answer (its seed's,
  // if one fits) lowers the bound.
  auto keepSeed = [&](Expected<Plan> plan) {
    if (plan)
      keepBest(result, std::move(*plan));
    else
      consumeError(plan.takeError());
  };
  std::vector<unsigned> probes(configs.size(), 0);
  std::vector<bool> solved(configs.size(), false);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    auto [lowerBound, i] = queue.back();
    queue.pop_back();
    double bound = currentBound();
    if (lowerBound >= bound)
      break;
    // (Under a probe, the cheap pass runs under `runBound`, the midpoint.)
    double runBound = bound;
    if (cheapFirst && std::isfinite(bound) && probes[i] < options.probeBounds) {
      ++probes[i];
      double mid = lowerBound + (bound - lowerBound) / 2;
      bool memoryBinds = false;
      Expected<bool> may = probeConfig(i, mid, &memoryBinds);
      if (!may)
        return may.takeError();
      ++result.boundProbes;
      if (!*may) {
        ++result.raisedBounds;
        requeue(mid, i);
        continue;
      }
      if (options.probeRelaxations && !memoryBinds)
        runBound = mid;
    }
    if (!solved[i]) {
      solved[i] = true;
      ++result.solvedConfigurations;
    }
    bool settled = true;
    Expected<Plan> plan =
        solveConfig(i, runBound, lowerBound, false,
                    cheapFirst ? DPPass::Cheap : DPPass::Whole, &settled);
    if (runBound < bound) {
      ++result.relaxationProbes;
      if (!settled) {
        // Its relaxation's plan under the midpoint does not fit: its seed
        // is kept. Where the seed (or another plan) has brought the bound
        // to the midpoint or below, that cheap pass ran under a bound at
        // least the whole one: the Pareto DP is left to a DPPass::Rest
        // (what its relaxation found is kept in the tables; exact as after
        // a cheap pass under the whole bound). Otherwise the
        // cheap pass runs again under the whole bound (the Pareto DP's
        // budgets are measured on that relaxation).
        keepSeed(std::move(plan));
        if (currentBound() <= runBound) {
          ++result.relaxationProbesLeft;
          unsettled.push_back({lowerBound, i});
          continue;
        }
        probes[i] = options.probeBounds;
        requeue(lowerBound, i);
        continue;
      }
      if (!plan) {
        // Nothing under the midpoint: its lower bound rises there (a
        // failure of the solver is left to a run under the whole bound).
        std::string message = toString(plan.takeError());
        if (!isSolverFailure(message)) {
          ++result.raisedBounds;
          ++result.relaxationRaises;
          requeue(runBound, i);
          continue;
        }
        plan =
            solveConfig(i, bound, lowerBound, false, DPPass::Cheap, &settled);
      }
    }
    if (!settled) {
      keepSeed(std::move(plan));
      unsettled.push_back({lowerBound, i});
      continue;
    }
    if (std::optional<std::string> m =
            settle(std::move(plan), i, lowerBound, bound))
      return err(*m);
    reportDone();
  }
  for (auto [lowerBound, i] : unsettled) {
    double bound = currentBound();
    if (lowerBound < bound)
      if (std::optional<std::string> m = settle(
              solveConfig(i, bound, lowerBound, false, DPPass::Rest, nullptr),
              i, lowerBound, bound))
        return err(*m);
    reportDone();
  }
  // The set-aside configurations, in increasing lower bound, until every
  // one is solved or cannot beat the bound; a round in which the bound
  // has not dropped below any one's failed bound would fail the same way.
  while (!deferred.empty()) {
    double bound = currentBound();
    llvm::erase_if(deferred,
                   [&](const Deferred &d) { return d.lowerBound >= bound; });
    if (deferred.empty())
      break;
    auto retry = llvm::find_if(
        deferred, [&](const Deferred &d) { return bound < d.failedBound; });
    if (retry == deferred.end())
      return err(deferred.front().message);
    ++result.retriedConfigurations;
    std::string message;
    if (answer(solveConfig(retry->config, bound, retry->lowerBound, true,
                           DPPass::Whole, nullptr),
               message)) {
      deferred.erase(retry);
      continue;
    }
    if (!isBudgetFailure(message))
      return err(message);
    retry->failedBound = bound;
    retry->message = message;
  }
  if (secondPass) {
    SearchOptions second = options;
    second.solver.space.onlyTemporal = true;
    second.squareMeshesOnly = true;
    second.temporalPass = false;
    second.progress = nullptr;
    if (options.progress) {
      // This pass's configurations (skipped ones included) are done.
      size_t done = configs.size();
      second.progress = [&, done](size_t n, size_t) {
        size_t at = std::min(done + n, total);
        if (at > reported && at < total)
          options.progress(reported = at, total);
      };
    }
    Expected<SearchResult> t =
        searchWith(problem, cluster, eff, second,
                   result.best ? &*result.best : nullptr, cache);
    if (!t)
      return t.takeError();
    if (t->best)
      keepBest(result, std::move(*t->best));
    // The pass's configurations are counted as more configurations (so
    // solved <= configurations), and its dropped states and points make
    // the result inexact like the first pass's.
    result.configurations += t->configurations;
    result.solvedConfigurations += t->solvedConfigurations;
    result.dominatedConfigurations += t->dominatedConfigurations;
    result.retriedConfigurations += t->retriedConfigurations;
    result.stats += t->stats;
  }
  if (options.progress && reported < total)
    options.progress(total, total);
  return result;
}

//===----------------------------------------------------------------------===//
// Baselines
//===----------------------------------------------------------------------===//

Partition makeMegatronPartition(const Operator &op, StringRef batchLoop,
                                int tpLoop, const Mesh &mesh) {
  const unsigned kDP = 1, kTP = 2;
  Partition part;
  part.loopAxes.assign(op.loops.size(), {});
  for (auto [d, loop] : enumerate(op.loops))
    if (loop.name == batchLoop && int(d) != tpLoop &&
        loop.extent % mesh.axes[kDP].size == 0)
      part.loopAxes[d].push_back(kDP);
  if (tpLoop >= 0)
    part.loopAxes[tpLoop].push_back(kTP);
  return part;
}

/// Megatron's partition of every operator of `g` on the mesh [pp, dp, tp]
/// (cost/MegatronRule.h), with the tensor-parallel splits followed along
/// the problem's edges.
static std::optional<std::vector<Partition>>
megatronPartitions(const Problem &problem, const FlatGraph &g, const Mesh &mesh,
                   bool sp) {
  const unsigned kTP = 2;
  unsigned numAxes = unsigned(mesh.axes.size());
  // The vocabulary table: the embedding parameter with most rows.
  int64_t vocabRows = 0;
  for (const Operator &op : g.ops)
    if (op.kind == OpKind::Embedding)
      for (const Operand &o : op.operands)
        if (o.role == OperandRole::Parameter && !o.dims.empty())
          vocabRows = std::max(vocabRows, op.loops[o.dims[0]].extent);
  std::vector<Partition> parts;
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    const Operator &op = g.ops[i];
    int seq = -1;
    for (unsigned d = 0; d < op.loops.size(); ++d)
      if (!problem.sequenceLoop.empty() &&
          op.loops[d].name == problem.sequenceLoop &&
          op.loops[d].name != problem.batchLoop)
        seq = int(d);
    std::vector<int> inputLoops;
    for (const Edge &e : g.edges) {
      if (e.consumer != i || e.producer >= i)
        continue;
      LayoutCode code = getOperandLayout(g.ops[e.producer], e.producerOperand,
                                         parts[e.producer], numAxes);
      if (code[kTP] < 0)
        continue;
      int l = int(op.operands[e.consumerOperand].dims[code[kTP]]);
      if (!is_contained(inputLoops, l))
        inputLoops.push_back(l);
    }
    MegatronInputs in;
    in.inputLoops = inputLoops;
    in.sequenceLoop = sp ? seq : -1;
    if (op.kind == OpKind::Embedding)
      for (const Operand &o : op.operands)
        if (o.role == OperandRole::Parameter && !o.dims.empty() &&
            op.loops[o.dims[0]].extent == vocabRows)
          in.vocabLoop = int(o.dims[0]);
    MegatronChoice choice = chooseMegatronLoop(op, in, mesh.axes[kTP].size);
    if (choice.indivisible)
      return std::nullopt; // not a Megatron configuration
    parts.push_back(
        makeMegatronPartition(op, problem.batchLoop, choice.loop, mesh));
  }
  return parts;
}

Expected<SearchResult> searchMegatron(const Problem &problem,
                                      const Cluster &cluster,
                                      const EfficiencyModel &eff,
                                      bool sequenceParallel,
                                      const SearchOptions &options) {
  SearchResult result;
  result.smallestMemory = std::numeric_limits<double>::infinity();
  int64_t n = problem.devices;
  SolverOptions solver;
  solver.space.temporal = false;
  const SearchOptions::MegatronGrid &grid = options.megatron;
  std::vector<std::pair<int64_t, int64_t>> choices;
  if (grid.pp > 0 && grid.microBatches > 0)
    choices.push_back({grid.pp, grid.microBatches});
  else
    for (auto [pp, m] : getPipelineChoices(problem, n, options.pipeline,
                                           options.microBatchChoices))
      if ((!grid.pp || pp == grid.pp) &&
          (!grid.microBatches || m == grid.microBatches))
        choices.push_back({pp, m});
  for (auto [pp, m] : choices) {
    std::vector<int64_t> schedules =
        grid.interleave > 0
            ? std::vector<int64_t>{pp > 1 ? grid.interleave : 1}
            : getInterleaveChoices(problem, pp, m, options.interleave);
    for (int64_t tp = 1; tp <= n / pp; ++tp)
      for (Recompute rc : options.recompute)
        for (int64_t v : schedules) {
          if ((n / pp) % tp || (grid.tp && tp != grid.tp))
            continue;
          int64_t dp = n / pp / tp;
          if (grid.dp && dp != grid.dp)
            continue;
          if (!options.meshShapes.empty() &&
              !any_of(options.meshShapes, [&](ArrayRef<int64_t> shape) {
                return pp == 1 && (shape.size() == 1
                                       ? dp == 1 && tp == shape[0]
                                       : shape.size() == 2 && dp == shape[0] &&
                                             tp == shape[1]);
              }))
            continue;
          Config c;
          c.mesh.axes = {{"pp", pp}, {"dp", dp}, {"tp", tp}};
          c.microBatches = m;
          c.zeroStage = grid.zeroStage;
          c.recompute = rc;
          c.interleave = v;
          c.overlapGradSync = grid.overlapGradSync;
          c.gpipe = grid.gpipe && pp > 1;
          // Enumerating candidates is not needed: the rule fixes the plan.
          Problem tiny = problem;
          Expected<std::unique_ptr<Instance>> inst =
              Instance::create(tiny, cluster, c, eff, solver);
          if (!inst)
            return inst.takeError();
          const FlatGraph &g = (*inst)->getFlatGraph();
          std::vector<Partition> parts;
          if (options.megatronPartitions) {
            Expected<std::optional<std::vector<Partition>>> given =
                options.megatronPartitions(g, c.mesh, sequenceParallel);
            if (!given)
              return given.takeError();
            if (!*given)
              continue; // the grid does not apply (e.g. tp and the heads)
            parts = std::move(**given);
            if (parts.size() != g.ops.size())
              return err("internal: the Megatron layout has " +
                         Twine(parts.size()) + " operators, the problem " +
                         Twine(g.ops.size()));
          } else {
            std::optional<std::vector<Partition>> rule =
                megatronPartitions(problem, g, c.mesh, sequenceParallel);
            if (!rule)
              continue;
            parts = std::move(*rule);
          }
          // dp must split the batch everywhere.
          bool ok = dp == 1 || all_of(parts, [](const Partition &p) {
                      return any_of(p.loopAxes, [](const auto &axes) {
                        return is_contained(axes, 1u);
                      });
                    });
          if (!ok)
            continue;
          ++result.configurations;
          Expected<PlanCost> pc = (*inst)->evaluate(parts);
          if (!pc)
            return pc.takeError();
          result.memoryLimit = (*inst)->getMemoryLimit();
          result.smallestMemory =
              std::min(result.smallestMemory, pc->getMemory());
          if (!pc->feasible)
            continue;
          Plan plan;
          plan.config = c;
          plan.partitions = std::move(parts);
          plan.cost = std::move(*pc);
          plan.label = "tp=" + std::to_string(tp) +
                       " pp=" + std::to_string(pp) +
                       " dp=" + std::to_string(dp) + " m=" + std::to_string(m) +
                       (c.zeroStage ? " zero-" + std::to_string(c.zeroStage)
                                    : std::string()) +
                       (c.interleave > 1 ? " vp=" + std::to_string(c.interleave)
                                         : std::string()) +
                       getRecomputeLabel(rc) + (sequenceParallel ? " sp" : "") +
                       (c.overlapGradSync ? "" : " overlap=0") +
                       (c.gpipe ? " schedule=gpipe" : "");
          keepBest(result, std::move(plan));
        }
  }
  return result;
}

/// Pure data parallelism at one configuration (micro-batches, recompute);
/// adds the plan to `result` if it applies.
static Error addZeROPlan(SearchResult &result, const Problem &problem,
                         const Cluster &cluster, const EfficiencyModel &eff,
                         int zeroStage, ArrayRef<int64_t> meshShape,
                         int64_t microBatches, Recompute recompute) {
  Config c;
  c.microBatches = microBatches;
  c.recompute = recompute;
  c.mesh.axes = {{"pp", 1}};
  // DeepSpeed-MoE: the experts of MoE operators over the minor
  // gcd(experts, devices) data-parallel ranks (expert parallelism inside
  // data parallelism, an "ep" axis), their weights data-parallel over the
  // rest.
  int64_t ep = 0;
  for (const Operator &op : problem.ops)
    if (op.moe)
      ep = std::gcd(ep, op.loops[op.moe->expertLoop].extent);
  ep = ep ? std::gcd(ep, problem.devices) : 1;
  if (meshShape.size() <= 1 && ep > 1) {
    c.mesh.axes.push_back({"dp", problem.devices / ep});
    c.mesh.axes.push_back({"ep", ep});
  } else if (meshShape.size() <= 1) {
    c.mesh.axes.push_back({"dp", problem.devices});
  } else {
    int64_t product = 1;
    for (auto [i, size] : llvm::enumerate(meshShape)) {
      c.mesh.axes.push_back({"dp" + std::to_string(i), size});
      product *= size;
    }
    if (product != problem.devices)
      return err("the mesh has " + Twine(product) + " devices, the problem " +
                 Twine(problem.devices));
  }
  std::vector<unsigned> dpAxes;
  for (unsigned a = 1; a < c.mesh.axes.size(); ++a)
    dpAxes.push_back(a);
  c.zeroStage = zeroStage;
  SolverOptions solver;
  solver.space.temporal = false;
  Expected<std::unique_ptr<Instance>> inst =
      Instance::create(problem, cluster, c, eff, solver);
  if (!inst)
    return inst.takeError();
  const FlatGraph &g = (*inst)->getFlatGraph();
  std::vector<Partition> parts;
  for (const Operator &op : g.ops) {
    Partition p;
    p.loopAxes.assign(op.loops.size(), {});
    bool split = false;
    for (unsigned d = 0; d < op.loops.size(); ++d)
      if (op.loops[d].name == problem.batchLoop &&
          op.loops[d].extent % problem.devices == 0) {
        p.loopAxes[d] = dpAxes;
        split = true;
      }
    if (!split && problem.devices > 1)
      return Error::success(); // the batch does not divide: no ZeRO plan
    if (op.moe && c.mesh.axes.back().name == "ep")
      p.loopAxes[op.moe->expertLoop] = {unsigned(c.mesh.axes.size() - 1)};
    parts.push_back(std::move(p));
  }
  ++result.configurations;
  Expected<PlanCost> pc = (*inst)->evaluate(parts);
  if (!pc)
    return pc.takeError();
  result.memoryLimit = (*inst)->getMemoryLimit();
  result.smallestMemory = std::min(result.smallestMemory, pc->getMemory());
  if (pc->feasible) {
    Plan plan;
    plan.config = c;
    plan.partitions = std::move(parts);
    plan.cost = std::move(*pc);
    plan.label = "zero-" + std::to_string(zeroStage) + " dp=" +
                 std::to_string(problem.devices);
    if (c.mesh.axes.back().name == "ep")
      plan.label += " ep=" + std::to_string(c.mesh.axes.back().size);
    if (microBatches > 1)
      plan.label += " m=" + std::to_string(microBatches);
    plan.label += getRecomputeLabel(recompute);
    keepBest(result, std::move(plan));
  }
  return Error::success();
}

Expected<SearchResult> searchZeRO(const Problem &problem,
                                  const Cluster &cluster,
                                  const EfficiencyModel &eff, int zeroStage,
                                  ArrayRef<int64_t> meshShape) {
  SearchResult result;
  result.smallestMemory = std::numeric_limits<double>::infinity();
  if (Error e = addZeROPlan(result, problem, cluster, eff, zeroStage, meshShape,
                            1, Recompute::None))
    return std::move(e);
  return result;
}

Expected<SearchResult> searchZeRO(const Problem &problem,
                                  const Cluster &cluster,
                                  const EfficiencyModel &eff, int zeroStage,
                                  const SearchOptions &options) {
  SearchResult result;
  result.smallestMemory = std::numeric_limits<double>::infinity();
  for (auto [stages, m] :
       getPipelineChoices(problem, problem.devices,
                          /*pipeline=*/false, options.microBatchChoices))
    for (Recompute rc : options.recompute) {
      if (rc != Recompute::None && !hasLayers(problem))
        continue;
      if (Error e =
              addZeROPlan(result, problem, cluster, eff, zeroStage, {}, m, rc))
        return std::move(e);
    }
  return result;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

void printPlanConfig(raw_ostream &os, const Config &config) {
  os << "mesh";
  for (const MeshAxis &a : config.mesh.axes)
    os << " " << a.name << "=" << a.size;
  os << ", micro-batches " << config.microBatches << ", ZeRO stage "
     << config.zeroStage;
  if (config.recompute != Recompute::None)
    os << ", " << getRecomputeName(config.recompute) << " recomputation";
  if (config.interleave > 1)
    os << ", " << config.interleave << " virtual stages per device";
  if (!config.overlapGradSync)
    os << ", gradient sync not overlapped";
  if (config.gpipe && config.getStages() > 1)
    os << ", GPipe schedule";
  os << "\n";
}

void printPlan(raw_ostream &os, const Problem &problem, const Plan &plan,
               bool foldLayers) {
  FlatGraph g = flatten(problem);
  const Mesh &mesh = plan.config.mesh;
  printPlanConfig(os, plan.config);
  os << format("  %-22s %-48s %12s %12s\n", "operator", "partition",
               "ms/micro-b", "GiB");
  const double gib = double(int64_t(1) << 30);
  // Fold identical layer copies.
  std::vector<unsigned> layerOps;
  for (unsigned i = 0; i < problem.ops.size(); ++i)
    if (problem.sections[i] == Section::Layer)
      layerOps.push_back(i);
  bool identical = foldLayers && !layerOps.empty();
  if (identical)
    for (unsigned i = 0; i < g.ops.size(); ++i)
      if (g.layerOf[i] > 0) {
        unsigned base = unsigned(i - g.layerOf[i] * layerOps.size());
        if (!(plan.partitions[i] == plan.partitions[base]))
          identical = false;
      }
  for (unsigned i = 0; i < g.ops.size(); ++i) {
    if (identical && g.layerOf[i] > 0)
      continue;
    std::string name = g.ops[i].name;
    if (identical && g.layerOf[i] == 0)
      name = problem.ops[g.original[i]].name + " x" +
             std::to_string(problem.layers);
    double s = i < plan.cost.opSeconds.size() ? plan.cost.opSeconds[i] : 0;
    double b = i < plan.cost.opBytes.size() ? plan.cost.opBytes[i] : 0;
    os << format("  %-22s %-48s %12.3f %12.3f\n", name.c_str(),
                 describePartition(g.ops[i], plan.partitions[i], mesh).c_str(),
                 s * 1e3, b / gib);
  }
  // MoE operators: FasterMoE's choices, once when every layer's are the
  // same.
  for (const auto &[i, m] : plan.cost.moe) {
    if (identical && g.layerOf[i] > 0)
      continue;
    std::string name = g.ops[i].name;
    if (identical && g.layerOf[i] == 0)
      name = problem.ops[g.original[i]].name + " x" +
             std::to_string(problem.layers);
    printMoELine(os, name, g.ops[i], m);
  }
  printPlanTotals(os, plan.cost, plan.config);
}

void printMoELine(raw_ostream &os, StringRef name, const Operator &op,
                  const OperatorCost::MoEChoice &m) {
  int64_t experts = op.moe ? op.loops[op.moe->expertLoop].extent : 0;
  os << "  " << name << ": expert parallelism " << m.expertParallel << " ("
     << experts / std::max<int64_t>(1, m.expertParallel) << " of " << experts
     << " experts per device), " << (m.hierarchical ? "hierarchical" : "flat")
     << " all-to-all, "
     << (m.groupSize
             ? "smart schedule in groups of " + std::to_string(m.groupSize)
             : std::string("not scheduled"))
     << ", shadowed experts ";
  if (m.shadowed.empty())
    os << "none";
  for (auto [k, e] : enumerate(m.shadowed))
    os << (k ? "," : "") << e;
  os << format("; most loaded device %.0f tokens, busiest link per "
               "dispatch %.2f MB NVLink / %.2f MB network",
               m.maxWorkerTokens, m.intraNodeLinkBytes / 1e6,
               m.interNodeLinkBytes / 1e6);
  if (!m.expertTokens.empty()) {
    auto [lo, hi] =
        std::minmax_element(m.expertTokens.begin(), m.expertTokens.end());
    if (*hi - *lo <= 1e-9 * *hi)
      os << format("; tokens per expert %.0f each", *hi);
    else
      os << format("; tokens per expert %.0f (expert %d) to %.0f (expert "
                   "%d)",
                   *lo, int(lo - m.expertTokens.begin()), *hi,
                   int(hi - m.expertTokens.begin()));
  }
  if (m.droppedTokens > 0)
    os << format(", %.0f tokens dropped", m.droppedTokens);
  os << "\n";
}

void printPlanTotals(raw_ostream &os, const PlanCost &c, const Config &config) {
  const double gib = double(int64_t(1) << 30);
  os << format("step time            %12.3f ms\n", c.stepTime * 1e3);
  os << format("  pipeline           %12.3f ms (bubble %.3f ms, re-layout "
               "%.3f ms)\n",
               c.pipeline * 1e3, c.bubble * 1e3, c.relayout * 1e3);
  os << format("    compute %.3f ms, collectives %.3f ms (partial-sum "
               "reductions %.3f ms), redistribution %.3f ms\n",
               c.compute * 1e3, (c.collectives + c.relayoutReductions) * 1e3,
               c.relayoutReductions * 1e3,
               (c.relayout - c.relayoutReductions) * 1e3);
  if (c.ring.getTotal() > 0)
    os << format("    temporal ring %.3f ms (not hidden %.3f, start-ups "
                 "%.3f, alignment %.3f)\n",
                 c.ring.getTotal() * 1e3, c.ring.exposed * 1e3,
                 c.ring.startup * 1e3, c.ring.alignment * 1e3);
  os << format("  exposed grad sync  %12.3f ms\n", c.exposedSync * 1e3);
  os << format("  optimizer          %12.3f ms\n", c.optimizer * 1e3);
  os << format("memory per device    %12.3f GiB (states %.3f, activations "
               "%.3f, transient %.3f)\n",
               c.getMemory() / gib, c.stateBytes / gib,
               c.activationBytes / gib, c.transientBytes / gib);
  // Each pipeline stage keeps its own micro-batches in flight (the total
  // above is the first stage's, the most).
  if (config.getStages() > 1) {
    cost::ScheduleShape schedule = config.getSchedule();
    os << "memory per stage    ";
    for (int64_t s = 0; s < schedule.stages; ++s)
      os << format("%s %lld: %.3f GiB (%.4g in flight)", s ? "," : "",
                   static_cast<long long>(s),
                   c.getStageMemory(schedule, s) / gib,
                   cost::getInFlight(schedule, s));
    os << "\n";
  }
}

} // namespace stpar::search
