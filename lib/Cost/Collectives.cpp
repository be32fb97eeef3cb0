//===- Collectives.cpp - alpha-beta cost of collectives ---------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Ring volumes and hierarchical composition; formulas in Collectives.h.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Collectives.h"

namespace stpar::cost {

llvm::StringRef getCollectiveName(Collective kind) {
  switch (kind) {
  case Collective::AllReduce:
    return "all-reduce";
  case Collective::AllGather:
    return "all-gather";
  case Collective::ReduceScatter:
    return "reduce-scatter";
  case Collective::AllToAll:
    return "all-to-all";
  case Collective::RingShift:
    return "ring-shift";
  case Collective::PointToPoint:
    return "point-to-point";
  case Collective::Broadcast:
    return "broadcast";
  case Collective::Reduce:
    return "reduce";
  }
  return "?";
}

double getRingVolume(Collective kind, double bytes, int64_t p) {
  if (p <= 1)
    return 0;
  double frac = double(p - 1) / double(p);
  switch (kind) {
  case Collective::AllReduce:
    return 2 * frac * bytes;
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    return frac * bytes;
  case Collective::RingShift:
  case Collective::PointToPoint:
  case Collective::Broadcast:
  case Collective::Reduce:
    return bytes;
  }
  return 0;
}

int64_t getRingSteps(Collective kind, int64_t p) {
  if (p <= 1)
    return 0;
  switch (kind) {
  case Collective::AllReduce:
    return 2 * (p - 1);
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
  case Collective::Broadcast:
  case Collective::Reduce:
    return p - 1;
  case Collective::RingShift:
  case Collective::PointToPoint:
    return 1;
  }
  return 0;
}

double getFlatCollectiveTime(Collective kind, double bytes, int64_t p,
                             const LinkSpec &link) {
  if (p <= 1 || bytes <= 0)
    return 0;
  return double(getRingSteps(kind, p)) * link.latency +
         getRingVolume(kind, bytes, p) / link.bandwidth;
}

double getCollectiveTime(Collective kind, double bytes, const AxisPlacement &pl,
                         const Cluster &c) {
  int64_t a = pl.intraNodeSize, n = pl.interNodeSize;
  if (a * n <= 1 || bytes <= 0)
    return 0;
  if (!pl.regular)
    return getFlatCollectiveTime(kind, bytes, a * n, c.interNode);
  if (n == 1)
    return getFlatCollectiveTime(kind, bytes, a, c.intraNode);
  if (a == 1)
    return getFlatCollectiveTime(kind, bytes, n, c.interNode);
  const LinkSpec &in = c.intraNode, &out = c.interNode;
  double shard = bytes / double(a);
  switch (kind) {
  case Collective::AllReduce:
    return getFlatCollectiveTime(Collective::ReduceScatter, bytes, a, in) +
           getFlatCollectiveTime(Collective::AllReduce, shard, n, out) +
           getFlatCollectiveTime(Collective::AllGather, bytes, a, in);
  case Collective::AllGather:
    return getFlatCollectiveTime(Collective::AllGather, shard, n, out) +
           getFlatCollectiveTime(Collective::AllGather, bytes, a, in);
  case Collective::ReduceScatter:
    return getFlatCollectiveTime(Collective::ReduceScatter, bytes, a, in) +
           getFlatCollectiveTime(Collective::ReduceScatter, shard, n, out);
  case Collective::AllToAll:
    return double(a - 1) * in.latency +
           bytes * double(a - 1) / double(a * n) / in.bandwidth +
           double(n - 1) * out.latency +
           bytes * double(n - 1) / double(n) / out.bandwidth;
  case Collective::RingShift:
  case Collective::PointToPoint:
    return out.latency + bytes / out.bandwidth;
  case Collective::Broadcast:
  case Collective::Reduce:
    return getFlatCollectiveTime(kind, bytes, a * n, out);
  }
  return 0;
}

} // namespace stpar::cost
