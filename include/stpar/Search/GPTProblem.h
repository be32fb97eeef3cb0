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

namespace stpar::search {

struct TransformerShape {
  cost::GPTConfig model;
  /// Key/value heads (grouped-query attention); 0 = heads.
  int64_t kvHeads = 0;
  /// SwiGLU-style FFN: fc1 produces 2 x ffn, the activation halves it.
  bool gatedFFN = false;
};

/// The problem: embedding (pre); ln1, qkv, scores, softmax, context, proj,
/// residual1, ln2, fc1, act, fc2, residual2 (layer, x layers); ln_f,
/// lm_head, loss (post). Batch loop "b", sequence loop "s".
Problem buildTransformerProblem(const TransformerShape &shape,
                                llvm::StringRef cluster, int64_t devices);

} // namespace stpar::search

#endif // STPAR_SEARCH_GPTPROBLEM_H
