//===- Cluster.h - GPU cluster descriptions ---------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The hardware the cost model sees: nodes x devices per node, each device's
// peak FLOP/s per dtype, HBM capacity and bandwidth, and two link levels
// (intra-node NVLink/NVSwitch, inter-node InfiniBand) in the alpha-beta
// model. The same figures as `#stp.cluster` (include/stpar/Dialect/STP/IR/
// STPAttrs.td), without MLIR. File format: docs/cluster-format.md.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_CLUSTER_H
#define STPAR_COST_CLUSTER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace stpar::cost {

/// Element types whose peak throughput a device lists.
enum class DType { FP32, TF32, FP16, BF16 };

/// The name used in files and printouts ("fp32", "tf32", "fp16", "bf16").
llvm::StringRef getDTypeName(DType type);

/// One accelerator, from its datasheet (dense, no sparsity).
struct DeviceSpec {
  /// Marketing name, e.g. "NVIDIA A100-SXM4-80GB".
  std::string name;
  /// Peak dense throughput in FLOP/s; 0 means the device has no math for
  /// that dtype (e.g. bf16 on V100). fp32 is required (> 0).
  double fp32 = 0, tf32 = 0, fp16 = 0, bf16 = 0;
  /// HBM capacity in bytes.
  int64_t hbmCapacity = 0;
  /// HBM bandwidth in bytes/s.
  double hbmBandwidth = 0;

  /// Peak FLOP/s for `type` (0 when the device has none).
  double getPeak(DType type) const;
};

/// One interconnect level in the alpha-beta model: moving S bytes between
/// two devices costs `latency + S / bandwidth` seconds.
///
/// `bandwidth` is what one device gets on this level when every device
/// communicates at once (the SPMD case). A cluster can state it directly or
/// describe the hardware, from which it is derived (docs/cluster-format.md):
///  - intra-node: `units` NVLink links per device of `unitBandwidth` bytes/s
///    each per direction; bandwidth = units * unitBandwidth.
///  - inter-node: `units` NICs per node of `unitBandwidth` bytes/s each per
///    direction, shared by the node's devices; bandwidth = units *
///    unitBandwidth / devices per node.
struct LinkSpec {
  /// Per-device bandwidth on this level, one direction, bytes/s.
  double bandwidth = 0;
  /// Start-up time of one transfer, seconds.
  double latency = 0;
  /// Hardware description (0 = not given, `bandwidth` stated directly):
  /// links per device (intra-node) or NICs per node (inter-node).
  int64_t units = 0;
  /// Bandwidth of one link / NIC, one direction, bytes/s.
  double unitBandwidth = 0;
};

/// A homogeneous cluster. Devices are numbered
/// `node * devicesPerNode + local`.
struct Cluster {
  /// The preset name or the file it was read from.
  std::string name;
  int64_t nodes = 0;
  int64_t devicesPerNode = 0;
  DeviceSpec device;
  LinkSpec intraNode;
  LinkSpec interNode;
  /// Where the figures come from (datasheets); printed by `cluster show`.
  std::string source;

  int64_t getNumDevices() const { return nodes * devicesPerNode; }
};

/// Names of the built-in presets, with "-N" meaning "any node count N >= 1"
/// (e.g. "dgx-a100-80g-N" accepts "dgx-a100-80g-4").
std::vector<std::string> getPresetNames();

/// Returns the preset `name` (see getPresetNames()), or an error naming it.
llvm::Expected<Cluster> getPreset(llvm::StringRef name);

/// Parses a cluster from JSON text (schema in docs/cluster-format.md).
/// `fileName` prefixes diagnostics, which name the offending field, e.g.
/// "c.json: field 'inter_node.bandwidth': must be positive".
llvm::Expected<Cluster> parseClusterJSON(llvm::StringRef text,
                                         llvm::StringRef fileName);

/// Validates a cluster's figures (positive counts, bandwidths, capacities;
/// non-negative latencies). The message names the field.
llvm::Error verifyCluster(const Cluster &cluster, llvm::StringRef context);

/// `nameOrFile` is a preset name, or a path to a JSON file when it ends in
/// ".json" or contains a '/'.
llvm::Expected<Cluster> loadCluster(llvm::StringRef nameOrFile);

/// The cluster in the file format of parseClusterJSON (round-trips).
llvm::json::Value toJSON(const Cluster &cluster);

/// A human-readable table of the cluster (units spelled out).
void printCluster(llvm::raw_ostream &os, const Cluster &cluster);

} // namespace stpar::cost

#endif // STPAR_COST_CLUSTER_H
