"""The five architectures, written as the op sequences torch.onnx.export
(torch 1.13, opset 17, constant folding on) emits for their PyTorch modules.

Reference exports these follow (print them with /usr/bin/python3):
  ../shared/models/torch113_gpt2_tiny_op17    GPT block (mask Where, Erf-GELU)
  ../shared/models/torch113_llama_block_op17  RMSNorm, rotary, GQA, SwiGLU
  ../shared/models/torch113_moe_top2_op17     Mixtral-style top-k MoE FFN
OPT and BLOOM follow the Hugging Face modules (OPTDecoderLayer, BloomBlock).
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .builder import FLOAT_MIN, INT64_MAX, Builder
from .presets import Config

OPSET = 17
IR_VERSION = 8   # what torch 1.13 writes


# -- shared pieces ----------------------------------------------------------

def _heads(b: Builder, x, bsz, sq, nh, d, perm):
    """x.view(bsz, sq, nh, d).permute(perm)"""
    return b.op("Transpose", [b.reshape(x, [bsz, sq, nh, d])], perm=perm)


def _merge_heads(b: Builder, x, bsz, sq, hidden):
    """x.transpose(1, 2).reshape(bsz, sq, hidden)"""
    x = b.op("Transpose", [x], perm=[0, 2, 1, 3])
    return b.reshape(x, [bsz, sq, hidden])


def _gelu_erf(b: Builder, x):
    """F.gelu(x) at opset 17: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    t = b.op("Div", [x, b.fconst(math.sqrt(2.0))])
    t = b.op("Erf", [t])
    t = b.op("Add", [t, b.fconst(1.0)])
    t = b.op("Mul", [x, t])
    return b.op("Mul", [t, b.fconst(0.5)])


def _gelu_tanh(b: Builder, x):
    """BLOOM's bloom_gelu_forward:
    x * 0.5 * (1.0 + tanh(0.79788456 * x * (1 + 0.044715 * x * x)))"""
    half = b.op("Mul", [x, b.fconst(0.5)])
    t = b.op("Mul", [x, b.fconst(0.79788456)])
    u = b.op("Mul", [x, b.fconst(0.044715)])
    u = b.op("Mul", [u, x])
    u = b.op("Add", [u, b.fconst(1.0)])
    t = b.op("Mul", [t, u])
    t = b.op("Tanh", [t])
    t = b.op("Add", [t, b.fconst(1.0)])
    return b.op("Mul", [half, t])


def _rms_norm(b: Builder, x, prefix, hidden, eps, scope):
    """LlamaRMSNorm: w * (x * rsqrt(mean(x^2) + eps)); rsqrt exports as
    Div(1, Sqrt)."""
    w = b.weight(f"{prefix}.weight", [hidden])
    with b.scope(scope):
        p = b.op("Pow", [x, b.fconst(2.0)])
        m = b.op("ReduceMean", [p], axes=[-1], keepdims=1)
        a = b.op("Add", [m, b.fconst(eps)])
        s = b.op("Sqrt", [a])
        r = b.op("Div", [b.fconst(1.0), s])
        y = b.op("Mul", [x, r])
        return b.op("Mul", [w, y])


def _lm_head(b: Builder, c: Config, x, embedding):
    if c.tied:
        # F.linear(x, wte.weight): the transpose of a shared weight is kept
        # as a node (folding it would duplicate the embedding).
        with b.scope("lm_head"):
            wt = b.op("Transpose", [embedding], perm=[1, 0])
            return b.op("MatMul", [x, wt], outputs=["logits"])
    w = b.weight("lm_head.weight", [c.hidden, c.vocab])
    with b.scope("lm_head"):
        return b.op("MatMul", [x, w], outputs=["logits"])


# -- GPT-3 (Megatron / GPT-2 style pre-LN block, learned positions) ---------

