//===- stpar_runtime.h - runtime of the cpu target --------------*- C++ -*-===//
//
// Part of stpar. Copied next to every program `stpar emit --target cpu`
// writes. Tensors, the device grid over MPI, the collectives of the shard
// dialect and the stp ops as plain loops. Row-major, statically shaped.
//
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_CPU_H
#define STPAR_RUNTIME_CPU_H

#include "stpar_grid.h"
#include "stpar_io.h"
#include "stpar_scalar.h"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

namespace stpar_rt {

/// A reference-counted host buffer of `size` elements.
template <typename T> struct Tensor {
  std::shared_ptr<T> buffer;
  int64_t size = 0;
  T *data() const { return buffer.get(); }
};

template <typename T> Tensor<T> alloc(int64_t n) {
  Tensor<T> t;
  t.size = n;
  t.buffer = std::shared_ptr<T>(new T[n > 0 ? n : 1](),
                                std::default_delete<T[]>());
  return t;
}
template <typename T> Tensor<T> clone(const Tensor<T> &src) {
  Tensor<T> t = alloc<T>(src.size);
  std::copy(src.data(), src.data() + src.size, t.data());
  return t;
}
template <typename T> Tensor<T> fromHost(const T *values, int64_t n) {
  Tensor<T> t = alloc<T>(n);
  std::copy(values, values + n, t.data());
  return t;
}
template <typename T> Tensor<T> full(int64_t n, T value) {
  Tensor<T> t = alloc<T>(n);
  std::fill(t.data(), t.data() + n, value);
  return t;
}

template <typename T> struct MpiType;
template <> struct MpiType<float> { static MPI_Datatype get() { return MPI_FLOAT; } };
template <> struct MpiType<double> { static MPI_Datatype get() { return MPI_DOUBLE; } };
template <> struct MpiType<int64_t> { static MPI_Datatype get() { return MPI_INT64_T; } };
template <> struct MpiType<int32_t> { static MPI_Datatype get() { return MPI_INT32_T; } };
template <> struct MpiType<int16_t> { static MPI_Datatype get() { return MPI_INT16_T; } };
template <> struct MpiType<int8_t> { static MPI_Datatype get() { return MPI_INT8_T; } };
template <> struct MpiType<uint8_t> { static MPI_Datatype get() { return MPI_UINT8_T; } };
// f16/bf16 move as 16-bit words; reductions go through float (below).
template <> struct MpiType<f16> {
  static MPI_Datatype get() { return MPI_UINT16_T; }
};
template <> struct MpiType<bf16> {
  static MPI_Datatype get() { return MPI_UINT16_T; }
};
template <typename T>
constexpr bool isLowPrecision =
    std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

enum class Reduction { Sum, Max, Min, Product };
inline MPI_Op mpiOp(Reduction r) {
  switch (r) {
  case Reduction::Sum: return MPI_SUM;
  case Reduction::Max: return MPI_MAX;
  case Reduction::Min: return MPI_MIN;
  case Reduction::Product: return MPI_PROD;
  }
  return MPI_SUM;
}

/// This process's place on the device grid and its communicators.
class Context : public Grid {
public:
  Context(int &argc, char **&argv, Shape gridShape)
      : Grid(std::move(gridShape)) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    options = parseOptions(argc, argv);
    if (size != numElements(this->gridShape))
      fatal("this program runs on " +
            std::to_string(numElements(this->gridShape)) +
            " ranks (the grid), started on " + std::to_string(size));
    place(rank);
    if (!options.weights.empty())
      weights.open(options.weights);
  }
  ~Context() {
    profile.report(rank);
    arena.report(rank);
    reportMemory();
    std::free(arena.base);
    for (auto &entry : comms)
      MPI_Comm_free(&entry.second);
    MPI_Finalize();
  }

  /// Measured memory per rank, printed by rank 0 (one line per rank, read
  /// by `stpar verify`): the bytes of the arena the run touched and the
  /// process's peak resident set (getrusage; the arena, the weights file
  /// mapping's touched pages, MPI's buffers and the C++ runtime).
  void reportMemory() {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    unsigned long long mine[2] = {
        static_cast<unsigned long long>(arena.touched),
        static_cast<unsigned long long>(usage.ru_maxrss) * 1024ULL};
    std::vector<unsigned long long> all(2 * static_cast<size_t>(size));
    MPI_Gather(mine, 2, MPI_UNSIGNED_LONG_LONG, all.data(), 2,
               MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rank != 0 || !arena.base)
      return;
    for (int r = 0; r < size; ++r)
      std::fprintf(stderr,
                   "stpar_program: rank %d memory: arena %llu bytes used, "
                   "peak resident %llu bytes\n",
                   r, all[2 * r], all[2 * r + 1]);
  }

  /// A profile mark (STPAR_PROFILE): the time since the last mark is the
  /// last mark's label's.
  void mark(const char *label) {
    if (!profile.enabled)
      return;
    auto now = std::chrono::steady_clock::now();
    if (!lastLabel.empty())
      profile.add(lastLabel,
                  std::chrono::duration<double>(now - lastMark).count());
    lastLabel = label;
    lastMark = now;
  }

  /// Allocates the arena of the memory plan (one allocation per rank).
  void reserveArena(uint64_t bytes, uint64_t arguments, uint64_t livePeak) {
    size_t rounded = (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
    arena.base = static_cast<char *>(std::aligned_alloc(256, rounded));
    if (!arena.base)
      fatal("cannot allocate the arena of " + std::to_string(bytes) +
            " bytes");
    arena.bytes = bytes;
    arena.arguments = arguments;
    arena.livePeak = livePeak;
  }

  /// The communicator of the devices that differ only in `axes`, ranked
  /// by groupIndex (MPI_Comm_split by the other coordinates).
  MPI_Comm comm(const Shape &axes) {
    auto it = comms.find(axes);
    if (it != comms.end())
      return it->second;
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(groupColor(axes)),
                   static_cast<int>(groupIndex(axes)), &c);
    comms[axes] = c;
    return c;
  }
  /// Creates the communicator of `axes` (collective: every rank calls it
  /// for the same axes in the same order at start-up).
  void prepare(const Shape &axes) { comm(axes); }

  int rank = 0, size = 1;
  Options options;
  Weights weights;
  Arena arena;
  Profile profile;
  std::string lastLabel;
  std::chrono::steady_clock::time_point lastMark;
  /// Ring shifts in flight (receive, send), by their `done` event id
  /// (ringShift, waitTransfer).
  std::map<int64_t, std::pair<MPI_Request, MPI_Request>> transfers;
  /// The pipeline transfer group being posted (groupStart .. groupEnd).
  bool inGroup = false;
  std::vector<MPI_Request> groupRequests;

private:
  std::map<Shape, MPI_Comm> comms;
};

//===----------------------------------------------------------------------===//
// Layout helpers
//===----------------------------------------------------------------------===//

inline int64_t prod(const Shape &s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= s[i];
  return n;
}

/// out[b][a][c] = in[a][b][c].
template <typename T>
void swap01(const T *in, T *out, int64_t a, int64_t b, int64_t c) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::copy(in + (i * b + j) * c, in + (i * b + j + 1) * c,
                out + (j * a + i) * c);
}

/// linalg.transpose: result dim i is input dim perm[i].
template <typename T>
void transpose(const T *in, T *out, const Shape &inShape, const Shape &perm) {
  size_t rank = inShape.size();
  Shape inStrides(rank, 1), outShape(rank);
  for (size_t d = rank; d-- > 1;)
    inStrides[d - 1] = inStrides[d] * inShape[d];
  for (size_t i = 0; i < rank; ++i)
    outShape[i] = inShape[perm[i]];
  int64_t n = numElements(inShape);
  Shape idx(rank, 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t src = 0;
    for (size_t i = 0; i < rank; ++i)
      src += idx[i] * inStrides[perm[i]];
    out[o] = in[src];
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < outShape[i])
        break;
      idx[i] = 0;
    }
  }
}

/// tensor.extract_slice (and insert_slice with `insert`): the strided block
/// of `big` (shape `bigShape`) at offsets/sizes/strides <-> `small`.
template <typename T>
void sliceCopy(T *big, const Shape &bigShape, T *small, const Shape &offsets,
               const Shape &sizes, const Shape &strides, bool insert) {
  size_t rank = bigShape.size();
  Shape bigStrides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    bigStrides[d - 1] = bigStrides[d] * bigShape[d];
  int64_t n = numElements(sizes);
  Shape idx(rank, 0);
  for (int64_t s = 0; s < n; ++s) {
    int64_t b = 0;
    for (size_t d = 0; d < rank; ++d)
      b += (offsets[d] + idx[d] * strides[d]) * bigStrides[d];
    if (insert)
      big[b] = small[s];
    else
      small[s] = big[b];
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < sizes[d])
        break;
      idx[d] = 0;
    }
  }
}

