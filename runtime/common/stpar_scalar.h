//===- stpar_scalar.h - scalar helpers of emitted stpar programs -*- C++ -*-===//
//
// Part of stpar. Copied next to every program `stpar emit` writes. Host and
// device (CUDA) versions of the arith/math ops that have no C operator.
//
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_SCALAR_H
#define STPAR_RUNTIME_SCALAR_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef __CUDACC__
#define STP_HD __host__ __device__
#else
#define STP_HD
#endif

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace stpar_rt {

#ifdef __CUDACC__
/// f16 and bf16 buffer elements on the cuda target: CUDA's own types
/// (implicit conversions to and from float, round to nearest even); NCCL
/// reduces them natively.
using f16 = __half;
using bf16 = __nv_bfloat16;
#else
/// IEEE binary16 and bfloat16 buffer elements on the cpu target: 2 bytes of
/// storage, arithmetic in float (every generic body computes in float and
/// each store rounds to nearest even, as CUDA's conversions do).
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  bf16(float f) {
    uint32_t u = floatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    else // round to nearest even
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const { return bitsFloat(uint32_t(bits) << 16); }
};
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  f16(float f) {
    uint32_t u = floatBits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { // NaN
      bits = static_cast<uint16_t>(sign | 0x7e00u);
    } else if (a >= 0x477ff000u) { // rounds to >= 65520: infinity
      bits = static_cast<uint16_t>(sign | 0x7c00u);
    } else if (a < 0x38800000u) { // below 2^-14: subnormal (or zero)
      // a / 2^-24 rounded to nearest even, via float addition.
      float m = bitsFloat(a) + 0.5f;
      bits = static_cast<uint16_t>(sign | (floatBits(m) - floatBits(0.5f)));
    } else {
      uint32_t mant_odd = (a >> 13) & 1u;
      a += 0xc8000fffu + mant_odd; // rebias exponent, round to nearest even
      bits = static_cast<uint16_t>(sign | (a >> 13));
    }
  }
  operator float() const {
    uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu;
    if (exp == 0x1f)
      return bitsFloat(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) // subnormal: mant * 2^-24
      return bitsFloat(sign) +
             (sign ? -1.0f : 1.0f) * float(mant) * 5.9604644775390625e-8f;
    return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  }
};
#endif

/// An element's value for arithmetic: f16/bf16 as float, other types as
/// they are (runtime kernels accumulate in float or double, never in 16
/// bits).
template <typename T> STP_HD inline T widen(T x) { return x; }
#ifdef __CUDACC__
STP_HD inline float widen(__half x) { return __half2float(x); }
STP_HD inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
#else
inline float widen(f16 x) { return x; }
inline float widen(bf16 x) { return x; }
#endif

/// arith.maximumf / arith.minimumf: NaN-propagating.
template <typename T> STP_HD inline T maximumf(T a, T b) {
  return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
}
template <typename T> STP_HD inline T minimumf(T a, T b) {
  return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b);
}
/// arith.maxnumf / arith.minnumf: a NaN operand loses.
template <typename T> STP_HD inline T maxnumf(T a, T b) {
  return a != a ? b : (b != b ? a : (a > b ? a : b));
}
template <typename T> STP_HD inline T minnumf(T a, T b) {
  return a != a ? b : (b != b ? a : (a < b ? a : b));
}
/// arith.floordivsi / arith.ceildivsi (rounding toward -inf / +inf).
template <typename T> STP_HD inline T floordivsi(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> STP_HD inline T ceildivsi(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q;
}
/// Affine `mod` (result in [0, b) for b > 0).
template <typename T> STP_HD inline T affine_mod(T a, T b) {
  T r = a % b;
  return r < 0 ? r + b : r;
}
template <typename T> STP_HD inline T maxsi(T a, T b) { return a > b ? a : b; }
template <typename T> STP_HD inline T minsi(T a, T b) { return a < b ? a : b; }

/// The per-peer layout of stp.moe_all_to_all: the rows of local expert `x`
/// (of `el`) for peer `q` (of `p`) start at this row of the whole
/// [E, C, D] buffer (`whole`) or of the local [E / P, P * C, D] one.
STP_HD inline int64_t moeRowOffset(bool whole, int64_t q, int64_t x, int64_t el,
                                   int64_t p, int64_t c) {
  return whole ? (q * el + x) * c : (x * p + q) * c;
}

/// Whether smart scheduling's step `step` (device groups of `g` of the
/// `p` devices; g = 0: no schedule, every pair) moves the rows of source
/// `w` for the experts of owner `q` (FasterMoE Sec. 4.2).
STP_HD inline bool moeStepPair(int64_t w, int64_t q, int64_t p, int64_t g,
                               int64_t step) {
  if (g <= 0)
    return true;
  int64_t steps = p / g;
  return ((q / g - w / g) % steps + steps) % steps == step;
}

/// BaGuaLu's two-level exchange of stp.moe_all_to_all (`intra_node_size`
/// l; member w of the group of p on node w / l), as both runtimes'
/// moeExchangeTwoLevel run it: whether it applies, and the row counts each
/// phase sends (host code).
inline bool moeTwoLevel(int64_t l, int64_t p) {
  return l > 1 && l < p && p % l == 0;
}
/// Phase 1 (inside the node of `me`), [p][p / l][el]: to peer v of this
/// node, for each node j, the counts of the blocks bound for member
/// q = (j, v mod l), sendCounts[q * el + x]; 0 for peers on other nodes.
inline std::vector<int64_t>
moePhase1Counts(int64_t me, int64_t p, int64_t l, int64_t el,
                const std::vector<int64_t> &sendCounts) {
  const int64_t nodes = p / l, node = me / l;
  std::vector<int64_t> out(p * nodes * el, 0);
  for (int64_t v = node * l; v < (node + 1) * l; ++v)
    for (int64_t j = 0; j < nodes; ++j)
      for (int64_t x = 0; x < el; ++x)
        out[(v * nodes + j) * el + x] = sendCounts[(j * l + v % l) * el + x];
  return out;
}
/// Phase 2 (across nodes), [p][l][el]: to member (j, me mod l) of each node
/// j, per member (node(me), k) of this node, the counts it handed over in
/// phase 1 for node j (`received`, phase 1's counts as this device got
/// them); 0 for the other members.
inline std::vector<int64_t>
moePhase2Counts(int64_t me, int64_t p, int64_t l, int64_t el,
                const std::vector<int64_t> &received) {
  const int64_t nodes = p / l, node = me / l, local = me % l;
  std::vector<int64_t> out(p * l * el, 0);
  for (int64_t j = 0; j < nodes; ++j)
    for (int64_t k = 0; k < l; ++k)
      for (int64_t x = 0; x < el; ++x)
        out[((j * l + local) * l + k) * el + x] =
            received[((node * l + k) * nodes + j) * el + x];
  return out;
}
/// The element offsets of blocks of counts[i] rows of d elements laid out
/// in order: n + 1 entries, the last the total.
inline std::vector<int64_t> moeRowStarts(const std::vector<int64_t> &counts,
                                         int64_t d) {
  std::vector<int64_t> at(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i)
    at[i + 1] = at[i] + counts[i] * d;
  return at;
}

/// stp.moe_combine's element (token t, dim i): the sum over the token's k
/// choices of the gate times its expert's output, from `outputs` [E, C, D]
/// at the choice's slot (choices with slot -1 were dropped).
template <typename T>
STP_HD inline float moeCombineElement(const T *outputs, const int64_t *slots,
                                      const int64_t *experts, const T *gates,
                                      int64_t t, int64_t i, int64_t k,
                                      int64_t c, int64_t d) {
  float acc = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t slot = slots[t * k + j];
    if (slot >= 0)
      acc += float(widen(gates[t * k + j])) *
             float(widen(outputs[(experts[t * k + j] * c + slot) * d + i]));
  }
  return acc;
}

