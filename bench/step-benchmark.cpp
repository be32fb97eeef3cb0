//===- step-benchmark.cpp - time one 175B training-step cost ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Times building the operator list of GPT-3 175B (96 layers, hidden 12288,
// 96 heads, seq 2048, vocab 51200, batch 1536) under Megatron tp=8, pp=8,
// dp=16 on dgx-a100-80g-128 and evaluating one training step, and prints a
// table (target: < 50 ms per evaluation). Not a timed test.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/TrainingStep.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <vector>

using namespace llvm;
using namespace stpar::cost;

int main() {
  using Clock = std::chrono::steady_clock;
  GPTConfig m{96, 12288, 96, 4 * 12288, 51200, 2048, 1536};
  Expected<Cluster> cluster = getPreset("dgx-a100-80g-128");
  if (!cluster) {
    errs() << toString(cluster.takeError()) << "\n";
    return 1;
  }
  outs() << format("%-18s %8s %12s %12s %12s %10s\n", "strategy", "ops",
                   "build ms", "evaluate ms", "step s", "TFLOP/s");
  struct S {
    int64_t tp, pp, dp;
  };
  for (S s : {S{8, 8, 16}, S{8, 16, 8}, S{4, 16, 16}}) {
    MegatronStrategy st;
    st.tp = s.tp;
    st.pp = s.pp;
    st.dp = s.dp;
    std::vector<double> build, eval;
    double step = 0, tflops = 0;
    size_t numOps = 0;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = Clock::now();
      Expected<CostProblem> p = buildMegatronGPT(m, st);
      auto t1 = Clock::now();
      if (!p) {
        errs() << toString(p.takeError()) << "\n";
        return 1;
      }
      Expected<StepBreakdown> b = evaluateTrainingStep(
          p->ops, p->mesh, *cluster, p->config, getDefaultEfficiency());
      auto t2 = Clock::now();
      if (!b) {
        errs() << toString(b.takeError()) << "\n";
        return 1;
      }
      build.push_back(std::chrono::duration<double>(t1 - t0).count());
      eval.push_back(std::chrono::duration<double>(t2 - t1).count());
      step = b->stepTime;
      tflops = b->modelFlopsPerDevice / 1e12;
      numOps = p->ops.size();
    }
    std::sort(build.begin(), build.end());
    std::sort(eval.begin(), eval.end());
    outs() << format("tp%lld pp%lld dp%-8lld %8zu %12.3f %12.3f %12.3f "
                     "%10.1f\n",
                     (long long)s.tp, (long long)s.pp, (long long)s.dp, numOps,
                     build[10] * 1e3, eval[10] * 1e3, step, tflops);
  }
  outs() << "(median of 20 runs; target: evaluate < 50 ms)\n";
  return 0;
}
