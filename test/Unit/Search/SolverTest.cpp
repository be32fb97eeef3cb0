//===- SolverTest.cpp - brute force vs segmented DP, search, baselines ----===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/Solver.h"
#include "stpar/Cost/MoE.h"
#include "stpar/Search/GPTProblem.h"

#include "gtest/gtest.h"

#include <cmath>
#include <map>
#include <random>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace {

const Cluster &cluster() {
  static Cluster c = cantFail(getPreset("v100-sxm2-32g-4x8"));
  return c;
}

/// A random problem of at most 6 flattened operators whose tensors are all
/// [B, M, H]: chains inside each section, random residual (skip) edges,
/// optionally a repeated layer block between pre and post operators.
Problem randomProblem(std::mt19937 &rng) {
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int64_t extents[] = {2, 4, 6, 8, 12};
  int64_t B = extents[pick(0, 4)], M = extents[pick(0, 4)],
          H = extents[pick(0, 4)];
  Problem p;
  p.name = "random";
  p.cluster = "v100-sxm2-32g-4x8";
  const int64_t devices[] = {1, 2, 3, 4, 6, 8};
  p.devices = devices[pick(0, 5)];
  p.batchLoop = "b";
  int nLayer = pick(0, 3);
  int layers = nLayer ? pick(1, 3) : 1;
  while (nLayer * layers > 5)
    --layers;
  int nPre = nLayer ? pick(0, 2) : pick(1, 6);
  int nPost = nLayer ? pick(0, 2) : 0;
  while (nPre + nLayer * layers + nPost > 6)
    nPre > 0 ? --nPre : --nPost;
  p.layers = layers;

  auto addOp = [&](Section section, int index) {
    Operator op;
    op.name = std::string(getSectionName(section)) + std::to_string(index);
    op.layerKind = "g";
    int kind = pick(0, 4);
    op.loops = {{"b", B, LoopKind::Parallel, {}},
                {"m", M, LoopKind::Parallel, {}},
                {"h", H, LoopKind::Parallel, {}}};
    if (kind == 0) {
      op.kind = OpKind::MatMul;
      op.loops.push_back({"n", H, LoopKind::Reduction, {}});
      op.operands = {{"x", OperandRole::Input, {0, 1, 3}, 2, true},
                     {"w", OperandRole::Parameter, {3, 2}, 2, true},
                     {"y", OperandRole::Output, {0, 1, 2}, 2, true}};
      op.flopsPerPoint = 2;
    } else if (kind == 1 || kind == 2) {
      op.kind = kind == 1 ? OpKind::Softmax : OpKind::Norm;
      op.loops[2].kind = LoopKind::Reduction;
      op.operands = {{"x", OperandRole::Input, {0, 1, 2}, 2, true}};
      if (kind == 2)
        op.operands.push_back({"w", OperandRole::Parameter, {2}, 2, true});
      op.operands.push_back({"y", OperandRole::Output, {0, 1, 2}, 2, true});
      op.flopsPerPoint = 8;
    } else {
      op.kind = OpKind::Elementwise;
      op.operands = {{"x0", OperandRole::Input, {0, 1, 2}, 2, true}};
      if (kind == 4)
        op.operands.push_back({"x1", OperandRole::Input, {0, 1, 2}, 2, true});
      op.operands.push_back({"y", OperandRole::Output, {0, 1, 2}, 2, true});
      op.flopsPerPoint = 3;
    }
    p.ops.push_back(std::move(op));
    p.sections.push_back(section);
    return unsigned(p.ops.size() - 1);
  };
  auto out = [&](unsigned op) {
    return unsigned(p.ops[op].operands.size() - 1);
  };
  std::vector<unsigned> pre, layer, post;
  for (int i = 0; i < nPre; ++i)
    pre.push_back(addOp(Section::Pre, i));
  for (int i = 0; i < nLayer; ++i)
    layer.push_back(addOp(Section::Layer, i));
  for (int i = 0; i < nPost; ++i)
    post.push_back(addOp(Section::Post, i));
  unsigned carry = layer.empty() ? 0 : layer.back();
  auto wire = [&](const std::vector<unsigned> &ops, Section section) {
    for (unsigned i = 0; i < ops.size(); ++i) {
      unsigned op = ops[i];
      bool hasInput = p.ops[op].operands[0].role == OperandRole::Input;
      if (!hasInput)
        continue;
      // First input: the previous op, or the carry.
      if (i > 0)
        p.edges.push_back({ops[i - 1], out(ops[i - 1]), op, 0, false});
      else if (section == Section::Layer)
        p.edges.push_back({carry, out(carry), op, 0, true});
      else if (section == Section::Post)
        p.edges.push_back({carry, out(carry), op, 0, false});
      // Second input (residual): any earlier op of the section or the carry.
      if (p.ops[op].operands.size() > 2 &&
          p.ops[op].operands[1].role == OperandRole::Input) {
        int from = pick(-1, int(i) - 1);
        if (from >= 0)
          p.edges.push_back({ops[from], out(ops[from]), op, 1, false});
        else if (section == Section::Layer)
          p.edges.push_back({carry, out(carry), op, 1, true});
      }
    }
  };
  wire(pre, Section::Pre);
  wire(layer, Section::Layer);
  wire(post, Section::Post);
  return p;
}

/// A random problem (randomProblem) whose memory limit binds one time in
/// three, and exact search options for it: at most `axes` mesh axes, every
/// micro-batch count, the temporal primitive on or off at random.
std::pair<Problem, SearchOptions> randomSearch(std::mt19937 &rng,
                                               unsigned axes) {
  Problem p = randomProblem(rng);
  if (rng() % 3 == 0)
    p.memoryLimit = 2e4 + double(rng() % 200000);
  SearchOptions opts;
  opts.maxMeshAxes = axes;
  opts.microBatchChoices = 0;
  opts.solver.space.temporal = rng() % 2;
  return {std::move(p), std::move(opts)};
}

Config randomConfig(std::mt19937 &rng, const Problem &p) {
  std::vector<std::vector<int64_t>> shapes = enumerateMeshShapes(p.devices, 2);
  Config c;
  c.mesh = makeSearchMesh(1, shapes[rng() % shapes.size()]);
  c.zeroStage = int(rng() % 4);
  return c;
}

TEST(Exactness, DPMatchesBruteForceOnRandomProblems) {
  std::mt19937 rng(20240427);
  EfficiencyModel eff = getDefaultEfficiency();
  int compared = 0, constrained = 0, infeasibleAgreed = 0, withLayers = 0;
  for (int attempt = 0; attempt < 5000 && compared < 300; ++attempt) {
    Problem p = randomProblem(rng);
    ASSERT_FALSE(bool(verifyProblem(p))) << toString(verifyProblem(p));
    Config c = randomConfig(rng, p);
    SolverOptions opts;
    opts.space.temporal = rng() % 4 != 0;
    auto inst = Instance::create(p, cluster(), c, eff, opts);
    ASSERT_TRUE(bool(inst)) << toString(inst.takeError());
    Expected<Plan> bf = (*inst)->bruteForce(3e5);
    if (!bf) {
      consumeError(bf.takeError()); // too many combinations; skip
      continue;
    }
    DPStats stats;
    Expected<Plan> dp = (*inst)->solveDP(&stats);
    ASSERT_TRUE(bool(dp)) << toString(dp.takeError());
    EXPECT_TRUE(stats.isExact());
    double a = bf->cost.stepTime, b = dp->cost.stepTime;
    ASSERT_NEAR(a, b, 1e-9 * std::max(a, b)) << "problem " << compared;
    EXPECT_TRUE(dp->cost.feasible);
    // Branch and bound: with the bound just above the optimum, the DP's
    // lower bounds of the rest of the plan (per-operator minima, the chain
    // bound per layout) must never prune the optimum; just below it, no
    // plan may be returned.
    Expected<Plan> above = (*inst)->solveDP(nullptr, a * (1 + 1e-9));
    ASSERT_TRUE(bool(above))
        << toString(above.takeError()) << " problem " << compared;
    ASSERT_NEAR(above->cost.stepTime, a, 1e-9 * a);
    Expected<Plan> below = (*inst)->solveDP(nullptr, a * (1 - 1e-9));
    EXPECT_FALSE(bool(below));
    if (!below)
      consumeError(below.takeError());
    EXPECT_LE((*inst)->getLowerBound(), a * (1 + 1e-12));
    ++compared;
    if (is_contained(p.sections, Section::Layer) && p.layers > 1)
      ++withLayers;
    // Tighten the memory limit below the unconstrained optimum's memory so
    // the constraint binds; both solvers must agree again (or both fail).
    p.memoryLimit = bf->cost.getMemory() * 0.97;
    auto inst2 = Instance::create(p, cluster(), c, eff, opts);
    ASSERT_TRUE(bool(inst2));
    Expected<Plan> bf2 = (*inst2)->bruteForce(3e5);
    Expected<Plan> dp2 = (*inst2)->solveDP();
    ASSERT_EQ(bool(bf2), bool(dp2));
    if (bf2) {
      double a2 = bf2->cost.stepTime, b2 = dp2->cost.stepTime;
      ASSERT_NEAR(a2, b2, 1e-9 * std::max(a2, b2));
      EXPECT_LE(dp2->cost.getMemory(), *p.memoryLimit * (1 + 1e-12));
      EXPECT_GE(a2, a * (1 - 1e-12));
      // The Lagrangian bounds of the memory limit must not prune the
      // constrained optimum either.
      Expected<Plan> above2 = (*inst2)->solveDP(nullptr, a2 * (1 + 1e-9));
      ASSERT_TRUE(bool(above2)) << toString(above2.takeError());
      ASSERT_NEAR(above2->cost.stepTime, a2, 1e-9 * a2);
      DPStats stats2;
      Expected<Plan> below2 = (*inst2)->solveDP(&stats2, a2 * (1 - 1e-9));
      EXPECT_FALSE(bool(below2));
      if (!below2)
        consumeError(below2.takeError());
      EXPECT_TRUE(stats2.isExact());
      EXPECT_LE((*inst2)->getLowerBound(), a2 * (1 + 1e-12));
      // The unconstrained optimum does not fit here, so the exact DP's
      // time-only relaxation cannot have answered alone.
      DPStats stats3;
      Expected<Plan> again = (*inst2)->solveDP(&stats3);
      ASSERT_TRUE(bool(again));
      if (a2 > a * (1 + 1e-9)) {
        EXPECT_EQ(stats3.memoryBoundSolves, 1u);
      }
      ++constrained;
    } else {
      consumeError(bf2.takeError());
      consumeError(dp2.takeError());
      ++infeasibleAgreed;
    }
  }
  EXPECT_EQ(compared, 300);
  EXPECT_GT(withLayers, 20);
  EXPECT_GT(constrained, 20);
  std::printf("compared %d problems (%d with repeated layers), %d with a "
              "binding memory limit, %d agreed infeasible\n",
              compared, withLayers, constrained, infeasibleAgreed);
}

