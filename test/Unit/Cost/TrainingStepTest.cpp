//===- TrainingStepTest.cpp - gpt:/megatron: specs, breakdown JSON -------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/TrainingStep.h"
#include "stpar/Cost/GPTModel.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

TEST(TrainingStepTest, ParsesGPTAndMegatronSpecs) {
  llvm::Expected<GPTConfig> m = parseGPTSpec(
      "gpt:layers=4,hidden=1024,heads=16,seq=2048,vocab=51200,batch=16");
  ASSERT_TRUE(bool(m));
  EXPECT_EQ(m->ffn, 4096);
  llvm::Expected<MegatronStrategy> s =
      parseMegatronSpec("megatron:tp=2,pp=2,dp=2,mb=1");
  ASSERT_TRUE(bool(s));
  EXPECT_EQ(s->recompute, Recompute::Full); // the default
  for (auto [text, r] : {std::pair{"none", Recompute::None},
                         {"0", Recompute::None},
                         {"full", Recompute::Full},
                         {"1", Recompute::Full},
                         {"selective", Recompute::Selective}}) {
    llvm::Expected<MegatronStrategy> t =
        parseMegatronSpec(std::string("megatron:tp=2,recompute=") + text);
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    EXPECT_EQ(t->recompute, r) << text;
  }
  llvm::Expected<MegatronStrategy> badName =
      parseMegatronSpec("megatron:tp=2,recompute=some");
  ASSERT_FALSE(bool(badName));
  EXPECT_EQ(llvm::toString(badName.takeError()),
            "megatron key 'recompute': expected none, selective or full, "
            "got 'some'");
  EXPECT_FALSE(bool(parseGPTSpec("gpt:layers=4,hidden=1024")));
  llvm::Expected<MegatronStrategy> bad = parseMegatronSpec("megatron:tq=2");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "unknown megatron key 'tq'");
}

// plan.json's "step" entry is read back by `stpar cost`: every field
// survives toJSON -> fromJSON, and a missing key is an error that names it.
TEST(TrainingStepTest, BreakdownJSONRoundTrip) {
  StepBreakdown b;
  b.numDevices = 8;
  b.microBatches = 4;
  b.pipelineStages = 2;
  b.interleave = 2;
  b.criticalStage = {1, 2, 3, 4, 5};
  b.boundStage = true;
  b.pipelineSend = 0.5;
  b.microBatchTime = 15.5;
  b.pipelineTime = 77.5;
  b.bubble = 7.75;
  b.gradSync = 3;
  b.gradSyncExposed = 1;
  b.optimizer = 0.25;
  b.stepTime = 78.75;
  b.modelFlops = 1e15;
  b.hardwareFlops = 1.5e15;
  b.modelFlopsPerDevice = 1e12;
  b.mfu = 0.4;
  b.peakMemory = {10, 20, 30, 40, 50};
  b.deviceCapacity = 80;
  b.fitsMemory = false;
  b.perLayerKind = {{"attention", {1, 0, 2, 3, 4}}, {"mlp", {5, 6, 7, 8, 9}}};
  llvm::json::Value v = toJSON(b);
  StepBreakdown r;
  llvm::json::Path::Root root("step");
  ASSERT_TRUE(fromJSON(v, r, root));
  auto same = [](const PhaseTimes &x, const PhaseTimes &y) {
    return x.forward == y.forward && x.recompute == y.recompute &&
           x.backwardInput == y.backwardInput &&
           x.backwardWeight == y.backwardWeight &&
           x.communication == y.communication;
  };
  EXPECT_EQ(r.numDevices, b.numDevices);
  EXPECT_EQ(r.microBatches, b.microBatches);
  EXPECT_EQ(r.pipelineStages, b.pipelineStages);
  EXPECT_EQ(r.interleave, b.interleave);
  EXPECT_TRUE(same(r.criticalStage, b.criticalStage));
  EXPECT_TRUE(r.boundStage);
  EXPECT_EQ(r.pipelineSend, b.pipelineSend);
  EXPECT_EQ(r.microBatchTime, b.microBatchTime);
  EXPECT_EQ(r.pipelineTime, b.pipelineTime);
  EXPECT_EQ(r.bubble, b.bubble);
  EXPECT_EQ(r.gradSync, b.gradSync);
  EXPECT_EQ(r.gradSyncExposed, b.gradSyncExposed);
  EXPECT_EQ(r.optimizer, b.optimizer);
  EXPECT_EQ(r.stepTime, b.stepTime);
  EXPECT_EQ(r.modelFlops, b.modelFlops);
  EXPECT_EQ(r.hardwareFlops, b.hardwareFlops);
  EXPECT_EQ(r.modelFlopsPerDevice, b.modelFlopsPerDevice);
  EXPECT_EQ(r.mfu, b.mfu);
  EXPECT_EQ(r.peakMemory.parameters, 10);
  EXPECT_EQ(r.peakMemory.gradients, 20);
  EXPECT_EQ(r.peakMemory.optimizer, 30);
  EXPECT_EQ(r.peakMemory.activations, 40);
  EXPECT_EQ(r.peakMemory.transient, 50);
  EXPECT_EQ(r.deviceCapacity, b.deviceCapacity);
  EXPECT_FALSE(r.fitsMemory);
  ASSERT_EQ(r.perLayerKind.size(), 2u);
  for (unsigned k = 0; k < 2; ++k) {
    EXPECT_EQ(r.perLayerKind[k].first, b.perLayerKind[k].first);
    EXPECT_TRUE(same(r.perLayerKind[k].second, b.perLayerKind[k].second));
  }
  // A breakdown of one stage of a plan keeps its stage numbers.
  b.boundStage = false;
  b.criticalStageIndex = 1;
  b.peakMemoryStage = 1;
  StepBreakdown s2;
  llvm::json::Path::Root root2("step");
  ASSERT_TRUE(fromJSON(toJSON(b), s2, root2));
  EXPECT_FALSE(s2.boundStage);
  EXPECT_EQ(s2.criticalStageIndex, 1u);
  EXPECT_EQ(s2.peakMemoryStage, 1u);

  v.getAsObject()->erase("step_s");
  llvm::json::Path::Root bad("step");
  EXPECT_FALSE(fromJSON(v, r, bad));
  EXPECT_NE(llvm::toString(bad.getError()).find("step_s"), std::string::npos);
}
