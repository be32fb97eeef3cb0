//===- MoETest.cpp - FasterMoE's model against hand-computed values -------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A made-up cluster with round figures so each value can be worked out by
// hand: 2 nodes x 2 devices; NVLink 100 GB/s per device and direction,
// 1 us; network 10 GB/s per device, 5 us; 100 TFLOP/s bf16 at efficiency 1
// and no launch cost, so an expert's forward on t tokens takes
// t * 2 * matrices * H * F / 1e14 s. Equation numbers and sections are
// FasterMoE's (PPoPP'22) unless said otherwise.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/MoE.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

namespace {
Cluster roundCluster() {
  Cluster c;
  c.name = "round";
  c.nodes = 2;
  c.devicesPerNode = 2;
  c.device.fp32 = c.device.bf16 = 1e14;
  c.device.hbmCapacity = int64_t(80) << 30;
  c.device.hbmBandwidth = 2e12;
  c.intraNode.bandwidth = 1e11;
  c.intraNode.latency = 1e-6;
  c.interNode.bandwidth = 1e10;
  c.interNode.latency = 5e-6;
  return c;
}
EfficiencyModel ideal() {
  EfficiencyModel e;
  e.matmulMax = 1;
  e.matmulHalfFlops = 0;
  e.kernelLaunch = 0;
  e.dtype = DType::BF16;
  return e;
}
AxisPlacement place(int64_t intra, int64_t inter) {
  AxisPlacement p;
  p.intraNodeSize = intra;
  p.interNodeSize = inter;
  return p;
}
MoELayer layer(int64_t experts, int64_t hidden, int64_t ffn, int64_t tokens) {
  MoELayer l;
  l.experts = experts;
  l.topK = 1;
  l.hidden = hidden;
  l.ffnHidden = ffn;
  l.ffnMatrices = 2;
  l.tokens = tokens;
  return l;
}
ExpertParallelism ep(int64_t intra, int64_t inter) {
  ExpertParallelism e;
  e.size = intra * inter;
  e.placement = place(intra, inter);
  return e;
}
} // namespace

TEST(MoECostTest, ComputeIsTheMostLoadedWorker) {
  // Sec. 3: E = 4 experts on P = 2 workers of one node (e0, e1 on worker 0),
  // T = 4000 tokens (2000 per worker), loads 0.55 / 0.25 / 0.1 / 0.1.
  // Worker 0 computes 2 x 2000 x 0.8 = 3200 tokens, worker 1 800. H = 1000,
  // F = 4000: 1.6e-7 s per token, so 3200 x 1.6e-7 = 5.12e-4 s.
  MoELayer l = layer(4, 1000, 4000, 4000);
  ExpertLoad load{{0.55, 0.25, 0.1, 0.1}};
  llvm::Expected<MoECost> c =
      getMoECost(l, load, ep(2, 1), roundCluster(), ideal());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->workerTokens[0], 3200);
  EXPECT_DOUBLE_EQ(c->workerTokens[1], 800);
  EXPECT_DOUBLE_EQ(c->maxWorkerTokens, 3200);
  EXPECT_NEAR(c->computeForward, 5.12e-4, 1e-12);
  // Dispatch: worker 1 sends 1600 tokens x 2000 B = 3.2e6 B to worker 0
  // (the busiest link: worker 1 out, worker 0 in), worker 0 sends 0.8e6 B:
  // 3.2e6 / 1e11 + 1 start-up of 1 us = 3.3e-5 s; the combine the same.
  EXPECT_DOUBLE_EQ(c->intraNodeLinkBytes, 3.2e6);
  EXPECT_DOUBLE_EQ(c->interNodeLinkBytes, 0);
  EXPECT_NEAR(c->dispatch, 3.3e-5, 1e-12);
  EXPECT_NEAR(c->combine, 3.3e-5, 1e-12);
  // Training (Sec. 3): F = 2 all-to-alls + compute, B = 2 + 2 x compute.
  EXPECT_NEAR(c->forward, 5.78e-4, 1e-12);
  EXPECT_NEAR(c->backward, 1.09e-3, 1e-12);
  EXPECT_NEAR(c->total, 1.668e-3, 1e-12);
  EXPECT_DOUBLE_EQ(c->droppedTokens, 0);
  // No-drop static bound: all 4000 tokens could go to one worker (k = 1).
  EXPECT_DOUBLE_EQ(c->receiveBufferTokens, 4000);
}

