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

def STP_MoEOp : STP_Op<"moe",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getCostRule"]>]> {
  let summary = "A sparse mixture-of-experts FFN: router, top-k gates, experts, gate-weighted combine";
  let description = [{
    A mixture-of-experts layer as Mixtral, GShard and Switch run it
    (Shazeer et al. 2017; Fedus et al. 2022), over `N` tokens of model dim
    `D`, `E` experts of hidden dim `F`:

    - router: `p = softmax(tokens @ router)` over the `E` experts
      (`router [D, E]`);
    - gates: the `top_k` largest entries of `p` per token and their experts
      (ties: the lower expert index), divided by their sum when
      `normalize` is set;
    - experts: expert `e` maps a token `x` to
      `act(x @ w_in[e]) @ w_out[e]`, or with `w_mul` (a gated FFN, SwiGLU
      when `act` is SiLU) `(act(x @ w_in[e]) * (x @ w_mul[e])) @ w_out[e]`;
      `w_in`, `w_mul`: `[E, D, F]`, `w_out`: `[E, F, D]`;
    - result `[N, D]`: per token, the sum over its `top_k` experts of the
      gate times the expert's output. A token's other experts never see it.

    `activation` is `silu`, `gelu` (erf form), `gelu_tanh` or `relu`. No
    token is dropped: every expert can take every token (a static bound).

    One op because the cost model (FasterMoE's model, docs/cost-model.md)
    and the partitioner treat the layer as one unit: -stp-normalize makes
    it from the dense exported form (every expert on every token, masked by
    scattered gates); -stp-partition expands it into `stp.moe_route`,
    `stp.moe_dispatch`, `stp.moe_experts` and `stp.moe_combine` with the
    all-to-alls of expert parallelism between them (docs/moe.md).

    ```mlir
    %y = stp.moe %x, %router experts %w1 gated %w3 down %w2
        {top_k = 2 : i64, normalize, activation = "silu"}
        : (tensor<16x32xf32>, tensor<32x4xf32>, tensor<4x32x64xf32>,
           tensor<4x32x64xf32>, tensor<4x64x32xf32>) -> tensor<16x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$router,
                       AnyRankedTensor:$w_in, Optional<AnyRankedTensor>:$w_mul,
                       AnyRankedTensor:$w_out, I64Attr:$top_k,
                       UnitAttr:$normalize, StrAttr:$activation);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $router `experts` $w_in (`gated` $w_mul^)? `down` $w_out
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoERouteOp : STP_Op<"moe_route", [Pure]> {
  let summary = "An MoE layer's router: top-k gates and experts of each token";
  let description = [{
    The first part of `stp.moe` on one rank's tokens: `tokens [N, D]`,
    `router [D, E]`; results `gates [N, top_k]` (the top-k softmax
    probabilities in descending order, divided by their sum when
    `normalize`) and `experts [N, top_k]` (i64 expert indices, ties to the
    lower index).
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$router,
                       I64Attr:$top_k, UnitAttr:$normalize);
  let results = (outs AnyRankedTensor:$gates, AnyRankedTensor:$experts);
  let assemblyFormat = [{
    $tokens `,` $router attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEDispatchOp : STP_Op<"moe_dispatch", [Pure]> {
  let summary = "Copy each token into a capacity-bounded buffer row of each of its experts";
  let description = [{
    `tokens [N, D]`, `experts [N, K]` (from `stp.moe_route`). Going
    through the tokens in order and each token's K choices in order, the
    token is copied into the next free row of its expert's block of
    `buffer [E, C, D]` (rows past the expert's count are zero); `counts
    [E, 1]` (i64) holds the rows used per expert and `slots [N, K]` (i64)
    the row each choice took, or -1 where the expert's C rows were full
    (the token is dropped for that expert). With C >= N nothing is dropped.
    The buffer's static shape is the capacity every rank of an expert group
    agrees on before any exchange; the counts travel with it so that
    receivers compute only the used rows. With `weights [N, K]` the row of
    choice j of token n is `weights[n, j] * tokens[n]` (the backward pass
    dispatches the output gradient times the gates this way).
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$experts,
                       Optional<AnyRankedTensor>:$weights);
  let results = (outs AnyRankedTensor:$buffer, AnyRankedTensor:$counts,
                      AnyRankedTensor:$slots);
  let assemblyFormat = [{
    $tokens `,` $experts (`weighted` $weights^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEExpertsOp : STP_Op<"moe_experts", [Pure]> {
  let summary = "Run the local experts' FFNs on their received buffer rows";
  let description = [{
    `buffer [El, S, D]` holds, for each of the `El` local experts, `P`
    segments of `C = S / P` rows (one per sending rank, in rank order);
    `counts [El, P]` (i64) the used rows of each segment. Every used row
    `x` of expert `e` becomes `act(x @ w_in[e]) @ w_out[e]` (times
    `x @ w_mul[e]` before `w_out` when gated, as `stp.moe`); unused rows
    are zero. Weights: `w_in`, `w_mul` `[El, D, Fl]`, `w_out [El, Fl, D]`;
    with `F` split over tensor-parallel axes the result holds partial sums
    over them. With `bf16_operands` (set by -stp-mixed-precision) the
    operands of the three GEMMs (the rows, the weights and the activation)
    are rounded to bf16 and the products accumulate in f32, as for every
    other GEMM of a mixed-precision program.

    `hidden` (none, or `A = x @ w_in[e]` and, gated, `U = x @ w_mul[e]`,
    each `[El, S, Fl]`, zero in unused rows): the pre-activation products
    a training step keeps for `stp.moe_experts_grad`.
  }];
  let arguments = (ins AnyRankedTensor:$buffer, AnyRankedTensor:$counts,
                       AnyRankedTensor:$w_in, Optional<AnyRankedTensor>:$w_mul,
                       AnyRankedTensor:$w_out, StrAttr:$activation,
                       UnitAttr:$bf16_operands);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$hidden);
  let assemblyFormat = [{
    $buffer `,` $counts `experts` $w_in (`gated` $w_mul^)? `down` $w_out
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEGradOp : STP_Op<"moe_grad",
    [Pure, DeclareOpInterfaceMethods<STP_PartitionableOpInterface,
        ["getPartitionRule", "getCostRule"]>]> {
  let summary = "The gradient of an stp.moe layer, routed as its forward pass";
  let description = [{
    The backward pass of `forward` (an `stp.moe` with these `tokens`,
    `router`, `w_in`, `w_mul`, `w_out` and attributes), made by
    -stp-training-step: with `dy [N, D]` the gradient of its result, the
    gradients of the tokens `[N, D]`, the router `[D, E]` and the expert
    weights (`d_w_mul` present exactly when `w_mul` is). Per choice j of
    token n (expert e, gate g, expert output o = FFN_e(x_n)):
    `dg[n, j] = o . dy[n]`; the expert's backward on the row `g dy[n]`;
    the router's through the gates (softmax, top-k, renormalization).
    `forward` ties the op to the forward layer whose routing and exchanged
    rows it reuses.

    -stp-partition expands it like the forward (docs/moe.md, "Training"):
    `stp.moe_gate_grad` and a weighted `stp.moe_dispatch` of `dy` on the
    tokens' ranks, the all-to-all to the experts' ranks,
    `stp.moe_experts_grad` on the rows the forward received, the
    all-to-all back, `stp.moe_combine`, then `stp.moe_route_grad`. Its
    `stp.spec` is the forward's (loops tokens, model dim, experts, expert
    hidden dim).
  }];
  let arguments = (ins AnyRankedTensor:$forward, AnyRankedTensor:$tokens,
                       AnyRankedTensor:$router, AnyRankedTensor:$w_in,
                       Optional<AnyRankedTensor>:$w_mul,
                       AnyRankedTensor:$w_out, AnyRankedTensor:$dy,
                       I64Attr:$top_k, UnitAttr:$normalize,
                       StrAttr:$activation);
  let results = (outs AnyRankedTensor:$d_tokens, AnyRankedTensor:$d_router,
                      AnyRankedTensor:$d_w_in,
                      Optional<AnyRankedTensor>:$d_w_mul,
                      AnyRankedTensor:$d_w_out);
  let assemblyFormat = [{
    $dy `of` $forward `,` $tokens `,` $router `experts` $w_in
    (`gated` $w_mul^)? `down` $w_out attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEExpertsGradOp : STP_Op<"moe_experts_grad",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "The local experts' backward pass on their received rows";
  let description = [{
    The backward of `stp.moe_experts` on the same `buffer [El, S, D]` and
    `counts [El, P]`: `d_out [El, S, D]` holds each used row's output
    gradient (the gate already applied). With `A = buffer @ w_in[e]`,
    `U = buffer @ w_mul[e]` (gated), `H = act(A) (* U)`:
    `d_w_out = H^T d_out`, `dH = d_out w_out^T`, `dA = dH (* U) act'(A)`,
    `dU = dH act(A)`, `d_w_in = buffer^T dA`, `d_w_mul = buffer^T dU`,
    `d_rows = dA w_in^T (+ dU w_mul^T)` (zero in unused rows). Results:
    `d_rows [El, S, D]`, `d_w_in`, `d_w_mul` `[El, D, Fl]`,
    `d_w_out [El, Fl, D]` (sums over the used rows only). With `Fl` a
    slice of the hidden dim, `d_rows` holds partial sums over its axes.
    With `bf16_operands` (-stp-mixed-precision) the operands of its GEMMs
    (rows, output gradients, weights, H, dA, dU) are rounded to bf16 and
    the products accumulate in f32, as `stp.moe_experts`'. With `hidden`
    (A and, gated, U as the forward's `stp.moe_experts` kept them) they
    are read instead of recomputed: the backward's GEMMs are then twice
    the forward's.
  }];
  let arguments = (ins AnyRankedTensor:$buffer, AnyRankedTensor:$d_out,
                       AnyRankedTensor:$counts, AnyRankedTensor:$w_in,
                       Optional<AnyRankedTensor>:$w_mul,
                       AnyRankedTensor:$w_out,
                       Variadic<AnyRankedTensor>:$hidden, StrAttr:$activation,
                       UnitAttr:$bf16_operands);
  let results = (outs AnyRankedTensor:$d_rows, AnyRankedTensor:$d_w_in,
                      Optional<AnyRankedTensor>:$d_w_mul,
                      AnyRankedTensor:$d_w_out);
  let assemblyFormat = [{
    $d_out `of` $buffer `,` $counts `experts` $w_in (`gated` $w_mul^)?
    `down` $w_out (`hidden` $hidden^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEGateGradOp : STP_Op<"moe_gate_grad", [Pure]> {
  let summary = "The gradient of each token's gates: its expert outputs dotted with the output gradient";
  let description = [{
    `outputs [E, C, D]` (the experts' outputs back in the dispatched rows,
    as `stp.moe_combine` reads them), `slots`, `experts` (i64) `[N, K]`,
    `dy [N, D]`; result `[N, K]`:
    `outputs[experts[n, j], slots[n, j]] . dy[n]`, zero where
    `slots[n, j] < 0`.
  }];
  let arguments = (ins AnyRankedTensor:$outputs, AnyRankedTensor:$slots,
                       AnyRankedTensor:$experts, AnyRankedTensor:$dy);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $outputs `,` $slots `,` $experts `,` $dy attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoERouteGradOp : STP_Op<"moe_route_grad", [Pure]> {
  let summary = "The router's backward: from the gates' gradient to the tokens' and the router's";
  let description = [{
    `tokens [N, D]`, `router [D, E]`, `experts [N, K]` (i64, as
    `stp.moe_route` chose them), `d_gates [N, K]`. With
    `p = softmax(tokens @ router)`, the gates `g_j = p[e_j] / S`
    (`S = sum_j p[e_j]` when `normalize`, else 1):
    `dp[e_j] = (d_gates[j] - sum_i d_gates[i] g_i) / S` (else
    `d_gates[j]`), zero off the top k; `dl = p (dp - sum_e p dp)`;
    results `d_tokens = dl router^T [N, D]` and
    `d_router = tokens^T dl [D, E]`.
  }];
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$router,
                       AnyRankedTensor:$experts, AnyRankedTensor:$d_gates,
                       UnitAttr:$normalize);
  let results = (outs AnyRankedTensor:$d_tokens, AnyRankedTensor:$d_router);
  let assemblyFormat = [{
    $d_gates `of` $tokens `,` $router `,` $experts attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEAllToAllOp : STP_Op<"moe_all_to_all", []> {
  let summary = "Expert parallelism's all-to-all of capacity-bounded buffers, sending only the used rows";
  let description = [{
    The exchange of an MoE layer under expert parallelism over the group of
    devices that differ only in their coordinates on `grid_axes` (P
    devices, numbered as `shard` numbers a group), each holding E / P = El
    consecutive experts. First every device sends each peer its row counts
    (E / P int64 per peer), so that every receiver knows the sizes before
    any row moves (sizes are never inferred from a device's own routing);
    then only the used rows travel (grouped ncclSend/ncclRecv on `cuda`,
    MPI_Alltoallv on `cpu`). The shapes are static bounds every device of
    the group agrees on: C rows per (expert, sending device).

    - Dispatch (no `reverse`): `rows [E, C, D]` and `counts [E, 1]` (rows
      used per expert, as `stp.moe_dispatch` leaves them) give
      `[El, P * C, D]`, segment `s` of local expert `x` holding the rows
      device `s` sent it, and their counts `[El, P]`.
    - Return (`reverse`): `rows [El, P * C, D]` and `counts [El, P]` give
      each device its rows back: `[E, C, D]` and `[E, 1]`.

    Rows past a segment's count are zero. `routed_rows` is the number of
    rows each device dispatches (its tokens times top-k, every one kept);
    the return sends back what a device received, which varies with the
    routing and equals `routed_rows` on average over the group. It is the
    volume the plan costs for either direction (the counts' few bytes
    aside), exact for the dispatch.

    FasterMoE's smart scheduling (Sec. 4.2) splits an exchange into
    S = P / `group_size` steps: with `group_size` = g > 0 the op is step
    `step` only, which moves the rows of the (source w, expert owner q)
    pairs with `(q / g - w / g) mod S = step` (device groups of g, a
    pairwise schedule); rows and counts of the other pairs are zero, except
    that a return with `init` starts from `init`'s rows (the earlier
    steps' results: each step fills the blocks of other experts; its
    counts are this step's). One step's experts run while the next step's
    rows travel. `group_size` = 0: all pairs at once.

    BaGuaLu's hierarchical all-to-all (Ma et al., PPoPP'22; Tutel's 2-D
    scheme): with `intra_node_size` = L > 1 (a proper divisor of P, the
    group's devices L per node: member w on node w / L) the rows travel in
    two phases, inside each node first (w hands (node(w), q mod L) every
    block bound for q), then across nodes ((j, l) sends (j', l) what its
    node holds for it), so each network message carries a node's rows at
    once. The result is the same as the flat exchange's. 0: flat.
  }];
  let arguments = (ins AnyRankedTensor:$rows, AnyRankedTensor:$counts,
                       Optional<AnyRankedTensor>:$init,
                       FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$grid_axes,
                       I64Attr:$routed_rows, UnitAttr:$reverse,
                       DefaultValuedAttr<I64Attr, "0">:$group_size,
                       DefaultValuedAttr<I64Attr, "0">:$step,
                       DefaultValuedAttr<I64Attr, "0">:$intra_node_size);
  let results = (outs AnyRankedTensor:$result_rows,
                      AnyRankedTensor:$result_counts);
  let assemblyFormat = [{
    $rows `,` $counts (`into` $init^)? `on` $grid `grid_axes` `=` $grid_axes
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEShadowBroadcastOp : STP_Op<"moe_shadow_broadcast", []> {
  let summary = "FasterMoE's shadowing: each shadowed expert's weights broadcast from its owner to its expert group";
  let description = [{
    Dynamic shadowing (FasterMoE, He et al. PPoPP'22, Sec. 4.1): instead
    of sending a popular expert its tokens, its owner sends every device
    of the expert group the expert's weights, and each device runs the
    expert on its own tokens. The group is the devices that differ only in
    their coordinates on `grid_axes` (P devices, numbered as `shard`
    numbers a group), member w holding the El = `num_experts` / P
    consecutive experts from w El on (as `stp.moe_all_to_all`).

    `weights [El, A, B]` (one of the local experts' `w_in`, `w_mul`,
    `w_out`); `experts` the shadowed experts' global indices (ascending);
    result `[S, A, B]`, S = the number of shadowed experts: row i is
    expert `experts[i]`'s weights as its owner (member `experts[i] / El`)
    holds them. One broadcast per shadowed expert, rooted at its owner
    (ncclBroadcast on `cuda`, MPI_Bcast on `cpu`), each device receiving
    S * A * B elements (FasterMoE's shadow cost: P - 1 start-ups and the
    bytes once over the slowest link level; docs/cost-model.md).
  }];
  let arguments = (ins AnyRankedTensor:$weights, FlatSymbolRefAttr:$grid,
                       DenseI16ArrayAttr:$grid_axes, I64Attr:$num_experts,
                       DenseI64ArrayAttr:$experts);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $weights `on` $grid `grid_axes` `=` $grid_axes `experts` `=` $experts
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoEShadowReduceOp : STP_Op<"moe_shadow_reduce", []> {
  let summary = "FasterMoE's shadowing: each shadowed expert's weight gradient reduced to its owner";
  let description = [{
    The backward half of `stp.moe_shadow_broadcast` (FasterMoE Sec. 4.1):
    every device of the expert group computed a shadowed expert's weight
    gradient on its own tokens; the owner needs their sum. `partial
    [S, A, B]` holds this device's gradients of the shadowed experts
    (row i: expert `experts[i]`), `local [El, A, B]` its own experts'
    gradients (from the rows it received); the result `[El, A, B]` is
    `local` plus, in the row of each shadowed expert the device owns, the
    sum of that expert's `partial` rows over the group (a reduce rooted at
    the owner: ncclReduce on `cuda`, MPI_Reduce on `cpu`; each device
    sends S * A * B elements). Group, numbering and `num_experts` as for
    `stp.moe_shadow_broadcast`.
  }];
  let arguments = (ins AnyRankedTensor:$partial, AnyRankedTensor:$local,
                       FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$grid_axes,
                       I64Attr:$num_experts, DenseI64ArrayAttr:$experts);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $partial `into` $local `on` $grid `grid_axes` `=` $grid_axes `experts`
    `=` $experts attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def STP_MoECombineOp : STP_Op<"moe_combine", [Pure]> {
  let summary = "Sum each token's expert outputs weighted by its gates";
  let description = [{
    `outputs [E, C, D]` (back in the rows `stp.moe_dispatch` chose),
    `slots`, `experts` (i64) and `gates` `[N, K]`; result `[N, D]`:
    `sum_j gates[n, j] * outputs[experts[n, j], slots[n, j]]` over the
    choices with `slots[n, j] >= 0`.
  }];
  let arguments = (ins AnyRankedTensor:$outputs, AnyRankedTensor:$slots,
                       AnyRankedTensor:$experts, AnyRankedTensor:$gates);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $outputs `,` $slots `,` $experts `,` $gates attr-dict `:`
    functional-type(operands, results)
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
