//===- MoE.h - FasterMoE's performance model of expert parallelism -*- C++
//-*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The cost of one mixture-of-experts layer under expert parallelism (EP):
// E experts placed E/P per worker on an expert-parallel group of P devices,
// each worker holding T/P of the group's T tokens, every token routed to k
// experts. The model is FasterMoE's (He et al., "FasterMoE: Modeling and
// Optimizing Training of Large-Scale Dynamic Pre-Trained Models", PPoPP'22;
// ../shared/DESIGN.md, "Mixture of Experts"):
//
//  - Expert compute (Sec. 3): the maximum over workers of the tokens a
//    worker computes times the FFN's FLOPs per token: the most loaded
//    worker sets the time (load imbalance is the max, not the mean).
//  - All-to-all (Sec. 3): the maximum over directed links of the bytes on
//    that link / the link's bandwidth, plus one start-up per peer.
//  - Training (Sec. 3): 3 x compute (F; B's input and weight gradients) and
//    4 all-to-alls (dispatch and combine in F, their gradients in B).
//  - Dynamic shadowing (Sec. 4.1): a shadowed expert's weights are
//    broadcast to every worker and its gradients reduced back, and its
//    tokens are computed where they are; chosen greedily, most popular
//    expert first, while the modelled layer time drops (the paper's
//    decision, evaluated with this model's terms).
//  - Smart scheduling (Sec. 4.2): the workers form P/g groups of g; in step
//    s each worker exchanges with group (r + s) mod (P/g) only, and the
//    steps run as a three-stage pipeline (send, compute, receive) over the
//    network and the compute units.
//  - Hierarchical all-to-all (BaGuaLu, Ma et al., PPoPP'22; Tutel's 2-D
//    all-to-all, Hwang et al., MLSys'23): an exchange inside
//    each node first (regrouping by destination local rank), then one
//    across nodes between devices of the same local rank: (a-1) + (n-1)
//    start-ups instead of (P-1), larger messages, more NVLink bytes.
//
// Units: bytes, seconds, FLOP. Links are the cluster's LinkSpec levels
// (alpha-beta): a device's NVLink port has `intraNode.bandwidth` per
// direction; the a devices of one group on one node share a * the
// per-device network share `interNode.bandwidth` (every group of the node
// exchanges at the same time, SPMD).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_MOE_H
#define STPAR_COST_MOE_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/Mesh.h"
#include "stpar/Cost/OperatorCost.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace stpar::cost {

/// One MoE layer: E experts, each an FFN of `ffnMatrices` weight matrices
/// of H x F elements (2: GELU MLP; 3: SwiGLU's gate, up and down).
struct MoELayer {
  int64_t experts = 0;
  /// Experts each token is routed to (top-k).
  int64_t topK = 1;
  /// Model dim H and the expert FFN's hidden dim F.
  int64_t hidden = 0, ffnHidden = 0;
  int64_t ffnMatrices = 2;
  /// Tokens of one micro-batch over the whole expert-parallel group (T);
  /// each worker holds T / P of them.
  int64_t tokens = 0;
  /// Bytes per element of the token features on the wire and of the expert
  /// weights and gradients a shadowed expert moves (bf16 = 2).
  double activationBytes = 2, weightBytes = 2, gradientBytes = 2;

  /// Weight elements of one expert: ffnMatrices * H * F.
  double getExpertParams() const;
  /// Forward FLOPs of one token in one expert: 2 * ffnMatrices * H * F.
  double getFlopsPerToken() const;
};

/// How the routed token slots (T * k) spread over the experts: `share[e]`,
/// non-negative, summing to 1. Every worker's tokens follow the same
/// distribution (FasterMoE Sec. 3's input is the global histogram).
struct ExpertLoad {
  std::vector<double> share;
  static ExpertLoad uniform(int64_t experts);
};

/// Parses an expert-load histogram (`--expert-load FILE`): a JSON array of
/// `experts` non-negative numbers (token counts, e.g. measured routing
/// counts, or shares), normalized to sum 1. Errors name `fileName` and say
/// what is wrong (not an array, wrong length, a negative or non-numeric
/// entry, all zero).
llvm::Expected<ExpertLoad> parseExpertLoad(llvm::StringRef text,
                                           int64_t experts,
                                           llvm::StringRef fileName);

