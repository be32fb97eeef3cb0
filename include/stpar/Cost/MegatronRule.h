//===- MegatronRule.h - Megatron-LM's tensor-parallel rule ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The one place that says which loop of an operator Megatron-LM splits over
// its tensor-parallel axis. Both ways of finding the loops use it:
// chooseMegatronLoops (OperatorGraph.h: imported models, `stpar plan` and
// `stpar cost` on ONNX, following splits through the graph's views) and
// searchMegatron (Solver.h: problems whose edges carry every split, the
// `gpt:` route and the benchmarks, following them along the problem's
// edges). Callers only differ in how they find the loops an operator's
// inputs arrive split on.
//
// The rule (Shoeybi et al., "Megatron-LM", 2019, Sec. 3; Korthikanti et al.,
// "Reducing Activation Recomputation in Large Transformer Models", MLSys
// 2023, Sec. 4.2.2 for sequence parallelism):
// - a linear (a contraction with one parameter) whose input arrives split
//   on its reduction loop is row-parallel (that loop on tp; its output is a
//   partial sum, all-reduced, or reduce-scattered under sequence
//   parallelism); one whose input arrives unsplit (or, under sequence
//   parallelism, split on the sequence, which Megatron all-gathers first)
//   is column-parallel: the first parallel loop its weight indexes and its
//   input does not that tp divides (QKV's heads, the first MLP linear's
//   FFN dim, the LM head's vocabulary);
// - the vocabulary table of the embedding (the largest one) is split on its
//   rows (vocab-parallel embedding);
// - any other operator follows the one loop its inputs arrive split on
//   (heads through attention, the FFN dim through GeLU), except a
//   normalization split on the loop it normalizes over, which Megatron
//   never does (it is replicated: the input is gathered); a softmax split
//   on its reduction is Megatron's vocab-parallel cross-entropy and keeps
//   the split;
// - under sequence parallelism an operator no split reaches (layer norms,
//   dropout, residual adds between the tensor-parallel regions) is split on
//   its sequence loop;
// - everything else is replicated across tp, with the reason.
// No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_MEGATRONRULE_H
#define STPAR_COST_MEGATRONRULE_H

#include "stpar/Cost/Operator.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>

namespace stpar::cost {

/// What reaches one operator.
struct MegatronInputs {
  /// Distinct loops of the operator that its inputs arrive split on over tp.
  llvm::ArrayRef<int> inputLoops;
  /// An input arrives split on a tensor dim no loop of the operator indexes
  /// (e.g. a reduction it folds away): the operator is replicated.
  bool lost = false;
  /// Embedding operators: the loop of the vocabulary table's rows when this
  /// embedding reads the vocabulary table (-1: another table, not split).
  int vocabLoop = -1;
  /// Sequence parallelism: the operator's sequence loop (-1: off, or the
  /// operator has none).
  int sequenceLoop = -1;
};

/// The choice for one operator.
struct MegatronChoice {
  /// Loop split over tp (index into Operator::loops), -1 for none.
  int loop = -1;
  /// Not empty when the operator is replicated across tp although a split
  /// reached it or it is a linear: why (for the warnings users see).
  std::string replicated;
  /// The split that reached the operator lies on a loop tp does not divide
  /// (also `replicated`): the configuration is not Megatron's.
  bool indivisible = false;
};

/// Megatron-LM's tensor-parallel loop of `op` for a tensor-parallel degree
/// `tp` (>= 1; 1 splits nothing). A loop is only chosen when tp divides its
/// extent.
MegatronChoice chooseMegatronLoop(const Operator &op,
                                  const MegatronInputs &inputs, int64_t tp);

} // namespace stpar::cost

#endif // STPAR_COST_MEGATRONRULE_H
