//===- PrintMeshPlacement.cpp - report mesh axes' link levels ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-print-mesh-placement: one remark per axis of every
// `stp.mesh` attribute, saying which link levels the axis crosses.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

namespace stpar::stp {
#define GEN_PASS_DEF_PRINTMESHPLACEMENTPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {
struct PrintMeshPlacementPass
    : public stpar::stp::impl::PrintMeshPlacementPassBase<
          PrintMeshPlacementPass> {
  void runOnOperation() override {
    getOperation()->walk([&](Operation *op) {
      auto mesh = op->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
      if (!mesh)
        return;
      ++numMeshes;
      for (auto [index, axis] : llvm::enumerate(mesh.getAxes())) {
        AxisPlacement placement = mesh.getAxisPlacement(index);
        InFlightDiagnostic remark = op->emitRemark();
        remark << "mesh axis \"" << axis.getName().getValue() << "\" size "
               << axis.getSize() << " stride " << mesh.getAxisStride(index)
               << ": ";
        if (!placement.regular)
          remark << "irregular (groups straddle node boundaries), costed as "
                    "inter-node";
        else if (placement.crossesIntraNode() && placement.crossesInterNode())
          remark << "hierarchical (" << placement.intraNodeSize
                 << " devices per node x " << placement.interNodeSize
                 << " nodes)";
        else if (placement.crossesInterNode())
          remark << "inter-node (" << placement.interNodeSize << " nodes)";
        else if (placement.crossesIntraNode())
          remark << "intra-node (" << placement.intraNodeSize << " devices)";
        else
          remark << "no links (size 1)";
      }
    });
  }
};
} // namespace