/// tensor.concat of `parts` (shapes equal but for `dim`) along `dim`.
template <typename T>
void concat(const std::vector<const T *> &parts, const std::vector<Shape> &shapes,
            T *out, int64_t dim) {
  int64_t outer = prod(shapes[0], 0, dim);
  int64_t total = 0;
  for (const Shape &s : shapes)
    total += prod(s, dim, s.size());
  int64_t offset = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    int64_t chunk = prod(shapes[p], dim, shapes[p].size());
    for (int64_t o = 0; o < outer; ++o)
      std::copy(parts[p] + o * chunk, parts[p] + (o + 1) * chunk,
                out + o * total + offset);
    offset += chunk;
  }
}

/// Strides (in elements) for reading a tensor of shape `from` broadcast
/// (numpy rules, right-aligned) to `to`: 0 on broadcast dims.
inline Shape broadcastStrides(const Shape &from, const Shape &to) {
  Shape strides(to.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < from.size(); ++i) {
    size_t f = from.size() - 1 - i, t = to.size() - 1 - i;
    strides[t] = from[f] == 1 ? 0 : stride;
    stride *= from[f];
  }
  return strides;
}
inline int64_t broadcastOffset(int64_t linear, const Shape &to,
                               const Shape &strides) {
  int64_t offset = 0;
  for (size_t d = to.size(); d-- > 0;) {
    offset += (linear % to[d]) * strides[d];
    linear /= to[d];
  }
  return offset;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

/// linalg.softmax along `dim`.
template <typename T>
void softmax(const T *in, T *out, const Shape &shape, int64_t dim) {
  int64_t outer = prod(shape, 0, dim), n = shape[dim],
          inner = prod(shape, dim + 1, shape.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T *x = in + o * n * inner + i;
      T *y = out + o * n * inner + i;
      // In float for f16/bf16 (widen), as the CUDA kernel; each exp is
      // recomputed for the store, so in == out works.
      using W = decltype(widen(T()));
      W m = -std::numeric_limits<W>::infinity();
      for (int64_t k = 0; k < n; ++k)
        m = std::max(m, W(widen(x[k * inner])));
      W s = 0;
      for (int64_t k = 0; k < n; ++k)
        s += std::exp(W(widen(x[k * inner])) - m);
      for (int64_t k = 0; k < n; ++k)
        y[k * inner] = static_cast<T>(std::exp(W(widen(x[k * inner])) - m) / s);
    }
}

/// stp.layer_norm (bias may be null) and stp.rms_norm (`rms`): the dims
/// from `axis` on (`inner` elements, shape `innerShape`) are normalized;
/// scale/bias broadcast to innerShape.
template <typename T>
void norm(const T *x, const T *scale, const Shape &scaleShape, const T *bias,
          const Shape &biasShape, T *y, const Shape &shape, int64_t axis,
          float epsilon, bool rms) {
  Shape innerShape(shape.begin() + axis, shape.end());
  int64_t outer = prod(shape, 0, axis), inner = numElements(innerShape);
  Shape ss = broadcastStrides(scaleShape, innerShape);
  Shape bs = bias ? broadcastStrides(biasShape, innerShape) : Shape();
  for (int64_t o = 0; o < outer; ++o) {
    const T *xr = x + o * inner;
    T *yr = y + o * inner;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t i = 0; i < inner; ++i)
        mean += xr[i];
      mean /= inner;
    }
    for (int64_t i = 0; i < inner; ++i)
      var += (xr[i] - mean) * (xr[i] - mean);
    var /= inner;
    double inv = 1.0 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < inner; ++i) {
      double v = (xr[i] - mean) * inv * scale[broadcastOffset(i, innerShape, ss)];
      if (bias)
        v += bias[broadcastOffset(i, innerShape, bs)];
      yr[i] = static_cast<T>(v);
    }
  }
}

/// stp.attention. q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv], mask
/// (may be null) broadcast to [B,Hq,Sq,Skv], out [B,Hq,Sq,Dv].
template <typename T>
void attention(const T *q, const T *k, const T *v, const T *mask,
               const Shape &maskShape, T *out, int64_t B, int64_t Hq,
               int64_t Sq, int64_t D, int64_t Hkv, int64_t Skv, int64_t Dv,
               float scale, bool causal) {
  Shape scoreShape = {B, Hq, Sq, Skv};
  Shape ms = mask ? broadcastStrides(maskShape, scoreShape) : Shape();
  std::vector<double> s(Skv);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        const T *qr = q + ((b * Hq + h) * Sq + i) * D;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Skv; ++j) {
          if (causal && j > i + (Skv - Sq)) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const T *kr = k + ((b * Hkv + hk) * Skv + j) * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(qr[d]) * kr[d];
          dot *= scale;
          if (mask)
            dot += mask[broadcastOffset(((b * Hq + h) * Sq + i) * Skv + j,
                                        scoreShape, ms)];
          s[j] = dot;
          m = std::max(m, dot);
        }
        double sum = 0;
        for (int64_t j = 0; j < Skv; ++j) {
          s[j] = (s[j] == -std::numeric_limits<double>::infinity())
                     ? 0
                     : std::exp(s[j] - m);
          sum += s[j];
        }
        T *o = out + ((b * Hq + h) * Sq + i) * Dv;
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; ++j)
            acc += s[j] * v[((b * Hkv + hk) * Skv + j) * Dv + e];
          o[e] = static_cast<T>(acc / sum);
        }
      }
    }
}

/// stp.moe_route on n tokens of dim d, e experts: softmax of the router
/// logits, the k largest (ties: lower expert), optionally renormalized.
template <typename T>
void moeRoute(const T *tokens, const T *router, T *gates, int64_t *experts,
              int64_t n, int64_t d, int64_t e, int64_t k, bool normalize) {
  std::vector<double> p(e);
  std::vector<int64_t> order(e);
  for (int64_t t = 0; t < n; ++t) {
    double top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < e; ++j) {
      float acc = 0;
      for (int64_t h = 0; h < d; ++h)
        acc +=
            float(widen(tokens[t * d + h])) * float(widen(router[h * e + j]));
      p[j] = acc;
      top = std::max(top, p[j]);
    }
    for (int64_t j = 0; j < e; ++j)
      sum += (p[j] = std::exp(p[j] - top));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j)
      chosen += p[order[j]] / sum;
    for (int64_t j = 0; j < k; ++j) {
      double g = p[order[j]] / sum;
      gates[t * k + j] = static_cast<T>(normalize ? g / chosen : g);
      experts[t * k + j] = order[j];
    }
  }
}

/// stp.moe_dispatch: tokens [n, d] into buffer [e, c, d] (zero past each
/// expert's count), counts [e], slots [n, k] (-1: dropped); with `weights`
/// [n, k] each row scaled by its choice's weight.
template <typename T>
void moeDispatch(const T *tokens, const int64_t *experts, const T *weights,
                 T *buffer, int64_t *counts, int64_t *slots, int64_t n,
                 int64_t d, int64_t k, int64_t e, int64_t c) {
  std::fill(buffer, buffer + e * c * d, T(0));
  std::fill(counts, counts + e, int64_t(0));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int64_t x = experts[t * k + j];
      if (x < 0 || x >= e || counts[x] >= c) {
        slots[t * k + j] = -1;
        continue;
      }
      int64_t slot = counts[x]++;
      T *row = buffer + (x * c + slot) * d;
      if (weights)
        for (int64_t i = 0; i < d; ++i)
          row[i] = static_cast<T>(float(widen(weights[t * k + j])) *
                                  float(widen(tokens[t * d + i])));
      else
        std::copy(tokens + t * d, tokens + (t + 1) * d, row);
      slots[t * k + j] = slot;
    }
}

/// stp.moe_combine: out [n, d] = sum over a token's k choices of the gate
/// times its expert's output row.
template <typename T>
void moeCombine(const T *outputs, const int64_t *slots, const int64_t *experts,
                const T *gates, T *out, int64_t n, int64_t k, int64_t c,
                int64_t d) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i)
      out[t * d + i] = static_cast<T>(
          moeCombineElement(outputs, slots, experts, gates, t, i, k, c, d));
}

