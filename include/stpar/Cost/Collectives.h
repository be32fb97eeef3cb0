//===- Collectives.h - alpha-beta cost of collectives -----------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Time of a collective along one mesh axis. Each link level is an
// alpha-beta link (LinkSpec): a ring step moving s bytes costs
// latency + s / bandwidth. Ring volumes (bytes each device sends, for a
// buffer of S bytes over p devices; Thakur, Rabenseifner, Gropp, "Optimization
// of Collective Communication Operations in MPICH", IJHPCA 2005, Sec. 4; the
// same figures as ../shared/DESIGN.md "Cost model"):
//
//   all-reduce      2 (p-1)/p S   in 2 (p-1) steps
//   all-gather        (p-1)/p S   in   (p-1) steps  (S = gathered output)
//   reduce-scatter    (p-1)/p S   in   (p-1) steps  (S = input)
//   all-to-all        (p-1)/p S   in   (p-1) steps  (S = send buffer)
//   ring shift            S       in 1 step
//   point-to-point        S       in 1 step
//   broadcast, reduce     S       in   (p-1) steps  (a pipelined chain from
//                                                    or to the root; S =
//                                                    the buffer)
//
// An axis that spans a nodes' worth of devices in each of n nodes
// (AxisPlacement) is costed hierarchically, as NCCL's tree/ring hybrids and
// BaGuaLu's supernode-first all-to-all do: all-reduce = reduce-scatter
// inside the node (S) + all-reduce across nodes (S/a) + all-gather inside
// the node (S); all-gather = across nodes (S/a) then inside (S);
// reduce-scatter = inside (S) then across (S/a); all-to-all = the intra-node
// share (a-1)/(a n) S over NVLink plus the inter-node share (n-1)/n S over
// the network; shift, point-to-point, broadcast and reduce use the slowest
// level crossed.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_COLLECTIVES_H
#define STPAR_COST_COLLECTIVES_H

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/Mesh.h"

namespace stpar::cost {

enum class Collective {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  RingShift,
  PointToPoint,
  /// From one root to every device (FasterMoE's shadowed expert weights).
  Broadcast,
  /// Summed onto one root (the shadowed experts' gradients).
  Reduce,
};

llvm::StringRef getCollectiveName(Collective kind);

/// Bytes each device sends in a flat ring collective of `bytes` (S, bytes)
/// over `devices` (p) devices (table in the file comment).
double getRingVolume(Collective kind, double bytes, int64_t devices);

/// Number of sequential ring steps (each paying the link latency once).
int64_t getRingSteps(Collective kind, int64_t devices);

/// Seconds for a flat ring collective over one link level:
/// steps * latency + volume / bandwidth.
double getFlatCollectiveTime(Collective kind, double bytes, int64_t devices,
                             const LinkSpec &link);

/// Seconds for a collective of `bytes` along an axis placed as `placement`
/// on `cluster` (hierarchical when it spans both levels). 0 for size 1.
double getCollectiveTime(Collective kind, double bytes,
                         const AxisPlacement &placement,
                         const Cluster &cluster);

} // namespace stpar::cost

#endif // STPAR_COST_COLLECTIVES_H
