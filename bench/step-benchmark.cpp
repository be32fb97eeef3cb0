//===- step-benchmark.cpp - time one 175B training-step cost ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Times costing GPT-3 175B (96 layers, hidden 12288, 96 heads, seq 2048,
// vocab 51200, batch 1536) under three Megatron plans on dgx-a100-80g-128
// the way `stpar cost --model gpt:` does (search::costMegatronGPT: build the
// search problem, lay out Megatron's plan, evaluate it with the search
// objective and break it down), and prints a table (target: < 50 ms per
// step costed). Not a timed test.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Search/GPTProblem.h"

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
  outs() << format("%-18s %8s %12s %12s %10s\n", "strategy", "ops", "cost ms",
                   "step s", "TFLOP/s");
  struct S {
    int64_t tp, pp, dp;
  };
  for (S s : {S{8, 8, 16}, S{8, 16, 8}, S{4, 16, 16}}) {
    MegatronStrategy st;
    st.tp = s.tp;
    st.pp = s.pp;
    st.dp = s.dp;
    std::vector<double> times;
    double step = 0, tflops = 0;
    size_t numOps = 0;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = Clock::now();
      Expected<stpar::search::CostedPlan> p = stpar::search::costMegatronGPT(
          m, st, *cluster, getDefaultEfficiency());
      auto t1 = Clock::now();
      if (!p) {
        errs() << toString(p.takeError()) << "\n";
        return 1;
      }
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
      step = p->step.stepTime;
      tflops = p->step.modelFlopsPerDevice / 1e12;
      numOps = p->plan.partitions.size();
    }
    std::sort(times.begin(), times.end());
    outs() << format("tp%lld pp%lld dp%-8lld %8zu %12.3f %12.3f %10.1f\n",
                     (long long)s.tp, (long long)s.pp, (long long)s.dp, numOps,
                     times[10] * 1e3, step, tflops);
  }
  outs() << "(median of 20 runs; target: < 50 ms per step costed)\n";
  return 0;
}