/// stp.moe_gate_grad: dg [n, k], each choice's expert output dotted with
/// the token's output gradient.
template <typename T>
void moeGateGrad(const T *outputs, const int64_t *slots, const int64_t *experts,
                 const T *dy, T *dg, int64_t n, int64_t k, int64_t c,
                 int64_t d) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j)
      dg[t * k + j] = static_cast<T>(
          moeGateGradElement(outputs, slots, experts, dy, t, j, k, c, d));
}

/// stp.moe_route_grad on n tokens of dim d, e experts, k choices: the
/// logits' gradient per token (moeLogitGrad, the softmax as moeRoute
/// computes it), then dTokens = dl router^T and dRouter = tokens^T dl.
template <typename T>
void moeRouteGrad(const T *tokens, const T *router, const int64_t *experts,
                  const T *dg, T *dTokens, T *dRouter, int64_t n, int64_t d,
                  int64_t e, int64_t k, bool normalize) {
  std::vector<float> p(e), dl(e), dr(d * e, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < e; ++j) {
      float acc = 0;
      for (int64_t h = 0; h < d; ++h)
        acc +=
            float(widen(tokens[t * d + h])) * float(widen(router[h * e + j]));
      p[j] = acc;
      top = std::max(top, acc);
    }
    for (int64_t j = 0; j < e; ++j)
      sum += (p[j] = std::exp(p[j] - top));
    for (int64_t j = 0; j < e; ++j)
      p[j] /= sum;
    for (int64_t x = 0; x < e; ++x)
      dl[x] =
          moeLogitGrad(p.data(), experts + t * k, dg + t * k, k, normalize, x);
    for (int64_t h = 0; h < d; ++h) {
      float acc = 0;
      float in = float(widen(tokens[t * d + h]));
      for (int64_t x = 0; x < e; ++x) {
        acc += dl[x] * float(widen(router[h * e + x]));
        dr[h * e + x] += in * dl[x];
      }
      dTokens[t * d + h] = static_cast<T>(acc);
    }
  }
  for (int64_t i = 0; i < d * e; ++i)
    dRouter[i] = static_cast<T>(dr[i]);
}

/// stp.topk along `axis`.
template <typename T>
void topk(const T *in, T *values, int64_t *indices, const Shape &shape,
          int64_t axis, int64_t k, bool largest) {
  int64_t outer = prod(shape, 0, axis), n = shape[axis],
          inner = prod(shape, axis + 1, shape.size());
  std::vector<int64_t> order(n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T *x = in + o * n * inner + i;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? x[a * inner] > x[b * inner] : x[a * inner] < x[b * inner];
      });
      for (int64_t j = 0; j < k; ++j) {
        values[(o * k + j) * inner + i] = x[order[j] * inner];
        indices[(o * k + j) * inner + i] = order[j];
      }
    }
}

/// stp.scatter_elements; `out` already holds a copy of data.
template <typename T, typename I>
void scatterElements(T *out, const Shape &dataShape, const I *indices,
                     const T *updates, const Shape &indexShape, int64_t axis,
                     int reduction) {
  size_t rank = dataShape.size();
  Shape strides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    strides[d - 1] = strides[d] * dataShape[d];
  int64_t n = numElements(indexShape);
  Shape idx(rank, 0);
  for (int64_t p = 0; p < n; ++p) {
    int64_t target = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t c = idx[d];
      if (int64_t(d) == axis) {
        c = static_cast<int64_t>(indices[p]);
        if (c < 0)
          c += dataShape[d];
      }
      target += c * strides[d];
    }
    T &t = out[target];
    switch (reduction) {
    case 0: t = updates[p]; break;
    case 1: t += updates[p]; break;
    case 2: t *= updates[p]; break;
    case 3: t = std::max(t, updates[p]); break;
    case 4: t = std::min(t, updates[p]); break;
    }
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < indexShape[d])
        break;
      idx[d] = 0;
    }
  }
}

//===----------------------------------------------------------------------===//
// Collectives (shard dialect semantics, docs/spmd-ir.md)
//===----------------------------------------------------------------------===//

template <typename T>
void allReduce(Context &ctx, const Shape &axes, Reduction r, const T *in,
               T *out, int64_t n) {
  if constexpr (isLowPrecision<T>) {
    // MPI has no 16-bit float: reduce in float, round once.
    std::vector<float> a(in, in + n), b(n);
    MPI_Allreduce(a.data(), b.data(), static_cast<int>(n), MPI_FLOAT, mpiOp(r),
                  ctx.comm(axes));
    std::copy(b.begin(), b.end(), out);
  } else {
    MPI_Allreduce(in, out, static_cast<int>(n), MpiType<T>::get(), mpiOp(r),
                  ctx.comm(axes));
  }
}

/// Concatenates the group's blocks (local shape `shape`) along `dim`.
template <typename T>
void allGather(Context &ctx, const Shape &axes, const T *in, T *out,
               const Shape &shape, int64_t dim) {
  int64_t g = ctx.groupSize(axes), n = numElements(shape);
  std::vector<T> tmp(g * n);
  MPI_Allgather(in, static_cast<int>(n), MpiType<T>::get(), tmp.data(),
                static_cast<int>(n), MpiType<T>::get(), ctx.comm(axes));
  int64_t pre = prod(shape, 0, dim);
  swap01(tmp.data(), out, g, pre, n / pre);
}

/// Sums over the group and keeps this device's block of `dim` (input
/// shape `shape`).
template <typename T>
void reduceScatter(Context &ctx, const Shape &axes, Reduction r, const T *in,
                   T *out, const Shape &shape, int64_t dim) {
  int64_t g = ctx.groupSize(axes), n = numElements(shape);
  int64_t pre = prod(shape, 0, dim);
  std::vector<T> tmp(n);
  swap01(in, tmp.data(), pre, g, n / pre / g);
  if constexpr (isLowPrecision<T>) {
    std::vector<float> a(tmp.begin(), tmp.end()), b(n / g);
    MPI_Reduce_scatter_block(a.data(), b.data(), static_cast<int>(n / g),
                             MPI_FLOAT, mpiOp(r), ctx.comm(axes));
    std::copy(b.begin(), b.end(), out);
  } else {
    MPI_Reduce_scatter_block(tmp.data(), out, static_cast<int>(n / g),
                             MpiType<T>::get(), mpiOp(r), ctx.comm(axes));
  }
}

/// Keeps this device's block of `dim` (input shape `shape`).
template <typename T>
void allSlice(Context &ctx, const Shape &axes, const T *in, T *out,
              const Shape &shape, int64_t dim) {
  int64_t g = ctx.groupSize(axes), gi = ctx.groupIndex(axes);
  int64_t pre = prod(shape, 0, dim), x = numElements(shape) / pre / g;
  for (int64_t p = 0; p < pre; ++p)
    std::copy(in + (p * g + gi) * x, in + (p * g + gi + 1) * x, out + p * x);
}

/// Splits `splitDim` into group-size blocks, sends block j to member j and
/// concatenates the received blocks along `concatDim`.
template <typename T>
void allToAll(Context &ctx, const Shape &axes, const T *in, T *out,
              const Shape &shape, int64_t splitDim, int64_t concatDim) {
  int64_t g = ctx.groupSize(axes), n = numElements(shape), chunk = n / g;
  int64_t preS = prod(shape, 0, splitDim);
  std::vector<T> send(n), recv(n);
  swap01(in, send.data(), preS, g, n / preS / g);
  MPI_Alltoall(send.data(), static_cast<int>(chunk), MpiType<T>::get(),
               recv.data(), static_cast<int>(chunk), MpiType<T>::get(),
               ctx.comm(axes));
  Shape block = shape;
  block[splitDim] /= g;
  int64_t preC = prod(block, 0, concatDim);
  swap01(recv.data(), out, g, preC, chunk / preC);
}

