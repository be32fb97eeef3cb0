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

/// Views (reshapes, slices, splits) between the producer and the consumer
/// of an edge: which producer dim's split carries over to which consumer dim,
/// and where the others are lost (the PartitionableOpInterface's
/// LayoutRule of each view, composed; docs/search.md "Edges through
/// views"). Dims are operand dim positions (Operand::dims).
struct EdgeViews {
  /// Number of views on the way; 0: none, the operands are the same
  /// tensor but one indexes a (unit) dim by no loop, so operand dim
  /// positions differ.
  unsigned count = 1;
  /// Per consumer operand dim: the producer operand dim whose split it
  /// takes, or -1 (the dim starts replicated).
  std::vector<int> producerDimOf;
  /// Per consumer operand dim: its size after each view (count entries): a
  /// split carries over only while every size is a multiple of its group.
  std::vector<std::vector<int64_t>> sizes;
  /// Per producer operand dim: the position of the view (0 = the one
  /// reading the producer's output) that drops its split, or -1.
  std::vector<int> lostAt;
  /// Per consumer operand dim: the position of the view whose gradient
  /// cannot keep that dim's split (it slices, concatenates or reshapes it
  /// away), walking back from the consumer: the program gathers the
  /// gradient there. -1: the split reaches the producer's backward. Empty
  /// (a problem file without it): every dim at the last view.
  std::vector<int> gradientLostAt;
  /// Whether this edge pays the re-layout before the views (the producer's
  /// partial sums reduced, the lost splits gathered). The program makes
  /// that re-layout once per producer output and target layout, so among
  /// edges from the same output with the same lostAt only the first does.
  bool chargesGather = true;
};

/// One tensor flowing from an Output operand of `producer` to an Input
/// operand of `consumer` (indices into Problem::ops and their operands).
/// Without `views` both operands have the same rank and the consumer's
/// extents may be smaller in a dimension (it reads a slice, e.g. Q out of a
/// fused QKV output), never larger; with them, the operands are joined
/// through the views' dim map.
struct Edge {
  unsigned producer = 0, producerOperand = 0;
  unsigned consumer = 0, consumerOperand = 0;
  /// Layer op -> layer op of the *next* layer copy (the residual stream). For
  /// layer 0 the producer is the last Pre operator's first output; the last
  /// layer's carry feeds Post operators through ordinary edges from the
  /// carry operator.
  bool nextLayer = false;
  /// Set when views lie between the operands.
  std::optional<EdgeViews> views;
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
