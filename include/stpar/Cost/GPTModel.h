//===- GPTModel.h - GPT-style transformers as operator lists ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A GPT-style decoder's dimensions (Megatron-LM's GPT: learned embedding
// tied to the LM head, pre-LayerNorm layers of attention and a GeLU MLP)
// and a Megatron-LM strategy (tensor x pipeline x data parallelism), with
// their `gpt:` and `megatron:` parsers. The search builds the problem
// (stpar/Search/GPTProblem.h) and costs the strategy
// (search::costMegatronGPT), so a strategy can be costed without the ONNX
// importer.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_GPTMODEL_H
#define STPAR_COST_GPTMODEL_H

#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/Operator.h"
#include "stpar/Cost/TrainingStep.h"

#include "llvm/Support/Error.h"

namespace stpar::cost {

/// Model dimensions. `batch` is the global batch in sequences per step.
struct GPTConfig {
  int64_t layers = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0, seq = 0,
          batch = 0;
};

/// Megatron-LM 3D parallelism: tp x pp x dp devices, micro-batches of `mb`
/// sequences, optional interleaving, ZeRO stage and activation
/// recomputation (full by default).
struct MegatronStrategy {
  int64_t tp = 1, pp = 1, dp = 1, mb = 1, interleave = 1;
  int zeroStage = 0;
  Recompute recompute = Recompute::Full;
  /// Megatron's sequence parallelism (Korthikanti et al., MLSys 2023,
  /// Sec. 4.2.2): norms, dropout and residual adds between the
  /// tensor-parallel regions split the sequence over tp. Same communication
  /// volume as tp alone (an all-reduce becomes a reduce-scatter and an
  /// all-gather), less activation memory.
  bool sequenceParallel = false;
  /// Whether the data-parallel gradient reduce-scatter / all-reduce (and
  /// ZeRO-3's parameter all-gather) overlap the backward pass (Megatron-LM's
  /// --overlap-grad-reduce / --overlap-param-gather; `overlap=`).
  bool overlapGradSync = true;
  /// The pipeline schedule: GPipe (`schedule=gpipe`: all forwards, then all
  /// backwards; m micro-batches in flight) instead of 1F1B (the default;
  /// interleaved with vp > 1). cost/PipelineSchedule.h.
  bool gpipe = false;
};

/// Parses "gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V,batch=B[,ffn=F]"
/// (ffn defaults to 4H). Errors name the bad key.
llvm::Expected<GPTConfig> parseGPTSpec(llvm::StringRef spec);

/// Parses "megatron:tp=T,pp=P,dp=D,mb=M[,interleave=V|vp=V][,zero=Z]
/// [,recompute=none|selective|full][,sp=0|1][,distopt=0|1][,overlap=0|1]
/// [,schedule=1f1b|gpipe]"
/// (vp is Megatron-LM's name for the virtual pipeline stages per rank, i.e.
/// interleave; recompute=0 and 1 are none and full; distopt=1, Megatron-LM's
/// distributed optimizer, is ZeRO stage 1 and an error with another zero=;
/// overlap defaults to 1).
llvm::Expected<MegatronStrategy> parseMegatronSpec(llvm::StringRef spec);

/// Total parameters of the model (embedding tied to the head), elements.
double getGPTParameterCount(const GPTConfig &model);

} // namespace stpar::cost

#endif // STPAR_COST_GPTMODEL_H