def build_gpt(b: Builder, c: Config, inputs):
    ids = inputs[0]
    h, nh = c.hidden, c.heads
    d = h // nh
    seq = b.dim(ids, 1)
    seq = b.op("Cast", [seq], to=TensorProto.INT64)
    pos = b.op("Range", [b.const(0, scalar=True), seq,
                         b.const(1, scalar=True)])
    pos = b.op("Unsqueeze", [pos, b.const([0])])
    wte = b.weight("transformer.wte.weight", [c.vocab, h])
    wpe = b.weight("transformer.wpe.weight", [c.seq, h])
    with b.scope("transformer"):
        with b.scope("wte"):
            e = b.op("Gather", [wte, ids])
        with b.scope("wpe"):
            p = b.op("Gather", [wpe, pos])
        x = b.op("Add", [e, p])
        # The causal mask buffer of every layer holds the same values; the
        # exporter keeps one and feeds the others through Identity.
        mask0 = b.weight("transformer.h.0.attn.bias", [1, 1, c.seq, c.seq],
                         buffer=True)
        identities = []
        for i in range(c.layers):
            pre = f"transformer.h.{i}"
            if i == 0:
                mask = mask0
            else:
                mask = f"{pre}.attn.bias"
                identities.append(helper.make_node(
                    "Identity", [mask0], [mask], name=f"Identity_{i}"))
            with b.scope(f"h.{i}"):
                bsz = b.dim(x, 0)
                sq = b.dim(x, 1)
                a = b.layer_norm(x, f"{pre}.ln_1", h, c.eps, "ln_1")
                with b.scope("attn"):
                    qkv = b.linear(a, f"{pre}.attn.c_attn", h, 3 * h)
                    q, k, v = b.op("Split", [qkv, b.const([h, h, h])],
                                   num_outputs=3, axis=2)
                    q = _heads(b, q, bsz, sq, nh, d, [0, 2, 1, 3])
                    k = _heads(b, k, bsz, sq, nh, d, [0, 2, 3, 1])
                    v = _heads(b, v, bsz, sq, nh, d, [0, 2, 1, 3])
                    s = b.op("MatMul", [q, k])
                    s = b.op("Div", [s, b.fconst(math.sqrt(d))])
                    m = b.op("Slice", [mask, b.const([0]), b.unsqueeze0(sq),
                                       b.const([2]), b.const([1])])
                    m = b.op("Slice", [m, b.const([0]), b.unsqueeze0(sq),
                                       b.const([3]), b.const([1])])
                    m = b.op("Equal", [m, b.fconst(0.0)])
                    m = b.op("Cast", [m], to=TensorProto.BOOL)
                    s = b.op("Where", [m, b.fconst(-math.inf), s])
                    s = b.op("Softmax", [s], axis=-1)
                    o = b.op("MatMul", [s, v])
                    o = _merge_heads(b, o, bsz, sq, h)
                    o = b.linear(o, f"{pre}.attn.c_proj", h, h)
                x = b.op("Add", [x, o])
                a = b.layer_norm(x, f"{pre}.ln_2", h, c.eps, "ln_2")
                with b.scope("mlp"):
                    f = b.linear(a, f"{pre}.mlp.c_fc", h, c.ffn)
                    f = _gelu_erf(b, f)
                    f = b.linear(f, f"{pre}.mlp.c_proj", c.ffn, h)
                x = b.op("Add", [x, f])
        b.nodes[0:0] = identities
        x = b.layer_norm(x, "transformer.ln_f", h, c.eps, "ln_f")
    return _lm_head(b, c, x, wte)


# -- OPT (HF OPTForCausalLM; pre-LN, ReLU, learned positions with offset 2) --

