//===- Space.h - meshes and per-operator partition spaces -------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The search space, derived from iteration spaces only (no per-model code):
// the logical meshes N devices can form (ordered factorizations; the order
// decides which axes are intra- and which inter-node), and for one operator
// on one mesh every assignment of mesh axes to its loops (spatial,
// replication included) plus PrimePar's temporal primitive on two equal-size
// free axes for linear layers. Non-divisible splits are excluded, not
// padded. docs/search.md.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_SEARCH_SPACE_H
#define STPAR_SEARCH_SPACE_H

#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/Operator.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::search {

/// Ordered factorizations of `devices` into factors >= 2 with at most
/// `maxAxes` factors, major axis first (devices == 1: one empty shape). Each
/// order is a distinct mesh because it places the axes differently over the
/// nodes. E.g. 12 -> [12] [2,6] [6,2] [3,4] [4,3] [2,2,3] [2,3,2] [3,2,2].
std::vector<std::vector<int64_t>> enumerateMeshShapes(int64_t devices,
                                                      unsigned maxAxes);

/// The mesh the search uses for one logical shape: axis 0 is "pp" (the
/// pipeline stages, outermost, splits no loop), then the shape's axes named
/// "x0", "x1", ...
cost::Mesh makeSearchMesh(int64_t stages, llvm::ArrayRef<int64_t> shape);

/// One operator's partition: mesh axes per loop (major first) and optionally
/// the temporal primitive.
struct Partition {
  std::vector<std::vector<unsigned>> loopAxes;
  std::optional<cost::TemporalPrimitive> temporal;
  bool operator==(const Partition &o) const;
};

/// Writes `part` into `op` (LoopDim::axes, Operator::temporal).
void applyPartition(cost::Operator &op, const Partition &part);

/// "b{x0} k{x1}", "replicated", "b{x0} temporal(x1,x2: m=s n=n k=k)".
std::string describePartition(const cost::Operator &op, const Partition &part,
                              const cost::Mesh &mesh);

/// How `part` cuts operand `operand` of `op`, one entry per tensor dim:
/// "[b/x0, s, h/x1,x2]" (the dim's loop, then the mesh axes that split it,
/// major first); a dim the temporal primitive cuts into q slices (its M, N
/// or K, the slice index changing per step) reads "n/t". Operand indices
/// out of range give "[]".
std::string describeLayout(const cost::Operator &op, const Partition &part,
                           const cost::Mesh &mesh, unsigned operand);

struct SpaceOptions {
  /// Include PrimePar's temporal primitive.
  bool temporal = true;
  /// Axes below this index are never assigned (axis 0 = "pp").
  unsigned firstAxis = 1;
  /// Forcing (for plans made to test the partitioner, `stpar plan
  /// --strategy temporal`): an operator that has temporal candidates keeps
  /// only those.
  bool onlyTemporal = false;
  /// Partial constraints (`stpar plan --fix NAME=SPEC`): the operator
  /// named first keeps only the candidates describePartition names as the
  /// second (`b{x0} d2{x1}`, `replicated`, `temporal(x0,x1: m=.. n=..
  /// k=..)`); a layer operator stands for every layer. Search drops the
  /// configurations whose mesh offers no such candidate.
  std::vector<std::pair<std::string, std::string>> fixed;
};

/// Every partition of `op` on `mesh`: each axis >= firstAxis is either
/// unused (the operator is replicated along it) or splits one loop, the
/// product of the sizes on a loop dividing its extent; plus, for MatMul
/// operators with an Input (M, N), a Parameter (N, K) and an Output (M, K),
/// the temporal primitive on every ordered pair of unused axes of equal size
/// q >= 2 and every (M, N, K) loop triple whose local extents q divides.
/// An MoE operator (cost::MoESpec) splits only its token loops and its
/// expert-hidden loop that way; each such partition also comes with its
/// expert loop split over every non-empty subset of the token loops' axes
/// whose sizes multiply to a divisor of the expert count (expert
/// parallelism).
std::vector<Partition> enumeratePartitions(const cost::Operator &op,
                                           const cost::Mesh &mesh,
                                           const SpaceOptions &options);

/// A tensor layout over the mesh, one entry per mesh axis: kReplicated,
/// kPartial (pending partial sums), kPartialGradient or the tensor dimension
/// the axis splits.
using LayoutCode = std::vector<int8_t>;
constexpr int8_t kReplicated = -1;
constexpr int8_t kPartial = -2;
/// An input replicated over the axis whose gradient comes back as partial
/// sums over it: a contraction's or an elementwise operator's input over an
/// axis that splits a loop the input does not index (Megatron's
/// column-parallel dX; a broadcast input). Reduced by the edge that feeds
/// the input, into the producer's layout.
constexpr int8_t kPartialGradient = -3;

/// Layout of operand `operand` of `op` under `part` (the operand as the op
/// produces or consumes it). Outputs of MatMul/Embedding split on a
/// reduction loop the output does not index are partial; inputs of the
/// temporal primitive are in its home layout (M on the row axis, N on the
/// column axis; the skew is charged to the operator).
LayoutCode getOperandLayout(const cost::Operator &op, unsigned operand,
                            const Partition &part, unsigned numAxes);

} // namespace stpar::search

#endif // STPAR_SEARCH_SPACE_H