TEST(MoECostTest, CapacityPadsAndDrops) {
  // GShard capacity factor 1: each worker sends each expert at most
  // ceil(1 x 2000 / 4) = 500 tokens, padded to 500. e0 wants 1100 per
  // worker: 600 dropped on each of 2 workers. Every worker computes
  // 2 experts x 2 senders x 500 = 2000 tokens: 2000 x 1.6e-7 = 3.2e-4 s;
  // every pair exchanges 2 x 500 x 2000 B = 2e6 B: 2e-5 + 1e-6 s.
  MoELayer l = layer(4, 1000, 4000, 4000);
  ExpertParallelism e = ep(2, 1);
  e.capacityFactor = 1;
  llvm::Expected<MoECost> c = getMoECost(l, ExpertLoad{{0.55, 0.25, 0.1, 0.1}},
                                         e, roundCluster(), ideal());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->droppedTokens, 1200);
  EXPECT_DOUBLE_EQ(c->expertTokens[0], 1000);
  EXPECT_DOUBLE_EQ(c->expertTokens[2], 400);
  EXPECT_DOUBLE_EQ(c->workerTokens[0], 2000);
  EXPECT_DOUBLE_EQ(c->workerTokens[1], 2000);
  EXPECT_NEAR(c->computeForward, 3.2e-4, 1e-12);
  EXPECT_NEAR(c->dispatch, 2.1e-5, 1e-12);
  EXPECT_DOUBLE_EQ(c->receiveBufferTokens, 2000);
}

TEST(MoECostTest, AllToAllIsTheBusiestLink) {
  // Sec. 3: 2 nodes x 2 devices, every worker sends 1e6 B to every other.
  // Flat: a device's NVLink carries 1e6 B (1e-5 s); a node's network
  // carries 2 devices x 2 remote peers x 1e6 = 4e6 B over 2 x 10 GB/s
  // (2e-4 s, the busiest); start-ups 1 x 1 us + 2 x 5 us.
  std::vector<std::vector<double>> bytes(4, std::vector<double>(4, 1e6));
  double intra = 0, inter = 0;
  double flat = getAllToAllTime(bytes, place(2, 2), roundCluster(), false,
                                &intra, &inter);
  EXPECT_NEAR(flat, 2e-4 + 1.1e-5, 1e-12);
  EXPECT_DOUBLE_EQ(intra, 1e6);
  EXPECT_DOUBLE_EQ(inter, 4e6);
  // A link is directed: one worker sending 8e6 B to one peer on the other
  // node loads only that node's way out: 8e6 / 2e10 + 5 us.
  std::vector<std::vector<double>> one(4, std::vector<double>(4, 0));
  one[0][3] = 8e6;
  EXPECT_NEAR(getAllToAllTime(one, place(2, 2), roundCluster(), false),
              4e-4 + 5e-6, 1e-12);
}

