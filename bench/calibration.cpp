//===- calibration.cpp - Megatron-LM SC'21 calibration ----------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Runs the Megatron-LM SC'21 Table 1 configurations
// (../shared/calibration/megatron_sc21_a100.csv, read at run time) through
// the cost model and prints predicted vs published TFLOP/s per GPU, the
// error per row, the median absolute error, and the held-out rows apart.
// `--fit` re-fits the two GEMM efficiency coefficients on the fit rows
// (grid search, least squares of log errors) and reports with them.
//
//   stpar-calibration [CSV] [--fit]
//
// Assumptions (docs/cost-model.md): micro-batch size 1, plain 1F1B
// (interleave 1), full recomputation, sequence 2048, vocabulary 51200,
// dgx-a100-80g-(gpus/8), ZeRO 0.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/TrainingStep.h"
#include "stpar/Search/GPTProblem.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace llvm;
using namespace stpar::cost;

namespace {
struct Row {
  std::string model;
  int64_t heads, hidden, layers, tp, pp, gpus, batch;
  double published; // TFLOP/s per GPU
  bool heldOut;
};
} // namespace

/// Rows used to fit (every other row, by model size); the rest is held out.
static bool isHeldOut(StringRef model) {
  return model == "3.6B" || model == "18B" || model == "76B" ||
         model == "310B" || model == "1T";
}

static constexpr int64_t kSeq = 2048, kVocab = 51200;

static Expected<std::vector<Row>> readCSV(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return createStringError(buffer.getError(),
                             path + ": " + buffer.getError().message());
  std::vector<Row> rows;
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, false);
  bool header = true;
  for (StringRef line : lines) {
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    if (header) { // model,params_b,heads,hidden,layers,tp,pp,gpus,...
      header = false;
      continue;
    }
    SmallVector<StringRef> f;
    line.split(f, ',');
    if (f.size() < 10)
      return createStringError(inconvertibleErrorCode(),
                               path + ": short row '" + line + "'");
    Row r;
    r.model = f[0].str();
    if (f[2].getAsInteger(10, r.heads) || f[3].getAsInteger(10, r.hidden) ||
        f[4].getAsInteger(10, r.layers) || f[5].getAsInteger(10, r.tp) ||
        f[6].getAsInteger(10, r.pp) || f[7].getAsInteger(10, r.gpus) ||
        f[8].getAsInteger(10, r.batch) || f[9].getAsDouble(r.published))
      return createStringError(inconvertibleErrorCode(),
                               path + ": bad number in '" + line + "'");
    r.heldOut = isHeldOut(r.model);
    rows.push_back(r);
  }
  return rows;
}