/// The rows of stp.moe_all_to_all through BaGuaLu's two-level exchange
/// (`intra_node_size` L: member w of the group of p sits on node w / L).
/// Phase 1, inside each node: w hands (node(w), local(q)) every block bound
/// for q. Phase 2, across nodes: (j, l) sends each (j', l) what its node
/// has for it, so every network message carries a node's rows at once.
/// `block(q, x)` points at the sendCounts[q * el + x] rows for local expert
/// x of member q; returns the received rows in (source, expert) order and
/// their counts in recvCounts, as the flat exchange leaves them. Each phase
/// sends its counts first (MPI_Alltoall), then the rows (MPI_Alltoallv;
/// members outside the phase's peers get nothing).
template <typename T, typename Block>
std::vector<T>
moeExchangeTwoLevel(MPI_Comm comm, int64_t me, int64_t p, int64_t l, int64_t el,
                    int64_t d, const std::vector<int64_t> &sendCounts,
                    Block block, std::vector<int64_t> &recvCounts) {
  const int64_t nodes = p / l, node = me / l, local = me % l;
  auto alltoallv = [&](const std::vector<T> &send, const std::vector<int> &sn,
                       const std::vector<int> &rn) {
    std::vector<int> sd(p, 0), rd(p, 0);
    for (int64_t v = 1; v < p; ++v) {
      sd[v] = sd[v - 1] + sn[v - 1];
      rd[v] = rd[v - 1] + rn[v - 1];
    }
    std::vector<T> recv(rd[p - 1] + rn[p - 1]);
    MPI_Alltoallv(send.data(), sn.data(), sd.data(), MpiType<T>::get(),
                  recv.data(), rn.data(), rd.data(), MpiType<T>::get(), comm);
    return recv;
  };
  // Phase 1: to peer v of this node, the blocks (j, x) of q = (j, local(v)).
  std::vector<int64_t> c1s = moePhase1Counts(me, p, l, el, sendCounts),
                       c1r(p * nodes * el, 0);
  std::vector<int> sn(p, 0), rn(p, 0);
  std::vector<T> send;
  for (int64_t v = node * l; v < (node + 1) * l; ++v) {
    size_t before = send.size();
    for (int64_t j = 0; j < nodes; ++j)
      for (int64_t x = 0; x < el; ++x) {
        int64_t q = j * l + v % l;
        send.insert(send.end(), block(q, x),
                    block(q, x) + c1s[(v * nodes + j) * el + x] * d);
      }
    sn[v] = static_cast<int>(send.size() - before);
  }
  MPI_Alltoall(c1s.data(), static_cast<int>(nodes * el), MPI_INT64_T,
               c1r.data(), static_cast<int>(nodes * el), MPI_INT64_T, comm);
  // stage holds, per member w of this node, its blocks (j, x) in order.
  std::vector<int64_t> at = moeRowStarts(c1r, d);
  for (int64_t w = 0; w < p; ++w)
    rn[w] = static_cast<int>(at[(w + 1) * nodes * el] - at[w * nodes * el]);
  std::vector<T> stage = alltoallv(send, sn, rn);
  // Phase 2: to (j, local), per member w = (node, k) of this node, the
  // blocks (j, x) it handed over.
  std::vector<int64_t> c2s = moePhase2Counts(me, p, l, el, c1r),
                       c2r(p * l * el, 0);
  std::fill(sn.begin(), sn.end(), 0);
  send.clear();
  for (int64_t j = 0; j < nodes; ++j) {
    size_t before = send.size();
    for (int64_t k = 0; k < l; ++k)
      for (int64_t x = 0; x < el; ++x) {
        int64_t i = ((node * l + k) * nodes + j) * el + x;
        send.insert(send.end(), stage.begin() + at[i],
                    stage.begin() + at[i + 1]);
      }
    sn[j * l + local] = static_cast<int>(send.size() - before);
  }
  MPI_Alltoall(c2s.data(), static_cast<int>(l * el), MPI_INT64_T, c2r.data(),
               static_cast<int>(l * el), MPI_INT64_T, comm);
  // From v = (j, local): the rows of w = (j, k) for k < l, in (w, x) order.
  for (int64_t v = 0; v < p; ++v) {
    rn[v] = 0;
    for (int64_t k = 0; k < l && v % l == local; ++k)
      for (int64_t x = 0; x < el; ++x) {
        int64_t n = c2r[(v * l + k) * el + x];
        recvCounts[((v / l) * l + k) * el + x] = n;
        rn[v] += static_cast<int>(n * d);
      }
  }
  return alltoallv(send, sn, rn);
}

/// stp.moe_all_to_all: the row counts (E / P per peer, MPI_Alltoall), then
/// only the used rows (MPI_Alltoallv), or both in two levels when
/// `intraNodeSize` L splits the group into nodes (moeExchangeTwoLevel).
/// Dispatch sends from the whole [E, C, D] buffer and receives into the
/// local [E / P, P * C, D] one; `reverse` the other way; with smart
/// scheduling only the pairs of `step` (moeStepPair). Unused rows of the
/// result are zero, or `init`'s.
template <typename T>
void moeAllToAll(Context &ctx, const Shape &axes, int64_t e, int64_t c,
                 int64_t d, bool reverse, int64_t g, int64_t step,
                 int64_t intraNodeSize, const T *rows, const int64_t *counts,
                 const T *init, T *outRows, int64_t *outCounts) {
  const int64_t p = ctx.groupSize(axes), el = e / p;
  MPI_Comm comm = ctx.comm(axes);
  int me = 0;
  MPI_Comm_rank(comm, &me);
  std::vector<int64_t> sendCounts(e), recvCounts(e);
  for (int64_t q = 0; q < p; ++q) {
    // Pairs of other steps send nothing (and so receive nothing).
    bool active = reverse ? moeStepPair(q, me, p, g, step)
                          : moeStepPair(me, q, p, g, step);
    for (int64_t x = 0; x < el; ++x)
      sendCounts[q * el + x] = !active   ? 0
                               : reverse ? counts[x * p + q]
                                         : counts[q * el + x];
  }
  auto block = [&](int64_t q, int64_t x) {
    return rows + moeRowOffset(!reverse, q, x, el, p, c) * d;
  };
  std::vector<T> recv;
  if (moeTwoLevel(intraNodeSize, p)) {
    recv = moeExchangeTwoLevel<T>(comm, me, p, intraNodeSize, el, d, sendCounts,
                                  block, recvCounts);
  } else {
    MPI_Alltoall(sendCounts.data(), static_cast<int>(el), MPI_INT64_T,
                 recvCounts.data(), static_cast<int>(el), MPI_INT64_T, comm);
    std::vector<int> sn(p), sd(p), rn(p), rd(p);
    std::vector<T> send;
    for (int64_t q = 0; q < p; ++q) {
      sd[q] = static_cast<int>(send.size());
      for (int64_t x = 0; x < el; ++x)
        send.insert(send.end(), block(q, x),
                    block(q, x) + sendCounts[q * el + x] * d);
      sn[q] = static_cast<int>(send.size()) - sd[q];
      rd[q] = q ? rd[q - 1] + rn[q - 1] : 0;
      rn[q] = 0;
      for (int64_t x = 0; x < el; ++x)
        rn[q] += static_cast<int>(recvCounts[q * el + x] * d);
    }
    recv.resize(p ? rd[p - 1] + rn[p - 1] : 0);
    MPI_Alltoallv(send.data(), sn.data(), sd.data(), MpiType<T>::get(),
                  recv.data(), rn.data(), rd.data(), MpiType<T>::get(), comm);
  }
  if (init)
    std::copy(init, init + e * c * d, outRows);
  else
    std::fill(outRows, outRows + e * c * d, T(0));
  const T *next = recv.data();
  for (int64_t q = 0; q < p; ++q)
    for (int64_t x = 0; x < el; ++x) {
      int64_t n = recvCounts[q * el + x];
      std::copy(next, next + n * d,
                outRows + moeRowOffset(reverse, q, x, el, p, c) * d);
      next += n * d;
      outCounts[reverse ? q * el + x : x * p + q] = n;
    }
}

/// An MPI transfer in flight.
struct Transfer {
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};
inline void wait(Transfer &t) {
  MPI_Waitall(2, t.requests, MPI_STATUSES_IGNORE);
}

/// shard.shift, started: the value at position p along `axis` moves to
/// p + offset. `in` and `out` must stay alive until wait().
template <typename T>
Transfer shiftStart(Context &ctx, int64_t axis, int64_t offset, bool rotate,
                    const T *in, T *out, int64_t n) {
  Transfer t;
  int to = ctx.neighbor(axis, offset, rotate);
  int from = ctx.neighbor(axis, -offset, rotate);
  MPI_Irecv(out, static_cast<int>(n), MpiType<T>::get(),
            from < 0 ? MPI_PROC_NULL : from, 0, MPI_COMM_WORLD,
            &t.requests[0]);
  MPI_Isend(in, static_cast<int>(n), MpiType<T>::get(),
            to < 0 ? MPI_PROC_NULL : to, 0, MPI_COMM_WORLD, &t.requests[1]);
  return t;
}