TEST(Exactness, GroupBoundNeverRejectsAnOptimum) {
  // Configurations sharing one table (ZeRO 0-3, with and without
  // recomputation) share the smallest price of each candidate
  // (Instance::shareGroupPrices): solveDP first tries to reject by the
  // group's chain bound. Each configuration's own optimum must still be
  // found with the bound just above it, and nothing just below it.
  std::mt19937 rng(1207);
  EfficiencyModel eff = getDefaultEfficiency();
  int compared = 0;
  for (int attempt = 0; attempt < 200 && compared < 40; ++attempt) {
    Problem p = randomProblem(rng);
    Config base = randomConfig(rng, p);
    SolverOptions opts;
    opts.space.temporal = rng() % 2;
    std::vector<std::unique_ptr<Instance>> group;
    std::vector<double> optimum;
    for (int z = 0; z < 4; ++z)
      for (Recompute r : {Recompute::None, Recompute::Full}) {
        if (r != Recompute::None && !is_contained(p.sections, Section::Layer))
          continue;
        Config c = base;
        c.zeroStage = z;
        c.recompute = r;
        auto inst =
            Instance::create(p, cluster(), c, eff, opts,
                             group.empty() ? nullptr : group.front().get());
        ASSERT_TRUE(bool(inst)) << toString(inst.takeError());
        // Each optimum before the group shares its prices.
        Expected<Plan> plan = (*inst)->solveDP();
        if (plan) {
          optimum.push_back(plan->cost.stepTime);
        } else {
          consumeError(plan.takeError()); // no plan fits
          optimum.push_back(std::nan(""));
        }
        group.push_back(std::move(*inst));
      }
    std::vector<const Instance *> members;
    for (const std::unique_ptr<Instance> &i : group)
      members.push_back(i.get());
    Instance::shareGroupPrices(members);
    for (auto [i, inst] : llvm::enumerate(group)) {
      double a = optimum[i];
      if (std::isnan(a))
        continue;
      Expected<Plan> above = inst->solveDP(nullptr, a * (1 + 1e-9));
      ASSERT_TRUE(bool(above))
          << toString(above.takeError()) << " attempt " << attempt;
      ASSERT_NEAR(above->cost.stepTime, a, 1e-9 * a);
      Expected<Plan> below = inst->solveDP(nullptr, a * (1 - 1e-9));
      EXPECT_FALSE(bool(below));
      if (!below)
        consumeError(below.takeError());
    }
    ++compared;
  }
  EXPECT_EQ(compared, 40);
}

Problem tinyGPT(int64_t devices) {
  TransformerShape s;
  s.model = {4, 64, 4, 256, 128, 32, 16};
  return buildTransformerProblem(s, "v100-sxm2-32g-4x8", devices);
}

TEST(Search, BeatsOrMatchesBaselinesInTheSameObjective) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(2);
  p.layers = 2;
  SearchOptions opts;
  opts.maxMeshAxes = 2;
  Expected<SearchResult> full = search(p, cluster(), eff, opts);
  ASSERT_TRUE(bool(full)) << toString(full.takeError());
  ASSERT_TRUE(full->best.has_value());
  EXPECT_TRUE(full->stats.isExact());
  SearchOptions spatialOpts = opts;
  spatialOpts.solver.space.temporal = false;
  Expected<SearchResult> spatial = search(p, cluster(), eff, spatialOpts);
  ASSERT_TRUE(bool(spatial) && spatial->best);
  Expected<SearchResult> mega = searchMegatron(p, cluster(), eff, false, opts);
  ASSERT_TRUE(bool(mega) && mega->best);
  Expected<SearchResult> megaSP = searchMegatron(p, cluster(), eff, true, opts);
  ASSERT_TRUE(bool(megaSP) && megaSP->best);
  double t = full->best->cost.stepTime;
  // The search space contains the spatial-only and Megatron plans.
  EXPECT_LE(t, spatial->best->cost.stepTime * (1 + 1e-12));
  EXPECT_LE(t, mega->best->cost.stepTime * (1 + 1e-12));
  EXPECT_LE(t, megaSP->best->cost.stepTime * (1 + 1e-12));
  // The reported cost is the evaluator's.
  auto inst = Instance::create(p, cluster(), full->best->config, eff, {});
  ASSERT_TRUE(bool(inst));
  Expected<PlanCost> again = (*inst)->evaluate(full->best->partitions);
  ASSERT_TRUE(bool(again));
  EXPECT_DOUBLE_EQ(again->stepTime, t);
}

TEST(Search, DoublingMatchesUnrolledLayers) {
  // The DP over 5 layers (doubling: 5 = 4 + 1) equals brute force when the
  // candidate space is tiny (1 x 2 mesh, spatial only).
  EfficiencyModel eff = getDefaultEfficiency();
  const char *text = R"(
problem chain
devices 2
batch-loop b
layers 5
op fc matmul section=layer
  loop b 4
  loop k 8
  loop n 8 reduction
  input x b,n
  param w n,k
  output y b,k
op act elementwise section=layer
  loop b 4
  loop h 8
  input x b,h
  output y b,h
edge fc.y -> act.x
edge act.y -> fc.x next
)";
  Expected<Problem> p = parseProblem(text, "chain");
  ASSERT_TRUE(bool(p)) << toString(p.takeError());
  Config c;
  c.mesh = makeSearchMesh(1, {2});
  SolverOptions opts;
  opts.space.temporal = false;
  auto inst = Instance::create(*p, cluster(), c, eff, opts);
  ASSERT_TRUE(bool(inst));
  Expected<Plan> bf = (*inst)->bruteForce(1e7);
  Expected<Plan> dp = (*inst)->solveDP();
  ASSERT_TRUE(bf && dp);
  EXPECT_NEAR(bf->cost.stepTime, dp->cost.stepTime,
              1e-9 * bf->cost.stepTime);
  EXPECT_EQ(dp->partitions.size(), 10u);
}

TEST(Search, ErrorsNameTheProblem) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(64);
  Expected<SearchResult> r = search(p, cluster(), eff, {});
  ASSERT_FALSE(bool(r));
  EXPECT_NE(toString(r.takeError()).find("cannot host 64"), std::string::npos);
  Problem q = tinyGPT(2);
  q.memoryLimit = 1e3; // 1 kB: nothing fits
  SearchOptions opts;
  opts.maxMeshAxes = 1;
  opts.zeroStages = {3};
  Expected<SearchResult> s = search(q, cluster(), eff, opts);
  ASSERT_TRUE(bool(s));
  EXPECT_FALSE(s->best.has_value());
  EXPECT_GT(s->smallestMemory, 1e3);
  EXPECT_LT(s->smallestMemory, 1e12);
}

TEST(Baselines, ZeROStagesTradeMemoryForTraffic) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(8);
  double prevMem = 1e300, t2 = 0, t3 = 0;
  for (int z = 0; z <= 3; ++z) {
    Expected<SearchResult> r = searchZeRO(p, cluster(), eff, z);
    ASSERT_TRUE(bool(r) && r->best);
    double mem = r->best->cost.stateBytes;
    EXPECT_LT(mem, prevMem) << "stage " << z;
    prevMem = mem;
    if (z == 2)
      t2 = r->best->cost.stepTime;
    if (z == 3)
      t3 = r->best->cost.stepTime;
  }
  EXPECT_GT(t3, t2); // ZeRO-3 gathers the parameters once more
}

// What the objective charges as communication for Megatron's layout
// (tp = 2, dp = 2): in F one all-reduce of the partial sums per
// row-parallel linear (attention projection, second MLP linear), under the
// operator that produced them; in B one per column-parallel linear's input
// gradient (QKV, first MLP linear); gradient syncs over dp only.
TEST(Communication, MegatronAllReducesPerBlock) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(4);
  SearchOptions opts;
  opts.megatron.tp = 2;
  opts.megatron.dp = 2;
  opts.megatron.pp = 1;
  opts.megatron.microBatches = 1;
  opts.recompute = {Recompute::None};
  Expected<SearchResult> r = searchMegatron(p, cluster(), eff, false, opts);
  ASSERT_TRUE(r && r->best) << (r ? "no plan" : toString(r.takeError()));
  const Plan &plan = *r->best;
  auto inst = Instance::create(p, cluster(), plan.config, eff, {});
  ASSERT_TRUE(bool(inst));
  Expected<std::vector<PlannedCommunication>> comms =
      (*inst)->getCommunication(plan.partitions);
  ASSERT_TRUE(bool(comms)) << toString(comms.takeError());
  const FlatGraph &g = (*inst)->getFlatGraph();
  unsigned tpAxis = 2; // mesh [pp, dp, tp]
  std::map<std::string, unsigned> forward, backward;
  for (const PlannedCommunication &c : *comms) {
    if (c.source == "gradient sync") {
      EXPECT_EQ(c.comm.axes, std::vector<unsigned>{1}) << c.comm.what;
      continue;
    }
    if (c.comm.kind != Collective::AllReduce)
      continue;
    ASSERT_EQ(c.comm.axes, std::vector<unsigned>{tpAxis}) << c.comm.what;
    std::string name = g.ops[c.op].name;
    name = name.substr(0, name.find('#'));
    ++(c.comm.phase == Phase::Forward ? forward : backward)[name];
  }
  int64_t layers = p.layers;
  EXPECT_EQ(forward["proj"], layers);
  EXPECT_EQ(forward["fc2"], layers);
  EXPECT_EQ(backward["qkv"], layers);
  EXPECT_EQ(backward["fc1"], layers);
  // The plan's re-layout time comes from exactly the listed re-layouts.
  size_t relayouts = llvm::count_if(*comms, [](const PlannedCommunication &c) {
    return c.source == "re-layout";
  });
  EXPECT_GT(plan.cost.relayout, 0);
  EXPECT_GT(relayouts, 0u);
  // Every byte the step time counts as a re-layout is listed: the plan
  // with no tensor parallelism (dp = 4) communicates only gradients.
  opts.megatron.tp = 1;
  opts.megatron.dp = 4;
  Expected<SearchResult> d = searchMegatron(p, cluster(), eff, false, opts);
  ASSERT_TRUE(d && d->best);
  auto dinst = Instance::create(p, cluster(), d->best->config, eff, {});
  ASSERT_TRUE(bool(dinst));
  Expected<std::vector<PlannedCommunication>> dcomms =
      (*dinst)->getCommunication(d->best->partitions);
  ASSERT_TRUE(bool(dcomms));
  for (const PlannedCommunication &c : *dcomms)
    EXPECT_EQ(c.source, "gradient sync") << c.comm.what;
  EXPECT_EQ(d->best->cost.relayout, 0);
}

