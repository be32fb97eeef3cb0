//===- OperatorCost.h - per-operator compute/comm/memory --------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Costs of one partitioned operator (Operator.h) on a mesh over a cluster:
// roofline compute per phase (forward F, input gradient B, weight gradient
// G), the collectives its partition implies, PrimePar's temporal primitive,
// re-layout between two partitions of a tensor, and its memory footprint.
// Formulas and their sources: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_OPERATORCOST_H
#define STPAR_COST_OPERATORCOST_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/Collectives.h"
#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/Operator.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <vector>

namespace stpar::cost {

/// Achieved fraction of peak, by operator kind and size. Only these
/// coefficients are fitted (bench/calibration, docs/cost-model.md).
struct EfficiencyModel {
  /// GEMM efficiency eta(F) = matmulMax * F / (F + matmulHalfFlops), F the
  /// FLOPs of one local GEMM call: small GEMMs cannot fill the device, large
  /// ones approach matmulMax (a saturating fit, like PrimePar Sec. 4.1's
  /// per-op-kind linear latency fit).
  double matmulMax = 0.72;
  /// FLOPs at which a GEMM reaches half of matmulMax.
  double matmulHalfFlops = 3.98e9;
  /// Fraction of datasheet HBM bandwidth reached by memory-bound kernels.
  double hbmEfficiency = 0.7;
  /// Fixed launch overhead per kernel, seconds.
  double kernelLaunch = 5e-6;
  /// The dtype whose peak the compute is measured against.
  DType dtype = DType::BF16;