/// shard.shift: the value at position p along `axis` moves to p + offset.
template <typename T>
void shift(Context &ctx, int64_t axis, int64_t offset, bool rotate,
           const T *in, T *out, int64_t n) {
  int to = ctx.neighbor(axis, offset, rotate);
  int from = ctx.neighbor(axis, -offset, rotate);
  MPI_Sendrecv(in, static_cast<int>(n), MpiType<T>::get(),
               to < 0 ? MPI_PROC_NULL : to, 0, out, static_cast<int>(n),
               MpiType<T>::get(), from < 0 ? MPI_PROC_NULL : from, 0,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}


//===----------------------------------------------------------------------===//
// Collectives as -stp-lower-collectives calls them (the same calls as the
// cuda runtime's): `ready` and `done` are the events
// -stp-schedule-collectives assigned; `in` and `out` the planned buffers.
// Here every collective is a blocking MPI call except ringShift, which
// completes at waitTransfer(ctx, done).
//===----------------------------------------------------------------------===//

template <typename T>
void allReduce(Context &ctx, int64_t, int64_t, const Shape &axes, Reduction r,
               const Tensor<T> &in, const Tensor<T> &out) {
  allReduce(ctx, axes, r, in.data(), out.data(), in.size);
}
template <typename T>
void allGather(Context &ctx, int64_t, int64_t, const Shape &axes,
               const Shape &shape, int64_t dim, const Tensor<T> &in,
               const Tensor<T> &out) {
  allGather(ctx, axes, in.data(), out.data(), shape, dim);
}
template <typename T>
void reduceScatter(Context &ctx, int64_t, int64_t, const Shape &axes,
                   Reduction r, const Shape &shape, int64_t dim,
                   const Tensor<T> &in, const Tensor<T> &out) {
  reduceScatter(ctx, axes, r, in.data(), out.data(), shape, dim);
}
template <typename T>
void allToAll(Context &ctx, int64_t, int64_t, const Shape &axes,
              const Shape &shape, int64_t splitDim, int64_t concatDim,
              const Tensor<T> &in, const Tensor<T> &out) {
  allToAll(ctx, axes, in.data(), out.data(), shape, splitDim, concatDim);
}
/// stp.moe_all_to_all (blocking, as allToAll).
template <typename T>
void moeAllToAll(Context &ctx, int64_t, int64_t, const Shape &axes, int64_t e,
                 int64_t c, int64_t d, bool reverse, int64_t g, int64_t step,
                 int64_t intraNodeSize, const Tensor<T> &rows,
                 const Tensor<int64_t> &counts, const Tensor<T> &outRows,
                 const Tensor<int64_t> &outCounts) {
  moeAllToAll(ctx, axes, e, c, d, reverse, g, step, intraNodeSize, rows.data(),
              counts.data(), static_cast<const T *>(nullptr), outRows.data(),
              outCounts.data());
}
/// The same with `init` (a smart-scheduled return after its first step).
template <typename T>
void moeAllToAll(Context &ctx, int64_t, int64_t, const Shape &axes, int64_t e,
                 int64_t c, int64_t d, bool reverse, int64_t g, int64_t step,
                 int64_t intraNodeSize, const Tensor<T> &rows,
                 const Tensor<int64_t> &counts, const Tensor<T> &init,
                 const Tensor<T> &outRows, const Tensor<int64_t> &outCounts) {
  moeAllToAll(ctx, axes, e, c, d, reverse, g, step, intraNodeSize, rows.data(),
              counts.data(), init.data(), outRows.data(), outCounts.data());
}
/// stp.moe_shadow_broadcast (FasterMoE Sec. 4.1): row i of `out`
/// [S, A, B] becomes shadowed expert experts[i]'s weights, broadcast from
/// its owner (member experts[i] / El of the group, El = the rows of
/// `weights` [El, A, B]; MPI_Bcast per expert, blocking).
template <typename T>
void moeShadowBroadcast(Context &ctx, int64_t, int64_t, const Shape &axes,
                        int64_t, const Shape &experts, const Tensor<T> &weights,
                        const Tensor<T> &out) {
  const int64_t s = static_cast<int64_t>(experts.size());
  const int64_t n = out.size / s, el = weights.size / n;
  MPI_Comm comm = ctx.comm(axes);
  int me = 0;
  MPI_Comm_rank(comm, &me);
  for (int64_t i = 0; i < s; ++i) {
    const int owner = static_cast<int>(experts[i] / el);
    T *row = out.data() + i * n;
    if (owner == me)
      std::copy_n(weights.data() + (experts[i] % el) * n, n, row);
    MPI_Bcast(row, static_cast<int>(n * sizeof(T)), MPI_BYTE, owner, comm);
  }
}
/// stp.moe_shadow_reduce: `out` = `local` [El, A, B] plus, in the row of
/// each shadowed expert this device owns, the group's sum of that
/// expert's `partial` row (MPI_Reduce rooted at the owner, blocking;
/// summed in double for every element type).
template <typename T>
void moeShadowReduce(Context &ctx, int64_t, int64_t, const Shape &axes, int64_t,
                     const Shape &experts, const Tensor<T> &partial,
                     const Tensor<T> &local, const Tensor<T> &out) {
  const int64_t s = static_cast<int64_t>(experts.size());
  const int64_t n = partial.size / s, el = local.size / n;
  MPI_Comm comm = ctx.comm(axes);
  int me = 0;
  MPI_Comm_rank(comm, &me);
  if (out.data() != local.data())
    std::copy_n(local.data(), local.size, out.data());
  std::vector<double> in(n), sum(n);
  for (int64_t i = 0; i < s; ++i) {
    const int owner = static_cast<int>(experts[i] / el);
    std::copy_n(partial.data() + i * n, n, in.data());
    MPI_Reduce(in.data(), sum.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
               owner, comm);
    if (owner != me)
      continue;
    T *row = out.data() + (experts[i] % el) * n;
    for (int64_t j = 0; j < n; ++j)
      row[j] = static_cast<T>(static_cast<double>(row[j]) + sum[j]);
  }
}
/// shard.all_slice: a local copy of this device's block.
template <typename T>
void allSlice(Context &ctx, const Shape &axes, const Shape &shape,
              int64_t dim, const Tensor<T> &in, const Tensor<T> &out) {
  allSlice(ctx, axes, in.data(), out.data(), shape, dim);
}
/// shard.shift, started (MPI_Irecv/MPI_Isend); `in` and `out` stay alive
/// (the memory plan keeps them) until waitTransfer(ctx, done).
template <typename T>
void ringShift(Context &ctx, int64_t, int64_t done, int64_t axis,
               int64_t offset, bool rotate, const Tensor<T> &in,
               const Tensor<T> &out) {
  Transfer t = shiftStart(ctx, axis, offset, rotate, in.data(), out.data(),
                          in.size);
  ctx.transfers[done] = {t.requests[0], t.requests[1]};
}
/// stp.grid_permute, started (MPI_Irecv/MPI_Isend to the computed peers);
/// completed by waitTransfer(ctx, done) like ringShift.
template <typename T>
void gridPermute(Context &ctx, int64_t, int64_t done, const Shape &axes,
                 const Shape &sources, const Tensor<T> &in,
                 const Tensor<T> &out) {
  auto [from, to] = ctx.permutePeers(axes, sources);
  MPI_Request requests[2];
  MPI_Irecv(out.data(), static_cast<int>(out.size), MpiType<T>::get(), from, 0,
            MPI_COMM_WORLD, &requests[0]);
  MPI_Isend(in.data(), static_cast<int>(in.size), MpiType<T>::get(), to, 0,
            MPI_COMM_WORLD, &requests[1]);
  ctx.transfers[done] = {requests[0], requests[1]};
}
/// The MPI tag of pipeline transfer `id` (MPI guarantees tags up to
/// 32767; Open MPI allows up to MPI_TAG_UB, about 2^31).
inline int transferTag(int64_t id) {
  static const int64_t bound = [] {
    void *value = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    return flag && value ? int64_t(*static_cast<int *>(value)) + 1
                         : int64_t(32768);
  }();
  return static_cast<int>(id % bound);
}
/// A transfer group (stp.transfer_group): its sends and receives are
/// posted together and groupEnd waits for all of them. Sends are
/// synchronous (MPI_Issend completes only once the receive is posted), so
/// the program has the rendezvous semantics of an NCCL group on the cuda
/// target: if these groups deadlock, so would the cuda program.
inline void groupStart(Context &ctx) { ctx.inGroup = true; }
inline void groupEnd(Context &ctx) {
  MPI_Waitall(static_cast<int>(ctx.groupRequests.size()),
              ctx.groupRequests.data(), MPI_STATUSES_IGNORE);
  ctx.groupRequests.clear();
  ctx.inGroup = false;
}
/// shard.send between pipeline ranks (-stp-pipeline-stages): `in` goes to
/// the device at index `peer` on grid axis `axis` (the other coordinates
/// equal), tagged with the transfer id. `in` stays unchanged until the
/// group ends (-stp-plan-memory keeps its buffer until the op's result is
/// waited for, right after the group). `out` (the op's result) is `in`.
template <typename T>
void sendTo(Context &ctx, int64_t, int64_t, int64_t axis, int64_t peer,
            int64_t tag, const Tensor<T> &in, const Tensor<T> &out) {
  MPI_Request request;
  MPI_Issend(in.data(), static_cast<int>(in.size), MpiType<T>::get(),
             ctx.groupMember(Shape{axis}, peer), transferTag(tag),
             MPI_COMM_WORLD, &request);
  ctx.groupRequests.push_back(request);
  if (out.data() != in.data())
    std::copy(in.data(), in.data() + in.size, out.data());
  if (!ctx.inGroup)
    groupEnd(ctx);
}
/// shard.recv between pipeline ranks: the transfer `tag` from the device
/// at index `peer` on grid axis `axis`, complete when the group ends.
template <typename T>
void recvFrom(Context &ctx, int64_t, int64_t, int64_t axis, int64_t peer,
              int64_t tag, const Tensor<T> &, const Tensor<T> &out) {
  MPI_Request request;
  MPI_Irecv(out.data(), static_cast<int>(out.size), MpiType<T>::get(),
            ctx.groupMember(Shape{axis}, peer), transferTag(tag),
            MPI_COMM_WORLD, &request);
  ctx.groupRequests.push_back(request);
  if (!ctx.inGroup)
    groupEnd(ctx);
}
/// Before the first use of a transfer's result: completes a ring shift or
/// grid permutation (the other collectives have completed already).
inline void waitTransfer(Context &ctx, int64_t done) {
  auto it = ctx.transfers.find(done);
  if (it == ctx.transfers.end())
    return;
  MPI_Request requests[2] = {it->second.first, it->second.second};
  MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
  ctx.transfers.erase(it);
}

} // namespace stpar_rt



