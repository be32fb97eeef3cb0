//===- GPTProblem.h - transformer search problems ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Builds the search problem of a GPT-style decoder (the layer structure of
// stpar/Cost/GPTModel.h, with Q/K/V fused into one operator whose output
// the attention matmuls read as slices, and optional grouped-query attention
// and gated FFN), so the search and the benchmark run without the importer.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_SEARCH_GPTPROBLEM_H
#define STPAR_SEARCH_GPTPROBLEM_H

#include "stpar/Cost/GPTModel.h"
#include "stpar/Search/Problem.h"
#include "stpar/Search/Solver.h"

namespace stpar::search {

struct TransformerShape {
  cost::GPTConfig model;
  /// Key/value heads (grouped-query attention); 0 = heads.
  int64_t kvHeads = 0;
  /// SwiGLU-style FFN: fc1 produces 2 x ffn, the activation halves it.
  bool gatedFFN = false;
  /// Every layer's FFN a mixture of experts (Mixtral, GShard/Switch-style
  /// GPTs): `experts` FFNs of model.ffn each (3 matrices when gatedFFN,
  /// else 2), top-k routing, one OpKind::MoE operator (cost::MoESpec).
  struct MoE {
    int64_t experts = 0, topK = 2;
    double capacityFactor = 0;
    /// Per-expert share of the routed tokens; empty: uniform.
    std::vector<double> load;
    bool shadowing = true, smartSchedule = true, hierarchical = true;
  };
  std::optional<MoE> moe;
};

/// The problem: embedding (pre); ln1, qkv, scores, softmax, context, proj,
/// residual1, ln2, fc1, act, fc2, residual2 (layer, x layers); ln_f,
/// lm_head, loss (post). Batch loop "b", sequence loop "s". With `moe`,
/// fc1, act and fc2 are one operator "moe" (loops b, s, h, e, f).
Problem buildTransformerProblem(const TransformerShape &shape,
                                llvm::StringRef cluster, int64_t devices);

/// One Megatron-LM configuration of a GPT, costed by the search objective
/// (the one step composition `stpar cost`, `stpar plan --compare`, the
/// benchmark and the calibration share): the plan searchMegatron makes at
/// exactly the grid point of `strategy` (tp, pp, dp; m = batch / (mb * dp)
/// micro-batches; its ZeRO stage, recomputation, interleave, sequence
/// parallelism and overlap) on `model.batch` sequences per step, with
/// Instance::getBreakdown. Memory is not a constraint here: the
/// breakdown's `fitsMemory` compares it with the device capacity. Fails
/// when tp does not divide heads, hidden, ffn and vocab (or seq with
/// sp=1), pp * interleave does not divide the layers, or mb * dp does not
/// divide the batch; the error names the key.
struct CostedPlan {
  Plan plan;
  cost::StepBreakdown step;
};
llvm::Expected<CostedPlan>
costMegatronGPT(const cost::GPTConfig &model,
                const cost::MegatronStrategy &strategy,
                const cost::Cluster &cluster, const cost::EfficiencyModel &eff);

} // namespace stpar::search

#endif // STPAR_SEARCH_GPTPROBLEM_H
