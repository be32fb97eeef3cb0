//===- stpar_grid.h - the device grid of emitted programs -------*- C++ -*-===//
//
// Part of stpar. Copied next to every program `stpar emit` writes.
// The grid geometry both runtimes share: this device's coordinates, its
// groups over grid axes (as `shard` numbers them: major axis first) and the
// world ranks of its peers in ring shifts and grid permutations
// (docs/spmd-ir.md, docs/emitted-code.md).
//
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_GRID_H
#define STPAR_RUNTIME_GRID_H

#include "stpar_io.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace stpar_rt {

/// The grid shape and this device's coordinates on it. World rank =
/// row-major linear index of the coordinates (last axis fastest).
struct Grid {
  explicit Grid(Shape shape) : gridShape(std::move(shape)) {}

  /// Places this device: its coordinates from its world rank.
  void place(int rank) {
    coords.assign(gridShape.size(), 0);
    int64_t r = rank;
    for (size_t a = gridShape.size(); a-- > 0;) {
      coords[a] = r % gridShape[a];
      r /= gridShape[a];
    }
  }
  /// Linear index of this device among the group over `axes` (major
  /// first): the block it holds of a dim split over `axes`.
  int64_t groupIndex(const Shape &axes) const {
    int64_t index = 0;
    for (int64_t a : axes)
      index = index * gridShape[a] + coords[a];
    return index;
  }
  int64_t groupSize(const Shape &axes) const {
    int64_t n = 1;
    for (int64_t a : axes)
      n *= gridShape[a];
    return n;
  }
  /// Which group over `axes` this device is in: the linear index of its
  /// coordinates on the other axes (the color of a communicator split).
  int64_t groupColor(const Shape &axes) const {
    int64_t color = 0;
    for (size_t a = 0; a < gridShape.size(); ++a)
      if (std::find(axes.begin(), axes.end(), int64_t(a)) == axes.end())
        color = color * gridShape[a] + coords[a];
    return color;
  }
  /// World rank of the device at `coords` with axis `axis` moved by
  /// `offset` (ring); -1 when it falls off a non-rotating grid.
  int neighbor(int64_t axis, int64_t offset, bool rotate) const {
    Shape c = coords;
    int64_t n = gridShape[axis];
    c[axis] += offset;
    if (c[axis] < 0 || c[axis] >= n) {
      if (!rotate)
        return -1;
      c[axis] = ((c[axis] % n) + n) % n;
    }
    return rankOf(c);
  }
  /// World rank of the device whose coordinates equal this device's except
  /// on `axes`, where they spell group index `index` (major first).
  int groupMember(const Shape &axes, int64_t index) const {
    Shape c = coords;
    for (size_t i = axes.size(); i-- > 0;) {
      c[axes[i]] = index % gridShape[axes[i]];
      index /= gridShape[axes[i]];
    }
    return rankOf(c);
  }
  /// The peers of stp.grid_permute: the world ranks this device receives
  /// from (`sources[me]`) and sends to (the j with sources[j] == me).
  std::pair<int, int> permutePeers(const Shape &axes,
                                   const Shape &sources) const {
    int64_t me = groupIndex(axes);
    if (static_cast<int64_t>(sources.size()) != groupSize(axes))
      fatal("gridPermute: " + std::to_string(sources.size()) +
            " sources for a group of " + std::to_string(groupSize(axes)));
    int64_t to = -1;
    for (size_t j = 0; j < sources.size(); ++j)
      if (sources[j] == me)
        to = static_cast<int64_t>(j);
    if (to < 0)
      fatal("gridPermute: sources is not a permutation");
    return {groupMember(axes, sources[me]), groupMember(axes, to)};
  }

  Shape gridShape, coords;

private:
  int rankOf(const Shape &c) const {
    int64_t r = 0;
    for (size_t a = 0; a < gridShape.size(); ++a)
      r = r * gridShape[a] + c[a];
    return static_cast<int>(r);
  }
};

} // namespace stpar_rt

#endif // STPAR_RUNTIME_GRID_H
