//===- SearchBridge.h - operator graph -> partition-search problem -*- C++ -*-//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Turns the OperatorGraph of an imported model (stpar/Analysis/
// OperatorGraph.h) into the partition search's Problem
// (stpar/Search/Problem.h): one copy of the repeated transformer layer cut
// at the residual stream (a cut crossed by exactly one gradient-carrying
// tensor), the operators before and after it, the edges between operators
// (through views that keep the rank and the dim order), the batch loop
// ("b") and the sequence loop ("s") followed from the graph inputs. Keeps,
// per flattened search operator, the graph operator it stands for, so a
// plan can be written back onto the IR. No MLIR. docs/plan-format.md.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_ANALYSIS_SEARCHBRIDGE_H
#define STPAR_ANALYSIS_SEARCHBRIDGE_H

#include "stpar/Analysis/OperatorGraph.h"
#include "stpar/Search/Problem.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace stpar::analysis {

/// The search problem of an operator graph and the way back.
struct BridgedProblem {
  search::Problem problem;
  /// Per operator of flatten(problem) (Pre, layer copies, Post): the index
  /// of the graph operator it stands for.
  std::vector<unsigned> graphOpOfFlat;
  /// Graph operators left out of the problem (no batch loop); not planned.
  std::vector<unsigned> unplanned;
  /// Approximations made (one line each).
  std::vector<std::string> notes;
};

/// Builds the problem for `devices` devices of `cluster` (a preset name or
/// JSON file, as search::Problem::cluster). The graph's bound batch is the
/// global batch of one step (micro-batching divides it). The layers become
/// one repeated block when every layer between consecutive residual cuts
/// has the same operators (kinds, loops, operands, edges); otherwise every
/// operator is a Pre operator (no layer folding, no pipelining) and a note
/// says why. Fails when no operator has a batch loop.
llvm::Expected<BridgedProblem> buildSearchProblem(const OperatorGraph &graph,
                                                  llvm::StringRef name,
                                                  llvm::StringRef cluster,
                                                  int64_t devices);

} // namespace stpar::analysis

#endif // STPAR_ANALYSIS_SEARCHBRIDGE_H