/// The expert-parallel choices for one MoE layer.
struct ExpertParallelism {
  /// Workers of the expert group (P; divides E). Worker w = j * a + l sits
  /// on node j, local rank l (a = placement.intraNodeSize); expert e on
  /// worker e / (E / P).
  int64_t size = 1;
  AxisPlacement placement;
  /// GShard / Switch capacity: each worker sends an expert at most
  /// ceil(capacityFactor * (T / P) * k / E) tokens, padded to that many
  /// (fixed buffers: balanced traffic and compute, tokens beyond it
  /// dropped). 0: no drop, buffers sized by the static bound (every local
  /// token to one worker), traffic and compute as routed.
  double capacityFactor = 0;
  /// Two-phase (node first) all-to-all instead of the flat one.
  bool hierarchical = false;
  /// Smart scheduling's group size g (divides P); 0: off (one all-to-all,
  /// then all compute, then one all-to-all).
  int64_t groupSize = 0;
  /// Per expert: shadowed (empty = none).
  std::vector<bool> shadowed;
};

/// The modelled cost of one MoE layer, one micro-batch.
struct MoECost {
  /// Tokens each worker computes in F (received from its experts' senders
  /// plus its own tokens of shadowed experts), and the maximum.
  std::vector<double> workerTokens;
  double maxWorkerTokens = 0;
  /// Token slots processed per expert (after capacity) and dropped by it.
  std::vector<double> expertTokens;
  double droppedTokens = 0;
  /// Receive buffer of the most loaded worker, tokens (the capacity, or
  /// the no-drop static bound).
  double receiveBufferTokens = 0;
  /// Bytes on the busiest directed link of each level in one dispatch
  /// all-to-all (the combine moves the same bytes the other way).
  double intraNodeLinkBytes = 0, interNodeLinkBytes = 0;
  /// Seconds: the expert FFNs' forward on the most loaded worker; one
  /// dispatch and one combine all-to-all (the whole exchange; under smart
  /// scheduling too, for comparison).
  double computeForward = 0, dispatch = 0, combine = 0;
  /// Seconds: broadcasting the shadowed experts' weights and reducing their
  /// gradients (once per step; 0 without shadowing).
  double shadow = 0;
  /// Seconds: F (dispatch, compute, combine; pipelined under smart
  /// scheduling) and B (the gradients' all-to-alls and 2 x compute), and
  /// the layer's training total F + B + shadow.
  double forward = 0, backward = 0, total = 0;
};

/// FasterMoE's model of one MoE layer (file comment). Errors: P does not
/// divide E, g does not divide P, a load of the wrong length, a placement
/// whose size is not P, or non-positive sizes.
llvm::Expected<MoECost> getMoECost(const MoELayer &layer,
                                   const ExpertLoad &load,
                                   const ExpertParallelism &ep,
                                   const Cluster &cluster,
                                   const EfficiencyModel &eff);

/// Seconds of an all-to-all whose worker w sends `bytes[w][v]` bytes to
/// worker v (P x P, P = placement size; the diagonal stays local): the
/// largest bytes / bandwidth over the directed links (each device's NVLink
/// port out and in; each node's network share of the group, out and in)
/// plus the start-ups, (a-1) intra-node and (P-a) inter-node peers flat,
/// or, hierarchical, (a-1) + (n-1) in two phases whose link maxima add.
/// On `intraMax` / `interMax` (when given) the busiest link's bytes per
/// level (the larger phase's when hierarchical).
double getAllToAllTime(const std::vector<std::vector<double>> &bytes,
                       const AxisPlacement &placement, const Cluster &cluster,
                       bool hierarchical, double *intraMax = nullptr,
                       double *interMax = nullptr);

/// FasterMoE's greedy shadowing decision (Sec. 4.1): experts in order of
/// decreasing load are shadowed one more at a time while the layer's
/// modelled total time drops; returns the per-expert choice (`ep.shadowed`
/// ignored). Errors as getMoECost.
llvm::Expected<std::vector<bool>>
chooseShadowedExperts(const MoELayer &layer, const ExpertLoad &load,
                      const ExpertParallelism &ep, const Cluster &cluster,
                      const EfficiencyModel &eff);

/// Smart scheduling's group size (Sec. 4.2), chosen on the cluster's links
/// by the model: of no schedule (0) and every divisor g of P, the one with
/// the lowest modelled total; ties go to no schedule, then to the larger g
/// (fewer steps).
llvm::Expected<int64_t> chooseGroupSize(const MoELayer &layer,
                                        const ExpertLoad &load,
                                        const ExpertParallelism &ep,
                                        const Cluster &cluster,
                                        const EfficiencyModel &eff);

} // namespace stpar::cost

#endif // STPAR_COST_MOE_H
