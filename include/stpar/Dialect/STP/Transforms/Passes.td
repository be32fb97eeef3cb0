//===- Passes.td - stp dialect passes ----------------------*- tablegen -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD
#define STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintMeshPlacementPass : Pass<"stp-print-mesh-placement"> {
  let summary = "Report the link levels each mesh axis crosses";
  let description = [{
    For every `stp.mesh` attribute on an op, emits one remark per mesh axis
    with its size, its stride in device ids, and the link levels its groups
    cross (`intra-node`, `inter-node`, `hierarchical` with the sizes of
    both parts, or `irregular` when its groups straddle node boundaries
    unevenly, costed as inter-node), as the cost model will see them. The IR is not changed.

    Input:

    ```mlir
    module attributes {stp.mesh = #stp.mesh<#dgx2, ["dp" = 2, "tp" = 8]>} {}
    ```

    Remarks:

    ```
    remark: mesh axis "dp" size 2 stride 8: inter-node (2 nodes)
    remark: mesh axis "tp" size 8 stride 1: intra-node (8 devices)
    ```
  }];
  let statistics = [
    Statistic<"numMeshes", "num-meshes", "Number of meshes reported">
  ];
}

#endif // STPAR_DIALECT_STP_TRANSFORMS_PASSES_TD