// DeepSpeed's ZeRO as it is run: the best over gradient accumulation steps
// and activation checkpointing. Every configuration it tries is one of the
// single-configuration baseline's kind, so it is never slower than m = 1
// without recomputation, it names its configuration, and under a memory
// limit that only gradient accumulation or recomputation meets it still
// finds a plan where the fixed configuration finds none.
TEST(Baselines, ZeROSearchesAccumulationAndRecomputation) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(4);
  SearchOptions opts;
  opts.microBatchChoices = 0;
  Expected<SearchResult> fixed = searchZeRO(p, cluster(), eff, 3);
  Expected<SearchResult> searched = searchZeRO(p, cluster(), eff, 3, opts);
  ASSERT_TRUE(fixed && fixed->best && searched && searched->best);
  EXPECT_LE(searched->best->cost.stepTime, fixed->best->cost.stepTime);
  EXPECT_GT(searched->configurations, 2u);
  EXPECT_EQ(searched->best->label.rfind("zero-3 dp=4", 0), 0u)
      << searched->best->label;
  // A limit between the smallest memory and the fixed plan's memory.
  double smallest = searched->smallestMemory;
  double fixedMem = fixed->best->cost.getMemory();
  ASSERT_LT(smallest, fixedMem);
  Problem tight = p;
  tight.memoryLimit = (smallest + fixedMem) / 2;
  Expected<SearchResult> f2 = searchZeRO(tight, cluster(), eff, 3);
  Expected<SearchResult> s2 = searchZeRO(tight, cluster(), eff, 3, opts);
  ASSERT_TRUE(f2 && s2);
  EXPECT_FALSE(f2->best.has_value());
  ASSERT_TRUE(s2->best.has_value());
  EXPECT_LE(s2->best->cost.getMemory(), *tight.memoryLimit);
  EXPECT_TRUE(s2->best->config.recompute != Recompute::None ||
              s2->best->config.microBatches > 1)
      << s2->best->label;
}

} // namespace