//===----------------------------------------------------------------------===//
// The entry points the emitted program calls (same names and arguments as
// the cuda target's runtime; the context carries the grid and, there, the
// streams).
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_CPU_ENTRY_POINTS
#define STPAR_RUNTIME_CPU_ENTRY_POINTS
namespace stpar_rt {
/// A profile mark before an op of the emitted function (STPAR_PROFILE).
inline void profile(Context &ctx, const char *label) { ctx.mark(label); }
template <typename T> Tensor<T> alloc(Context &, int64_t n) { return alloc<T>(n); }
template <typename T> Tensor<T> clone(Context &, const Tensor<T> &t) { return clone(t); }
template <typename T> Tensor<T> fromHost(Context &, const T *v, int64_t n) {
  return fromHost(v, n);
}
template <typename T> Tensor<T> full(Context &, int64_t n, T v) { return full(n, v); }
template <typename T> T readScalar(Context &, const Tensor<T> &t, int64_t i) {
  return t.data()[i];
}
/// A tensor of `n` elements at byte `offset` of the arena (a view: the
/// arena owns the memory), zero-filled.
template <typename T> Tensor<T> at(Context &ctx, uint64_t offset, int64_t n) {
  Tensor<T> t;
  t.size = n;
  T *p = reinterpret_cast<T *>(
      ctx.arena.at(offset, sizeof(T) * std::max<int64_t>(n, 1)));
  std::fill(p, p + n, T());
  t.buffer = std::shared_ptr<T>(std::shared_ptr<T>(), p);
  return t;
}
/// A copy of `src` at byte `offset` of the arena.
template <typename T>
Tensor<T> cloneAt(Context &ctx, uint64_t offset, const Tensor<T> &src) {
  Tensor<T> t;
  t.size = src.size;
  T *p = reinterpret_cast<T *>(
      ctx.arena.at(offset, sizeof(T) * std::max<int64_t>(src.size, 1)));
  if (p != src.data())
    std::copy(src.data(), src.data() + src.size, p);
  t.buffer = std::shared_ptr<T>(std::shared_ptr<T>(), p);
  return t;
}
template <typename T>
Tensor<T> fullAt(Context &ctx, uint64_t offset, int64_t n, T v) {
  Tensor<T> t = at<T>(ctx, offset, n);
  std::fill(t.data(), t.data() + n, v);
  return t;
}
template <typename T>
Tensor<T> fromHostAt(Context &ctx, uint64_t offset, const T *v, int64_t n) {
  Tensor<T> t = at<T>(ctx, offset, n);
  std::copy(v, v + n, t.data());
  return t;
}
template <typename T>
Tensor<T> loadParam(Context &ctx, uint64_t at_, const char *name,
                    const char *file, uint64_t offset, const Shape &global,
                    const Shape &local, const Shape &offsets) {
  Tensor<T> t = at<T>(ctx, at_, numElements(local));
  ctx.weights.read(name, file, offset, sizeof(T), global, local, offsets,
                   t.data());
  return t;
}
template <typename T>
Tensor<T> loadInput(Context &ctx, uint64_t at_, int index,
                    const Shape &global, const Shape &local,
                    const Shape &offsets) {
  Tensor<T> t = at<T>(ctx, at_, numElements(local));
  readInput(ctx.options, index, sizeof(T), global, local, offsets, t.data());
  return t;
}
/// Writes output `index` from world rank `writer` (a pipelined program's
/// result comes from the pipeline rank that computes it).
template <typename T>
void storeOutput(Context &ctx, int index, const Tensor<T> &t, int writer = 0) {
  if (ctx.rank == writer)
    writeOutput(ctx.options, index, t.data(), t.size * sizeof(T));
}
/// C += op(X) * op(Y) with the semantics of cublasGemmStridedBatchedEx
/// (column-major, leading dims, batch strides, alpha = beta = 1), so the
/// cpu target runs the contraction mapping the cuda target sends to cuBLAS.
/// X and Y are f32, or bf16 (-stp-mixed-precision) widened to f32; the sum
/// is f32 either way (CUBLAS_COMPUTE_32F).
template <typename T>
void gemm(Context &, bool transX, bool transY, int64_t rows, int64_t cols,
          int64_t k, const T *x, int64_t ldx, int64_t strideX, const T *y,
          int64_t ldy, int64_t strideY, float *c, int64_t ldc, int64_t strideC,
          int64_t batch) {
  for (int64_t b = 0; b < batch; ++b) {
    const T *xb = x + b * strideX, *yb = y + b * strideY;
    float *cb = c + b * strideC;
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < rows; ++i) {
        float acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += float(widen(transX ? xb[p + i * ldx] : xb[i + p * ldx])) *
                 float(widen(transY ? yb[j + p * ldy] : yb[p + j * ldy]));
        cb[i + j * ldc] += acc;
      }
  }
}

/// `src` (n elements) as GEMM operands of type Op: itself where Op is T,
/// else a rounded copy in `dst` (mixed precision).
template <typename Op, typename T>
const Op *moeOperand(const T *src, int64_t n, std::vector<Op> &dst) {
  if constexpr (std::is_same_v<Op, T>) {
    return src;
  } else {
    dst.resize(n);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<Op>(float(widen(src[i])));
    return dst.data();
  }
}

