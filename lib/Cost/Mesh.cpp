//===- Mesh.cpp - logical device meshes over a cluster ----------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The placement rule of the stp dialect, without MLIR.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Mesh.h"

namespace stpar::cost {

int64_t Mesh::getNumDevices() const {
  int64_t n = 1;
  for (const MeshAxis &a : axes)
    n *= a.size;
  return n;
}

int64_t Mesh::getStride(unsigned index) const {
  int64_t stride = 1;
  for (unsigned i = index + 1; i < axes.size(); ++i)
    stride *= axes[i].size;
  return stride;
}

std::optional<unsigned> Mesh::findAxis(llvm::StringRef name) const {
  for (unsigned i = 0; i < axes.size(); ++i)
    if (axes[i].name == name)
      return i;
  return std::nullopt;
}

AxisPlacement Mesh::getPlacement(unsigned index, int64_t devicesPerNode) const {
  return getAxisPlacement(axes[index].size, getStride(index), devicesPerNode);
}

AxisPlacement getAxisPlacement(int64_t size, int64_t stride, int64_t perNode) {
  AxisPlacement placement;
  if (size == 1)
    return placement;
  if (stride * size <= perNode && perNode % (stride * size) == 0) {
    placement.intraNodeSize = size;
  } else if (stride % perNode == 0) {
    placement.interNodeSize = size;
  } else if (perNode % stride == 0 && size % (perNode / stride) == 0) {
    placement.intraNodeSize = perNode / stride;
    placement.interNodeSize = size / placement.intraNodeSize;
  } else {
    placement.interNodeSize = size;
    placement.regular = false;
  }
  return placement;
}

} // namespace stpar::cost