namespace {

/// One linear layer y[b,k] = x[b,n] w[n,k] on a 2 x 2 mesh.
Problem singleLinear(int64_t b, int64_t k, int64_t n) {
  Problem p;
  p.name = "linear";
  p.cluster = "v100-sxm2-32g-4x8";
  p.devices = 4;
  p.batchLoop = "b";
  Operator op;
  op.name = "fc";
  op.kind = OpKind::MatMul;
  op.flopsPerPoint = 2;
  op.loops = {{"b", b, LoopKind::Parallel, {}},
              {"k", k, LoopKind::Parallel, {}},
              {"n", n, LoopKind::Reduction, {}}};
  op.operands = {{"x", OperandRole::Input, {0, 2}, 2, true},
                 {"w", OperandRole::Parameter, {2, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  p.ops.push_back(op);
  p.sections.push_back(Section::Pre);
  return p;
}

TEST(Objective, TemporalHoldsOneBlockOfTheWeight) {
  // On a q x q square the temporal primitive keeps one (N/q, K/q) block of W
  // (and of dW and the optimizer states) per device, like the spatial split
  // n{x0} k{x1}; neither replicates W. Model states and optimizer time must
  // therefore be equal, for every ZeRO stage (no data-parallel axis here).
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = singleLinear(64, 512, 1024);
  for (int z = 0; z <= 3; ++z) {
    Config c;
    c.mesh = makeSearchMesh(1, {2, 2});
    c.zeroStage = z;
    auto inst = Instance::create(p, cluster(), c, eff, {});
    ASSERT_TRUE(bool(inst)) << toString(inst.takeError());
    Partition spatial;
    spatial.loopAxes = {{}, {2}, {1}}; // k on x1, n on x0
    Partition temporal;
    temporal.loopAxes = {{}, {}, {}};
    temporal.temporal = TemporalPrimitive{1, 2, 0, 2, 1}; // M=b N=n K=k
    Expected<PlanCost> s = (*inst)->evaluate({spatial});
    Expected<PlanCost> t = (*inst)->evaluate({temporal});
    ASSERT_TRUE(s && t);
    double wBytes = 1024.0 * 512 * 2 / 4; // one block, fp16
    double psi = wBytes / 2;
    EXPECT_DOUBLE_EQ(t->stateBytes, getModelStateBytes(psi, 1, z).getTotal())
        << "stage " << z;
    EXPECT_DOUBLE_EQ(t->stateBytes, s->stateBytes) << "stage " << z;
    EXPECT_DOUBLE_EQ(t->optimizer, s->optimizer) << "stage " << z;
  }
}

TEST(Objective, BreakdownAddsUpToThePipeline) {
  // PlanCost's breakdown (PrimePar Fig. 9's categories) partitions the
  // pipeline time without pipeline stages: compute + collectives + temporal
  // ring + re-layout = pipeline. Megatron's row-parallel outputs are reduced
  // by edges (partial-sum reductions, no ring); a plan forced onto the
  // temporal primitive pays start-ups and alignments and no reductions of
  // its linear layers' outputs.
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(4);
  for (Recompute recompute : {Recompute::None, Recompute::Full}) {
    SearchOptions opts;
    opts.pipeline = false;
    opts.zeroStages = {0};
    opts.recompute = {recompute};
    opts.meshShapes = {{2, 2}};
    SearchOptions forcedOpts = opts;
    forcedOpts.solver.space.onlyTemporal = true;
    Expected<SearchResult> mega =
        searchMegatron(p, cluster(), eff, false, opts);
    Expected<SearchResult> forced = search(p, cluster(), eff, forcedOpts);
    ASSERT_TRUE(mega && mega->best && forced && forced->best);
    for (const PlanCost &c : {mega->best->cost, forced->best->cost}) {
      EXPECT_GT(c.compute, 0);
      EXPECT_NEAR(c.compute + c.collectives + c.ring.getTotal() + c.relayout,
                  c.pipeline, 1e-9 * c.pipeline);
      EXPECT_LE(c.relayoutReductions, c.relayout * (1 + 1e-12));
    }
    const PlanCost &m = mega->best->cost, &t = forced->best->cost;
    EXPECT_EQ(m.ring.getTotal(), 0);
    EXPECT_GT(m.relayoutReductions, 0)
        << "recompute " << getRecomputeName(recompute);
    EXPECT_GT(t.ring.startup, 0);
    EXPECT_GT(t.ring.alignment, 0);
    EXPECT_LT(t.relayoutReductions, m.relayoutReductions);
  }
}

} // namespace

namespace {

TEST(Exactness, SlotTableAndHashMapAgree) {
  // A DP step finds its destination states in a table of (base key,
  // signature) or, where that table would be large, in a hash map
  // (SolverOptions::maxSlotTableEntries). No benchmark row reaches the
  // hash map, so here both ways solve the same random problems, exact and
  // capped, every configuration without a bound (so that every DP runs and
  // is counted), and must give the same plans, times and DP statistics.
  std::mt19937 rng(47);
  EfficiencyModel eff = getDefaultEfficiency();
  int solved = 0;
  uint64_t visited = 0;
  for (int i = 0; i < 100; ++i) {
    auto [p, table] = randomSearch(rng, 3);
    table.branchAndBound = false;
    if (i % 2)
      table.solver.setDefaultCaps();
    SearchOptions hashed = table;
    hashed.solver.maxSlotTableEntries = 0;
    Expected<SearchResult> a = search(p, cluster(), eff, table);
    Expected<SearchResult> b = search(p, cluster(), eff, hashed);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->best.has_value(), b->best.has_value()) << "problem " << i;
    EXPECT_EQ(a->stats.statesVisited, b->stats.statesVisited)
        << "problem " << i;
    visited += a->stats.statesVisited;
    EXPECT_EQ(a->stats.droppedStates, b->stats.droppedStates)
        << "problem " << i;
    if (!a->best)
      continue;
    EXPECT_EQ(a->best->cost.stepTime, b->best->cost.stepTime)
        << "problem " << i;
    EXPECT_TRUE(a->best->partitions == b->best->partitions) << "problem " << i;
    ++solved;
  }
  EXPECT_GT(solved, 50);
  EXPECT_GT(visited, 10000u);
}

/// Compares the exact DP with SolverOptions::layerDual against the DP
/// without it on `wanted` random problems with deep layer stacks (4-32
/// layers, beyond brute force) whose memory limit `limitOf` draws from the
/// unconstrained optimum's cost: both must give the same optimum for bounds
/// well above (x 1.2, where the DP without it can take minutes), just above
/// and just below it (no plan). Returns the DP statistics with it.
/// `tight`: the DP with it then runs under a limit of the optimum's own
/// memory (the optimum stays the optimum, and fits with no byte to spare:
/// a Lagrangian bound that overshoots by any margin rejects it).
static DPStats compareLayerDual(
    std::mt19937 &rng, int wanted,
    llvm::function_ref<double(const PlanCost &, std::mt19937 &)> limitOf,
    bool tight = false) {
  EfficiencyModel eff = getDefaultEfficiency();
  int compared = 0;
  DPStats total;
  for (int attempt = 0; attempt < 4000 && compared < wanted; ++attempt) {
    Problem p = randomProblem(rng);
    if (!is_contained(p.sections, Section::Layer))
      continue;
    p.layers = std::uniform_int_distribution<int>(4, 32)(rng);
    Config c = randomConfig(rng, p);
    SolverOptions on;
    on.space.temporal = rng() % 2;
    SolverOptions off = on;
    off.layerDual = false;
    // (Nor the relaxation's first plan: the reference shares as little
    // with the DP tested as it can.)
    off.relaxationShare = 1;
    auto free = Instance::create(p, cluster(), c, eff, off);
    EXPECT_TRUE(bool(free)) << toString(free.takeError());
    if (!free)
      return total;
    Expected<Plan> unconstrained = (*free)->solveDP();
    if (!unconstrained) {
      consumeError(unconstrained.takeError());
      continue;
    }
    p.memoryLimit = limitOf(unconstrained->cost, rng);
    auto withDual = Instance::create(p, cluster(), c, eff, on);
    auto without = Instance::create(p, cluster(), c, eff, off);
    EXPECT_TRUE(withDual && without);
    if (!withDual || !without)
      return total;
    // The reference: the DP without the dual, bounded by the capped DP's
    // plan (unbounded, its Pareto products grow through deep stacks).
    SolverOptions capped = off;
    capped.setDefaultCaps();
    auto seed = Instance::create(p, cluster(), c, eff, capped);
    EXPECT_TRUE(bool(seed));
    if (!seed)
      return total;
    Expected<Plan> seedPlan = (*seed)->solveDP();
    if (!seedPlan) {
      consumeError(seedPlan.takeError());
      continue;
    }
    Expected<Plan> ref =
        (*without)->solveDP(nullptr, seedPlan->cost.stepTime * (1 + 1e-9));
    EXPECT_TRUE(bool(ref)) << toString(ref.takeError());
    if (!ref)
      return total;
    double t = ref->cost.stepTime;
    if (tight) {
      p.memoryLimit = ref->cost.getMemory();
      withDual = Instance::create(p, cluster(), c, eff, on);
      EXPECT_TRUE(bool(withDual));
      if (!withDual)
        return total;
    }
    // (Last, just above it again: passes that follow one under a lower
    // bound must not read what that one concluded; Tables::layerPrices.)
    for (double f : {1.2, 1 + 1e-9, 1 - 1e-9, 1 + 1e-9}) {
      DPStats stats;
      Expected<Plan> a = (*withDual)->solveDP(&stats, t * f);
      total += stats;
      EXPECT_EQ(bool(a), f > 1) << "problem " << attempt << " bound x" << f;
      if (!a) {
        consumeError(a.takeError());
        continue;
      }
      EXPECT_NEAR(a->cost.stepTime, t, 1e-9 * t) << "problem " << attempt;
      EXPECT_TRUE(a->cost.feasible);
    }
    ++compared;
  }
  EXPECT_EQ(compared, wanted);
  return total;
}

static void printDualStats(const char *what, const DPStats &total) {
  std::printf("%s: %llu priced seeds, %llu dual runs, %llu seeded, %llu "
              "answered below the seed's bound, %llu transient cuts, %llu "
              "points dropped by Lagrangian rests, %llu rejected by the "
              "per-class duals, %llu rejected by the layer price per transient "
              "class, %llu layer price states, %llu anchors dropped\n",
              what, (unsigned long long)total.pricedSeeds,
              (unsigned long long)total.dualSolves,
              (unsigned long long)total.dualSeeds,
              (unsigned long long)total.dualEarlyAnswers,
              (unsigned long long)total.transientCuts,
              (unsigned long long)total.pricedRestDrops,
              (unsigned long long)total.classDualRejections,
              (unsigned long long)total.classLayerPriceRejections,
              (unsigned long long)total.layerPrice.states,
              (unsigned long long)total.droppedAnchors);
}

TEST(Exactness, LayerDualChangesNoOptimum) {
  // Exact DPs where memory binds first run a priced DP (one point per
  // front, time + lambda x memory) whose plan, where it fits, lowers the
  // bound, then the layer dual (SolverOptions::layerDual): its Lagrangian
  // bound prunes the layer products, its least-priced plan that fits
  // lowers the bound, and the products run first for plans just above the
  // dual bound; transient classes and the layer block's Lagrangian rest
  // test prune before and inside the DP (all of it off with
  // layerDual = false). Here the limit is 0.85-0.99 of the unconstrained
  // optimum's memory.
  std::mt19937 rng(2027);
  DPStats total =
      compareLayerDual(rng, 100, [](const PlanCost &free, std::mt19937 &rng) {
        return free.getMemory() *
               std::uniform_real_distribution<double>(0.85, 0.99)(rng);
      });
  // The dual's three parts all ran: its bound, its seed plan, and an
  // answer from a pass below the seed's bound.
  EXPECT_GT(total.dualSolves, 100u);
  EXPECT_GT(total.dualSeeds, 10u);
  EXPECT_GT(total.dualEarlyAnswers, 10u);
  EXPECT_GT(total.pricedSeeds, 10u);
  // And the transient classes and the layer block's Lagrangian rests cut,
  // and the layer price's chain along the carry's layouts dropped some.
  EXPECT_GT(total.transientCuts, 10u);
  EXPECT_GT(total.pricedRestDrops, 1000u);
  EXPECT_GT(total.layerPrice.states, 1000u);
  EXPECT_GT(total.droppedAnchors, 50u);
  printDualStats("layer dual, 100 problems agree", total);
}

TEST(Exactness, TransientBindingChangesNoOptimum) {
  // The same where the transient decides what fits: the limit leaves the
  // unconstrained optimum its additive memory and 0.2-0.95 of its
  // transient, so that the transient classes (their ceiling in the chain
  // bounds, the per-class duals) do the pruning.
  std::mt19937 rng(2031);
  DPStats total =
      compareLayerDual(rng, 100, [](const PlanCost &free, std::mt19937 &rng) {
        return free.stateBytes + free.activationBytes +
               free.transientBytes *
                   std::uniform_real_distribution<double>(0.2, 0.95)(rng);
      });
  EXPECT_GT(total.transientCuts, 10u);
  printDualStats("transient binding, 100 problems agree", total);
}

TEST(Exactness, NoSpareByteChangesNoOptimum) {
  // The same with the limit then lowered to the constrained optimum's own
  // memory: every Lagrangian bound of the optimum's transient class is at
  // most its time there, so any bound that rejects more than it may (the
  // layer price per transient class included) loses the optimum.
  std::mt19937 rng(2039);
  DPStats total = compareLayerDual(
      rng, 100,
      [](const PlanCost &free, std::mt19937 &rng) {
        return free.stateBytes + free.activationBytes +
               free.transientBytes *
                   std::uniform_real_distribution<double>(0.2, 0.95)(rng);
      },
      /*tight=*/true);
  EXPECT_GT(total.layerPrice.states, 1000u);
  printDualStats("no spare byte, 100 problems agree", total);
}

TEST(Exactness, MemoryBudgetIsReportedNotSkipped) {
  // A DP past its memory budget (SolverOptions::maxDPBytes) fails with a
  // solver failure, which the search reports instead of skipping the
  // configuration (or aborting in the allocator, as an exact search of a
  // memory-bound problem did at 23 GB).
  EXPECT_TRUE(isSolverFailure("internal error: the DP chose 3 partitions"));
  EXPECT_FALSE(isSolverFailure("no plan beats the bound of 1.0 s"));
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(4);
  SearchOptions opts;
  Expected<SearchResult> fine = search(p, cluster(), eff, opts);
  ASSERT_TRUE(fine && fine->best) << "the default budget solves it";
  opts.solver.maxDPBytes = 56 * 64; // 64 nodes
  Expected<SearchResult> tight = search(p, cluster(), eff, opts);
  ASSERT_FALSE(bool(tight));
  std::string message = toString(tight.takeError());
  EXPECT_TRUE(isSolverFailure(message)) << message;
  EXPECT_NE(message.find("maxDPBytes"), std::string::npos) << message;
  // One configuration's DP, exact, with and without a bound.
  Config c;
  c.mesh = makeSearchMesh(1, {2, 2});
  auto inst = Instance::create(p, cluster(), c, eff, opts.solver);
  ASSERT_TRUE(bool(inst)) << toString(inst.takeError());
  for (double bound : {std::numeric_limits<double>::infinity(), 1e9}) {
    Expected<Plan> dp = (*inst)->solveDP(nullptr, bound);
    ASSERT_FALSE(bool(dp));
    std::string m = toString(dp.takeError());
    EXPECT_TRUE(isSolverFailure(m)) << m;
  }
}

TEST(Exactness, BudgetFailuresAreRetriedUnderALowerBound) {
  // A configuration whose DP passes the memory budget is set aside and
  // solved again once the other configurations have lowered the bound.
  // Under a small budget the search either fails with the budget's error or
  // finds the optimum of the unlimited search, never another plan; some
  // searches succeed only through a retry.
  std::mt19937 rng(12);
  EfficiencyModel eff = getDefaultEfficiency();
  int agreed = 0, failed = 0, retried = 0;
  for (int attempt = 0; attempt < 150; ++attempt) {
    auto [p, opts] = randomSearch(rng, 3);
    Expected<SearchResult> free = search(p, cluster(), eff, opts);
    ASSERT_TRUE(bool(free)) << toString(free.takeError());
    for (size_t nodes : {24, 96, 384}) {
      SearchOptions tight = opts;
      tight.solver.maxDPBytes = 56 * nodes;
      // Without the capped search's seed the first DP runs unbounded.
      tight.seedBound = attempt % 2;
      // (Cheap passes under the probes' midpoints, which can pass the
      // budget too, on every third problem.)
      tight.probeRelaxations = attempt % 3 == 0;
      // The trace sees every DP of the search: each solved configuration
      // once (more often under probes), each retry once, with the
      // statistics the result sums.
      size_t traced = 0, tracedRetries = 0;
      uint64_t tracedStates = 0;
      tight.trace = [&](const ConfigurationTrace &t) {
        if (t.capped || t.pass == DPPass::Rest)
          return;
        ++traced;
        tracedRetries += t.retry;
        EXPECT_EQ(t.stepTime.has_value(), t.message.empty());
      };
      // (Every pass's states, the Pareto DPs' too.)
      auto counted = tight.trace;
      tight.trace = [&](const ConfigurationTrace &t) {
        if (!t.capped)
          tracedStates += t.stats.statesVisited;
        counted(t);
      };
      Expected<SearchResult> r = search(p, cluster(), eff, tight);
      if (!r) {
        std::string m = toString(r.takeError());
        EXPECT_TRUE(isBudgetFailure(m)) << m;
        ++failed;
        continue;
      }
      ASSERT_EQ(r->best.has_value(), free->best.has_value())
          << "problem " << attempt;
      if (tight.probeRelaxations)
        EXPECT_GE(traced, r->solvedConfigurations + r->retriedConfigurations);
      else
        EXPECT_EQ(traced, r->solvedConfigurations + r->retriedConfigurations);
      EXPECT_EQ(tracedRetries, r->retriedConfigurations);
      EXPECT_EQ(tracedStates, r->stats.statesVisited);
      if (r->best) {
        EXPECT_NEAR(r->best->cost.stepTime, free->best->cost.stepTime,
                    1e-9 * free->best->cost.stepTime)
            << "problem " << attempt;
      }
      if (r->retriedConfigurations > 0) {
        ++retried;
        // Without the retry the same search fails at the budget.
        tight.retryOverBudget = false;
        Expected<SearchResult> once = search(p, cluster(), eff, tight);
        ASSERT_FALSE(bool(once)) << "problem " << attempt;
        std::string m = toString(once.takeError());
        EXPECT_TRUE(isBudgetFailure(m)) << m;
      }
      ++agreed;
    }
  }
  std::printf("memory budget: %d searches agree with the unlimited one (%d "
              "after a retry), %d fail with the budget's error\n",
              agreed, retried, failed);
  EXPECT_GT(retried, 0);
  EXPECT_GT(failed, 0);
}

TEST(Exactness, BranchAndBoundMatchesSolvingEveryConfiguration) {
  // The outer search prunes configurations by lower bounds and runs each DP
  // against the best plan so far; without that it solves every
  // configuration. Both must find the same optimum (exact DP, random
  // problems with pipelining, micro-batches, ZeRO 0-3, recomputation). The
  // branch and bound starts from the capped search's plan
  // (SearchOptions::seedBound), which must not change the optimum either.
  std::mt19937 rng(7);
  EfficiencyModel eff = getDefaultEfficiency();
  int compared = 0, infeasible = 0;
  for (int attempt = 0; attempt < 400 && compared < 60; ++attempt) {
    auto [p, opts] = randomSearch(rng, 2);
    Expected<SearchResult> fast = search(p, cluster(), eff, opts);
    opts.branchAndBound = false;
    Expected<SearchResult> slow = search(p, cluster(), eff, opts);
    ASSERT_TRUE(fast && slow);
    ASSERT_EQ(fast->best.has_value(), slow->best.has_value());
    EXPECT_DOUBLE_EQ(fast->smallestMemory, slow->smallestMemory);
    if (!fast->best) {
      ++infeasible;
      continue;
    }
    double a = fast->best->cost.stepTime, b = slow->best->cost.stepTime;
    ASSERT_NEAR(a, b, 1e-9 * b) << "problem " << attempt;
    EXPECT_LE(fast->solvedConfigurations, slow->solvedConfigurations);
    ++compared;
  }
  EXPECT_EQ(compared, 60);
  std::printf("branch and bound: %d problems agree, %d infeasible in both\n",
              compared, infeasible);
}

/// Capped (SolverOptions::setDefaultCaps) vs exact search on the random
/// problems (randomSearch, up to 8 devices and 3 mesh axes, some with a
/// binding memory limit) of one seed, until `problems` of them where the
/// caps dropped states or points are compared (elsewhere equality is
/// trivial).
struct CappedVsExact {
  int capped = 0, trivial = 0, infeasible = 0, faster = 0, slower = 0;
  double worst = 0, mildest = 1;
  void print() const {
    std::printf("capped vs exact: %d problems where the caps dropped states "
                "or points (%d of them slower, by %.2g to %.2g of the step "
                "time; %d faster), %d where they dropped nothing, %d "
                "infeasible\n",
                capped, slower, slower ? mildest : 0.0, worst, faster, trivial,
                infeasible);
  }
  void add(const CappedVsExact &o) {
    capped += o.capped;
    trivial += o.trivial;
    infeasible += o.infeasible;
    faster += o.faster;
    slower += o.slower;
    if (o.slower) {
      worst = std::max(worst, o.worst);
      mildest = std::min(mildest, o.mildest);
    }
  }
};
CappedVsExact compareCapped(unsigned seed, int problems) {
  std::mt19937 rng(seed);
  EfficiencyModel eff = getDefaultEfficiency();
  CappedVsExact r;
  for (int attempt = 0; attempt < 3000 && r.capped < problems; ++attempt) {
    auto [p, opts] = randomSearch(rng, 3);
    Expected<SearchResult> exact = search(p, cluster(), eff, opts);
    opts.solver.setDefaultCaps();
    Expected<SearchResult> heuristic = search(p, cluster(), eff, opts);
    EXPECT_TRUE(exact && heuristic);
    if (!exact || !heuristic)
      return r;
    EXPECT_EQ(exact->best.has_value(), heuristic->best.has_value())
        << "seed " << seed << " problem " << attempt;
    if (!exact->best || !heuristic->best) {
      ++r.infeasible;
      continue;
    }
    if (heuristic->stats.isExact()) {
      ++r.trivial;
      continue;
    }
    double a = exact->best->cost.stepTime, b = heuristic->best->cost.stepTime;
    if (b < a * (1 - 1e-9))
      ++r.faster;
    if (b > a * (1 + 1e-9)) {
      ++r.slower;
      r.worst = std::max(r.worst, (b - a) / a);
      r.mildest = std::min(r.mildest, (b - a) / a);
    }
    ++r.capped;
  }
  EXPECT_EQ(r.capped, problems);
  return r;
}

TEST(Exactness, CheapPassesFirstChangeNoOptimum) {
  // SearchOptions::cheapFirst: every configuration's relaxation and priced
  // seed run before any Pareto DP, whose configurations are then solved
  // under the bound that left, the configurations' lower bounds raised by
  // probes of their pre-DP tests (SearchOptions::probeBounds). Where memory
  // binds (the limit just under the unconstrained optimum's memory) the
  // search finds the optimum of the search that solves each DP whole in
  // turn, without probes.
  // The same with the Pareto DP's first try in the cheap pass
  // (SolverOptions::paretoFirstNodes: after a relaxation stopped at once,
  // and stopped itself at once) and with the cheap passes run under the
  // probes' midpoints (SearchOptions::probeRelaxations), also from loose
  // incumbents under the memory limit, where a cheap pass under a midpoint
  // whose seed brings the bound below it leaves the configuration to its
  // Pareto DP (SearchResult::relaxationProbesLeft).
  std::mt19937 rng(31);
  EfficiencyModel eff = getDefaultEfficiency();
  int compared = 0, unsettled = 0, infeasible = 0;
  size_t probes = 0, raised = 0, relaxationRaises = 0, probesLeft = 0;
  uint64_t firstAnswers = 0, abandoned = 0;
  for (int attempt = 0; attempt < 400 && compared < 40; ++attempt) {
    auto [p, opts] = randomSearch(rng, 2);
    if (!is_contained(p.sections, Section::Layer))
      continue;
    p.layers = std::uniform_int_distribution<int>(4, 16)(rng);
    p.memoryLimit = std::numeric_limits<double>::infinity();
    Expected<SearchResult> free = search(p, cluster(), eff, opts);
    ASSERT_TRUE(bool(free)) << toString(free.takeError());
    if (!free->best)
      continue;
    // (Without a memory limit the cheap passes run under the probes'
    // midpoints: SearchOptions::probeRelaxations.)
    SearchOptions freeWhole = opts;
    freeWhole.cheapFirst = false;
    Expected<SearchResult> freeB = search(p, cluster(), eff, freeWhole);
    ASSERT_TRUE(freeB && freeB->best);
    ASSERT_NEAR(free->best->cost.stepTime, freeB->best->cost.stepTime,
                1e-9 * freeB->best->cost.stepTime)
        << "problem " << attempt;
    relaxationRaises += free->relaxationRaises;
    probesLeft += free->relaxationProbesLeft;
    // A search from a loose bound: an incumbent `factor` x the optimum,
    // no capped seed (the probes' midpoints can lie below the optimum).
    auto searchFromLoose = [&](const Plan &optimum, double factor) {
      Plan loose = optimum;
      loose.cost.stepTime *= factor;
      SearchOptions fromLoose = opts;
      fromLoose.seedBound = false;
      return search(p, cluster(), eff, fromLoose, &loose);
    };
    {
      Expected<SearchResult> l = searchFromLoose(*free->best, 1.05);
      ASSERT_TRUE(l && l->best);
      ASSERT_NEAR(l->best->cost.stepTime, free->best->cost.stepTime,
                  1e-9 * free->best->cost.stepTime)
          << "problem " << attempt;
      relaxationRaises += l->relaxationRaises;
      probesLeft += l->relaxationProbesLeft;
    }
    p.memoryLimit = free->best->cost.getMemory() *
                    std::uniform_real_distribution<double>(0.85, 0.99)(rng);
    SearchOptions cheap = opts;
    cheap.solver.paretoFirstNodes = 0;
    cheap.probeRelaxations = false;
    cheap.trace = [&](const ConfigurationTrace &t) { unsettled += !t.settled; };
    SearchOptions first = opts;
    first.solver.relaxationFirstNodes = 1;
    SearchOptions giveUp = first;
    giveUp.solver.paretoFirstNodes = 1;
    SearchOptions whole = opts;
    whole.cheapFirst = false;
    Expected<SearchResult> b = search(p, cluster(), eff, whole);
    ASSERT_TRUE(bool(b));
    EXPECT_EQ(b->boundProbes, 0u);
    bool feasible = b->best.has_value();
    for (const SearchOptions *o : {&cheap, &first, &giveUp}) {
      Expected<SearchResult> a = search(p, cluster(), eff, *o);
      ASSERT_TRUE(bool(a));
      if (o == &cheap) {
        probes += a->boundProbes;
        raised += a->raisedBounds;
        EXPECT_EQ(a->relaxationProbes, 0u);
        EXPECT_EQ(a->stats.paretoFirstTries, 0u);
      } else if (o == &first) {
        relaxationRaises += a->relaxationRaises;
        probesLeft += a->relaxationProbesLeft;
        firstAnswers += a->stats.paretoFirstAnswers;
      } else {
        EXPECT_EQ(a->stats.paretoFirstAnswers, 0u);
        abandoned += a->stats.paretoFirstTries;
      }
      ASSERT_EQ(a->best.has_value(), feasible) << "problem " << attempt;
      if (!feasible)
        continue;
      EXPECT_TRUE(a->stats.isExact());
      ASSERT_NEAR(a->best->cost.stepTime, b->best->cost.stepTime,
                  1e-9 * b->best->cost.stepTime)
          << "problem " << attempt;
      EXPECT_TRUE(a->best->cost.feasible);
    }
    for (double factor : {1.02, 1.05, 1.1, 1.2}) {
      if (!feasible)
        break;
      // From a loose bound under the memory limit too.
      Expected<SearchResult> l = searchFromLoose(*b->best, factor);
      ASSERT_TRUE(l && l->best);
      ASSERT_NEAR(l->best->cost.stepTime, b->best->cost.stepTime,
                  1e-9 * b->best->cost.stepTime)
          << "problem " << attempt << " factor " << factor;
      probesLeft += l->relaxationProbesLeft;
    }
    infeasible += !feasible;
    compared += feasible;
  }
  EXPECT_EQ(compared, 40);
  EXPECT_GT(unsettled, 10);
  EXPECT_GT(raised, 10u);
  EXPECT_GE(firstAnswers, 5u);
  EXPECT_GE(relaxationRaises, 5u);
  EXPECT_GE(abandoned, 5u);
  EXPECT_GE(probesLeft, 5u);
  std::printf("cheap passes first: %d problems agree (%d infeasible in "
              "all); %d cheap passes left their Pareto DP for later; %zu "
              "probes raised %zu lower bounds; %llu cheap "
              "passes answered by the Pareto DP's first try, %zu lower "
              "bounds raised by a cheap pass under the probe (with and "
              "without the memory limit), %zu left to the Pareto DP "
              "without a second cheap pass; %llu first tries given up\n",
              compared, infeasible, unsettled, probes, raised,
              (unsigned long long)firstAnswers, relaxationRaises, probesLeft,
              (unsigned long long)abandoned);
}

TEST(Exactness, CappedSearchMatchesExactOnRandomProblems) {
  // The caps are a heuristic; issue 12 asks that capped plans equal exact
  // ones wherever both finish. On these 400 problems they do (3 were
  // slower, by up to 7.1e-6 of the step time, before the candidate cap
  // ranked by the next segment's entry and took distinct families first;
  // 7 when it ranked without the time so far, 9 by own time alone). A
  // capped plan faster than the exact optimum would make the exact search
  // wrong.
  CappedVsExact r = compareCapped(2026, 400);
  r.print();
  EXPECT_EQ(r.faster, 0);
  EXPECT_EQ(r.slower, 0);
}

// The same over 30 more seeds (12,400 problems in all with the one above;
// 84 s here, so not in the default run: --gtest_also_run_disabled_tests).
// The caps remain a heuristic: 3 of them are slower, by 2.5e-7 to 1.3e-6
// of the step time (37, by 1.1e-7 to 1.2e-5, before the exit term and the
// families). None may be faster.
TEST(Exactness, DISABLED_CappedSearchOverSeeds) {
  CappedVsExact all;
  for (unsigned seed = 1; seed <= 30; ++seed)
    all.add(compareCapped(seed, 400));
  all.add(compareCapped(2026, 400));
  all.print();
  EXPECT_EQ(all.faster, 0);
}

} // namespace

// The objective's Megatron-LM settings (Config): interleaved 1F1B divides
// the bubble by v and multiplies the stage sends by v; without overlap the
// whole gradient sync is exposed; selective recomputation re-runs only the
// attention core, so it costs less time than full recomputation and keeps
// less activation memory than none.
TEST(Objective, InterleaveOverlapAndSelectiveRecomputation) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(8);
  auto plan = [&](int64_t pp, int64_t v, bool overlap, Recompute rc) {
    SearchOptions opts;
    opts.megatron.tp = 2;
    opts.megatron.pp = pp;
    opts.megatron.dp = 8 / 2 / pp;
    opts.megatron.microBatches = 4;
    opts.megatron.interleave = v;
    opts.megatron.overlapGradSync = overlap;
    opts.recompute = {rc};
    Expected<SearchResult> r = searchMegatron(p, cluster(), eff, false, opts);
    EXPECT_TRUE(r && r->best) << (r ? "no plan" : toString(r.takeError()));
    return r && r->best ? r->best->cost : PlanCost();
  };
  PlanCost one = plan(2, 1, true, Recompute::None);
  PlanCost two = plan(2, 2, true, Recompute::None);
  // 1F1B: bubble = (p - 1) / (m + p - 1) of the pipeline; interleaved with
  // v = 2: (p - 1) / v of a micro-batch's slot out of m + (p - 1) / v.
  EXPECT_NEAR(one.bubble, one.pipeline * 1 / 5.0, 1e-12 * one.pipeline);
  EXPECT_NEAR(two.bubble, two.pipeline * 0.5 / 4.5, 1e-12 * two.pipeline);
  EXPECT_LT(two.bubble, one.bubble);
  // Without the stage sends the per-slot time is the same; v = 2 sends
  // twice as often, so the v = 2 slot is longer.
  EXPECT_GT(two.pipeline / 4.5, one.pipeline / 5.0);
  EXPECT_LT(two.stepTime, one.stepTime);

  PlanCost overlapped = plan(1, 1, true, Recompute::None);
  PlanCost exposed = plan(1, 1, false, Recompute::None);
  EXPECT_GT(exposed.exposedSync, overlapped.exposedSync);
  EXPECT_NEAR(exposed.stepTime - exposed.exposedSync,
              overlapped.stepTime - overlapped.exposedSync,
              1e-12 * exposed.stepTime);

  PlanCost full = plan(1, 1, true, Recompute::Full);
  PlanCost selective = plan(1, 1, true, Recompute::Selective);
  EXPECT_LT(overlapped.stepTime, selective.stepTime);
  EXPECT_LT(selective.stepTime, full.stepTime);
  EXPECT_LT(selective.activationBytes, overlapped.activationBytes);
  EXPECT_GT(selective.activationBytes, full.activationBytes);
  EXPECT_EQ(selective.stateBytes, overlapped.stateBytes);
}

// `stpar cost`'s breakdown is the objective's cost, split: the same step
// time and memory as evaluate, phases that add up to the pipeline.
TEST(Objective, BreakdownIsTheEvaluatedCost) {
  EfficiencyModel eff = getDefaultEfficiency();
  Problem p = tinyGPT(8);
  struct Case {
    int64_t pp, v;
    bool overlap;
  };
  for (Case k : {Case{1, 1, true}, Case{2, 1, true}, Case{2, 2, false}})
    for (Recompute rc :
         {Recompute::None, Recompute::Full, Recompute::Selective}) {
      int64_t pp = k.pp;
      SearchOptions opts;
      opts.megatron.tp = 2;
      opts.megatron.pp = pp;
      opts.megatron.dp = 4 / pp;
      opts.megatron.microBatches = 4;
      opts.megatron.zeroStage = 1;
      opts.megatron.interleave = k.v;
      opts.megatron.overlapGradSync = k.overlap;
      opts.recompute = {rc};
      Expected<SearchResult> r = searchMegatron(p, cluster(), eff, false, opts);
      ASSERT_TRUE(r && r->best) << (r ? "no plan" : toString(r.takeError()));
      auto inst = Instance::create(p, cluster(), r->best->config, eff, {});
      ASSERT_TRUE(bool(inst));
      Expected<PlanCost> c = (*inst)->evaluate(r->best->partitions);
      Expected<StepBreakdown> b = (*inst)->getBreakdown(r->best->partitions);
      ASSERT_TRUE(c && b);
      EXPECT_DOUBLE_EQ(b->stepTime, c->stepTime);
      EXPECT_NEAR(b->pipelineTime + b->gradSyncExposed + b->optimizer,
                  b->stepTime, 1e-12 * b->stepTime);
      EXPECT_NEAR(b->peakMemory.getTotal(), c->getMemory(),
                  1e-9 * c->getMemory());
      EXPECT_NEAR(b->microBatchTime * r->best->config.getSlots(),
                  b->pipelineTime, 1e-9 * b->pipelineTime);
      EXPECT_EQ(b->criticalStage.recompute > 0, rc != Recompute::None);
      // The split is of real times: each phase >= 0, the forward of what
      // re-runs no more than the forward, the critical stage's kernels no
      // more than the per-kind totals of one step (those sum all layers).
      const PhaseTimes &t = b->criticalStage;
      for (double x : {t.forward, t.recompute, t.backwardInput,
                       t.backwardWeight, t.communication})
        EXPECT_GE(x, 0);
      EXPECT_LE(t.recompute, t.forward * (1 + 1e-12));
      if (rc == Recompute::Full) {
        EXPECT_GT(t.recompute, 0.5 * t.forward);
      }
      if (rc == Recompute::Selective) {
        EXPECT_LT(t.recompute, 0.5 * t.forward);
      }
      EXPECT_GT(t.communication, 0); // tp = 2 all-reduces
      PhaseTimes kinds;
      for (const auto &[name, kt] : b->perLayerKind)
        kinds += kt;
      EXPECT_GE(kinds.forward * (1 + 1e-12), t.forward);
      EXPECT_EQ(b->interleave, k.v);
      if (!k.overlap)
        EXPECT_DOUBLE_EQ(b->gradSyncExposed, b->gradSync);
      else
        EXPECT_LE(b->gradSyncExposed, b->gradSync);
      EXPECT_GT(b->modelFlops, 0);
      EXPECT_GE(b->hardwareFlops, b->modelFlops);
      EXPECT_GT(b->peakMemory.optimizer, b->peakMemory.parameters);
    }
}

// `stpar cost --model gpt:` costs search::costMegatronGPT's plan: the
// Megatron grid point asked for, its FLOPs as Megatron counts them (SC'21
// Eq. 3 with recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) =
// 2.7917e15 FLOP here; ours adds norm, softmax and elementwise FLOPs, a few
// per element, so within 3%), and errors that name the key.
TEST(CostMegatronGPT, CountsMegatronFlops) {
  Expected<GPTConfig> m = parseGPTSpec(
      "gpt:layers=4,hidden=1024,heads=16,seq=2048,vocab=51200,batch=16");
  Expected<MegatronStrategy> s =
      parseMegatronSpec("megatron:tp=2,pp=2,dp=2,mb=1");
  ASSERT_TRUE(m && s);
  Expected<Cluster> c = getPreset("dgx-a100-80g-1");
  ASSERT_TRUE(bool(c));
  Expected<CostedPlan> p = costMegatronGPT(*m, *s, *c, getDefaultEfficiency());
  ASSERT_TRUE(bool(p)) << toString(p.takeError());
  EXPECT_EQ(p->plan.config.microBatches, 8); // 16 / (mb 1 * dp 2)
  EXPECT_EQ(p->plan.config.mesh.getNumDevices(), 8);
  EXPECT_EQ(p->plan.config.recompute, Recompute::Full); // the default
  EXPECT_EQ(p->step.microBatches, 8);
  double B = 16, sq = 2048, l = 4, h = 1024, V = 51200;
  double megatron =
      96 * B * sq * l * h * h * (1 + sq / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(p->step.hardwareFlops / megatron, 1.0, 0.03);
  EXPECT_GT(p->step.hardwareFlops, megatron);
  EXPECT_GT(p->step.stepTime, 0);
  EXPECT_TRUE(p->step.fitsMemory);
  s->tp = 3;
  Expected<CostedPlan> bad =
      costMegatronGPT(*m, *s, *c, getDefaultEfficiency());
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(toString(bad.takeError()),
            "megatron: tp=3 must divide heads, hidden, ffn and vocab");
}

// An edge through a view (docs/search.md, "Edges through views"): a linear
// layer's output [b, h*d] read as [b, h, d] by two operators. A split of
// h*d over 2 carries over to h (4 heads): nothing moves. Over 8 it does not
// (8 does not divide 4): the output is gathered before the view, once for
// both readers (the program re-lays a value out once per target layout),
// at the view, and the readers' head split is then a free slice.
TEST(Communication, EdgeThroughViews) {
  const char *text = R"(
problem views
cluster v100-sxm2-32g-4x8
devices 8
batch-loop b
op fc matmul section=pre flops=2
  loop b 8
  loop n 16
  loop k 4 reduction
  input x b,k nograd
  param w k,n
  output y b,n
op r0 elementwise section=pre flops=1
  loop b 8
  loop h 4
  loop d 4
  input x b,h,d
  output y b,h,d
op r1 elementwise section=pre flops=1
  loop b 8
  loop h 4 fixed
  loop d 4
  input x b,h,d
  output y b,h,d
edge fc.y -> r0.x views=1 map=0,1,- sizes=8,4,4 lost=-,- gradlost=-,-,0
edge fc.y -> r1.x views=1 map=0,1,- sizes=8,4,4 lost=-,- shared
)";
  Expected<Problem> p = parseProblem(text, "views.txt");
  ASSERT_TRUE(bool(p)) << toString(p.takeError());
  ASSERT_FALSE(bool(verifyProblem(*p)));
  std::string once;
  raw_string_ostream os(once);
  printProblem(os, *p);
  Expected<Problem> q = parseProblem(once, "printed");
  ASSERT_TRUE(bool(q)) << toString(q.takeError());
  ASSERT_TRUE(q->edges[1].views.has_value());
  EXPECT_FALSE(q->edges[1].views->chargesGather);
  EXPECT_EQ(q->edges[0].views->producerDimOf, (std::vector<int>{0, 1, -1}));
  EXPECT_EQ(q->edges[0].views->gradientLostAt, (std::vector<int>{-1, -1, 0}));
  EXPECT_TRUE(q->edges[1].views->gradientLostAt.empty());
  EXPECT_FALSE(q->ops[2].loops[1].splittable);

  EfficiencyModel eff = getDefaultEfficiency();
  auto gathered = [&](int64_t devices, unsigned readerLoop) {
    Config c;
    c.mesh = makeSearchMesh(1, {devices});
    auto inst = Instance::create(*p, cluster(), c, eff, {});
    EXPECT_TRUE(bool(inst));
    Partition fc, r0, r1;
    fc.loopAxes = {{}, {1}, {}};
    r0.loopAxes = {{}, {}, {}};
    r0.loopAxes[readerLoop] = {1};
    r1.loopAxes = {{}, {}, {}};
    Expected<std::vector<PlannedCommunication>> comms =
        (*inst)->getCommunication({fc, r0, r1});
    EXPECT_TRUE(bool(comms));
    std::vector<std::string> out;
    for (const PlannedCommunication &m : *comms)
      if (m.source == "re-layout" && m.comm.phase == Phase::Forward)
        out.push_back(std::string(getCollectiveName(m.comm.kind)) + "@" +
                      std::to_string(m.viewPosition) + ":" +
                      std::to_string(int64_t(m.comm.bytes)));
    return out;
  };
  // h*d over 2 -> h over 2: free for r0; r1 (replicated) gathers h after
  // the view (the gathered buffer: 8 x 4 x 4 elements of 2 bytes).
  EXPECT_EQ(gathered(2, 1), (std::vector<std::string>{"all-gather@-1:256"}));
  // h*d over 8 (r0 splits the batch): gathered once before the view
  // (8 x 16 elements of 2 bytes), at the view; r0 and r1 slice.
  EXPECT_EQ(gathered(8, 0), (std::vector<std::string>{"all-gather@0:256"}));
}

// Where a view edge's gradient is gathered (docs/search.md, "Edges
// through views"), as -stp-partition does it: a replicated producer whose
// reader splits the heads of [b, h, d] gets its gradient gathered by its
// own backward when the view's gradient keeps the head split (gradlost -),
// at the view when it cannot (gradlost 0, e.g. a slice along the split
// dim). Through a concatenation (the reader's [b, 12] from the producer's
// [b, 8] and another tensor) only the producer's part of the gradient
// moves: 8 of the 12 rows.
TEST(Communication, ViewGradientGather) {
  auto planned = [](StringRef edge, int64_t readerRows, unsigned split) {
    std::string text = R"(
problem views
cluster v100-sxm2-32g-4x8
devices 2
op fc matmul section=pre flops=2
  loop b 8
  loop n 16
  loop k 4 reduction
  input x b,k nograd
  param w k,n
  output y b,n
op r elementwise section=pre flops=1
  loop b )" + std::to_string(readerRows) +
                       R"(
  loop h 4
  loop d 4
  input x b,h,d
  output y b,h,d
)" + edge.str() + "\n";
    Expected<Problem> p = parseProblem(text, "views.txt");
    EXPECT_TRUE(bool(p)) << toString(p.takeError());
    Config c;
    c.mesh = makeSearchMesh(1, {2});
    auto inst = Instance::create(*p, cluster(), c, getDefaultEfficiency(), {});
    EXPECT_TRUE(bool(inst));
    Partition fc, r;
    fc.loopAxes = {{}, {}, {}};
    r.loopAxes = {{}, {}, {}};
    r.loopAxes[split] = {1};
    Expected<std::vector<PlannedCommunication>> comms =
        (*inst)->getCommunication({fc, r});
    EXPECT_TRUE(bool(comms));
    std::vector<std::string> out;
    for (const PlannedCommunication &m : *comms)
      if (m.source == "re-layout" && m.comm.phase == Phase::InputGrad)
        out.push_back(std::string(getCollectiveName(m.comm.kind)) + "@op" +
                      std::to_string(m.op) + "/view" +
                      std::to_string(m.viewPosition) + ":" +
                      std::to_string(int64_t(m.comm.bytes)) + " reader op" +
                      std::to_string(m.reader));
    return out;
  };
  // The gathered gradient: 8 x 4 x 4 elements of 2 bytes.
  EXPECT_EQ(planned("edge fc.y -> r.x views=1 map=0,1,- sizes=8,4,4 "
                    "lost=-,- gradlost=-,-,-",
                    8, 1),
            (std::vector<std::string>{"all-gather@op0/view-1:256 reader op1"}));
  EXPECT_EQ(planned("edge fc.y -> r.x views=1 map=0,1,- sizes=8,4,4 "
                    "lost=-,- gradlost=-,0,-",
                    8, 1),
            (std::vector<std::string>{"all-gather@op1/view0:256 reader op1"}));
  // Without gradlost (an older problem file): at the last view.
  EXPECT_EQ(
      planned("edge fc.y -> r.x views=1 map=0,1,- sizes=8,4,4 lost=-,-", 8, 1),
      (std::vector<std::string>{"all-gather@op1/view0:256 reader op1"}));
  // Through a concatenation along b: 12 x 4 x 4 elements read, the
  // producer's 8 rows of them gathered (256 bytes, not 384).
  EXPECT_EQ(planned("edge fc.y -> r.x views=1 map=-,1,- sizes=12,4,4 "
                    "lost=-,- gradlost=0,-,-",
                    12, 1),
            (std::vector<std::string>{"all-gather@op0/view-1:256 reader op1"}));
}

