//===- STPAttrs.td - stp attributes ------------------------*- tablegen -*-===//
//
// Part of stpar. Cluster, mesh and partition-spec attributes.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPATTRS_TD
#define STPAR_DIALECT_STP_IR_STPATTRS_TD

include "stpar/Dialect/STP/IR/STPBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

// A 64-bit float written as a plain number (`3.0e11`, `100`).
def STP_F64Parameter
    : AttrOrTypeParameter<"::stpar::stp::F64Value", "64-bit float"> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::stpar::stp::F64Value> {
    double value = 0;
    if (::stpar::stp::parseNumber($_parser, value))
      return ::mlir::failure();
    return ::stpar::stp::F64Value(value);
  }() }];
  let printer = [{ $_printer << $_self.getValue() }];
}

// An optional 64-bit float: omitted in the syntax when absent.
def STP_OptionalF64Parameter
    : OptionalParameter<"::std::optional<::stpar::stp::F64Value>",
                        "optional 64-bit float"> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::std::optional<::stpar::stp::F64Value>> {
    double value = 0;
    if (::stpar::stp::parseNumber($_parser, value))
      return ::mlir::failure();
    return ::std::optional<::stpar::stp::F64Value>(::stpar::stp::F64Value(value));
  }() }];
  let printer = [{ $_printer << $_self->getValue() }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def STP_LoopKind : I32EnumAttr<"LoopKind", "kind of a loop dimension", [
    I32EnumAttrCase<"Parallel", 0, "parallel">,
    I32EnumAttrCase<"Reduction", 1, "reduction">,
    I32EnumAttrCase<"Experts", 2, "experts">
  ]> {
  let cppNamespace = "::stpar::stp";
  let genSpecializedAttr = 0;
}

def STP_DataLocation : I32EnumAttr<"DataLocation",
    "where a parameter's values live", [
    I32EnumAttrCase<"Embedded", 0, "embedded">,
    I32EnumAttrCase<"External", 1, "external">,
    I32EnumAttrCase<"Absent", 2, "absent">
  ]> {
  let cppNamespace = "::stpar::stp";
  let genSpecializedAttr = 0;
}

class STP_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<STP_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Hardware: device, link, cluster
//===----------------------------------------------------------------------===//

def STP_DeviceAttr : STP_Attr<"Device", "device"> {
  let summary = "One accelerator: peak FLOP/s per dtype, HBM capacity and bandwidth";
  let description = [{
    The figures the cost model needs of one device, from its datasheet.

    | parameter | unit | meaning |
    | --- | --- | --- |
    | `fp32` | FLOP/s | peak dense fp32 throughput (required) |
    | `tf32` | FLOP/s | peak dense TF32 tensor-core throughput (omit if the device has none, e.g. V100) |
    | `fp16` | FLOP/s | peak dense fp16 tensor-core throughput (omit if none) |
    | `bf16` | FLOP/s | peak dense bf16 tensor-core throughput (omit if none, e.g. V100) |
    | `hbm_capacity` | bytes | device memory capacity |
    | `hbm_bandwidth` | bytes/s | device memory bandwidth |

    Every figure given must be positive; an absent peak means the device has
    no math for that dtype.

    Example (NVIDIA A100-SXM4-80GB datasheet, dense figures):

    ```mlir
    #a100 = #stp.device<fp32 = 1.95e13, tf32 = 1.56e14, fp16 = 3.12e14,
                        bf16 = 3.12e14, hbm_capacity = 85899345920,
                        hbm_bandwidth = 2.039e12>
    ```
  }];
  let parameters = (ins
    STP_F64Parameter:$fp32,
    STP_OptionalF64Parameter:$tf32,
    STP_OptionalF64Parameter:$fp16,
    STP_OptionalF64Parameter:$bf16,
    "int64_t":$hbm_capacity,
    STP_F64Parameter:$hbm_bandwidth
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def STP_LinkAttr : STP_Attr<"Link", "link"> {
  let summary = "One level of the interconnect: bandwidth and latency";
  let description = [{
    A link level as the collective cost formulas see it (alpha-beta model):
    moving `S` bytes costs `latency + S / bandwidth` seconds.

    | parameter | unit | meaning |
    | --- | --- | --- |
    | `bandwidth` | bytes/s | per-device bandwidth on this level, one direction (positive) |
    | `latency` | s | start-up time of one transfer (non-negative) |

    Example (NVLink 2 on a V100-SXM2 node: 6 links of 25 GB/s per direction,
    150 GB/s one way per GPU):

    ```mlir
    #nvlink = #stp.link<bandwidth = 1.5e11, latency = 5.0e-6>
    ```
  }];
  let parameters = (ins
    STP_F64Parameter:$bandwidth,
    STP_F64Parameter:$latency
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def STP_ClusterAttr : STP_Attr<"Cluster", "cluster"> {
  let summary = "A GPU cluster: nodes x devices per node, device and link figures";
  let description = [{
    A homogeneous cluster of `nodes` nodes with `devices_per_node` devices
    each. Devices are numbered `node * devices_per_node + local` (so ids
    inside one node are consecutive). Transfers between devices of one node
    use `intra_node`; transfers between nodes use `inter_node`.

    | parameter | meaning |
    | --- | --- |
    | `name` | optional: the preset or file it came from |
    | `nodes` | number of nodes (>= 1) |
    | `devices_per_node` | devices per node (>= 1) |
    | `device` | a `#stp.device` |
    | `intra_node` | a `#stp.link` (NVLink/NVSwitch) |
    | `inter_node` | a `#stp.link` (InfiniBand/Ethernet) |

    Example (PrimePar's testbed: 8 nodes x 4 V100-SXM2-32GB):

    ```mlir
    #v100x32 = #stp.cluster<name = "v100-sxm2-32g-4x8", nodes = 8,
        devices_per_node = 4,
        device = <fp32 = 1.57e13, fp16 = 1.25e14, hbm_capacity = 34359738368,
                  hbm_bandwidth = 9.0e11>,
        intra_node = <bandwidth = 1.5e11, latency = 5.0e-6>,
        inter_node = <bandwidth = 3.125e9, latency = 1.0e-5>>
    ```

    The per-device figures are those `stp::cost::Cluster` derives from the
    hardware (docs/cluster-format.md): here 6 NVLink 2 links of 25 GB/s
    inside a node, and one 100 Gb/s EDR port per node shared by 4 GPUs.
  }];
  let parameters = (ins
    StringRefParameter<"preset or file name", "\"\"">:$name,
    "int64_t":$nodes,
    "int64_t":$devices_per_node,
    "DeviceAttr":$device,
    "LinkAttr":$intra_node,
    "LinkAttr":$inter_node
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Total number of devices: nodes * devices_per_node.
    int64_t getNumDevices() const {
      return getNodes() * getDevicesPerNode();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def STP_AxisAttr : STP_Attr<"Axis", "axis"> {
  let summary = "A named mesh axis and its size";
  let description = [{
    One axis of a `#stp.mesh`: a name unique in its mesh and a size (>= 1).

    ```mlir
    #tp = #stp.axis<"tp" = 8>
    ```
  }];
  let parameters = (ins "::mlir::StringAttr":$name, "int64_t":$size);
  let assemblyFormat = "`<` $name `=` $size `>`";
  let genVerifyDecl = 1;
}

def STP_MeshAttr : STP_Attr<"Mesh", "mesh"> {
  let summary = "A logical device mesh of named axes laid over a cluster";
  let description = [{
    A mesh of named axes whose sizes multiply to the number of devices of its
    cluster. Device ids are laid row-major over the axes: the last axis
    varies fastest, so with `devices_per_node = 8` and axes
    `["dp" = 4, "tp" = 8]`, `tp` stays inside a node (NVLink) and `dp`
    crosses nodes (InfiniBand). An axis whose groups span part of a node and
    several nodes is *hierarchical*: its collectives run over both levels.
    `getAxisPlacement` derives this from the sizes; the axis order is the
    placement.

    ```mlir
    #mesh = #stp.mesh<#cluster, ["dp" = 4, "tp" = 8]>
    ```
  }];
  let parameters = (ins
    "ClusterAttr":$cluster,
    ArrayRefParameter<"AxisAttr", "mesh axes, major to minor">:$axes
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Index of the axis called `name`, or std::nullopt.
    std::optional<unsigned> findAxis(::llvm::StringRef name) const;
    /// Size of the axis called `name`; the axis must exist.
    int64_t getAxisSize(::llvm::StringRef name) const;
    /// Product of all axis sizes (= the cluster's device count once verified).
    int64_t getNumDevices() const;
    /// Distance in device ids between neighbours along axis `index`: the
    /// product of the sizes of the axes after it.
    int64_t getAxisStride(unsigned index) const;
    /// Which link levels the groups of axis `index` cross.
    AxisPlacement getAxisPlacement(unsigned index) const;
  }];
}

//===----------------------------------------------------------------------===//
// Partition spec
//===----------------------------------------------------------------------===//

def STP_LoopDimAttr : STP_Attr<"LoopDim", "loop"> {
  let summary = "One loop dimension of an operator and the mesh axes splitting it";
  let description = [{
    A loop dimension of an operator's iteration space (as linalg indexing
    maps see it): its name, its extent (>= 1), whether it is `parallel`
    (default, omitted in the syntax), a `reduction` or the `experts` loop
    of a mixture-of-experts layer, the mesh axes that split it in space
    (major to minor, in braces, omitted when none), and whether a split
    that does not divide the extent pads it up to the next multiple
    (`padded`). An `experts` loop's axes are expert parallelism: they also
    split a token loop of the same spec (each rank of the group holds its
    share of the experts and receives their tokens by all-to-all), so a
    partition spec may name them twice.

    ```mlir
    #k = #stp.loop<"k" = 4096 {"tp"}>
    #n = #stp.loop<"n" = 1000 reduction {"tp"} padded>
    #e = #stp.loop<"e" = 8 experts {"dp"}>
    ```
  }];
  let parameters = (ins
    "::mlir::StringAttr":$name,
    "int64_t":$extent,
    "LoopKind":$kind,
    ArrayRefParameter<"::mlir::StringAttr", "splitting mesh axes">:$split,
    "bool":$padded
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isReduction() const { return getKind() == LoopKind::Reduction; }
    bool isExperts() const { return getKind() == LoopKind::Experts; }
  }];
}

def STP_TemporalAttr : STP_Attr<"Temporal", "temporal"> {
  let summary = "PrimePar's spatial-temporal primitive on a square device grid";
  let description = [{
    PrimePar's temporal primitive (Wang et al., ASPLOS'24, Section 4) applied
    to a matmul-like operator `O[M, K] = sum_N I[M, N] * W[N, K]`: two mesh
    axes of equal size `q` form a `q x q` grid (`row` indexed by `r`, `col`
    by `c`), each of the three dims `M`, `N`, `K` is cut into `q` slices, and
    device `(r, c)` runs `steps = q` sequential steps `t = 0 .. q-1`.

    `matmul` names the operator's loop dims playing `M`, `N` (the reduced
    dim) and `K`. Each phase has a slice-index rule: an affine map
    `(r, c, t)[d] -> (M-slice, N-slice, K-slice)`, taken modulo `q`, where the
    symbol `d` is 1 at the last step and 0 otherwise:

    | phase | computes | PrimePar's rule |
    | --- | --- | --- |
    | `forward` | `O = I * W` | `(r, r + c + t, c)` |
    | `input_grad` | `dI = dO * W^T` | `(r, r + c - 1, c + t)` |
    | `weight_grad` | `dW = I^T * dO` | `(r + t, r + c - 1 + d, c - 1 + d)` |

    The verifier of the enclosing `#stp.spec` checks each rule is a valid
    schedule: over all devices and steps every `(M, N, K)` block product is
    computed exactly once, and at each step no operand slice is held by two
    devices (nothing is replicated).

    ```mlir
    #t = #stp.temporal<grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2,
           forward = (d0, d1, d2)[s0] -> (d0, d0 + d1 + d2, d1),
           input_grad = (d0, d1, d2)[s0] -> (d0, d0 + d1 - 1, d1 + d2),
           weight_grad = (d0, d1, d2)[s0] -> (d0 + d2, d0 + d1 + s0 - 1, d1 + s0 - 1)>
    ```
  }];
  let parameters = (ins
    "::mlir::StringAttr":$row_axis,
    "::mlir::StringAttr":$col_axis,
    "::mlir::StringAttr":$m,
    "::mlir::StringAttr":$n,
    "::mlir::StringAttr":$k,
    "int64_t":$steps,
    "::mlir::AffineMap":$forward,
    "::mlir::AffineMap":$input_grad,
    "::mlir::AffineMap":$weight_grad
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$rowAxis, "::llvm::StringRef":$colAxis,
                     "::llvm::StringRef":$m, "::llvm::StringRef":$n,
                     "::llvm::StringRef":$k, "int64_t":$steps)>
  ];
  let extraClassDeclaration = [{
    /// The slice-index rule of `phase`.
    ::mlir::AffineMap getRule(Phase phase) const;
  }];
}

def STP_PartitionSpecAttr : STP_Attr<"PartitionSpec", "spec"> {
  let summary = "The partition of one operator over a mesh, in space and time";
  let description = [{
    How one operator is partitioned: its loop dimensions (each with the mesh
    axes splitting it in space) and, optionally, PrimePar's temporal
    primitive on two further mesh axes.

    Rules (Wang et al., ASPLOS'24, Section 3; ../shared/DESIGN.md): a mesh
    axis on a parallel dim splits the output; one on a reduction dim leaves
    partial sums (an all-reduce or reduce-scatter follows); operands that do
    not index a split dim are replicated along that axis. Mesh axes not used
    by the spec replicate the whole operator.

    The verifier rejects: unknown mesh axes, an axis used twice (in splits or
    the temporal grid), duplicate loop names, a split (times `q` for the
    temporal dims) that does not divide the extent unless the loop is
    `padded`, a temporal grid that is not square, `steps` other than `q`,
    temporal `matmul` dims that are missing or of the wrong kind, and slice
    rules that compute a block twice or replicate an operand slice.

    ```mlir
    // Megatron column-parallel linear layer, data-parallel batch.
    #col = #stp.spec<#mesh, loops = ["b" = 8 {"dp"}, "m" = 2048,
                                     "k" = 4096 {"tp"}, "n" = 1024 reduction]>
    ```
  }];
  let parameters = (ins
    "MeshAttr":$mesh,
    ArrayRefParameter<"LoopDimAttr", "loop dimensions">:$loops,
    OptionalParameter<"TemporalAttr">:$temporal
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The loop dim called `name`, or a null attribute.
    LoopDimAttr findLoop(::llvm::StringRef name) const;
    /// Number of pieces loop `loop` is cut into on one device's view:
    /// product of its split axes' sizes, times `q` if it is a temporal dim.
    int64_t getNumPieces(LoopDimAttr loop) const;
  }];
}

//===----------------------------------------------------------------------===//
// Parameters of an imported model
//===----------------------------------------------------------------------===//

def STP_ParamAttr : STP_Attr<"Param", "param"> {
  let summary = "A model parameter (ONNX initializer): its name and where its values live";
  let description = [{
    Attached as `stp.param` to a function argument that holds a model
    parameter or buffer (the argument's type gives its shape and dtype). The
    values are never inlined into the IR:

    | `data` | meaning |
    | --- | --- |
    | `embedded` | stored inside the ONNX model file (`raw_data` or typed fields); when those bytes are in the argument's layout (raw data, packed float/double fields), `file` is the model file and `offset`/`length` their byte range in it |
    | `external` | stored in `file` (relative to the model's folder) at byte `offset`, `length` bytes (`length = -1`: to the end of the file) |
    | `absent` | declared external but the file does not exist: planning works, running needs the values |

    The emitted programs read each rank's block of the values in place from
    `file` at `offset` (in the folder given with `--weights`, the model's
    own); compiling never reads them.

    `trainable` marks parameters the optimizer updates (floating-point
    initializers with more than one element); others are buffers (masks,
    index tables).

    ```mlir
    func.func @main(%w: tensor<768x2304xf32> {stp.param = #stp.param<name = "h.0.attn.c_attn.weight",
        data = external, file = "gpt2.data", offset = 4096, length = 7077888, trainable = true>})
    ```
  }];
  let parameters = (ins
    "::mlir::StringAttr":$name,
    EnumParameter<STP_DataLocation>:$data,
    DefaultValuedParameter<"::mlir::StringAttr", "::mlir::StringAttr()">:$file,
    DefaultValuedParameter<"int64_t", "0">:$offset,
    DefaultValuedParameter<"int64_t", "-1">:$length,
    DefaultValuedParameter<"bool", "false">:$trainable
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // STPAR_DIALECT_STP_IR_STPATTRS_TD
