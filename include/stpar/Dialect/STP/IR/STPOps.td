//===- STPOps.td - stp graph ops ---------------------------*- tablegen -*-===//
//
// Part of stpar. Graph-level ops for the units the cost model and the
// partitioner treat as one operator, and for ONNX ops upstream MLIR has no
// op for.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPOPS_TD
#define STPAR_DIALECT_STP_IR_STPOPS_TD

include "stpar/Dialect/STP/IR/STPBase.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "stpar/Dialect/STP/IR/PartitionableOpInterface.td"

class STP_Op<string mnemonic, list<Trait> traits = []>
    : Op<STP_Dialect, mnemonic, traits>;

def STP_LayerNormOp : STP_Op<"layer_norm",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getCostRule"]>,
      DeclareOpInterfaceMethods<STP_NormalizationOpInterface>]> {
  let summary = "Layer normalization over the trailing dims from `axis`";
  let description = [{
    `y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + bias`, with mean
    and (biased) variance over the dims `axis .. rank-1` of `x` (ONNX
    LayerNormalization-17 semantics; Ba et al. 2016). `scale` and the
    optional `bias` have the shape of those normalized dims. All tensors are
    statically shaped floats; the result has the type of `x`.

    One op because the cost model and the partitioner treat it as one unit:
    splitting a normalized dim needs the statistics all-reduced.

    ```mlir
    %y = stp.layer_norm %x, %gamma, %beta {axis = 2 : i64, epsilon = 1.0e-5 : f32}
        : (tensor<8x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x128x768xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$scale,
                       Optional<AnyRankedTensor>:$bias, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_RMSNormOp : STP_Op<"rms_norm",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getCostRule"]>,
      DeclareOpInterfaceMethods<STP_NormalizationOpInterface>]> {
  let summary = "Root-mean-square normalization over the trailing dims from `axis`";
  let description = [{
    `y = x / sqrt(mean(x^2) + epsilon) * scale` with the mean over the dims
    `axis .. rank-1` of `x` (ONNX RMSNormalization-23; Zhang & Sennrich
    2019, as used by Llama). `scale` broadcasts against those dims.

    ```mlir
    %y = stp.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-6 : f32}
        : (tensor<1x8x32xf32>, tensor<32xf32>) -> tensor<1x8x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$scale,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_AttentionOp : STP_Op<"attention",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getCostRule"]>]> {
  let summary = "Scaled dot-product attention with optional mask, causal flag and grouped-query heads";
  let description = [{
    `softmax(Q K^T * scale + mask) V` per batch and head (Vaswani et al.
    2017, Eq. 1). Shapes: `query [B, Hq, Sq, D]`, `key [B, Hkv, Skv, D]`,
    `value [B, Hkv, Skv, Dv]`, result `[B, Hq, Sq, Dv]`; `Hq` must be a
    multiple of `Hkv` (grouped-query attention: query head `h` uses key/value
    head `h / (Hq / Hkv)`). The optional additive `mask` broadcasts to
    `[B, Hq, Sq, Skv]`. With `causal`, position `i` attends to key positions
    `j <= i + (Skv - Sq)` only. `scale` defaults to `1/sqrt(D)`.

    One op because the partitioner splits it by batch and heads (never along
    `D`) and the cost model counts its two matmuls and softmax together.

    ```mlir
    %o = stp.attention %q, %k, %v {scale = 0.125 : f32, causal}
        : (tensor<2x12x128x64xf32>, tensor<2x12x128x64xf32>, tensor<2x12x128x64xf32>)
        -> tensor<2x12x128x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                       AnyRankedTensor:$value, Optional<AnyRankedTensor>:$mask,
                       F32Attr:$scale, UnitAttr:$causal);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_TopKOp : STP_Op<"topk",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getLayoutRule", "getCostRule"]>]> {
  let summary = "The k largest (or smallest) elements along an axis and their indices";
  let description = [{
    ONNX TopK-11 semantics: along `axis`, returns the `k` largest
    (`largest = true`) or smallest elements, sorted when `sorted` is set
    (ties broken by the lower index), and their int64 indices. Result shapes
    equal the input shape with dim `axis` replaced by `k`.

    ```mlir
    %values, %indices = stp.topk %logits {axis = 1 : i64, k = 2 : i64, largest = true, sorted = true}
        : (tensor<16x8xf32>) -> (tensor<16x2xf32>, tensor<16x2xi64>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis, I64Attr:$k,
                       BoolAttr:$largest, BoolAttr:$sorted);
  let results = (outs AnyRankedTensor:$values, AnyRankedTensor:$indices);
  let assemblyFormat = [{
    $input attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_ScatterElementsOp : STP_Op<"scatter_elements",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getLayoutRule", "getCostRule"]>]> {
  let summary = "ONNX ScatterElements: write updates at per-element indices along an axis";
  let description = [{
    ONNX ScatterElements-18 semantics: the result is `data` with, for every
    position `p` of `indices`, element `p with p[axis] := indices[p]`
    replaced by `updates[p]` (`reduction = "none"`, the default) or combined
    with it by `add`, `mul`, `max` or `min` (duplicate indices then
    accumulate). `indices` and `updates` have the same shape; negative
    indices count from the end.

    ```mlir
    %r = stp.scatter_elements %zeros, %idx, %vals {axis = 1 : i64}
        : (tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32>) -> tensor<16x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices,
                       AnyRankedTensor:$updates, I64Attr:$axis,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `,` $updates attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_GridPermuteOp : STP_Op<"grid_permute", [SameOperandsAndResultType]> {
  let summary = "Point-to-point permutation of per-device blocks over grid axes";
  let description = [{
    Every device of a group (the devices that differ only in their
    coordinates on `grid_axes`, numbered by those coordinates, major axis
    first, as `shard` numbers a group) sends its `input` block to one device
    of the group and receives the result from one: device `j` receives the
    block of device `sources[j]`. `sources` is a permutation of
    `0 .. n-1`, `n` the group's size. Shapes and element type do not change.

    This is the transfer PrimePar's temporal primitive needs where a single
    ring shift along one axis (`shard.shift`) cannot say it (Wang et al.,
    ASPLOS'24, Section 3.3, Table 1): the diagonal transfers of the input
    and weight gradient phases (receive from `(r-1, c+1)` or `(r+1, c-1)`),
    the redistribution of the partial weight gradient at the last step, and
    the skew between a temporal phase's slice layout and the blocked layout
    the partitioner's other ops use. It lowers to one grouped
    `ncclSend`/`ncclRecv` pair (cuda) or `MPI_Isend`/`MPI_Irecv` (cpu) to
    the computed peers; no device sends more than its own block, and no
    reduction or copy to several devices takes place (it is not a
    collective in the all-reduce sense).

    ```mlir
    // 2 x 2 grid over axes 0 and 1: (r, c) receives from (r + 1, c - 1).
    %next = stp.grid_permute %w on @grid grid_axes = [0, 1]
        sources = [3, 2, 1, 0] : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$grid,
                       DenseI16ArrayAttr:$grid_axes,
                       DenseI64ArrayAttr:$sources);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $grid `grid_axes` `=` $grid_axes `sources` `=` $sources
    attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

#endif // STPAR_DIALECT_STP_IR_STPOPS_TD