namespace {

Problem moeGPT(int64_t experts, StringRef clusterName, int64_t devices,
               int64_t seq = 256) {
  TransformerShape s;
  // layers, hidden, heads, ffn, vocab, seq, batch.
  s.model = {2, 1024, 16, 4096, 1024, seq, 16};
  s.gatedFFN = true;
  s.moe = TransformerShape::MoE{};
  s.moe->experts = experts;
  return buildTransformerProblem(s, clusterName, devices);
}

/// The flattened problem's first MoE operator with `part` applied.
Operator moeWith(const Problem &p, const Partition &part) {
  Operator op = *llvm::find_if(
      p.ops, [](const Operator &o) { return o.kind == OpKind::MoE; });
  applyPartition(op, part);
  return op;
}

/// moeGPT(8) on mesh [pp 1, x0 4, x1 2, x2 2] of 2 DGX A100 nodes with
/// `part`: tokens b{x0,x1,x2} (16 devices, 1 sequence of 256 tokens
/// each), experts e{x0,x1} (8 workers, 1 expert each, 2 nodes x 4).
struct MoEOnTwoNodes {
  EfficiencyModel eff = getDefaultEfficiency();
  Cluster dgx = cantFail(getPreset("dgx-a100-80g-2"));
  Problem p = moeGPT(8, "dgx-a100-80g-2", 16);
  Mesh mesh = makeSearchMesh(1, {4, 2, 2});
  Partition part = [] {
    Partition x;
    x.loopAxes = {{1, 2, 3}, {}, {}, {1, 2}, {}};
    return x;
  }();
  Expected<OperatorCost> cost(const Operator &op) const {
    return costOperator(op, mesh, dgx, eff);
  }
};

TEST(MoE, OperatorCostIsFasterMoEsModel) {
  // MoEOnTwoNodes: the operator's time is getMoECost's total with the
  // choices it reports, plus the router's GEMM in F, B and G.
  MoEOnTwoNodes on;
  const EfficiencyModel &eff = on.eff;
  const Cluster &dgx = on.dgx;
  const Problem &p = on.p;
  const Mesh &mesh = on.mesh;
  Partition &part = on.part;
  Operator op = moeWith(p, part);
  Expected<OperatorCost> c = on.cost(op);
  ASSERT_TRUE(bool(c)) << toString(c.takeError());
  ASSERT_TRUE(c->moe.has_value());
  EXPECT_EQ(c->moe->expertParallel, 8);
  MoELayer layer;
  layer.experts = 8;
  layer.topK = 2;
  layer.hidden = 1024;
  layer.ffnHidden = 4096;
  layer.ffnMatrices = 3;
  layer.tokens = 256 * 8;
  ExpertParallelism ep;
  ep.size = 8;
  ep.placement.intraNodeSize = 4;
  ep.placement.interNodeSize = 2;
  ep.hierarchical = c->moe->hierarchical;
  ep.groupSize = c->moe->groupSize;
  ep.shadowed.assign(8, false);
  for (int64_t e : c->moe->shadowed)
    ep.shadowed[e] = true;
  Expected<MoECost> m = getMoECost(layer, ExpertLoad::uniform(8), ep, dgx, eff);
  ASSERT_TRUE(bool(m));
  double router =
      getRooflineTime(OpKind::MatMul, 2.0 * 256 * 1024 * 8,
                      (256.0 * (1024 + 8) + 1024 * 8) * 2, dgx, eff);
  double t = c->forward + c->backwardInput + c->backwardWeight +
             c->forwardComm + c->backwardComm;
  EXPECT_NEAR(t, m->total + 3 * router, 1e-12 * t);
  // The choices only help: no better than plain FastMoE (flat, nothing
  // shadowed, unscheduled) is impossible.
  ExpertParallelism plain = ep;
  plain.hierarchical = false;
  plain.groupSize = 0;
  plain.shadowed.clear();
  Expected<MoECost> fast =
      getMoECost(layer, ExpertLoad::uniform(8), plain, dgx, eff);
  ASSERT_TRUE(bool(fast));
  EXPECT_LE(m->total, fast->total);
  // Two all-to-alls per phase over the expert axes, each 256 tokens x 2
  // experts x 1024 x 2 B sent per device.
  ASSERT_EQ(c->communication.size(), 2u);
  EXPECT_EQ(c->communication[0].kind, Collective::AllToAll);
  EXPECT_EQ(c->communication[0].axes, (std::vector<unsigned>{1, 2}));
  EXPECT_DOUBLE_EQ(c->communication[0].bytes, 256.0 * 2 * 1024 * 2);
  EXPECT_EQ(c->communication[0].count, 2);
  // One expert per device: 3 x 1024 x 4096 x 2 B of weights; their
  // gradients are summed over x2 only (the token axis the experts do not
  // take: expert data parallelism).
  EXPECT_DOUBLE_EQ(c->parameterBytes, 3.0 * 1024 * 4096 * 2);
  for (const GradientSync &g : getGradientSyncs(op, mesh, 0u))
    EXPECT_EQ(g.axes, (std::vector<unsigned>{3})) << g.parameter;
  // Tensor parallelism inside the experts: F over x2 (2 devices), the
  // tokens over x0, x1 only (2 sequences per device, replicated over x2).
  // Each device holds half of every local expert; the experts' output and
  // the input's gradient (2 x 256 x 1024 x 2 B each) are all-reduced over
  // x2, and no expert weight is replicated, so none is synced.
  part.loopAxes = {{1, 2}, {}, {}, {1, 2}, {3}};
  Operator tpOp = moeWith(p, part);
  Expected<OperatorCost> tp = costOperator(tpOp, mesh, dgx, eff);
  ASSERT_TRUE(bool(tp)) << toString(tp.takeError());
  EXPECT_DOUBLE_EQ(tp->parameterBytes, 3.0 * 1024 * 2048 * 2);
  ASSERT_EQ(tp->communication.size(), 4u);
  EXPECT_EQ(tp->communication[0].kind, Collective::AllReduce);
  EXPECT_EQ(tp->communication[0].axes, (std::vector<unsigned>{3}));
  EXPECT_DOUBLE_EQ(tp->communication[0].bytes, 2.0 * 256 * 1024 * 2);
  EXPECT_EQ(tp->communication[1].phase, Phase::InputGrad);
  EXPECT_GT(tp->forwardComm,
            getCollectiveTime(Collective::AllReduce, 2.0 * 256 * 1024 * 2,
                              mesh.getPlacement(3, dgx.devicesPerNode), dgx) *
                (1 - 1e-12));
  for (const GradientSync &g : getGradientSyncs(tpOp, mesh, 0u))
    EXPECT_TRUE(g.axes.empty()) << g.parameter;
  // The experts may only take axes that split the tokens.
  part.loopAxes = {{1}, {}, {}, {2}, {}};
  Expected<OperatorCost> bad = costOperator(moeWith(p, part), mesh, dgx, eff);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(toString(bad.takeError()),
            "operator 'moe': the expert loop's mesh axis 'x1' does not split "
            "the tokens (expert parallelism exchanges the tokens of its "
            "group)");
}

TEST(MoE, StaticBuffersAreTheProgramsMemory) {
  // stpar's program (MoESpec::staticBuffers, set for stp.moe layers of
  // ONNX models) sizes every MoE buffer by the no-drop bound: with n = 256
  // tokens per device, E = 8 experts over P = 8 devices, D = 1024, F =
  // 4096, gated (A and U kept), 2-byte activations, the stash is the
  // input n D, the returned outputs E n D, and per smart-schedule step the
  // received rows E n D and A, U 2 E n F (plus a shadowed expert's own n
  // rows and A, U); the transient the dispatch buffer and the experts'
  // outputs, 2 E n D, and the output n D.
  MoEOnTwoNodes on;
  Operator op = moeWith(on.p, on.part);
  Expected<OperatorCost> expected = on.cost(op);
  ASSERT_TRUE(bool(expected)) << toString(expected.takeError());
  op.moe->staticBuffers = true;
  Expected<OperatorCost> c = on.cost(op);
  ASSERT_TRUE(bool(c)) << toString(c.takeError());
  double n = 256, e = 8, d = 1024, f = 4096;
  double steps = c->moe->groupSize ? 8.0 / double(c->moe->groupSize) : 1.0;
  double shadowed = double(c->moe->shadowed.size());
  EXPECT_DOUBLE_EQ(c->stashBytes,
                   n * d * 2 + e * n * d * 2 +
                       (steps * e * n + shadowed * n) * (d * 2 + 2 * f * 2));
  EXPECT_DOUBLE_EQ(c->transientBytes - shadowed * 3 * d * f * 4,
                   2 * e * n * d * 2 + n * d * 2);
  // The same choices and times; more memory than the expected rows (K = 2
  // of E = 8 experts per token) the model charges without it.
  EXPECT_EQ(c->moe->groupSize, expected->moe->groupSize);
  EXPECT_DOUBLE_EQ(c->forward, expected->forward);
  EXPECT_GT(c->stashBytes, 2 * expected->stashBytes);
  // With a capacity factor the buffers are the capacity's (the model's).
  op.moe->capacityFactor = 1.25;
  Expected<OperatorCost> capped = on.cost(op);
  ASSERT_TRUE(bool(capped)) << toString(capped.takeError());
  EXPECT_LT(capped->stashBytes, c->stashBytes);
}

TEST(MoE, SkewedRoutingCostsMoreAndShadowsTheHotExpert) {
  // 65% of the routed tokens go to expert 0 (FasterMoE Sec. 4.1's case):
  // its worker sets the time unless the expert is shadowed. With 2048
  // tokens per device its worker would compute 8 x 2 x 2048 x 0.65 = 21299
  // tokens, while broadcasting its 12.6 M weights and reducing their
  // gradients costs about 2 ms over the network: the cost shadows it, and
  // with shadowing off the operator is slower. (At 256 tokens per device,
  // OperatorCostIsFasterMoEsModel's size, it does not pay.)
  EfficiencyModel eff = getDefaultEfficiency();
  Cluster dgx = cantFail(getPreset("dgx-a100-80g-2"));
  Problem p = moeGPT(8, "dgx-a100-80g-2", 16, 2048);
  Mesh mesh = makeSearchMesh(1, {4, 2, 2});
  Partition part;
  part.loopAxes = {{1, 2, 3}, {}, {}, {1, 2}, {}};
  auto seconds = [&](std::vector<double> load, bool shadowing,
                     OperatorCost *out = nullptr) {
    Operator op = moeWith(p, part);
    op.moe->load = std::move(load);
    op.moe->shadowing = shadowing;
    Expected<OperatorCost> c = costOperator(op, mesh, dgx, eff);
    EXPECT_TRUE(bool(c));
    if (!c)
      return 0.0;
    if (out)
      *out = *c;
    return c->forward + c->backwardInput + c->backwardWeight + c->forwardComm +
           c->backwardComm;
  };
  std::vector<double> skew = {0.65, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05};
  OperatorCost hot, flat;
  double uniform = seconds({}, true, &flat);
  double skewed = seconds(skew, true, &hot);
  double skewedNoShadow = seconds(skew, false);
  EXPECT_GT(skewed, uniform);
  EXPECT_LT(skewed, skewedNoShadow);
  ASSERT_TRUE(hot.moe.has_value());
  EXPECT_EQ(hot.moe->shadowed, (std::vector<int64_t>{0}));
  // Every device holds a copy of the shadowed expert's weights and
  // gradients (3 x 1024 x 4096, 2 + 2 bytes) beyond the buffers, which are
  // the same (the no-drop bound does not depend on the load).
  EXPECT_DOUBLE_EQ(hot.transientBytes - flat.transientBytes,
                   3.0 * 1024 * 4096 * 4);
}

TEST(MoE, SearchUsesExpertParallelism) {
  // A 2-layer MoE GPT (8 experts of 3 x 1024 x 4096) on 16 A100s: the
  // searched plan splits the experts over the devices (their gradient
  // sync and memory shrink with the group; the all-to-all runs over
  // NVLink and 2 nodes' networks), and its reported cost is the
  // evaluator's.
  EfficiencyModel eff = getDefaultEfficiency();
  Cluster dgx = cantFail(getPreset("dgx-a100-80g-2"));
  Problem p = moeGPT(8, "dgx-a100-80g-2", 16);
  SearchOptions opts;
  opts.solver.setDefaultCaps();
  Expected<SearchResult> r = search(p, dgx, eff, opts);
  ASSERT_TRUE(bool(r)) << toString(r.takeError());
  ASSERT_TRUE(r->best.has_value());
  auto inst = Instance::create(p, dgx, r->best->config, eff, {});
  ASSERT_TRUE(bool(inst));
  const FlatGraph &g = (*inst)->getFlatGraph();
  unsigned moes = 0;
  for (unsigned i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == OpKind::MoE) {
      ++moes;
      EXPECT_FALSE(r->best->partitions[i].loopAxes[3].empty())
          << describePartition(g.ops[i], r->best->partitions[i],
                               r->best->config.mesh);
    }
  EXPECT_EQ(moes, 2u);
  Expected<PlanCost> again = (*inst)->evaluate(r->best->partitions);
  ASSERT_TRUE(bool(again));
  EXPECT_NEAR(again->stepTime, r->best->cost.stepTime, 1e-12 * again->stepTime);
}

} // namespace