def build_opt(b: Builder, c: Config, inputs):
    ids, amask = inputs
    h, nh = c.hidden, c.heads
    d = h // nh
    # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2).
    emb = b.weight("model.decoder.embed_tokens.weight", [c.vocab, h])
    pemb = b.weight("model.decoder.embed_positions.weight", [c.seq + 2, h])
    with b.scope("model"), b.scope("decoder"):
        with b.scope("embed_tokens"):
            e = b.op("Gather", [emb, ids])
        with b.scope("embed_positions"):
            # positions = (cumsum(mask, 1) * mask) - 1; [:, past:]; + offset
            p = b.op("CumSum", [amask, b.const(1, scalar=True)])
            p = b.op("Mul", [p, amask])
            p = b.op("Sub", [p, b.const(1, scalar=True)])
            p = b.op("Slice", [p, b.const([0]), b.const([INT64_MAX]),
                               b.const([1]), b.const([1])])
            p = b.op("Add", [p, b.const(2, scalar=True)])
            p = b.op("Gather", [pemb, p])
        x = b.op("Add", [e, p])
        # _prepare_decoder_attention_mask: causal + expanded padding mask,
        # additive, finfo.min where masked.
        bsz = b.dim(ids, 0)
        sq = b.dim(ids, 1)
        full = b.op("ConstantOfShape", [b.shape_of([sq, sq])],
                    value=numpy_helper.from_array(
                        np.array([FLOAT_MIN], dtype=np.float32)))
        r = b.op("Range", [b.const(0, scalar=True), sq,
                           b.const(1, scalar=True)])
        r1 = b.op("Add", [r, b.const(1, scalar=True)])
        r1 = b.reshape(r1, [sq, 1])
        lt = b.op("Less", [r, r1])
        causal = b.op("Where", [lt, b.fconst(0.0), full])
        causal = b.op("Unsqueeze", [causal, b.const([0, 1])])
        causal = b.op("Expand", [causal, b.shape_of([bsz, 1, sq, sq])])
        pad = b.op("Unsqueeze", [amask, b.const([1, 2])])
        pad = b.op("Expand", [pad, b.shape_of([bsz, 1, sq, sq])])
        pad = b.op("Cast", [pad], to=TensorProto.FLOAT)
        inv = b.op("Sub", [b.fconst(1.0), pad])
        invb = b.op("Cast", [inv], to=TensorProto.BOOL)
        pad = b.op("Where", [invb, b.fconst(FLOAT_MIN), inv])
        attn_mask = b.op("Add", [pad, causal])
        for i in range(c.layers):
            pre = f"model.decoder.layers.{i}"
            with b.scope(f"layers.{i}"):
                a = b.layer_norm(x, f"{pre}.self_attn_layer_norm", h, c.eps,
                                 "self_attn_layer_norm")
                with b.scope("self_attn"):
                    bsz = b.dim(a, 0)
                    sq = b.dim(a, 1)
                    q = b.linear(a, f"{pre}.self_attn.q_proj", h, h)
                    q = b.op("Mul", [q, b.fconst(d ** -0.5)])
                    k = b.linear(a, f"{pre}.self_attn.k_proj", h, h)
                    v = b.linear(a, f"{pre}.self_attn.v_proj", h, h)
                    q = _heads(b, q, bsz, sq, nh, d, [0, 2, 1, 3])
                    k = _heads(b, k, bsz, sq, nh, d, [0, 2, 3, 1])
                    v = _heads(b, v, bsz, sq, nh, d, [0, 2, 1, 3])
                    s = b.op("MatMul", [q, k])
                    s = b.op("Add", [s, attn_mask])
                    s = b.op("Max", [s, b.fconst(FLOAT_MIN)])
                    s = b.op("Softmax", [s], axis=-1)
                    o = b.op("MatMul", [s, v])
                    o = _merge_heads(b, o, bsz, sq, h)
                    o = b.linear(o, f"{pre}.self_attn.out_proj", h, h)
                x = b.op("Add", [x, o])
                a = b.layer_norm(x, f"{pre}.final_layer_norm", h, c.eps,
                                 "final_layer_norm")
                f = b.linear(a, f"{pre}.fc1", h, c.ffn)
                with b.scope("activation_fn"):
                    f = b.op("Relu", [f])
                f = b.linear(f, f"{pre}.fc2", c.ffn, h)
                x = b.op("Add", [x, f])
        x = b.layer_norm(x, "model.decoder.final_layer_norm", h, c.eps,
                         "final_layer_norm")
    return _lm_head(b, c, x, emb)


# -- BLOOM (HF BloomForCausalLM; ALiBi, embedding LayerNorm, tanh-GELU) -----

