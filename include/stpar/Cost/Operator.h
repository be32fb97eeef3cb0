//===- Operator.h - operators as iteration spaces ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The cost model's view of one operator: loop dimensions with extents,
// operands indexing some of them (as linalg indexing maps do, restricted to
// projections), and a partition choice (mesh axes on loop dims, optionally
// PrimePar's temporal primitive). Plain structs, so the importer can fill
// them from IR and tests can write them by hand (../shared/DESIGN.md,
// "Iteration-space view of an operator"; the same content as `#stp.spec`).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_OPERATOR_H
#define STPAR_COST_OPERATOR_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::cost {

enum class LoopKind { Parallel, Reduction };

/// One loop of the iteration space, with the mesh axes that split it
/// (indices into Mesh::axes, major first). Its local extent on a device is
/// ceil(extent / product of the axis sizes).
struct LoopDim {
  std::string name;
  int64_t extent = 1;
  LoopKind kind = LoopKind::Parallel;
  std::vector<unsigned> axes;
  /// Whether a partition may split the loop (the search's space,
  /// search::enumeratePartitions): false where the partitioned program
  /// cannot (stp.attention splits only its batch and head loops).
  bool splittable = true;
};

/// How the cost rules treat an operator.
enum class OpKind {
  /// A contraction (linear layer, attention batched matmul): FLOPs =
  /// flopsPerPoint * product of all extents; efficiency from the GEMM curve.
  MatMul,
  /// Memory-bound elementwise (bias, GeLU, dropout, residual add).
  Elementwise,
  /// Softmax over one reduction loop (non-decomposable: a split of it costs
  /// an all-reduce of the max and sum statistics).
  Softmax,
  /// LayerNorm/RMSNorm (statistics over a reduction loop, as Softmax).
  Norm,
  /// Embedding lookup: a gather of rows; a split vocabulary (reduction loop)
  /// leaves partial outputs to all-reduce, as in Megatron's
  /// vocab-parallel embedding.
  Embedding,
  /// A mixture-of-experts FFN (router, top-k dispatch, the experts' FFNs,
  /// combine), described by Operator::moe and costed with FasterMoE's model
  /// (stpar/Cost/MoE.h): its expert loop may take mesh axes that also split
  /// its token loops (expert parallelism: tokens reach their experts by
  /// all-to-all over those axes).
  MoE,
};

/// The kind's name as printed in tables and problem files ("matmul",
/// "elementwise", "softmax", "norm", "embedding").
llvm::StringRef getOpKindName(OpKind kind);

enum class OperandRole { Input, Parameter, Output };

/// One operand: the loops it indexes (projections of the iteration space).
struct Operand {
  std::string name;
  OperandRole role = OperandRole::Input;
  std::vector<unsigned> dims;
  /// Bytes per element (2 for fp16/bf16, 4 for fp32, 8 for int64 ids).
  int64_t elementBytes = 2;
  /// Inputs only: whether backward computes a gradient for it (false for
  /// token ids, masks).
  bool needsGrad = true;
  /// Inputs only: the tensor comes from an operator that is not planned
  /// and runs replicated (no batch loop: BERT's position embedding read
  /// with constant indices). F slices it for free; B gathers its gradient
  /// whole again over the axes splitting this operand, for that
  /// operator's own gradient (costOperator charges the all-gather).
  bool gatherGradient = false;
  /// A tensor of the attention core that selective recomputation
  /// regenerates instead of stashing: the softmax output and dropout mask
  /// (stashed by the softmax) and the probabilities read by the context
  /// matmul; Korthikanti et al., MLSys 2023, Sec. 5: 5as^2b of a layer's
  /// sbh(34 + 5as/h) bytes.
  bool selectiveRecomputed = false;
};

/// PrimePar's spatial-temporal primitive on a q x q sub-mesh (PrimePar Sec.
/// 3; ../shared/DESIGN.md "Temporal partition"): rows on mesh axis
/// `rowAxis`, columns on `colAxis` (both of size q), applied to a linear
/// layer O[m,k] = sum_n I[m,n] W[n,k] whose loops are `mDim`, `nDim`
/// (reduction) and `kDim`. Each of M, N, K is cut into q slices; q steps.
struct TemporalPrimitive {
  unsigned rowAxis = 0;
  unsigned colAxis = 0;
  unsigned mDim = 0;
  unsigned nDim = 0;
  unsigned kDim = 0;
};

/// What an OpKind::MoE operator is (FasterMoE's model, stpar/Cost/MoE.h):
/// loops over the tokens (the batch and sequence loops, any others
/// parallel), the model dim H, the experts E and an expert's hidden dim F;
/// parameters are `ffnMatrices` expert weights indexed (E, H, F). A
/// partition may split the token loops like any loop; the expert loop
/// takes a subset of the axes that split the token loops (the expert-
/// parallel group), never other axes; F may be split over other axes
/// (tensor parallelism inside every expert, Megatron-style: the output's
/// partial sums and the input's gradient are all-reduced over them). H is
/// not split.
struct MoESpec {
  unsigned expertLoop = 0, hiddenLoop = 0, ffnLoop = 0;
  int64_t topK = 1;
  int64_t ffnMatrices = 2;
  /// Share of the routed token slots per expert (sums to 1); empty: uniform.
  std::vector<double> load;
  /// GShard/Switch capacity factor; 0: no drop (ExpertParallelism).
  double capacityFactor = 0;
  /// FasterMoE's optimizations the cost may use, each chosen where it
  /// lowers the operator's time: dynamic shadowing, smart scheduling and
  /// the hierarchical all-to-all.
  bool shadowing = true, smartSchedule = true, hierarchical = true;
  /// Memory as stpar's generated program holds it (the IR route): without
  /// a capacity factor every buffer has the static no-drop bound, C = the
  /// device's tokens per (expert, sending device), E x C rows per device,
  /// instead of the rows the routing fills (docs/moe.md).
  bool staticBuffers = false;
};

/// One operator of one micro-batch's forward pass with its partition.
struct Operator {
  std::string name;
  OpKind kind = OpKind::Elementwise;
  /// Reporting group, e.g. "attention", "mlp", "embedding", "head".
  std::string layerKind;
  std::vector<LoopDim> loops;
  std::vector<Operand> operands;
  /// FLOPs per point of the iteration space (2 for a multiply-add; a few
  /// for elementwise ops).
  double flopsPerPoint = 2;
  std::optional<TemporalPrimitive> temporal;
  /// Pipeline stage running it (0-based).
  unsigned stage = 0;
  /// Re-run before backward under full activation recomputation.
  bool recomputable = false;
  /// Re-run before backward under selective recomputation (Korthikanti et
  /// al., MLSys 2023, Sec. 5): the attention core's QK^T and softmax (with
  /// its scale, mask and dropout), which regenerate the operands marked
  /// Operand::selectiveRecomputed. Q, K and V stay stashed.
  bool attentionCore = false;
  /// Under recomputation, its first input is the stashed checkpoint (the
  /// input of a transformer layer).
  bool checkpoint = false;
  /// Set exactly for OpKind::MoE.
  std::optional<MoESpec> moe;
};

} // namespace stpar::cost

#endif // STPAR_COST_OPERATOR_H