namespace {
TEST(MoE, PlanTableShowsTheChoices) {
  // The plan table's line per MoE operator (printPlan): the group, the
  // all-to-all form, the schedule, the shadowed experts and the load.
  EfficiencyModel eff = getDefaultEfficiency();
  Cluster dgx = cantFail(getPreset("dgx-a100-80g-2"));
  Problem p = moeGPT(8, "dgx-a100-80g-2", 16);
  SearchOptions opts;
  opts.solver.setDefaultCaps();
  Expected<SearchResult> r = search(p, dgx, eff, opts);
  ASSERT_TRUE(r && r->best);
  ASSERT_EQ(r->best->cost.moe.size(), 2u);
  std::string table;
  raw_string_ostream os(table);
  printPlan(os, p, *r->best);
  // One sequence of 256 tokens per device: a group of 8 devices routes
  // 8 x 256 x 2 = 4096 token slots, 512 per expert (uniform), and each
  // device holds one expert.
  EXPECT_NE(table.find("  moe#0: expert parallelism 8 (1 of 8 experts per "
                       "device), "),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("most loaded device 512 tokens, busiest link per "
                       "dispatch "),
            std::string::npos)
      << table;
  // Uniform routing: each expert of a group gets the same 512 slots.
  EXPECT_NE(table.find("; tokens per expert 512 each\n"), std::string::npos)
      << table;
}
} // namespace
