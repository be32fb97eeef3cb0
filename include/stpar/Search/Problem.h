//===- Problem.h - the partition-search problem -----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A partition-search problem without MLIR (the CIRCT scheduling-library split,
// ../shared/STYLE.md): operators as iteration spaces (stpar/Cost/Operator.h,
// partition fields left empty), the tensors flowing between them (edges), a
// block of operators repeated `layers` times (the transformer layers), the
// device count and the cluster. A line-based text format with a parser and a
// printer lets the solvers be tested alone; docs/search.md describes it.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_SEARCH_PROBLEM_H
#define STPAR_SEARCH_PROBLEM_H

#include "stpar/Cost/Operator.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::search {

/// Where an operator sits: before the repeated layers (stage 0 under
/// pipelining), in the repeated block, or after it (last stage).
enum class Section { Pre, Layer, Post };

/// One tensor flowing from an Output operand of `producer` to an Input
/// operand of `consumer` (indices into Problem::ops and their operands). Both
/// operands have the same rank; the consumer's extents may be smaller in a
/// dimension (it reads a slice, e.g. Q out of a fused QKV output), never
/// larger.
struct Edge {
  unsigned producer = 0, producerOperand = 0;
  unsigned consumer = 0, consumerOperand = 0;
  /// Layer op -> layer op of the *next* layer copy (the residual stream). For
  /// layer 0 the producer is the last Pre operator's first output; the last
  /// layer's carry feeds Post operators through ordinary edges from the
  /// carry operator.
  bool nextLayer = false;
};

struct Problem {
  std::string name;
  /// Cluster preset name or JSON file (stpar/Cost/Cluster.h, loadCluster).
  std::string cluster;
  /// Devices the plan may use (<= the cluster's).
  int64_t devices = 1;
  /// Per-device memory limit in bytes; the device capacity when unset.
  std::optional<double> memoryLimit;
  /// Name of the loop that is the global batch (micro-batching divides it).
  std::string batchLoop;
  /// Name of the sequence loop (Megatron sequence parallelism); optional.
  std::string sequenceLoop;
  /// How many times the Layer operators repeat (>= 1 when there are any).
  int64_t layers = 1;
  std::vector<cost::Operator> ops;
  std::vector<Section> sections;
  std::vector<Edge> edges;
};

/// Checks the structure: sections ordered Pre*, Layer*, Post*; edges from an
/// Output to an Input operand, forward in op order (or nextLayer between
/// Layer ops from a single carry operand), slice-compatible shapes; Layer ->
/// Post edges only from the carry; no Pre -> Layer edges except through the
/// carry. Messages name the operator.
llvm::Error verifyProblem(const Problem &problem);

/// Parses the text format (docs/search.md). `fileName` prefixes errors,
/// which carry the line number: "p.txt:12: unknown operator kind 'foo'".
llvm::Expected<Problem> parseProblem(llvm::StringRef text,
                                     llvm::StringRef fileName);

/// Prints `problem` in the text format (parseProblem(print(p)) == p).
void printProblem(llvm::raw_ostream &os, const Problem &problem);

/// Name of a section in the text format (op kinds: cost::getOpKindName).
llvm::StringRef getSectionName(Section section);

/// The problem with the layers written out: Pre ops, `layers` copies of the
/// Layer ops (names suffixed "#l"), Post ops; nextLayer edges resolved.
/// `layerOf[i]` is the copy of op i (-1 outside the layers) and `original[i]`
/// the index in `problem.ops`.
struct FlatGraph {
  std::vector<cost::Operator> ops;
  std::vector<Section> sections;
  std::vector<int64_t> layerOf;
  std::vector<unsigned> original;
  /// nextLayer is false in these.
  std::vector<Edge> edges;
};
FlatGraph flatten(const Problem &problem);

/// Index of the carry operator (producer of the nextLayer edges), if any.
std::optional<unsigned> getCarryOp(const Problem &problem);

} // namespace stpar::search

#endif // STPAR_SEARCH_PROBLEM_H
