//===- Mesh.h - logical device meshes over a cluster ------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A logical mesh of named axes laid over a cluster, with the same placement
// rule as the `stp` dialect (MeshAttr::getAxisPlacement in
// lib/Dialect/STP/IR/STPAttrs.cpp): devices are numbered row-major over the
// axes, last axis fastest, and device d lives on node d / devices_per_node.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_COST_MESH_H
#define STPAR_COST_MESH_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::cost {

/// Link levels a mesh axis crosses. Every group of devices along the axis
/// has `intraNodeSize` members in each node it touches and touches
/// `interNodeSize` nodes (`intraNodeSize * interNodeSize == size`). An axis
/// whose groups straddle node boundaries unevenly is `regular == false` and
/// costed as fully inter-node.
struct AxisPlacement {
  int64_t intraNodeSize = 1;
  int64_t interNodeSize = 1;
  bool regular = true;

  int64_t getSize() const { return intraNodeSize * interNodeSize; }
  bool crossesIntraNode() const { return intraNodeSize > 1; }
  bool crossesInterNode() const { return interNodeSize > 1; }
  bool operator==(const AxisPlacement &o) const {
    return intraNodeSize == o.intraNodeSize &&
           interNodeSize == o.interNodeSize && regular == o.regular;
  }
};

/// One named mesh axis.
struct MeshAxis {
  std::string name;
  int64_t size = 1;
};

/// A logical mesh: axes in major-to-minor order.
struct Mesh {
  std::vector<MeshAxis> axes;

  /// Product of the axis sizes.
  int64_t getNumDevices() const;
  /// Device-id distance between neighbours along axis `index`: the product
  /// of the sizes of the axes after it.
  int64_t getStride(unsigned index) const;
  /// Index of the axis called `name`, if any.
  std::optional<unsigned> findAxis(llvm::StringRef name) const;
  /// Placement of axis `index` on nodes of `devicesPerNode` devices.
  AxisPlacement getPlacement(unsigned index, int64_t devicesPerNode) const;
};

/// The placement rule for an axis of `size` devices at device-id distance
/// `stride`, on nodes of `devicesPerNode` devices (the stp dialect's rule):
/// - size 1: no links;
/// - stride*size divides devicesPerNode: all inside one node;
/// - devicesPerNode divides stride: one member per node;
/// - stride divides devicesPerNode and devicesPerNode/stride divides size:
///   hierarchical, devicesPerNode/stride members per node;
/// - otherwise irregular, costed as inter-node.
AxisPlacement getAxisPlacement(int64_t size, int64_t stride,
                               int64_t devicesPerNode);

} // namespace stpar::cost

#endif // STPAR_COST_MESH_H