/// Model FLOPs per step incl. recomputation (Narayanan et al. SC'21 Eq. 3,
/// the CSV header's formula): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
static double megatronFlops(const Row &r) {
  double B = double(r.batch), s = double(kSeq), l = double(r.layers),
         h = double(r.hidden), V = double(kVocab);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

/// Predicted TFLOP/s per GPU, or a negative number on error.
static double predict(const Row &r, const EfficiencyModel &eff) {
  GPTConfig m;
  m.layers = r.layers;
  m.hidden = r.hidden;
  m.heads = r.heads;
  m.ffn = 4 * r.hidden;
  m.vocab = kVocab;
  m.seq = kSeq;
  m.batch = r.batch;
  MegatronStrategy s;
  s.tp = r.tp;
  s.pp = r.pp;
  s.dp = r.gpus / (r.tp * r.pp);
  s.mb = 1;
  s.recompute = Recompute::Full;
  Expected<Cluster> cluster =
      getPreset("dgx-a100-80g-" + std::to_string(r.gpus / 8));
  if (!cluster) {
    errs() << "stpar-calibration: " << r.model << ": "
           << toString(cluster.takeError()) << "\n";
    return -1;
  }
  Expected<stpar::search::CostedPlan> costed =
      stpar::search::costMegatronGPT(m, s, *cluster, eff);
  if (!costed) {
    errs() << "stpar-calibration: " << r.model << ": "
           << toString(costed.takeError()) << "\n";
    return -1;
  }
  double stepTime = costed->step.stepTime;
  return megatronFlops(r) / stepTime / double(r.gpus) / 1e12;
}

static double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const std::vector<Row> &rows, const EfficiencyModel &eff) {
  outs() << format("GEMM efficiency: eta(F) = %.3f * F / (F + %.3g FLOP); "
                   "HBM efficiency %.2f; kernel launch %.1f us\n",
                   eff.matmulMax, eff.matmulHalfFlops, eff.hbmEfficiency,
                   eff.kernelLaunch * 1e6);
  outs() << format("%-6s %4s %4s %5s %6s %10s %10s %8s  %s\n", "model", "tp",
                   "pp", "dp", "gpus", "published", "predicted", "error",
                   "set");
  std::vector<double> all, fit, held;
  double worst = 0;
  for (const Row &r : rows) {
    double pred = predict(r, eff);
    double err = (pred - r.published) / r.published;
    outs() << format("%-6s %4lld %4lld %5lld %6lld %10.1f %10.1f %+7.1f%%  "
                     "%s\n",
                     r.model.c_str(), (long long)r.tp, (long long)r.pp,
                     (long long)(r.gpus / (r.tp * r.pp)), (long long)r.gpus,
                     r.published, pred, err * 100,
                     r.heldOut ? "held-out" : "fit");
    all.push_back(std::fabs(err));
    (r.heldOut ? held : fit).push_back(std::fabs(err));
    worst = std::max(worst, std::fabs(err));
  }
  outs() << format("median |error|: all %.1f%%, fit rows %.1f%%, held-out "
                   "rows %.1f%%; max |error| %.1f%%\n",
                   median(all) * 100, median(fit) * 100, median(held) * 100,
                   worst * 100);
}

/// Least squares of log(predicted/published) over the fit rows, by grid
/// search over (matmulMax, matmulHalfFlops).
static EfficiencyModel fitEfficiency(const std::vector<Row> &rows,
                                     EfficiencyModel eff) {
  double best = INFINITY;
  EfficiencyModel bestEff = eff;
  for (double mx = 0.50; mx <= 0.951; mx += 0.01) {
    for (double lg = 8.0; lg <= 12.01; lg += 0.05) {
      EfficiencyModel e = eff;
      e.matmulMax = mx;
      e.matmulHalfFlops = std::pow(10.0, lg);
      double sse = 0;
      for (const Row &r : rows) {
        if (r.heldOut)
          continue;
        double pred = predict(r, e);
        double d = std::log(pred / r.published);
        sse += d * d;
      }
      if (sse < best) {
        best = sse;
        bestEff = e;
      }
    }
  }
  return bestEff;
}

int main(int argc, char **argv) {
  std::string path = std::string(STPAR_SOURCE_DIR) +
                     "/../shared/calibration/megatron_sc21_a100.csv";
  bool fit = false;
  for (int i = 1; i < argc; ++i) {
    StringRef arg(argv[i]);
    if (arg == "--fit")
      fit = true;
    else
      path = arg.str();
  }
  Expected<std::vector<Row>> rows = readCSV(path);
  if (!rows) {
    errs() << "stpar-calibration: error: " << toString(rows.takeError())
           << "\n";
    return 1;
  }
  outs() << "Megatron-LM SC'21 Table 1 (" << path << ")\n";
  outs() << "assumptions: micro-batch 1, plain 1F1B, full recomputation, "
            "seq 2048, vocab 51200, dgx-a100-80g-(gpus/8), ZeRO 0\n\n";
  EfficiencyModel eff = getDefaultEfficiency();
  report(*rows, eff);
  if (fit) {
    outs() << "\nre-fitted on the fit rows:\n";
    report(*rows, fitEfficiency(*rows, eff));
  }
  return 0;
}