/// stp.moe_experts: el local experts, each with p segments of s / p rows
/// of which counts[expert * p + segment] are used; wMul may be null. The
/// products of the cuda target's three grouped GEMMs, one `gemm` (cuBLAS
/// semantics) per (expert, segment) pair with n > 0 used rows and stage:
/// A[n, f] = rows @ wIn[x] (U likewise with wMul), then H = act(A) (* U)
/// in the operand type for all rows, then O[n, d] = H @ wOut[x]; A, U, H
/// and O laid out like the buffer, unused rows zero. Op is the GEMM
/// operand type: T, or bf16 under -stp-mixed-precision (rows and weights
/// rounded into copies first; with Op = T they are read in place).
/// `keptA`, `keptU` (training; may be null): A and U stored for the
/// backward.
template <typename Op, typename T>
void moeExpertsAs(Context &ctx, const T *buffer, const int64_t *counts,
                  const T *wIn, const T *wMul, const T *wOut, T *out, T *keptA,
                  T *keptU, int64_t el, int64_t s, int64_t p, int64_t d,
                  int64_t f, int activation) {
  const int64_t c = s / p;
  std::vector<float> a(el * s * f, 0.0f), u(wMul ? el * s * f : 0, 0.0f),
      o(el * s * d, 0.0f);
  std::vector<Op> h(el * s * f), rows, wi, wm, wo;
  auto operand = [](const T *src, int64_t n, std::vector<Op> &dst) {
    return moeOperand<Op>(src, n, dst);
  };
  const Op *rows_ = operand(buffer, el * s * d, rows);
  const Op *wIn_ = operand(wIn, el * d * f, wi);
  const Op *wMul_ = wMul ? operand(wMul, el * d * f, wm) : nullptr;
  const Op *wOut_ = operand(wOut, el * f * d, wo);
  // Row-major [n, d] x [d, f] is column-major [f, d] x [d, n].
  auto eachPair = [&](auto &&body) {
    for (int64_t x = 0; x < el; ++x)
      for (int64_t g = 0; g < p; ++g)
        if (int64_t n = std::min(c, counts[x * p + g]); n > 0)
          body(x, x * s + g * c, n);
  };
  eachPair([&](int64_t x, int64_t row, int64_t n) {
    gemm(ctx, false, false, f, n, d, wIn_ + x * d * f, f, 0, rows_ + row * d, d,
         0, a.data() + row * f, f, 0, 1);
  });
  if (wMul_)
    eachPair([&](int64_t x, int64_t row, int64_t n) {
      gemm(ctx, false, false, f, n, d, wMul_ + x * d * f, f, 0, rows_ + row * d,
           d, 0, u.data() + row * f, f, 0, 1);
    });
  for (int64_t i = 0; i < el * s * f; ++i)
    h[i] = static_cast<Op>(moeActivation(activation, a[i]) *
                           (wMul_ ? u[i] : 1.0f));
  eachPair([&](int64_t x, int64_t row, int64_t n) {
    gemm(ctx, false, false, d, n, f, wOut_ + x * f * d, d, 0,
         h.data() + row * f, f, 0, o.data() + row * d, d, 0, 1);
  });
  for (int64_t i = 0; i < el * s * d; ++i)
    out[i] = static_cast<T>(o[i]);
  for (int64_t i = 0; keptA && i < el * s * f; ++i)
    keptA[i] = static_cast<T>(a[i]);
  for (int64_t i = 0; keptU && wMul_ && i < el * s * f; ++i)
    keptU[i] = static_cast<T>(u[i]);
}

/// Row-major C[m, n] += op(P)[m, k] op(Q)[k, n] through the column-major
/// `gemm` (C^T = op(Q)^T op(P)^T); P is stored [m, k], or [k, m] when
/// `transP`, Q likewise.
template <typename T>
void rowMajorGemm(Context &ctx, bool transP, bool transQ, int64_t m, int64_t n,
                  int64_t k, const T *pm, const T *q, float *c) {
  gemm(ctx, transQ, transP, n, m, k, q, transQ ? k : n, 0, pm, transP ? m : k,
       0, c, n, 0, 1);
}

/// stp.moe_experts_grad: the backward of moeExpertsAs on the same rows:
/// per (expert, segment) pair with used rows, A and U recomputed, then
/// dW_out += H^T dO, dH = dO W_out^T, dA = dH (* U) act'(A), dU = dH
/// act(A), dW_in += X^T dA, dW_mul += X^T dU, dX = dA W_in^T (+ dU
/// W_mul^T); unused rows of dX zero. Op is the GEMM operand type: T, or
/// bf16 under -stp-mixed-precision (the rows, output gradients and weights
/// rounded into copies, H, dA and dU rounded as they are made); the sums
/// are f32. With `keptA` (and `keptU`), A and U are read as the forward
/// kept them instead of recomputed.
template <typename Op, typename T>
void moeExpertsGradAs(Context &ctx, const T *buffer, const T *dOut,
                      const int64_t *counts, const T *wIn, const T *wMul,
                      const T *wOut, const T *keptA, const T *keptU, T *dRows,
                      T *dWIn, T *dWMul, T *dWOut, int64_t el, int64_t s,
                      int64_t p, int64_t d, int64_t f, int activation) {
  const int64_t c = s / p;
  std::vector<float> dwi(el * d * f, 0.0f), dwm(wMul ? el * d * f : 0, 0.0f),
      dwo(el * f * d, 0.0f), dx(el * s * d, 0.0f);
  std::vector<float> a, u, dh;
  std::vector<Op> h, da, du, rows, grads, wi, wm, wo;
  auto operand = [](const T *src, int64_t n, std::vector<Op> &dst) {
    return moeOperand<Op>(src, n, dst);
  };
  const Op *rows_ = operand(buffer, el * s * d, rows);
  const Op *dOut_ = operand(dOut, el * s * d, grads);
  const Op *wIn_ = operand(wIn, el * d * f, wi);
  const Op *wMul_ = wMul ? operand(wMul, el * d * f, wm) : nullptr;
  const Op *wOut_ = operand(wOut, el * f * d, wo);
  for (int64_t x = 0; x < el; ++x)
    for (int64_t g = 0; g < p; ++g) {
      int64_t n = std::min(c, counts[x * p + g]);
      if (n <= 0)
        continue;
      int64_t row = x * s + g * c;
      const Op *xr = rows_ + row * d, *dO = dOut_ + row * d;
      const Op *w1 = wIn_ + x * d * f, *w2 = wOut_ + x * f * d;
      const Op *w3 = wMul_ ? wMul_ + x * d * f : nullptr;
      a.assign(n * f, 0.0f);
      u.assign(w3 ? n * f : 0, 0.0f);
      dh.assign(n * f, 0.0f);
      auto recall = [&](const T *kept, std::vector<float> &to) {
        for (int64_t i = 0; i < n * f; ++i)
          to[i] = float(widen(kept[row * f + i]));
      };
      if (keptA)
        recall(keptA, a);
      else
        rowMajorGemm(ctx, false, false, n, f, d, xr, w1, a.data());
      if (w3 && keptU)
        recall(keptU, u);
      else if (w3)
        rowMajorGemm(ctx, false, false, n, f, d, xr, w3, u.data());
      h.resize(n * f);
      for (int64_t i = 0; i < n * f; ++i)
        h[i] = static_cast<Op>(moeActivation(activation, a[i]) *
                               (w3 ? u[i] : 1.0f));
      rowMajorGemm(ctx, true, false, f, d, n, h.data(), dO,
                   dwo.data() + x * f * d);
      rowMajorGemm(ctx, false, true, n, f, d, dO, w2, dh.data());
      da.resize(n * f);
      du.resize(w3 ? n * f : 0);
      for (int64_t i = 0; i < n * f; ++i) {
        float grad = dh[i] * (w3 ? u[i] : 1.0f);
        da[i] = static_cast<Op>(grad * moeActivationGrad(activation, a[i]));
        if (w3)
          du[i] = static_cast<Op>(dh[i] * moeActivation(activation, a[i]));
      }
      rowMajorGemm(ctx, true, false, d, f, n, xr, da.data(),
                   dwi.data() + x * d * f);
      if (w3)
        rowMajorGemm(ctx, true, false, d, f, n, xr, du.data(),
                     dwm.data() + x * d * f);
      rowMajorGemm(ctx, false, true, n, d, f, da.data(), w1,
                   dx.data() + row * d);
      if (w3)
        rowMajorGemm(ctx, false, true, n, d, f, du.data(), w3,
                     dx.data() + row * d);
    }
  auto store = [](const std::vector<float> &from, T *to) {
    for (size_t i = 0; i < from.size(); ++i)
      to[i] = static_cast<T>(from[i]);
  };
  store(dx, dRows);
  store(dwi, dWIn);
  if (wMul)
    store(dwm, dWMul);
  store(dwo, dWOut);
}