/// An stp.moe expert's activation: 0 SiLU, 1 GELU (erf form), 2 GELU (tanh
/// form), 3 ReLU (the codes the emitter passes).
STP_HD inline float moeActivation(int kind, float x) {
  switch (kind) {
  case 0:
    return x / (1.0f + expf(-x));
  case 1:
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case 2:
    return 0.5f * x *
           (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  default:
    return x > 0.0f ? x : 0.0f;
  }
}

/// The derivative of moeActivation(kind, x) at x (the forms of
/// -stp-training-step's dense rule, docs/moe.md "Training").
STP_HD inline float moeActivationGrad(int kind, float x) {
  switch (kind) {
  case 0: {
    // silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + exp(-x)).
    float sig = 1.0f / (1.0f + expf(-x));
    return sig * (1.0f + x * (1.0f - sig));
  }
  case 1:
    // 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
           x * expf(-0.5f * x * x) * 0.39894228040143268f;
  case 2: {
    // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u', u = sqrt(2/pi) (x +
    // 0.044715 x^3).
    const float k = 0.79788456080286536f;
    float th = tanhf(k * (x + 0.044715f * x * x * x));
    float du = k * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
  }
  default:
    return x > 0.0f ? 1.0f : 0.0f;
  }
}

/// stp.moe_gate_grad's element (token t, choice j): the choice's expert
/// output row in `outputs` [E, C, D] dotted with dy[t] (0 if dropped).
template <typename T>
STP_HD inline float moeGateGradElement(const T *outputs, const int64_t *slots,
                                       const int64_t *experts, const T *dy,
                                       int64_t t, int64_t j, int64_t k,
                                       int64_t c, int64_t d) {
  int64_t slot = slots[t * k + j];
  if (slot < 0)
    return 0.0f;
  const T *row = outputs + (experts[t * k + j] * c + slot) * d;
  float acc = 0;
  for (int64_t i = 0; i < d; ++i)
    acc += float(widen(row[i])) * float(widen(dy[t * d + i]));
  return acc;
}

/// stp.moe_route_grad's logit gradient of one token at expert `x`: with
/// the softmax `p` [E] of its logits, its k chosen `experts` and their
/// gates' gradient `dg` [k], the gates p[e_j] / S (S = sum_j p[e_j] when
/// `normalize`, else 1): dp[e_j] = (dg_j - sum_i dg_i g_i) / S (else
/// dg_j), 0 off the top k; dl[x] = p[x] (dp[x] - sum_e p[e] dp[e]).
template <typename T>
STP_HD inline float moeLogitGrad(const float *p, const int64_t *experts,
                                 const T *dg, int64_t k, bool normalize,
                                 int64_t x) {
  float s = 1.0f, dot = 0.0f;
  if (normalize) {
    s = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      s += p[experts[j]];
    for (int64_t j = 0; j < k; ++j)
      dot += float(widen(dg[j])) * p[experts[j]] / s;
  }
  float mine = 0.0f, mean = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    float dp = (float(widen(dg[j])) - dot) / s;
    mean += p[experts[j]] * dp;
    if (experts[j] == x)
      mine = dp;
  }
  return p[x] * (mine - mean);
}

} // namespace stpar_rt

#endif // STPAR_RUNTIME_SCALAR_H