  /// eta(F) for a GEMM of `flops` FLOPs (dimensionless, in (0, matmulMax]).
  double getMatMulEfficiency(double flops) const;
};

/// The default, fitted coefficients (docs/cost-model.md, "Calibration").
EfficiencyModel getDefaultEfficiency();

/// Local extent of loop `dim` on one device: ceil(extent / product of the
/// sizes of its mesh axes), further / q for the temporal primitive's M, N, K
/// (q slices each; one slice per step).
int64_t getLocalExtent(const Operator &op, unsigned dim, const Mesh &mesh);

/// Elements of `operand` held by one device (product of the local extents of
/// the loops it indexes). For a temporal operator this is one step's slice.
double getLocalElements(const Operator &op, const Operand &operand,
                        const Mesh &mesh);

/// Roofline of one kernel: seconds = launch + max(flops / (peak * eta),
/// bytes / (hbm bandwidth * hbmEfficiency)); eta from the GEMM curve for
/// MatMul, 1 otherwise (memory-bound kinds are bandwidth-limited).
double getRooflineTime(OpKind kind, double flops, double bytes,
                       const Cluster &cluster, const EfficiencyModel &eff);

/// The temporal primitive's time beyond its compute, seconds: ring
/// transfers not hidden behind the step's compute ((q - 1) x max(0, step
/// transfer - step compute)), the transfers' start-ups ((q - 1) x
/// start-up), and the
/// alignments around the paper's steps (input skew into step 0, dI and dW
/// back to the blocked layout, G's diagonal dW re-layout; not overlapped).
struct RingOverhead {
  double exposed = 0, startup = 0, alignment = 0;
  double getTotal() const { return exposed + startup + alignment; }
  RingOverhead &operator+=(const RingOverhead &o) {
    exposed += o.exposed;
    startup += o.startup;
    alignment += o.alignment;
    return *this;
  }
  RingOverhead scaled(double k) const {
    return {exposed * k, startup * k, alignment * k};
  }
};

/// The phase of a micro-batch's step a communication belongs to
/// (PrimePar's F, B and G).
enum class Phase { Forward, InputGrad, WeightGrad };

/// "forward", "input_grad", "weight_grad" (the names of `stp.phase` in a
/// training step, docs/training.md).
llvm::StringRef getPhaseName(Phase phase);

/// One communication the cost model charges, per micro-batch on one device:
/// what the partitioned program must issue for the plan's time to hold.
/// `stpar compile --check-plan` compares these, summed per operator and
/// phase, with the collectives of the program (docs/plan-format.md,
/// "communication").
struct Communication {
  Phase phase = Phase::Forward;
  Collective kind = Collective::AllReduce;
  /// Mesh axes of the group; one collective over the product of their
  /// sizes (a diagonal point-to-point names both axes of its square).
  std::vector<unsigned> axes;
  /// Buffer size S as Collectives.h defines it per kind, bytes.
  double bytes = 0;
  /// Bytes per element of the tensor moved (bytes / elementBytes elements).
  int64_t elementBytes = 2;
  /// Times it is issued per micro-batch.
  double count = 1;
  /// Whether `bytes` is one micro-batch's share of the batch (activations
  /// and their gradients); false for what does not depend on the batch
  /// (the temporal primitive's moves of W and dW), which a program that
  /// runs the whole batch at once issues once, not once per micro-batch.
  bool perMicroBatch = true;
  /// What it moves, in words ("partial sums of the output").
  std::string what;
  /// The operand whose gradient it reduces (the input-gradient
  /// all-reduces), else -1.
  int operand = -1;
};

/// Bytes one device sends for `c`, taken as one collective over the group
/// of its axes: getRingVolume of its kind, S and group size (the product
/// of its axes' sizes; a point-to-point sends S), times its count. For
/// all-gather and reduce-scatter this does not depend on how the
/// collective is decomposed over the axes (over a then b sends the same
/// (ab-1)/ab S); an all-reduce over a x b sends 2 (ab-1)/ab S, while the
/// time model (getMultiAxisCollectiveTime) still charges one all-reduce of
/// S per axis, 2 (a-1)/a S + 2 (b-1)/b S (more; docs/cost-model.md).
double getSentBytes(const Communication &c, const Mesh &mesh);

/// Costs of one operator for one micro-batch on one device (seconds, bytes,
/// FLOPs).
struct OperatorCost {
  /// Local FLOPs of F, B, G on one device.
  double forwardFlops = 0, backwardInputFlops = 0, backwardWeightFlops = 0;
  /// Compute seconds of F, B, G (temporal ops: including the overlapped ring
  /// transfers, (q - 1) * (max(step compute, step transfer) + start-up) +
  /// step compute, and the alignments).
  double forward = 0, backwardInput = 0, backwardWeight = 0;
  /// Temporal ops: the part of forward + backwardInput + backwardWeight that
  /// is not compute (RingOverhead), all phases and F's share (charged again
  /// when recomputing); zero for other ops. For the breakdown of a plan's
  /// time (search::PlanCost), not a separate charge.
  RingOverhead ring, forwardRing;
  /// Seconds of the collectives the partition implies (not overlapped):
  /// forward partial-sum all-reduces, backward input-gradient all-reduces,
  /// statistics all-reduces of split softmax/norm.
  double forwardComm = 0, backwardComm = 0;
  /// The communications behind forwardComm, backwardComm and the temporal
  /// primitive's transfers and alignments (in F, B and G), as charged.
  std::vector<Communication> communication;
  /// Bytes of this op's parameters on one device (unique per operand).
  double parameterBytes = 0;
  /// Activation bytes stashed from F for B/G on one device.
  double stashBytes = 0;
  /// Transient working set beyond stashes (output buffer, temporal double
  /// buffers), bytes.
  double transientBytes = 0;
  /// OpKind::MoE: what FasterMoE's model chose and predicts (MoE.h).
  struct MoEChoice {
    /// Workers of the expert-parallel group (the expert loop's axes).
    int64_t expertParallel = 1;
    bool hierarchical = false;
    /// Smart scheduling's group size; 0 = not scheduled.
    int64_t groupSize = 0;
    /// Shadowed experts, by index.
    std::vector<int64_t> shadowed;
    /// Tokens the most loaded worker computes, tokens dropped by the
    /// capacity (one micro-batch of the group), bytes on the busiest
    /// NVLink port and node network of one dispatch.
    double maxWorkerTokens = 0, droppedTokens = 0;
    double intraNodeLinkBytes = 0, interNodeLinkBytes = 0;
    /// Token slots each expert processes (one micro-batch of the group).
    std::vector<double> expertTokens;
  };
  std::optional<MoEChoice> moe;
};

/// One parameter's gradient synchronization: `bytes` of local gradient,
/// replicated over the mesh axes `axes` (those splitting loops it does not
/// index; the data-parallel axes of the parameter).
struct GradientSync {
  std::string parameter;
  double bytes = 0;
  std::vector<unsigned> axes;
};

/// Costs `op` (see OperatorCost). Fails when axes are out of range or the
/// temporal primitive is malformed (non-square, wrong loop kinds).
///
/// OpKind::MoE (FasterMoE's model, MoE.h; docs/cost-model.md "Mixture of
/// Experts"): the expert-parallel group is the expert loop's axes (each
/// must split a token loop); the group's tokens are the device's tokens
/// times its size. Of the optimizations its MoESpec allows, the
/// combination with the lowest layer time is used (hierarchical or flat
/// all-to-all; greedy shadowing; smart scheduling's group size) and
/// reported in OperatorCost::moe. forward / backwardInput / backwardWeight
/// are the experts' compute on the most loaded worker (plus the router's
/// GEMM and, in forward, the shadowed experts' weight broadcast and
/// gradient reduce); forwardComm / backwardComm the all-to-all time not
/// hidden by smart scheduling. Stashed: the input, the dispatched tokens
/// and the experts' F-wide activations of the most loaded worker;
/// transient: the dispatch and combine buffers, the output and the copies
/// of shadowed experts' weights and gradients. The router's weights are not
/// counted.
llvm::Expected<OperatorCost> costOperator(const Operator &op, const Mesh &mesh,
                                          const Cluster &cluster,
                                          const EfficiencyModel &eff);

/// The gradient synchronizations of `op`'s parameters, excluding
/// `ignoredAxis` (e.g. the pipeline axis, which splits no loop).
std::vector<GradientSync>
getGradientSyncs(const Operator &op, const Mesh &mesh,
                 std::optional<unsigned> ignoredAxis = std::nullopt);

/// Time of one collective along each axis of `axes` in turn (bytes constant),
/// seconds.
double getMultiAxisCollectiveTime(Collective kind, double bytes,
                                  const std::vector<unsigned> &axes,
                                  const Mesh &mesh, const Cluster &cluster);

/// One step of the temporal primitive, seconds: compute and ring transfer of
/// one step, and the per-step start-up (latency of the slowest link the
/// shifts cross).
struct TemporalStepCost {
  double compute = 0;
  double transfer = 0;
  double startup = 0;
  /// max(compute, transfer) + startup (../shared/DESIGN.md "Cost model",
  /// overlap; PrimePar Eq. 7).
  double getStepTime() const;
};

//===----------------------------------------------------------------------===//
// Re-layout
//===----------------------------------------------------------------------===//

/// A tensor's layout over the mesh: which axes split each dim (major first)
/// and which axes hold pending partial sums.
struct TensorLayout {
  std::vector<int64_t> shape;
  std::vector<std::vector<unsigned>> dimAxes;
  std::vector<unsigned> partialAxes;
  int64_t elementBytes = 2;
};

/// One collective of a re-layout.
struct RelayoutStep {
  Collective kind = Collective::AllGather;
  unsigned axis = 0;
  /// Buffer size S passed to the collective (Collectives.h), bytes.
  double bytes = 0;
  double seconds = 0;
};

/// The collectives delivering `to` from `from`, and the bytes each device
/// receives (missing bytes).
struct RelayoutCost {
  std::vector<RelayoutStep> steps;
  double seconds = 0;
  double receivedBytes = 0;
};

/// How a tensor uses one mesh axis: replicated over it, split on dim `dim`,
/// or holding partial sums.
struct AxisUse {
  enum class State : uint8_t { Replicated, Split, Partial };
  State state = State::Replicated;
  unsigned dim = 0;
};

/// getRelayoutCost on per-axis uses (one entry per mesh axis), without
/// building TensorLayouts: `localBytes` is the tensor's bytes per device
/// under `from`, `placements[a]` the placement of mesh axis a
/// (Mesh::getPlacement). Returns the seconds; fills `cost` (steps, received
/// bytes) when given. The search's re-layout tables call this directly.
double getRelayoutSeconds(llvm::ArrayRef<AxisUse> from,
                          llvm::ArrayRef<AxisUse> to, double localBytes,
                          const Mesh &mesh,
                          llvm::ArrayRef<AxisPlacement> placements,
                          const Cluster &cluster, RelayoutCost *cost = nullptr);

/// The collectives -stp-partition issues (docs/partition.md, "Re-layout"),
/// the axes on one dim taken major first in ascending axis order: partial
/// sums reduce-scattered when the wanted split of one dim is the current
/// one with the partial axes appended, else all-reduced; per dim, the axes
/// after the common prefix of the current and the wanted list dropped, by
/// all-to-all when another dim wants exactly them appended, else by
/// all-gather; then the axes still wanted added by a local slice (free).
/// One step per axis (a group's collective as consecutive steps whose ring
/// volumes add up to the group's). `to` must not have partial axes.
llvm::Expected<RelayoutCost> getRelayoutCost(const TensorLayout &from,
                                             const TensorLayout &to,
                                             const Mesh &mesh,
                                             const Cluster &cluster);

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// Bytes per device of model states under mixed-precision Adam with ZeRO
/// (Rajbhandari et al., SC'20, Sec. 5, Fig. 1; ../shared/DESIGN.md): per
/// parameter 2 (fp16 weight) + 2 (fp16 grad) + 12 (fp32 master, momentum,
/// variance). With N_d ranks: stage 0 16 psi; 1: 4 psi + 12 psi / N_d;
/// 2: 2 psi + 14 psi / N_d; 3: 16 psi / N_d.
struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer = 0;
  double getTotal() const { return parameters + gradients + optimizer; }
};
ModelStateBytes getModelStateBytes(double parameterCount, int64_t dpRanks,
                                   int zeroStage);

} // namespace stpar::cost

#endif // STPAR_COST_OPERATORCOST_H