/// The call -stp-lower-contractions makes: the same product into the
/// result's buffer `c` (which holds the init), operands as buffers.
template <typename T>
void gemm(Context &ctx, bool transX, bool transY, int64_t rows, int64_t cols,
          int64_t k, const Tensor<T> &x, int64_t ldx, int64_t strideX,
          const Tensor<T> &y, int64_t ldy, int64_t strideY, int64_t ldc,
          int64_t strideC, int64_t batch, const Tensor<float> &c) {
  gemm(ctx, transX, transY, rows, cols, k, x.data(), ldx, strideX, y.data(),
       ldy, strideY, c.data(), ldc, strideC, batch);
}
template <typename T>
void transpose(Context &, const Tensor<T> &in, Tensor<T> &out, const Shape &s,
               const Shape &perm) {
  transpose(in.data(), out.data(), s, perm);
}
template <typename T>
void extractSlice(Context &, const Tensor<T> &in, const Shape &inShape,
                  Tensor<T> &out, const Shape &offsets, const Shape &sizes,
                  const Shape &strides) {
  sliceCopy(in.data(), inShape, out.data(), offsets, sizes, strides, false);
}
template <typename T>
void insertSlice(Context &, const Tensor<T> &src, Tensor<T> &dest,
                 const Shape &destShape, const Shape &offsets,
                 const Shape &sizes, const Shape &strides) {
  sliceCopy(dest.data(), destShape, src.data(), offsets, sizes, strides, true);
}
template <typename T>
void concat(Context &, const std::vector<Tensor<T>> &parts,
            const std::vector<Shape> &shapes, Tensor<T> &out, int64_t dim) {
  std::vector<const T *> ptrs;
  for (const Tensor<T> &p : parts)
    ptrs.push_back(p.data());
  concat(ptrs, shapes, out.data(), dim);
}
template <typename T>
void softmax(Context &, const Tensor<T> &in, Tensor<T> &out, const Shape &s,
             int64_t dim) {
  softmax(in.data(), out.data(), s, dim);
}
template <typename T>
void layerNorm(Context &, const Tensor<T> &x, const Tensor<T> &scale,
               const Shape &scaleShape, const Tensor<T> *bias,
               const Shape &biasShape, Tensor<T> &y, const Shape &shape,
               int64_t axis, float eps) {
  norm(x.data(), scale.data(), scaleShape, bias ? bias->data() : nullptr,
       biasShape, y.data(), shape, axis, eps, false);
}
template <typename T>
void rmsNorm(Context &, const Tensor<T> &x, const Tensor<T> &scale,
             const Shape &scaleShape, Tensor<T> &y, const Shape &shape,
             int64_t axis, float eps) {
  norm(x.data(), scale.data(), scaleShape, (const T *)nullptr, Shape(),
       y.data(), shape, axis, eps, true);
}
template <typename T>
void attention(Context &, const Tensor<T> &q, const Tensor<T> &k,
               const Tensor<T> &v, const Tensor<T> *mask, const Shape &maskShape,
               Tensor<T> &out, int64_t B, int64_t Hq, int64_t Sq, int64_t D,
               int64_t Hkv, int64_t Skv, int64_t Dv, float scale, bool causal) {
  attention(q.data(), k.data(), v.data(), mask ? mask->data() : nullptr,
            maskShape, out.data(), B, Hq, Sq, D, Hkv, Skv, Dv, scale, causal);
}
template <typename T>
void moeRoute(Context &, const Tensor<T> &tokens, const Tensor<T> &router,
              Tensor<T> &gates, Tensor<int64_t> &experts, int64_t n, int64_t d,
              int64_t e, int64_t k, bool normalize) {
  moeRoute(tokens.data(), router.data(), gates.data(), experts.data(), n, d, e,
           k, normalize);
}
template <typename T>
void moeDispatch(Context &, const Tensor<T> &tokens,
                 const Tensor<int64_t> &experts, const Tensor<T> *weights,
                 Tensor<T> &buffer, Tensor<int64_t> &counts,
                 Tensor<int64_t> &slots, int64_t n, int64_t d, int64_t k,
                 int64_t e, int64_t c) {
  moeDispatch(tokens.data(), experts.data(),
              weights ? weights->data() : nullptr, buffer.data(), counts.data(),
              slots.data(), n, d, k, e, c);
}
template <typename T>
void moeExpertsGrad(Context &ctx, const Tensor<T> &buffer,
                    const Tensor<T> &dOut, const Tensor<int64_t> &counts,
                    const Tensor<T> &wIn, const Tensor<T> *wMul,
                    const Tensor<T> &wOut, const Tensor<T> *keptA,
                    const Tensor<T> *keptU, Tensor<T> &dRows, Tensor<T> &dWIn,
                    Tensor<T> *dWMul, Tensor<T> &dWOut, int64_t el, int64_t s,
                    int64_t p, int64_t d, int64_t f, int activation,
                    bool bf16Operands) {
  auto run = [&](auto op) {
    moeExpertsGradAs<decltype(op)>(
        ctx, buffer.data(), dOut.data(), counts.data(), wIn.data(),
        wMul ? wMul->data() : nullptr, wOut.data(),
        keptA ? keptA->data() : nullptr, keptU ? keptU->data() : nullptr,
        dRows.data(), dWIn.data(), dWMul ? dWMul->data() : nullptr,
        dWOut.data(), el, s, p, d, f, activation);
  };
  if (bf16Operands)
    run(bf16());
  else
    run(T());
}
template <typename T>
void moeGateGrad(Context &, const Tensor<T> &outputs,
                 const Tensor<int64_t> &slots, const Tensor<int64_t> &experts,
                 const Tensor<T> &dy, Tensor<T> &dg, int64_t n, int64_t k,
                 int64_t c, int64_t d) {
  moeGateGrad(outputs.data(), slots.data(), experts.data(), dy.data(),
              dg.data(), n, k, c, d);
}
template <typename T>
void moeRouteGrad(Context &, const Tensor<T> &tokens, const Tensor<T> &router,
                  const Tensor<int64_t> &experts, const Tensor<T> &dg,
                  Tensor<T> &dTokens, Tensor<T> &dRouter, int64_t n, int64_t d,
                  int64_t e, int64_t k, bool normalize) {
  moeRouteGrad(tokens.data(), router.data(), experts.data(), dg.data(),
               dTokens.data(), dRouter.data(), n, d, e, k, normalize);
}
template <typename T>
void moeExperts(Context &ctx, const Tensor<T> &buffer,
                const Tensor<int64_t> &counts, const Tensor<T> &wIn,
                const Tensor<T> *wMul, const Tensor<T> &wOut, Tensor<T> &out,
                Tensor<T> *keptA, Tensor<T> *keptU, int64_t el, int64_t s,
                int64_t p, int64_t d, int64_t f, int activation,
                bool bf16Operands) {
  auto run = [&](auto op) {
    moeExpertsAs<decltype(op)>(ctx, buffer.data(), counts.data(), wIn.data(),
                               wMul ? wMul->data() : nullptr, wOut.data(),
                               out.data(), keptA ? keptA->data() : nullptr,
                               keptU ? keptU->data() : nullptr, el, s, p, d, f,
                               activation);
  };
  if (bf16Operands)
    run(bf16());
  else
    run(T());
}
template <typename T>
void moeCombine(Context &, const Tensor<T> &outputs,
                const Tensor<int64_t> &slots, const Tensor<int64_t> &experts,
                const Tensor<T> &gates, Tensor<T> &out, int64_t n, int64_t k,
                int64_t c, int64_t d) {
  moeCombine(outputs.data(), slots.data(), experts.data(), gates.data(),
             out.data(), n, k, c, d);
}
template <typename T>
void topk(Context &, const Tensor<T> &in, Tensor<T> &values,
          Tensor<int64_t> &indices, const Shape &shape, int64_t axis, int64_t k,
          bool largest) {
  topk(in.data(), values.data(), indices.data(), shape, axis, k, largest);
}
template <typename T, typename I>
void scatterElements(Context &, Tensor<T> &out, const Shape &dataShape,
                     const Tensor<I> &indices, const Tensor<T> &updates,
                     const Shape &indexShape, int64_t axis, int reduction) {
  scatterElements(out.data(), dataShape, indices.data(), updates.data(),
                  indexShape, axis, reduction);
}
} // namespace stpar_rt
#endif // STPAR_RUNTIME_CPU_ENTRY_POINTS
#endif // STPAR_RUNTIME_CPU_H