TEST(MoECostTest, HierarchicalAllToAll) {
  // BaGuaLu's hierarchical / Tutel's 2-D all-to-all. Phase 1 (inside the node):
  // (j, l) hands (j, l') the 1e6 B for (j, l') and the 1e6 B for (j', l'):
  // 2e6 B per NVLink port, 2e-5 s + 1 us. Phase 2 (across): (j, l') sends
  // (j', l') 2e6 B; the node's network 4e6 B: 2e-4 s + 5 us (one inter-node
  // peer instead of two). Total 2.26e-4 s: slower than flat (2.11e-4 s)
  // when bandwidth dominates...
  std::vector<std::vector<double>> bytes(4, std::vector<double>(4, 1e6));
  double intra = 0, inter = 0;
  EXPECT_NEAR(
      getAllToAllTime(bytes, place(2, 2), roundCluster(), true, &intra, &inter),
      2.1e-5 + 2.05e-4, 1e-12);
  EXPECT_DOUBLE_EQ(intra, 2e6);
  EXPECT_DOUBLE_EQ(inter, 4e6);
  // ... and faster when start-ups do: 1 B each way costs 1 us + 2 x 5 us
  // flat, 1 us + 5 us (+ the bytes) in two phases.
  std::vector<std::vector<double>> tiny(4, std::vector<double>(4, 1));
  double flat = getAllToAllTime(tiny, place(2, 2), roundCluster(), false);
  double twoPhase = getAllToAllTime(tiny, place(2, 2), roundCluster(), true);
  EXPECT_NEAR(flat, 1.1e-5, 1e-9);
  EXPECT_NEAR(twoPhase, 6e-6, 1e-9);
}

TEST(MoECostTest, ShadowingDecisionOnASkewedHistogram) {
  // Sec. 4.1: E = 2 on P = 2 workers of one node, loads 0.9 / 0.1, H = F =
  // 1000 (2e6 weights per expert, 4e-8 s per token), L tokens per worker.
  //   none:        2.88e-7 L + 4e-6 s (worker 0 computes 1.8 L tokens)
  //   e0 shadowed: 1.40e-7 L + 8.6e-5 s (its broadcast + gradient reduce:
  //                2 x 1 us + 2e6 x (2 + 2) B / 1e11 B/s = 8.2e-5 s)
  //   both:        1.20e-7 L + 1.62e-4 s
  // so shadowing e0 pays from L = 554 on, e1 as well from L = 3800.
  auto decide = [](int64_t tokensPerWorker) {
    MoELayer l = layer(2, 1000, 1000, 2 * tokensPerWorker);
    llvm::Expected<std::vector<bool>> s = chooseShadowedExperts(
        l, ExpertLoad{{0.9, 0.1}}, ep(2, 1), roundCluster(), ideal());
    EXPECT_TRUE(bool(s));
    return s ? *s : std::vector<bool>{};
  };
  EXPECT_EQ(decide(200), (std::vector<bool>{false, false}));
  EXPECT_EQ(decide(2000), (std::vector<bool>{true, false}));
  EXPECT_EQ(decide(100000), (std::vector<bool>{true, true}));
  // The L = 2000 totals by hand.
  MoELayer l = layer(2, 1000, 1000, 4000);
  ExpertParallelism e = ep(2, 1);
  llvm::Expected<MoECost> none =
      getMoECost(l, ExpertLoad{{0.9, 0.1}}, e, roundCluster(), ideal());
  e.shadowed = {true, false};
  llvm::Expected<MoECost> hot =
      getMoECost(l, ExpertLoad{{0.9, 0.1}}, e, roundCluster(), ideal());
  ASSERT_TRUE(none && hot);
  EXPECT_NEAR(none->total, 5.8e-4, 1e-12);
  EXPECT_NEAR(hot->shadow, 8.2e-5, 1e-12);
  EXPECT_NEAR(hot->total, 3.66e-4, 1e-12);
  // Worker 0 now computes only its own 1800 tokens of e0; worker 1 its own
  // 1800 of e0 and 2 x 200 of e1.
  EXPECT_DOUBLE_EQ(hot->workerTokens[0], 1800);
  EXPECT_DOUBLE_EQ(hot->workerTokens[1], 2200);
}