def alibi_slopes(heads: int) -> np.ndarray:
    """Press et al.'s slopes as in HF build_alibi_tensor (any head count)."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** p for p in range(1, closest + 1)]
    if closest != heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        n = min(closest, heads - closest)
        slopes += [extra ** p for p in range(1, 1 + 2 * n, 2)]
    return np.array(slopes, dtype=np.float32)


def build_bloom(b: Builder, c: Config, inputs):
    ids, amask = inputs
    h, nh = c.hidden, c.heads
    d = h // nh
    emb = b.weight("transformer.word_embeddings.weight", [c.vocab, h])
    with b.scope("transformer"):
        with b.scope("word_embeddings"):
            e = b.op("Gather", [emb, ids])
        x = b.layer_norm(e, "transformer.word_embeddings_layernorm", h,
                         c.eps, "word_embeddings_layernorm")
        bsz = b.dim(ids, 0)
        sq = b.dim(ids, 1)
        # build_alibi_tensor: slopes[h, None] * ((cumsum(mask) - 1) * mask)
        ar = b.op("CumSum", [amask, b.const(-1, scalar=True)])
        ar = b.op("Sub", [ar, b.const(1, scalar=True)])
        ar = b.op("Mul", [ar, amask])
        ar = b.op("Unsqueeze", [ar, b.const([1])])
        ar = b.op("Cast", [ar], to=TensorProto.FLOAT)
        slopes = b.const(alibi_slopes(nh).reshape(nh, 1), np.float32)
        alibi = b.op("Mul", [slopes, ar])                # [b, heads, s]
        alibi = b.op("Unsqueeze", [alibi, b.const([2])])  # [b, heads, 1, s]
        # _prepare_attn_mask: causal | ~padding, boolean (True = masked).
        r = b.op("Range", [b.const(0, scalar=True), sq,
                           b.const(1, scalar=True)])
        rc = b.op("Unsqueeze", [r, b.const([1])])
        rr = b.op("Unsqueeze", [r, b.const([0])])
        causal = b.op("Less", [rc, rr])
        causal = b.op("Unsqueeze", [causal, b.const([0, 1])])
        causal = b.op("Expand", [causal, b.shape_of([bsz, 1, sq, sq])])
        pad = b.op("Cast", [amask], to=TensorProto.BOOL)
        pad = b.op("Not", [pad])
        pad = b.op("Unsqueeze", [pad, b.const([1, 2])])
        pad = b.op("Expand", [pad, b.shape_of([bsz, 1, sq, sq])])
        mask = b.op("Or", [pad, causal])
        for i in range(c.layers):
            pre = f"transformer.h.{i}"
            with b.scope(f"h.{i}"):
                a = b.layer_norm(x, f"{pre}.input_layernorm", h, c.eps,
                                 "input_layernorm")
                with b.scope("self_attention"):
                    bsz = b.dim(a, 0)
                    sq = b.dim(a, 1)
                    qkv = b.linear(a, f"{pre}.self_attention.query_key_value",
                                   h, 3 * h)
                    # _split_heads: view(b, s, heads, 3, d)[..., j, :]
                    qkv = b.reshape(qkv, [bsz, sq, nh, 3, d])
                    q, k, v = (b.op("Gather", [qkv, b.const(j, scalar=True)],
                                    axis=3) for j in range(3))
                    q = b.op("Transpose", [q], perm=[0, 2, 1, 3])
                    k = b.op("Transpose", [k], perm=[0, 2, 3, 1])
                    v = b.op("Transpose", [v], perm=[0, 2, 1, 3])
                    # alibi.baddbmm(q, k, beta=1, alpha=1/sqrt(d))
                    s = b.op("MatMul", [q, k])
                    s = b.op("Mul", [s, b.fconst(1.0 / math.sqrt(d))])
                    s = b.op("Add", [s, alibi])
                    s = b.op("Where", [mask, b.fconst(FLOAT_MIN), s])
                    s = b.op("Softmax", [s], axis=-1)
                    o = b.op("MatMul", [s, v])
                    o = _merge_heads(b, o, bsz, sq, h)
                    o = b.linear(o, f"{pre}.self_attention.dense", h, h)
                x = b.op("Add", [o, x])
                a = b.layer_norm(x, f"{pre}.post_attention_layernorm", h,
                                 c.eps, "post_attention_layernorm")
                with b.scope("mlp"):
                    f = b.linear(a, f"{pre}.mlp.dense_h_to_4h", h, c.ffn)
                    with b.scope("gelu_impl"):
                        f = _gelu_tanh(b, f)
                    f = b.linear(f, f"{pre}.mlp.dense_4h_to_h", c.ffn, h)
                x = b.op("Add", [f, x])
        x = b.layer_norm(x, "transformer.ln_f", h, c.eps, "ln_f")
    return _lm_head(b, c, x, emb)


# -- Llama-2 and Mixtral (RMSNorm, rotary, GQA, SwiGLU / top-k MoE) --------

def _rotary(b: Builder, x, cos, sin):
    """x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1)."""
    half = b.op("Div", [b.dim(x, 3), b.const(2, scalar=True)])
    half = b.op("Cast", [half], to=TensorProto.INT64)
    half = b.op("Cast", [half], to=TensorProto.INT64)
    x1 = b.op("Slice", [x, b.const([0]), b.unsqueeze0(half), b.const([3]),
                        b.const([1])])
    x2 = b.op("Slice", [x, b.unsqueeze0(half), b.const([INT64_MAX]),
                        b.const([3]), b.const([1])])
    xc = b.op("Mul", [x, cos])
    n = b.op("Neg", [x2])
    rot = b.op("Concat", [n, x1], axis=-1)
    rs = b.op("Mul", [rot, sin])
    return b.op("Add", [xc, rs])


def _repeat_kv(b: Builder, x, bsz, sq, kv, n_rep, d):
    """x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv*n_rep, s, d)"""
    u = b.op("Unsqueeze", [x, b.const([2])])
    shape = b.op("Concat", [b.unsqueeze0(bsz), b.const([kv]),
                            b.const([n_rep]), b.unsqueeze0(sq),
                            b.const([d])], axis=0)
    shape = b.op("Reshape", [shape, b.const([-1])], allowzero=0)
    ones = b.op("ConstantOfShape", [b.op("Shape", [shape])],
                value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
    neg = b.op("Mul", [ones, b.const(-1, scalar=True)])
    eq = b.op("Equal", [shape, neg])
    shape = b.op("Where", [eq, ones, shape])
    e = b.op("Expand", [u, shape])
    return b.reshape(e, [bsz, kv * n_rep, sq, d])


def _moe(b: Builder, c: Config, x, pre):
    """Dense top-k MoE as in torch113_moe_top2_op17: softmax router, TopK,
    renormalised gates scattered into [tokens, E], all experts via Einsum,
    gate-weighted sum over experts."""
    h, E = c.hidden, c.experts
    bsz = b.dim(x, 0)
    sq = b.dim(x, 1)
    flat = b.op("Reshape", [x, b.const([-1, h])], allowzero=0)
    logits = b.linear(flat, f"{pre}.gate", h, E, bias=False)
    probs = b.op("Softmax", [logits], axis=-1)
    vals, idx = b.op("TopK", [probs, b.const([c.top_k])], num_outputs=2,
                     axis=-1, largest=1, sorted=1)
    ssum = b.op("ReduceSum", [vals, b.const([-1])], keepdims=1)
    gate = b.op("Div", [vals, ssum])
    zeros = b.op("ConstantOfShape", [b.op("Shape", [probs])],
                 value=numpy_helper.from_array(np.array([0.0],
                                                        dtype=np.float32)))
    gates = b.op("ScatterElements", [zeros, idx, gate], axis=1)
    w1 = b.weight(f"{pre}.experts.w1", [E, h, c.ffn])
    w3 = b.weight(f"{pre}.experts.w3", [E, h, c.ffn])
    w2 = b.weight(f"{pre}.experts.w2", [E, c.ffn, h])
    a = b.op("Einsum", [flat, w1], equation="nd,edf->enf")
    sg = b.op("Sigmoid", [a])
    a = b.op("Mul", [a, sg])
    u = b.op("Einsum", [flat, w3], equation="nd,edf->enf")
    a = b.op("Mul", [a, u])
    y = b.op("Einsum", [a, w2], equation="enf,efd->end")
    gt = b.op("Transpose", [gates], perm=[1, 0])
    gt = b.op("Unsqueeze", [gt, b.const([-1])])
    y = b.op("Mul", [y, gt])
    y = b.op("ReduceSum", [y, b.const([0])], keepdims=0)
    return b.reshape(y, [bsz, sq, h])


def build_llama(b: Builder, c: Config, inputs):
    ids = inputs[0]
    h, nh, kv = c.hidden, c.heads, c.kv_heads
    d = h // nh
    emb = b.weight("model.embed_tokens.weight", [c.vocab, h])
    cos_buf = b.weight("model.rotary_emb.cos_cached", [c.seq, d], buffer=True)
    sin_buf = b.weight("model.rotary_emb.sin_cached", [c.seq, d], buffer=True)
    with b.scope("model"):
        with b.scope("embed_tokens"):
            x = b.op("Gather", [emb, ids])
        # Causal mask: triu(full((s, s), -inf), 1), added to the scores.
        sq = b.dim(ids, 1)
        one = b.const(1, scalar=True)
        full = b.op("ConstantOfShape", [b.shape_of([sq, sq])],
                    value=numpy_helper.from_array(
                        np.array([-np.inf], dtype=np.float32)))
        causal = b.op("Trilu", [full, one], upper=1)
        for i in range(c.layers):
            pre = f"model.layers.{i}"
            with b.scope(f"layers.{i}"):
                bsz = b.dim(x, 0)
                sq = b.dim(x, 1)
                a = _rms_norm(b, x, f"{pre}.input_layernorm", h, c.eps,
                              "input_layernorm")
                with b.scope("self_attn"):
                    q = b.linear(a, f"{pre}.self_attn.q_proj", h, nh * d,
                                 bias=False)
                    q = _heads(b, q, bsz, sq, nh, d, [0, 2, 1, 3])
                    k = b.linear(a, f"{pre}.self_attn.k_proj", h, kv * d,
                                 bias=False)
                    k = _heads(b, k, bsz, sq, kv, d, [0, 2, 1, 3])
                    v = b.linear(a, f"{pre}.self_attn.v_proj", h, kv * d,
                                 bias=False)
                    v = _heads(b, v, bsz, sq, kv, d, [0, 2, 1, 3])
                    with b.scope("rotary_emb"):
                        cos = b.op("Slice", [cos_buf, b.const([0]),
                                             b.unsqueeze0(sq), b.const([0]),
                                             b.const([1])])
                        sin = b.op("Slice", [sin_buf, b.const([0]),
                                             b.unsqueeze0(sq), b.const([0]),
                                             b.const([1])])
                    q = _rotary(b, q, cos, sin)
                    k = _rotary(b, k, cos, sin)
                    if nh != kv:
                        k = _repeat_kv(b, k, bsz, sq, kv, nh // kv, d)
                        v = _repeat_kv(b, v, bsz, sq, kv, nh // kv, d)
                    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
                    s = b.op("MatMul", [q, kt])
                    s = b.op("Div", [s, b.fconst(math.sqrt(d))])
                    s = b.op("Add", [s, causal])
                    s = b.op("Softmax", [s], axis=-1)
                    o = b.op("MatMul", [s, v])
                    o = _merge_heads(b, o, bsz, sq, h)
                    o = b.linear(o, f"{pre}.self_attn.o_proj", h, h,
                                 bias=False)
                x = b.op("Add", [x, o])
                a = _rms_norm(b, x, f"{pre}.post_attention_layernorm", h,
                              c.eps, "post_attention_layernorm")
                if c.arch == "mixtral":
                    with b.scope("block_sparse_moe"):
                        f = _moe(b, c, a, f"{pre}.block_sparse_moe")
                else:
                    with b.scope("mlp"):
                        g = b.linear(a, f"{pre}.mlp.gate_proj", h, c.ffn,
                                     bias=False)
                        with b.scope("act_fn"):
                            g = b.op("Mul", [g, b.op("Sigmoid", [g])])
                        u = b.linear(a, f"{pre}.mlp.up_proj", h, c.ffn,
                                     bias=False)
                        f = b.op("Mul", [g, u])
                        f = b.linear(f, f"{pre}.mlp.down_proj", c.ffn, h,
                                     bias=False)
                x = b.op("Add", [x, f])
        x = _rms_norm(b, x, "model.norm", h, c.eps, "norm")
    return _lm_head(b, c, x, emb)


BUILDERS = {"gpt": build_gpt, "opt": build_opt, "llama": build_llama,
            "bloom": build_bloom, "mixtral": build_llama}
# Inputs the real Hugging Face / Megatron export has (besides input_ids).
EXTRA_INPUTS = {"opt": ["attention_mask"], "bloom": ["attention_mask"]}


def build_model(c: Config, name: str, data_location: str) -> onnx.ModelProto:
    """Builds the graph-only model of configuration `c`."""
    c.validate()
    b = Builder(data_location)
    names = ["input_ids"] + EXTRA_INPUTS.get(c.arch, [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64,
                                            ["batch_size", "seq_len"])
              for n in names]
    out = BUILDERS[c.arch](b, c, names)
    assert out == "logits"
    output = helper.make_tensor_value_info(
        "logits", TensorProto.FLOAT, ["batch_size", "seq_len", c.vocab])
    graph = helper.make_graph(b.nodes, f"{name}", inputs, [output],
                              b.initializers)
    model = helper.make_model(
        graph, producer_name="stpar-zoo", producer_version="0.1",
        opset_imports=[helper.make_opsetid("", OPSET)],
        doc_string=("Graph-only model (weights external and absent) with the "
                    "op patterns of torch 1.13 torch.onnx.export, opset 17."))
    model.ir_version = IR_VERSION
    cfg = {k: getattr(c, k) for k in ("arch", "layers", "hidden", "heads",
                                      "kv_heads", "ffn", "vocab", "seq",
                                      "experts", "top_k", "tied", "eps")}
    meta = {"stpar_zoo.name": name, "stpar_zoo.config": json.dumps(cfg),
            "stpar_zoo.parameters": str(b.num_params),
            "stpar_zoo.data_file": data_location}
    if c.published_params:
        meta["stpar_zoo.published_parameters"] = f"{c.published_params:.4g}"
        meta["stpar_zoo.source"] = c.source
    helper.set_model_props(model, meta)
    return model