TEST(MoECostTest, SmartScheduleOverlapsCompute) {
  // Sec. 4.2: P = 2, g = 1: step 0 is each worker's own tokens (no
  // transfer), step 1 the other's. Uniform loads, E = 2, H = F = 1000,
  // 10000 tokens per worker: C = 5000 x 4e-8 = 2e-4 s per step, the step-1
  // exchange S = R = 5000 x 2000 B / 1e11 + 1 us = 1.01e-4 s. Slots:
  // max(S1, C0), max(0, C1), R1: F = 2e-4 + 2e-4 + 1.01e-4 = 5.01e-4 s
  // against S1 + C0 + C1 + R1 = 6.02e-4 s unscheduled; B with 2 x C:
  // 4e-4 + 4e-4 + 1.01e-4 = 9.01e-4 s against 1.002e-3 s.
  MoELayer l = layer(2, 1000, 1000, 20000);
  ExpertParallelism e = ep(2, 1);
  llvm::Expected<MoECost> plain =
      getMoECost(l, ExpertLoad::uniform(2), e, roundCluster(), ideal());
  e.groupSize = 1;
  llvm::Expected<MoECost> smart =
      getMoECost(l, ExpertLoad::uniform(2), e, roundCluster(), ideal());
  ASSERT_TRUE(plain && smart);
  EXPECT_NEAR(plain->forward, 6.02e-4, 1e-12);
  EXPECT_NEAR(plain->backward, 1.002e-3, 1e-12);
  EXPECT_NEAR(smart->forward, 5.01e-4, 1e-12);
  EXPECT_NEAR(smart->backward, 9.01e-4, 1e-12);
  // The whole exchange is still reported for comparison.
  EXPECT_NEAR(smart->dispatch, 1.01e-4, 1e-12);
  // g = 2 is one step: no overlap, the same as unscheduled; g = 1 wins.
  e.groupSize = 2;
  llvm::Expected<MoECost> one =
      getMoECost(l, ExpertLoad::uniform(2), e, roundCluster(), ideal());
  ASSERT_TRUE(bool(one));
  EXPECT_NEAR(one->total, plain->total, 1e-15);
  llvm::Expected<int64_t> g =
      chooseGroupSize(l, ExpertLoad::uniform(2), e, roundCluster(), ideal());
  ASSERT_TRUE(bool(g));
  EXPECT_EQ(*g, 1);
}

TEST(MoECostTest, Errors) {
  MoELayer l = layer(4, 8, 8, 16);
  auto message = [&](const ExpertParallelism &e, const ExpertLoad &load) {
    llvm::Expected<MoECost> c = getMoECost(l, load, e, roundCluster(), ideal());
    return c ? std::string("no error") : llvm::toString(c.takeError());
  };
  ExpertLoad u = ExpertLoad::uniform(4);
  EXPECT_EQ(message(ep(3, 1), u),
            "expert parallelism: 3 workers do not divide 4 experts");
  EXPECT_EQ(message(ep(2, 1), ExpertLoad::uniform(3)),
            "expert load: 3 shares for 4 experts");
  ExpertParallelism e = ep(2, 2);
  e.groupSize = 3;
  EXPECT_EQ(message(e, u),
            "smart scheduling: group size 3 does not divide 4 workers");
  e = ep(2, 1);
  e.placement = place(2, 2);
  EXPECT_EQ(message(e, u),
            "expert parallelism: the placement spans 4 devices, not 2");
}

TEST(MoECostTest, ParseExpertLoad) {
  llvm::Expected<ExpertLoad> ok =
      parseExpertLoad("[30, 10, 0, 60]", 4, "l.json");
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  EXPECT_DOUBLE_EQ(ok->share[0], 0.3);
  EXPECT_DOUBLE_EQ(ok->share[3], 0.6);
  auto message = [](llvm::StringRef text) {
    llvm::Expected<ExpertLoad> l = parseExpertLoad(text, 4, "l.json");
    return l ? std::string("no error") : llvm::toString(l.takeError());
  };
  EXPECT_EQ(message("[1, 2, 3]"),
            "l.json: 3 entries, but the MoE layer has 4 experts");
  EXPECT_EQ(message("[1, -2, 3, 4]"),
            "l.json: entry 1 must be a non-negative number");
  EXPECT_EQ(message("[0, 0, 0, 0]"), "l.json: every entry is 0; no token is "
                                     "routed");
  EXPECT_EQ(message("{\"a\": 1}"),
            "l.json: expected a JSON array of token counts, one per expert");
  EXPECT_NE(message("[1, 2").find("l.json: not JSON"), std::string::npos);
}
