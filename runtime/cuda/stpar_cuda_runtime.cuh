//===- stpar_cuda_runtime.cuh - runtime of the cuda target ------*- CUDA -*-===//
//
// Part of stpar. Copied next to every program `stpar emit --target cuda`
// writes. Device tensors, the device grid (MPI for the launch and the NCCL
// unique id, NCCL communicators per set of grid axes split from one world
// communicator), one compute and one communication stream, cuBLAS for
// contractions and simple kernels for the other ops: one thread per output
// element or row, written for correctness and clarity, not peak speed.
// Row-major, statically shaped. Entry points match runtime/cpu.
//
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_CUDA_H
#define STPAR_RUNTIME_CUDA_H

#include "stpar_grid.h"
#include "stpar_io.h"
#include "stpar_scalar.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
// STPAR_WITHOUT_MPI (CMake option STPAR_WITH_MPI=OFF): a one-rank program
// started without mpirun, for a single-GPU machine that has no MPI.
#ifndef STPAR_WITHOUT_MPI
#include <mpi.h>
#endif
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#define STP_CUDA(call)                                                         \
  do {                                                                         \
    cudaError_t stpErr = (call);                                               \
    if (stpErr != cudaSuccess)                                                 \
      stpar_rt::fatal(std::string(#call) + ": " + cudaGetErrorString(stpErr)); \
  } while (0)
#define STP_NCCL(call)                                                         \
  do {                                                                         \
    ncclResult_t stpRes = (call);                                              \
    if (stpRes != ncclSuccess)                                                 \
      stpar_rt::fatal(std::string(#call) + ": " + ncclGetErrorString(stpRes)); \
  } while (0)
#define STP_CUBLAS(call)                                                       \
  do {                                                                         \
    cublasStatus_t stpSt = (call);                                             \
    if (stpSt != CUBLAS_STATUS_SUCCESS)                                        \
      stpar_rt::fatal(std::string(#call) + ": cuBLAS status " +                \
                      std::to_string(static_cast<int>(stpSt)));                \
  } while (0)

namespace stpar_rt {

/// A reference-counted device buffer of `size` elements.
template <typename T> struct Tensor {
  std::shared_ptr<T> buffer;
  int64_t size = 0;
  T *data() const { return buffer.get(); }
};

enum class Reduction { Sum, Max, Min, Product };

/// Up to 8 dims passed to kernels by value.
struct Dims {
  int64_t v[8];
  int n;
};
inline Dims dims(const Shape &s) {
  if (s.size() > 8)
    fatal("tensors of rank > 8 are not supported by the cuda runtime");
  Dims d{};
  d.n = static_cast<int>(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    d.v[i] = s[i];
  return d;
}
inline Shape rowMajorStrides(const Shape &s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d];
  return st;
}
inline int64_t prod(const Shape &s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= s[i];
  return n;
}
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
__host__ __device__ inline int64_t broadcastOffset(int64_t linear,
                                                   const Dims &to,
                                                   const Dims &strides) {
  int64_t offset = 0;
  for (int d = to.n; d-- > 0;) {
    offset += (linear % to.v[d]) * strides.v[d];
    linear /= to.v[d];
  }
  return offset;
}
inline unsigned blocksFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + 255) / 256));
}

/// This process's place on the device grid, its GPU, streams, events,
/// communicators and cuBLAS handle.
class Context : public Grid {
public:
  Context(int &argc, char **&argv, Shape gridShape, int numEvents)
      : Grid(std::move(gridShape)) {
    int localRank = 0, devices = 0;
#ifdef STPAR_WITHOUT_MPI
    rank = 0;
    size = 1;
    options = parseOptions(argc, argv);
    if (size != numElements(this->gridShape))
      fatal("this program runs on " +
            std::to_string(numElements(this->gridShape)) +
            " ranks (the grid) and was built without MPI "
            "(STPAR_WITH_MPI=OFF), which starts one; rebuild with MPI");
    place(rank);
#else
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    options = parseOptions(argc, argv);
    if (size != numElements(this->gridShape))
      fatal("this program runs on " +
            std::to_string(numElements(this->gridShape)) +
            " ranks (the grid), started on " + std::to_string(size));
    place(rank);
    // One GPU per rank of a node.
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                        MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &localRank);
    MPI_Comm_free(&node);
#endif
    STP_CUDA(cudaGetDeviceCount(&devices));
    if (devices == 0)
      fatal("no CUDA device");
    STP_CUDA(cudaSetDevice(localRank % devices));
    STP_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    STP_CUDA(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    events.resize(numEvents);
    for (cudaEvent_t &e : events)
      STP_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    // The world communicator: rank 0's unique id, broadcast over MPI.
    ncclUniqueId id;
    if (rank == 0)
      STP_NCCL(ncclGetUniqueId(&id));
#ifndef STPAR_WITHOUT_MPI
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    STP_NCCL(ncclCommInitRank(&world, size, id, rank));
    STP_CUBLAS(cublasCreate(&blas));
    STP_CUBLAS(cublasSetStream(blas, compute));
    if (profile.enabled)
      warmUpBlas();
    if (!options.weights.empty())
      weights.open(options.weights);
  }
  ~Context() {
    cudaDeviceSynchronize();
    // Profile: the time between consecutive marks' events on the compute
    // stream is the earlier mark's op's.
    for (size_t i = 0; i + 1 < marks.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks[i].second, marks[i + 1].second);
      profile.add(marks[i].first, ms * 1e-3);
    }
    for (auto &mark : marks)
      cudaEventDestroy(mark.second);
    profile.report(rank);
    arena.report(rank);
    if (arena.base)
      cudaFree(arena.base);
    for (auto &entry : comms)
      ncclCommDestroy(entry.second);
    ncclCommDestroy(world);
    cublasDestroy(blas);
    for (cudaEvent_t e : events)
      cudaEventDestroy(e);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(comm);
#ifndef STPAR_WITHOUT_MPI
    MPI_Finalize();
#endif
  }

  /// cuBLAS initializes itself in its first GEMM (about 100 ms on an H200,
  /// bench/gpu/RESULTS.md); a profiled run does that before the first mark,
  /// with one f32 and one bf16-operand product of 16 x 16, so that the
  /// profile times the step.
  void warmUpBlas() {
    float *c = nullptr;
    void *x = nullptr;
    STP_CUDA(cudaMalloc(&c, 16 * 16 * sizeof(float)));
    STP_CUDA(cudaMalloc(&x, 16 * 16 * sizeof(float)));
    STP_CUDA(cudaMemset(x, 0, 16 * 16 * sizeof(float)));
    const float one = 1.0f, zero = 0.0f;
    for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF})
      STP_CUBLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one,
                              x, type, 16, x, type, 16, &zero, c, CUDA_R_32F,
                              16, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    STP_CUDA(cudaDeviceSynchronize());
    STP_CUDA(cudaFree(x));
    STP_CUDA(cudaFree(c));
  }

  /// Allocates the arena of the memory plan: the program's only
  /// cudaMalloc (docs/emitted-code.md, "Memory").
  void reserveArena(uint64_t bytes, uint64_t arguments, uint64_t livePeak) {
    STP_CUDA(cudaMalloc(&arena.base, std::max<uint64_t>(bytes, 1)));
    arena.bytes = bytes;
    arena.arguments = arguments;
    arena.livePeak = livePeak;
  }

  /// The communicator of the devices that differ only in `axes`, ranked by
  /// groupIndex: ncclCommSplit of the world communicator by the other
  /// coordinates. Collective: every rank calls prepare() for the same axes
  /// in the same order at start-up.
  void prepare(const Shape &axes) {
    if (comms.count(axes))
      return;
    ncclComm_t c;
    STP_NCCL(ncclCommSplit(world, static_cast<int>(groupColor(axes)),
                           static_cast<int>(groupIndex(axes)), &c, nullptr));
    comms[axes] = c;
  }
  ncclComm_t nccl(const Shape &axes) {
    auto it = comms.find(axes);
    if (it == comms.end())
      fatal("communicator used before prepare()");
    return it->second;
  }

  int rank = 0, size = 1;
  Options options;
  Weights weights;
  Profile profile;
  /// Profile marks: label and an event recorded on the compute stream.
  std::vector<std::pair<std::string, cudaEvent_t>> marks;
  void mark(const char *label) {
    if (!profile.enabled)
      return;
    cudaEvent_t e;
    STP_CUDA(cudaEventCreate(&e));
    STP_CUDA(cudaEventRecord(e, compute));
    marks.push_back({label, e});
  }
  cudaStream_t compute = nullptr, comm = nullptr;
  std::vector<cudaEvent_t> events;
  /// The pipeline transfer group being issued (groupStart .. groupEnd) and
  /// the `done` events of its transfers.
  bool inGroup = false;
  std::vector<int64_t> groupDone;
  ncclComm_t world = nullptr;
  cublasHandle_t blas = nullptr;
  Arena arena;

private:
  std::map<Shape, ncclComm_t> comms;
};

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

/// A profile mark before an op of the emitted function (STPAR_PROFILE).
inline void profile(Context &ctx, const char *label) { ctx.mark(label); }
template <typename T> Tensor<T> alloc(Context &ctx, int64_t n) {
  Tensor<T> t;
  t.size = n;
  T *p = nullptr;
  STP_CUDA(cudaMalloc(&p, sizeof(T) * std::max<int64_t>(n, 1)));
  STP_CUDA(cudaMemsetAsync(p, 0, sizeof(T) * std::max<int64_t>(n, 1),
                           ctx.compute));
  t.buffer = std::shared_ptr<T>(p, [](T *q) { cudaFree(q); });
  return t;
}
/// An uninitialized buffer for the communication stream's temporaries (no
/// memset on the compute stream that the communication stream would race).
/// It comes from the device's stream-ordered memory pool on the
/// communication stream (no cudaMalloc), and goes back to it there.
template <typename T> Tensor<T> scratch(Context &ctx, int64_t n) {
  Tensor<T> t;
  t.size = n;
  T *p = nullptr;
  cudaStream_t stream = ctx.comm;
  STP_CUDA(cudaMallocAsync(reinterpret_cast<void **>(&p),
                           sizeof(T) * std::max<int64_t>(n, 1), stream));
  t.buffer = std::shared_ptr<T>(p, [stream](T *q) { cudaFreeAsync(q, stream); });
  return t;
}
/// A tensor of `n` elements at byte `offset` of the arena (a view: the
/// arena owns the memory), zero-filled on the compute stream.
template <typename T> Tensor<T> at(Context &ctx, uint64_t offset, int64_t n) {
  Tensor<T> t;
  t.size = n;
  size_t bytes = sizeof(T) * std::max<int64_t>(n, 1);
  T *p = reinterpret_cast<T *>(ctx.arena.at(offset, bytes));
  STP_CUDA(cudaMemsetAsync(p, 0, bytes, ctx.compute));
  t.buffer = std::shared_ptr<T>(std::shared_ptr<T>(), p);
  return t;
}
template <typename T>
Tensor<T> cloneAt(Context &ctx, uint64_t offset, const Tensor<T> &src) {
  Tensor<T> t;
  t.size = src.size;
  T *p = reinterpret_cast<T *>(
      ctx.arena.at(offset, sizeof(T) * std::max<int64_t>(src.size, 1)));
  if (p != src.data())
    STP_CUDA(cudaMemcpyAsync(p, src.data(), sizeof(T) * src.size,
                             cudaMemcpyDeviceToDevice, ctx.compute));
  t.buffer = std::shared_ptr<T>(std::shared_ptr<T>(), p);
  return t;
}
template <typename T>
Tensor<T> fromHostAt(Context &ctx, uint64_t offset, const T *values,
                     int64_t n) {
  Tensor<T> t = at<T>(ctx, offset, n);
  STP_CUDA(cudaMemcpyAsync(t.data(), values, sizeof(T) * n,
                           cudaMemcpyHostToDevice, ctx.compute));
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  return t;
}
template <typename T> Tensor<T> clone(Context &ctx, const Tensor<T> &src) {
  Tensor<T> t = alloc<T>(ctx, src.size);
  STP_CUDA(cudaMemcpyAsync(t.data(), src.data(), sizeof(T) * src.size,
                           cudaMemcpyDeviceToDevice, ctx.compute));
  return t;
}
template <typename T>
Tensor<T> fromHost(Context &ctx, const T *values, int64_t n) {
  Tensor<T> t = alloc<T>(ctx, n);
  STP_CUDA(cudaMemcpyAsync(t.data(), values, sizeof(T) * n,
                           cudaMemcpyHostToDevice, ctx.compute));
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  return t;
}
template <typename T> __global__ void fillKernel(T *p, int64_t n, T v) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    p[i] = v;
}
template <typename T> Tensor<T> full(Context &ctx, int64_t n, T value) {
  Tensor<T> t = alloc<T>(ctx, n);
  fillKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(t.data(), n, value);
  STP_CUDA(cudaGetLastError());
  return t;
}
template <typename T>
Tensor<T> fullAt(Context &ctx, uint64_t offset, int64_t n, T value) {
  Tensor<T> t = at<T>(ctx, offset, n);
  fillKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(t.data(), n, value);
  STP_CUDA(cudaGetLastError());
  return t;
}
template <typename T> T readScalar(Context &ctx, const Tensor<T> &t, int64_t i) {
  T v;
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  STP_CUDA(cudaMemcpy(&v, t.data() + i, sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
template <typename T>
Tensor<T> loadParam(Context &ctx, uint64_t at_, const char *name,
                    const char *file, uint64_t offset, const Shape &global,
                    const Shape &local, const Shape &offsets) {
  std::vector<T> host(numElements(local));
  ctx.weights.read(name, file, offset, sizeof(T), global, local, offsets,
                   host.data());
  return fromHostAt(ctx, at_, host.data(),
                    static_cast<int64_t>(host.size()));
}
template <typename T>
Tensor<T> loadInput(Context &ctx, uint64_t at_, int index,
                    const Shape &global, const Shape &local,
                    const Shape &offsets) {
  std::vector<T> host(numElements(local));
  readInput(ctx.options, index, sizeof(T), global, local, offsets, host.data());
  return fromHostAt(ctx, at_, host.data(),
                    static_cast<int64_t>(host.size()));
}
/// Result `index` of the step, written by rank `writer` (a pipelined
/// program: the first device of the pipeline rank that computes it).
template <typename T>
void storeOutput(Context &ctx, int index, const Tensor<T> &t, int writer = 0) {
  if (ctx.rank != writer)
    return;
  std::vector<T> host(t.size);
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  STP_CUDA(cudaMemcpy(host.data(), t.data(), sizeof(T) * t.size,
                      cudaMemcpyDeviceToHost));
  writeOutput(ctx.options, index, host.data(), host.size() * sizeof(T));
}

//===----------------------------------------------------------------------===//
// Layout kernels
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void swap01Kernel(const T *in, T *out, int64_t a, int64_t b,
                             int64_t c) {
  int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= a * b * c)
    return;
  int64_t k = o % c, j = (o / c) % b, i = o / (b * c);
  out[(j * a + i) * c + k] = in[o];
}
/// out[b][a][c] = in[a][b][c], on `stream`.
template <typename T>
void swap01(cudaStream_t stream, const T *in, T *out, int64_t a, int64_t b,
            int64_t c) {
  swap01Kernel<<<blocksFor(a * b * c), 256, 0, stream>>>(in, out, a, b, c);
  STP_CUDA(cudaGetLastError());
}

template <typename T>
__global__ void transposeKernel(const T *in, T *out, Dims outShape,
                                Dims srcStrides, int64_t n) {
  int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= n)
    return;
  int64_t rest = o, src = 0;
  for (int d = outShape.n; d-- > 0;) {
    src += (rest % outShape.v[d]) * srcStrides.v[d];
    rest /= outShape.v[d];
  }
  out[o] = in[src];
}
template <typename T>
void transpose(Context &ctx, const Tensor<T> &in, Tensor<T> &out,
               const Shape &inShape, const Shape &perm) {
  Shape st = rowMajorStrides(inShape), outShape(perm.size()),
        srcStrides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    outShape[i] = inShape[perm[i]];
    srcStrides[i] = st[perm[i]];
  }
  int64_t n = numElements(inShape);
  transposeKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(
      in.data(), out.data(), dims(outShape), dims(srcStrides), n);
  STP_CUDA(cudaGetLastError());
}

template <typename T>
__global__ void sliceKernel(T *big, Dims bigStrides, T *small, Dims offsets,
                            Dims sizes, Dims strides, int64_t n, bool insert) {
  int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= n)
    return;
  int64_t rest = s, b = 0;
  for (int d = sizes.n; d-- > 0;) {
    b += (offsets.v[d] + (rest % sizes.v[d]) * strides.v[d]) * bigStrides.v[d];
    rest /= sizes.v[d];
  }
  if (insert)
    big[b] = small[s];
  else
    small[s] = big[b];
}
template <typename T>
void extractSlice(Context &ctx, const Tensor<T> &in, const Shape &inShape,
                  Tensor<T> &out, const Shape &offsets, const Shape &sizes,
                  const Shape &strides) {
  int64_t n = numElements(sizes);
  sliceKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(
      in.data(), dims(rowMajorStrides(inShape)), out.data(), dims(offsets),
      dims(sizes), dims(strides), n, false);
  STP_CUDA(cudaGetLastError());
}
template <typename T>
void insertSlice(Context &ctx, const Tensor<T> &src, Tensor<T> &dest,
                 const Shape &destShape, const Shape &offsets,
                 const Shape &sizes, const Shape &strides) {
  int64_t n = numElements(sizes);
  sliceKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(
      dest.data(), dims(rowMajorStrides(destShape)), src.data(), dims(offsets),
      dims(sizes), dims(strides), n, true);
  STP_CUDA(cudaGetLastError());
}

template <typename T>
void concat(Context &ctx, const std::vector<Tensor<T>> &parts,
            const std::vector<Shape> &shapes, Tensor<T> &out, int64_t dim) {
  int64_t outer = prod(shapes[0], 0, dim), total = 0;
  for (const Shape &s : shapes)
    total += prod(s, dim, s.size());
  int64_t offset = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    int64_t chunk = prod(shapes[p], dim, shapes[p].size());
    STP_CUDA(cudaMemcpy2DAsync(out.data() + offset, total * sizeof(T),
                               parts[p].data(), chunk * sizeof(T),
                               chunk * sizeof(T), outer,
                               cudaMemcpyDeviceToDevice, ctx.compute));
    offset += chunk;
  }
}

template <typename T>
__global__ void allSliceKernel(const T *in, T *out, int64_t pre, int64_t g,
                               int64_t gi, int64_t x) {
  int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= pre * x)
    return;
  out[o] = in[((o / x) * g + gi) * x + o % x];
}
/// shard.all_slice: this device's block of `dim` (no communication).
template <typename T>
void allSlice(Context &ctx, const Shape &axes, const T *in, T *out,
              const Shape &shape, int64_t dim) {
  int64_t g = ctx.groupSize(axes), pre = prod(shape, 0, dim);
  int64_t x = numElements(shape) / pre / g;
  allSliceKernel<<<blocksFor(pre * x), 256, 0, ctx.compute>>>(
      in, out, pre, g, ctx.groupIndex(axes), x);
  STP_CUDA(cudaGetLastError());
}

//===----------------------------------------------------------------------===//
// Collectives as -stp-lower-collectives calls them (the same calls as the
// cpu runtime's). Each runs on the communication stream between two events
// -stp-schedule-collectives assigned: the communication stream waits for
// `ready`, recorded on the compute stream, and records `done`;
// waitTransfer(ctx, done) makes the compute stream wait for the result
// before its first use. NCCL temporaries come from the stream-ordered pool.
//===----------------------------------------------------------------------===//

template <typename T> struct NcclType;
template <> struct NcclType<float> { static constexpr ncclDataType_t value = ncclFloat32; };
template <> struct NcclType<double> { static constexpr ncclDataType_t value = ncclFloat64; };
template <> struct NcclType<int64_t> { static constexpr ncclDataType_t value = ncclInt64; };
template <> struct NcclType<int32_t> { static constexpr ncclDataType_t value = ncclInt32; };
template <> struct NcclType<int8_t> { static constexpr ncclDataType_t value = ncclInt8; };
template <> struct NcclType<uint8_t> { static constexpr ncclDataType_t value = ncclUint8; };
template <> struct NcclType<f16> {
  static constexpr ncclDataType_t value = ncclFloat16;
};
template <> struct NcclType<bf16> {
  static constexpr ncclDataType_t value = ncclBfloat16;
};

inline ncclRedOp_t ncclOp(Reduction r) {
  switch (r) {
  case Reduction::Sum: return ncclSum;
  case Reduction::Max: return ncclMax;
  case Reduction::Min: return ncclMin;
  case Reduction::Product: return ncclProd;
  }
  return ncclSum;
}

/// The communication stream waits for the compute stream's work so far.
inline void transferBegin(Context &ctx, int64_t ready) {
  STP_CUDA(cudaEventRecord(ctx.events[ready], ctx.compute));
  STP_CUDA(cudaStreamWaitEvent(ctx.comm, ctx.events[ready], 0));
}
inline void transferEnd(Context &ctx, int64_t done) {
  // In a transfer group the NCCL calls run at ncclGroupEnd: their events
  // are recorded after it.
  if (ctx.inGroup)
    ctx.groupDone.push_back(done);
  else
    STP_CUDA(cudaEventRecord(ctx.events[done], ctx.comm));
}
/// Before the first use of a transfer's result.
inline void waitTransfer(Context &ctx, int64_t done) {
  STP_CUDA(cudaStreamWaitEvent(ctx.compute, ctx.events[done], 0));
}

template <typename T>
void allReduce(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
               Reduction r, const Tensor<T> &in, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  STP_NCCL(ncclAllReduce(in.data(), out.data(), in.size, NcclType<T>::value,
                         ncclOp(r), ctx.nccl(axes), ctx.comm));
  transferEnd(ctx, done);
}

/// A pipeline transfer group (stp.transfer_group): its sends and receives
/// go to NCCL between ncclGroupStart and ncclGroupEnd, so they progress
/// together (a rank's activation send and its gradient receive, as
/// Megatron-LM's send_forward_recv_backward), on the communication stream
/// after every ready event of the group; their done events are recorded
/// after the group. -stp-pipeline-stages checked that the ranks' groups
/// cannot deadlock and that two ranks' transfers come in the same order
/// (NCCL matches them by order).
inline void groupStart(Context &ctx) {
  STP_NCCL(ncclGroupStart());
  ctx.inGroup = true;
}
inline void groupEnd(Context &ctx) {
  STP_NCCL(ncclGroupEnd());
  ctx.inGroup = false;
  for (int64_t done : ctx.groupDone)
    STP_CUDA(cudaEventRecord(ctx.events[done], ctx.comm));
  ctx.groupDone.clear();
}
/// shard.send between pipeline ranks (-stp-pipeline-stages): `in` goes to
/// the device at index `peer` on grid axis `axis` (its rank in the axis'
/// communicator). NCCL has no tags: `tag` (the transfer id) only names it.
/// `out` (the op's result) is `in`.
template <typename T>
void sendTo(Context &ctx, int64_t ready, int64_t done, int64_t axis,
            int64_t peer, int64_t, const Tensor<T> &in, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  if (out.data() != in.data())
    STP_CUDA(cudaMemcpyAsync(out.data(), in.data(), sizeof(T) * in.size,
                             cudaMemcpyDeviceToDevice, ctx.comm));
  STP_NCCL(ncclSend(in.data(), in.size, NcclType<T>::value,
                    static_cast<int>(peer), ctx.nccl(Shape{axis}), ctx.comm));
  transferEnd(ctx, done);
}
/// shard.recv between pipeline ranks: the next transfer from the device at
/// index `peer` on grid axis `axis`, into `out`.
template <typename T>
void recvFrom(Context &ctx, int64_t ready, int64_t done, int64_t axis,
              int64_t peer, int64_t, const Tensor<T> &, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  STP_NCCL(ncclRecv(out.data(), out.size, NcclType<T>::value,
                    static_cast<int>(peer), ctx.nccl(Shape{axis}), ctx.comm));
  transferEnd(ctx, done);
}

/// Concatenates the group's blocks (local shape `shape`) along `dim`:
/// ncclAllGather stacks them in front, a transpose puts them at `dim`.
template <typename T>
void allGather(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
               const Shape &shape, int64_t dim, const Tensor<T> &in,
               const Tensor<T> &out) {
  transferBegin(ctx, ready);
  {
    const int64_t g = ctx.groupSize(axes), n = in.size;
    const int64_t pre = prod(shape, 0, dim);
    auto gathered = scratch<T>(ctx, g * n);
    STP_NCCL(ncclAllGather(in.data(), gathered.data(), n, NcclType<T>::value,
                           ctx.nccl(axes), ctx.comm));
    swap01(ctx.comm, gathered.data(), out.data(), g, pre, n / pre);
  }
  transferEnd(ctx, done);
}

/// Reduces over the group and keeps this device's block of `dim` (input
/// shape `shape`): a transpose brings the blocks to the front first.
template <typename T>
void reduceScatter(Context &ctx, int64_t ready, int64_t done,
                   const Shape &axes, Reduction r, const Shape &shape,
                   int64_t dim, const Tensor<T> &in, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  {
    const int64_t g = ctx.groupSize(axes), n = in.size;
    const int64_t pre = prod(shape, 0, dim);
    auto blocks = scratch<T>(ctx, n);
    swap01(ctx.comm, in.data(), blocks.data(), pre, g, n / pre / g);
    STP_NCCL(ncclReduceScatter(blocks.data(), out.data(), n / g,
                               NcclType<T>::value, ncclOp(r), ctx.nccl(axes),
                               ctx.comm));
  }
  transferEnd(ctx, done);
}

/// Splits `splitDim` into group-size blocks, sends block j to member j
/// (grouped ncclSend/ncclRecv) and concatenates the received blocks along
/// `concatDim`.
template <typename T>
void allToAll(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
              const Shape &shape, int64_t splitDim, int64_t concatDim,
              const Tensor<T> &in, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  {
    const int64_t g = ctx.groupSize(axes), n = in.size, chunk = n / g;
    const int64_t preS = prod(shape, 0, splitDim);
    Shape block = shape;
    block[splitDim] /= g;
    const int64_t preC = prod(block, 0, concatDim);
    auto send = scratch<T>(ctx, n), recv = scratch<T>(ctx, n);
    swap01(ctx.comm, in.data(), send.data(), preS, g, n / preS / g);
    ncclComm_t comm = ctx.nccl(axes);
    STP_NCCL(ncclGroupStart());
    for (int64_t j = 0; j < g; ++j) {
      STP_NCCL(ncclSend(send.data() + j * chunk, chunk, NcclType<T>::value,
                        static_cast<int>(j), comm, ctx.comm));
      STP_NCCL(ncclRecv(recv.data() + j * chunk, chunk, NcclType<T>::value,
                        static_cast<int>(j), comm, ctx.comm));
    }
    STP_NCCL(ncclGroupEnd());
    swap01(ctx.comm, recv.data(), out.data(), g, preC, chunk / preC);
  }
  transferEnd(ctx, done);
}

/// stp.moe_all_to_all's rows in two levels (BaGuaLu; `intra_node_size` L,
/// member w of the group of p on node w / L), as the cpu runtime's
/// moeExchangeTwoLevel, which documents the phases: inside each node first,
/// then across nodes, each phase's counts first (copied to the host: the
/// row transfers' sizes), then its rows by grouped ncclSend/ncclRecv (a
/// pair's transfers match in issue order), staged on this device between
/// the phases. `block(q, x)` points at the sendCounts[q * el + x] rows for
/// local expert x of member q, `dest(w, x)` where the rows from member w
/// for expert x go; recvCounts[w * el + x] gets their counts.
template <typename T, typename Block, typename Dest>
void moeExchangeTwoLevel(Context &ctx, ncclComm_t comm, int64_t me, int64_t p,
                         int64_t l, int64_t el, int64_t d,
                         const std::vector<int64_t> &sendCounts, Block block,
                         Dest dest, std::vector<int64_t> &recvCounts) {
  const int64_t nodes = p / l, node = me / l, local = me % l;
  auto exchangeCounts = [&](const std::vector<int64_t> &out,
                            std::vector<int64_t> &in, int64_t per,
                            auto isPeer) {
    auto sendDev = scratch<int64_t>(ctx, p * per),
         recvDev = scratch<int64_t>(ctx, p * per);
    STP_CUDA(cudaMemcpyAsync(sendDev.data(), out.data(),
                             sizeof(int64_t) * p * per, cudaMemcpyHostToDevice,
                             ctx.comm));
    STP_CUDA(cudaMemsetAsync(recvDev.data(), 0, sizeof(int64_t) * p * per,
                             ctx.comm));
    STP_NCCL(ncclGroupStart());
    for (int64_t v = 0; v < p; ++v)
      if (isPeer(v)) {
        STP_NCCL(ncclSend(sendDev.data() + v * per, per, ncclInt64,
                          static_cast<int>(v), comm, ctx.comm));
        STP_NCCL(ncclRecv(recvDev.data() + v * per, per, ncclInt64,
                          static_cast<int>(v), comm, ctx.comm));
      }
    STP_NCCL(ncclGroupEnd());
    STP_CUDA(cudaMemcpyAsync(in.data(), recvDev.data(),
                             sizeof(int64_t) * p * per, cudaMemcpyDeviceToHost,
                             ctx.comm));
    STP_CUDA(cudaStreamSynchronize(ctx.comm));
  };
  // Phase 1: to peer v of this node, the blocks (j, x) of q = (j, v mod L).
  std::vector<int64_t> c1s = moePhase1Counts(me, p, l, el, sendCounts),
                       c1r(p * nodes * el, 0);
  exchangeCounts(c1s, c1r, nodes * el,
                 [&](int64_t v) { return v / l == node; });
  std::vector<int64_t> at = moeRowStarts(c1r, d);
  auto stage = scratch<T>(ctx, at.back());
  STP_NCCL(ncclGroupStart());
  for (int64_t v = node * l; v < (node + 1) * l; ++v)
    for (int64_t j = 0; j < nodes; ++j)
      for (int64_t x = 0; x < el; ++x) {
        int64_t q = j * l + v % l, i = (v * nodes + j) * el + x;
        if (int64_t n = c1s[i])
          STP_NCCL(ncclSend(block(q, x), n * d, NcclType<T>::value,
                            static_cast<int>(v), comm, ctx.comm));
        if (int64_t n = c1r[i])
          STP_NCCL(ncclRecv(stage.data() + at[i], n * d, NcclType<T>::value,
                            static_cast<int>(v), comm, ctx.comm));
      }
  STP_NCCL(ncclGroupEnd());
  // Phase 2: to (j, local), per member w = (node, k), the blocks (j, x) it
  // handed over; from (j, local), the rows of (j, k) in (k, x) order.
  std::vector<int64_t> c2s = moePhase2Counts(me, p, l, el, c1r),
                       c2r(p * l * el, 0);
  exchangeCounts(c2s, c2r, l * el,
                 [&](int64_t v) { return v % l == local; });
  STP_NCCL(ncclGroupStart());
  for (int64_t j = 0; j < nodes; ++j)
    for (int64_t k = 0; k < l; ++k)
      for (int64_t x = 0; x < el; ++x) {
        int64_t v = j * l + local, i = ((node * l + k) * nodes + j) * el + x,
                w = j * l + k;
        if (int64_t n = c1r[i])
          STP_NCCL(ncclSend(stage.data() + at[i], n * d, NcclType<T>::value,
                            static_cast<int>(v), comm, ctx.comm));
        int64_t n = c2r[(v * l + k) * el + x];
        recvCounts[w * el + x] = n;
        if (n)
          STP_NCCL(ncclRecv(dest(w, x), n * d, NcclType<T>::value,
                            static_cast<int>(v), comm, ctx.comm));
      }
  STP_NCCL(ncclGroupEnd());
}

/// stp.moe_all_to_all on the communication stream: the row counts (E / P
/// int64 per active peer, grouped ncclSend/ncclRecv), copied to the host
/// (the communication stream is synchronized: the sizes of the row
/// transfers come from them, never from this device's own routing), then
/// one grouped ncclSend/ncclRecv per (peer, local expert) of only the used
/// rows. Dispatch: whole [E, C, D] -> local [E / P, P * C, D]; `reverse`
/// the other way. With smart scheduling (g > 0) only the pairs of `step`
/// talk (FasterMoE Sec. 4.2: device group w / g sends to group
/// w / g + step); a return's `init` (may be null) holds the earlier
/// steps' rows. Unused rows of the result are zero. With `intraNodeSize`
/// L splitting the group into nodes, counts and rows travel in two levels
/// instead (moeExchangeTwoLevel).
template <typename T>
void moeAllToAllImpl(Context &ctx, int64_t ready, int64_t done,
                     const Shape &axes, int64_t e, int64_t c, int64_t d,
                     bool reverse, int64_t g, int64_t step,
                     int64_t intraNodeSize, const Tensor<T> &rows,
                     const Tensor<int64_t> &counts, const T *init,
                     const Tensor<T> &outRows,
                     const Tensor<int64_t> &outCounts) {
  transferBegin(ctx, ready);
  const int64_t p = ctx.groupSize(axes), el = e / p;
  ncclComm_t comm = ctx.nccl(axes);
  int me = 0;
  STP_NCCL(ncclCommUserRank(comm, &me));
  // Peers this step sends to and receives from.
  auto sendsTo = [&](int64_t q) {
    return reverse ? moeStepPair(q, me, p, g, step)
                   : moeStepPair(me, q, p, g, step);
  };
  auto receivesFrom = [&](int64_t q) {
    return reverse ? moeStepPair(me, q, p, g, step)
                   : moeStepPair(q, me, p, g, step);
  };
  std::vector<int64_t> local(e), sendCounts(e, 0), recvCounts(e, 0);
  STP_CUDA(cudaMemcpyAsync(local.data(), counts.data(), sizeof(int64_t) * e,
                           cudaMemcpyDeviceToHost, ctx.comm));
  STP_CUDA(cudaStreamSynchronize(ctx.comm));
  for (int64_t q = 0; q < p; ++q)
    for (int64_t x = 0; x < el; ++x)
      if (sendsTo(q))
        sendCounts[q * el + x] = reverse ? local[x * p + q] : local[q * el + x];
  auto fill = [&] {
    if (init)
      STP_CUDA(cudaMemcpyAsync(outRows.data(), init, sizeof(T) * e * c * d,
                               cudaMemcpyDeviceToDevice, ctx.comm));
    else
      STP_CUDA(
          cudaMemsetAsync(outRows.data(), 0, sizeof(T) * e * c * d, ctx.comm));
  };
  auto finish = [&] {
    std::vector<int64_t> result(e);
    for (int64_t q = 0; q < p; ++q)
      for (int64_t x = 0; x < el; ++x)
        result[reverse ? q * el + x : x * p + q] = recvCounts[q * el + x];
    STP_CUDA(cudaMemcpyAsync(outCounts.data(), result.data(),
                             sizeof(int64_t) * e, cudaMemcpyHostToDevice,
                             ctx.comm));
    STP_CUDA(cudaStreamSynchronize(ctx.comm));
    transferEnd(ctx, done);
  };
  if (moeTwoLevel(intraNodeSize, p)) {
    fill();
    moeExchangeTwoLevel<T>(
        ctx, comm, me, p, intraNodeSize, el, d, sendCounts,
        [&](int64_t q, int64_t x) {
          return rows.data() + moeRowOffset(!reverse, q, x, el, p, c) * d;
        },
        [&](int64_t w, int64_t x) {
          return outRows.data() + moeRowOffset(reverse, w, x, el, p, c) * d;
        },
        recvCounts);
    finish();
    return;
  }
  auto sendDev = scratch<int64_t>(ctx, e), recvDev = scratch<int64_t>(ctx, e);
  STP_CUDA(cudaMemcpyAsync(sendDev.data(), sendCounts.data(),
                           sizeof(int64_t) * e, cudaMemcpyHostToDevice,
                           ctx.comm));
  STP_CUDA(cudaMemsetAsync(recvDev.data(), 0, sizeof(int64_t) * e, ctx.comm));
  STP_NCCL(ncclGroupStart());
  for (int64_t q = 0; q < p; ++q) {
    if (sendsTo(q))
      STP_NCCL(ncclSend(sendDev.data() + q * el, el, ncclInt64,
                        static_cast<int>(q), comm, ctx.comm));
    if (receivesFrom(q))
      STP_NCCL(ncclRecv(recvDev.data() + q * el, el, ncclInt64,
                        static_cast<int>(q), comm, ctx.comm));
  }
  STP_NCCL(ncclGroupEnd());
  STP_CUDA(cudaMemcpyAsync(recvCounts.data(), recvDev.data(),
                           sizeof(int64_t) * e, cudaMemcpyDeviceToHost,
                           ctx.comm));
  STP_CUDA(cudaStreamSynchronize(ctx.comm));
  fill();
  STP_NCCL(ncclGroupStart());
  for (int64_t q = 0; q < p; ++q)
    for (int64_t x = 0; x < el; ++x) {
      if (int64_t n = sendCounts[q * el + x])
        STP_NCCL(ncclSend(
            rows.data() + moeRowOffset(!reverse, q, x, el, p, c) * d, n * d,
            NcclType<T>::value, static_cast<int>(q), comm, ctx.comm));
      if (int64_t n = recvCounts[q * el + x])
        STP_NCCL(ncclRecv(
            outRows.data() + moeRowOffset(reverse, q, x, el, p, c) * d, n * d,
            NcclType<T>::value, static_cast<int>(q), comm, ctx.comm));
    }
  STP_NCCL(ncclGroupEnd());
  finish();
}
template <typename T>
void moeAllToAll(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
                 int64_t e, int64_t c, int64_t d, bool reverse, int64_t g,
                 int64_t step, int64_t intraNodeSize, const Tensor<T> &rows,
                 const Tensor<int64_t> &counts, const Tensor<T> &outRows,
                 const Tensor<int64_t> &outCounts) {
  moeAllToAllImpl(ctx, ready, done, axes, e, c, d, reverse, g, step,
                  intraNodeSize, rows, counts, static_cast<const T *>(nullptr),
                  outRows, outCounts);
}
/// The same with `init` (a smart-scheduled return after its first step).
template <typename T>
void moeAllToAll(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
                 int64_t e, int64_t c, int64_t d, bool reverse, int64_t g,
                 int64_t step, int64_t intraNodeSize, const Tensor<T> &rows,
                 const Tensor<int64_t> &counts, const Tensor<T> &init,
                 const Tensor<T> &outRows, const Tensor<int64_t> &outCounts) {
  moeAllToAllImpl(ctx, ready, done, axes, e, c, d, reverse, g, step,
                  intraNodeSize, rows, counts, init.data(), outRows, outCounts);
}

template <typename T>
__global__ void moeAddKernel(T *out, const T *in, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n)
    out[i] = T(float(out[i]) + float(in[i]));
}

/// stp.moe_shadow_broadcast (FasterMoE Sec. 4.1): row i of `out`
/// [S, A, B] becomes shadowed expert experts[i]'s weights from its owner
/// (member experts[i] / El, El = the rows of `weights` [El, A, B]): one
/// ncclBroadcast per expert, grouped, on the communication stream.
template <typename T>
void moeShadowBroadcast(Context &ctx, int64_t ready, int64_t done,
                        const Shape &axes, int64_t, const Shape &experts,
                        const Tensor<T> &weights, const Tensor<T> &out) {
  transferBegin(ctx, ready);
  const int64_t s = static_cast<int64_t>(experts.size());
  const int64_t n = out.size / s, el = weights.size / n;
  ncclComm_t comm = ctx.nccl(axes);
  STP_NCCL(ncclGroupStart());
  for (int64_t i = 0; i < s; ++i)
    STP_NCCL(ncclBroadcast(weights.data() + (experts[i] % el) * n,
                           out.data() + i * n, n, NcclType<T>::value,
                           static_cast<int>(experts[i] / el), comm, ctx.comm));
  STP_NCCL(ncclGroupEnd());
  transferEnd(ctx, done);
}
/// stp.moe_shadow_reduce: `out` = `local` [El, A, B] plus, in the row of
/// each shadowed expert this device owns, the group's sum of its
/// `partial` row (ncclReduce rooted at the owner, grouped, then an add on
/// the communication stream).
template <typename T>
void moeShadowReduce(Context &ctx, int64_t ready, int64_t done,
                     const Shape &axes, int64_t, const Shape &experts,
                     const Tensor<T> &partial, const Tensor<T> &local,
                     const Tensor<T> &out) {
  transferBegin(ctx, ready);
  {
    const int64_t s = static_cast<int64_t>(experts.size());
    const int64_t n = partial.size / s, el = local.size / n;
    const int64_t me = ctx.groupIndex(axes);
    ncclComm_t comm = ctx.nccl(axes);
    auto sums = scratch<T>(ctx, s * n);
    if (out.data() != local.data())
      STP_CUDA(cudaMemcpyAsync(out.data(), local.data(), sizeof(T) * local.size,
                               cudaMemcpyDeviceToDevice, ctx.comm));
    STP_NCCL(ncclGroupStart());
    for (int64_t i = 0; i < s; ++i)
      STP_NCCL(ncclReduce(partial.data() + i * n, sums.data() + i * n, n,
                          NcclType<T>::value, ncclSum,
                          static_cast<int>(experts[i] / el), comm, ctx.comm));
    STP_NCCL(ncclGroupEnd());
    for (int64_t i = 0; i < s; ++i)
      if (experts[i] / el == me)
        moeAddKernel<<<blocksFor(n), 256, 0, ctx.comm>>>(
            out.data() + (experts[i] % el) * n, sums.data() + i * n, n);
  }
  transferEnd(ctx, done);
}

/// shard.shift: the value at position p along `axis` moves to p + offset
/// (grouped ncclSend/ncclRecv on the world communicator).
template <typename T>
void ringShift(Context &ctx, int64_t ready, int64_t done, int64_t axis,
               int64_t offset, bool rotate, const Tensor<T> &in,
               const Tensor<T> &out) {
  transferBegin(ctx, ready);
  const int to = ctx.neighbor(axis, offset, rotate),
            from = ctx.neighbor(axis, -offset, rotate);
  STP_NCCL(ncclGroupStart());
  if (to >= 0)
    STP_NCCL(ncclSend(in.data(), in.size, NcclType<T>::value, to, ctx.world,
                      ctx.comm));
  if (from >= 0)
    STP_NCCL(ncclRecv(out.data(), out.size, NcclType<T>::value, from,
                      ctx.world, ctx.comm));
  STP_NCCL(ncclGroupEnd());
  transferEnd(ctx, done);
}

/// stp.grid_permute: this device's block goes to the device that lists it
/// as its source, and the block of `sources[me]` arrives (grouped
/// ncclSend/ncclRecv on the world communicator).
template <typename T>
void gridPermute(Context &ctx, int64_t ready, int64_t done, const Shape &axes,
                 const Shape &sources, const Tensor<T> &in,
                 const Tensor<T> &out) {
  transferBegin(ctx, ready);
  auto [from, to] = ctx.permutePeers(axes, sources);
  STP_NCCL(ncclGroupStart());
  STP_NCCL(ncclSend(in.data(), in.size, NcclType<T>::value, to, ctx.world,
                    ctx.comm));
  STP_NCCL(ncclRecv(out.data(), out.size, NcclType<T>::value, from, ctx.world,
                    ctx.comm));
  STP_NCCL(ncclGroupEnd());
  transferEnd(ctx, done);
}

/// shard.all_slice on the compute stream (no communication).
template <typename T>
void allSlice(Context &ctx, const Shape &axes, const Shape &shape,
              int64_t dim, const Tensor<T> &in, const Tensor<T> &out) {
  allSlice(ctx, axes, in.data(), out.data(), shape, dim);
}

//===----------------------------------------------------------------------===//
// Compute kernels
//===----------------------------------------------------------------------===//

/// The cuBLAS type of a GEMM operand: f32, or bf16 under
/// -stp-mixed-precision.
template <typename T> struct BlasType;
template <> struct BlasType<float> {
  static constexpr cudaDataType_t value = CUDA_R_32F;
};
template <> struct BlasType<bf16> {
  static constexpr cudaDataType_t value = CUDA_R_16BF;
};

/// Row-major strided batched C += X * Y through cuBLAS (column-major view
/// prepared by the emitter: C is rows x cols with leading dim ldc). X and Y
/// are f32 or bf16; C is f32 and the sum is f32 (CUBLAS_COMPUTE_32F; with
/// bf16 inputs cuBLAS uses the tensor cores).
template <typename T>
void gemm(Context &ctx, bool transX, bool transY, int64_t rows, int64_t cols,
          int64_t k, const T *x, int64_t ldx, int64_t strideX, const T *y,
          int64_t ldy, int64_t strideY, float *c, int64_t ldc, int64_t strideC,
          int64_t batch) {
  const float one = 1.0f;
  STP_CUBLAS(cublasGemmStridedBatchedEx(
      ctx.blas, transX ? CUBLAS_OP_T : CUBLAS_OP_N,
      transY ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(rows),
      static_cast<int>(cols), static_cast<int>(k), &one, x, BlasType<T>::value,
      static_cast<int>(ldx), strideX, y, BlasType<T>::value,
      static_cast<int>(ldy), strideY, &one, c, CUDA_R_32F,
      static_cast<int>(ldc), strideC, static_cast<int>(batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
__global__ void softmaxKernel(const T *in, T *out, int64_t outer, int64_t n,
                              int64_t inner) {
  int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= outer * inner)
    return;
  const T *x = in + (r / inner) * n * inner + r % inner;
  T *y = out + (r / inner) * n * inner + r % inner;
  auto m = widen(x[0]);
  for (int64_t k = 1; k < n; ++k)
    m = widen(x[k * inner]) > m ? widen(x[k * inner]) : m;
  decltype(m) s = 0;
  for (int64_t k = 0; k < n; ++k)
    s += exp(widen(x[k * inner]) - m);
  for (int64_t k = 0; k < n; ++k)
    y[k * inner] = static_cast<T>(exp(widen(x[k * inner]) - m) / s);
}
template <typename T>
void softmax(Context &ctx, const Tensor<T> &in, Tensor<T> &out,
             const Shape &shape, int64_t dim) {
  int64_t outer = prod(shape, 0, dim), n = shape[dim],
          inner = prod(shape, dim + 1, shape.size());
  softmaxKernel<<<blocksFor(outer * inner), 256, 0, ctx.compute>>>(
      in.data(), out.data(), outer, n, inner);
  STP_CUDA(cudaGetLastError());
}

/// The sum of every thread's v over the block (blockDim.x a power of two,
/// at most kReduceThreads); red holds blockDim.x doubles. All threads get
/// the sum; red may be reused after the call.
constexpr int kReduceThreads = 256;
__device__ inline double blockReduce(double v, double *red, bool max) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      double o = red[threadIdx.x + s];
      red[threadIdx.x] = max ? (o > red[threadIdx.x] ? o : red[threadIdx.x])
                             : red[threadIdx.x] + o;
    }
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

/// One block per row of `inner` elements: the block reduces the row's mean
/// (layer norm) and mean square in double, then normalizes its elements.
template <typename T>
__global__ void normKernel(const T *x, const T *scale, Dims scaleStrides,
                           const T *bias, Dims biasStrides, T *y,
                           Dims innerShape, int64_t outer, int64_t inner,
                           float epsilon, bool rms) {
  __shared__ double red[kReduceThreads];
  int64_t r = blockIdx.x;
  if (r >= outer)
    return;
  const T *xr = x + r * inner;
  T *yr = y + r * inner;
  double mean = 0, var = 0;
  if (!rms) {
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      mean += widen(xr[i]);
    mean = blockReduce(mean, red, false) / inner;
  }
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
    var += (widen(xr[i]) - mean) * (widen(xr[i]) - mean);
  var = blockReduce(var, red, false) / inner;
  double inv = 1.0 / sqrt(var + epsilon);
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double v = (widen(xr[i]) - mean) * inv *
               widen(scale[broadcastOffset(i, innerShape, scaleStrides)]);
    if (bias)
      v += widen(bias[broadcastOffset(i, innerShape, biasStrides)]);
    yr[i] = static_cast<T>(v);
  }
}
template <typename T>
void layerNorm(Context &ctx, const Tensor<T> &x, const Tensor<T> &scale,
               const Shape &scaleShape, const Tensor<T> *bias,
               const Shape &biasShape, Tensor<T> &y, const Shape &shape,
               int64_t axis, float eps) {
  Shape innerShape(shape.begin() + axis, shape.end());
  int64_t outer = prod(shape, 0, axis), inner = numElements(innerShape);
  normKernel<<<static_cast<unsigned>(std::max<int64_t>(outer, 1)),
               kReduceThreads, 0, ctx.compute>>>(
      x.data(), scale.data(), dims(broadcastStrides(scaleShape, innerShape)),
      bias ? bias->data() : nullptr,
      dims(bias ? broadcastStrides(biasShape, innerShape) : Shape()), y.data(),
      dims(innerShape), outer, inner, eps, false);
  STP_CUDA(cudaGetLastError());
}
template <typename T>
void rmsNorm(Context &ctx, const Tensor<T> &x, const Tensor<T> &scale,
             const Shape &scaleShape, Tensor<T> &y, const Shape &shape,
             int64_t axis, float eps) {
  Shape innerShape(shape.begin() + axis, shape.end());
  int64_t outer = prod(shape, 0, axis), inner = numElements(innerShape);
  normKernel<<<static_cast<unsigned>(std::max<int64_t>(outer, 1)),
               kReduceThreads, 0, ctx.compute>>>(
      x.data(), scale.data(), dims(broadcastStrides(scaleShape, innerShape)),
      static_cast<const T *>(nullptr), dims(Shape()), y.data(),
      dims(innerShape), outer, inner, eps, true);
  STP_CUDA(cudaGetLastError());
}

/// The scaled, masked score of query row `row` (its elements at qr) and key
/// j of kv head hk: (q . k) * scale + mask, in double.
template <typename T>
__device__ inline double
attentionScore(const T *qr, const T *k, const T *mask, const Dims &scoreShape,
               const Dims &maskStrides, int64_t row, int64_t kvRow, int64_t j,
               int64_t D, int64_t Skv, float scale) {
  const T *kr = k + (kvRow * Skv + j) * D;
  double dot = 0;
  for (int64_t d = 0; d < D; ++d)
    dot += double(widen(qr[d])) * widen(kr[d]);
  dot *= scale;
  if (mask)
    dot += widen(mask[broadcastOffset(row * Skv + j, scoreShape, maskStrides)]);
  return dot;
}

/// The fallback for rows too long for shared memory: one thread per output
/// element (b, h, i, e), the row's max and sum, then the weighted sum of v
/// (scores recomputed for every e).
template <typename T>
__global__ void attentionKernel(const T *q, const T *k, const T *v,
                                const T *mask, Dims scoreShape,
                                Dims maskStrides, T *out, int64_t B,
                                int64_t Hq, int64_t Sq, int64_t D, int64_t Hkv,
                                int64_t Skv, int64_t Dv, float scale,
                                bool causal) {
  int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= B * Hq * Sq * Dv)
    return;
  int64_t e = o % Dv, i = (o / Dv) % Sq, h = (o / (Dv * Sq)) % Hq,
          b = o / (Dv * Sq * Hq);
  int64_t hk = h / (Hq / Hkv);
  const T *qr = q + ((b * Hq + h) * Sq + i) * D;
  auto score = [&](int64_t j) {
    return attentionScore(qr, k, mask, scoreShape, maskStrides,
                          (b * Hq + h) * Sq + i, b * Hkv + hk, j, D, Skv,
                          scale);
  };
  int64_t last = causal ? i + (Skv - Sq) : Skv - 1;
  if (last > Skv - 1)
    last = Skv - 1;
  double m = -1e300;
  for (int64_t j = 0; j <= last; ++j) {
    double s = score(j);
    m = s > m ? s : m;
  }
  double sum = 0, acc = 0;
  for (int64_t j = 0; j <= last; ++j) {
    double p = ::exp(score(j) - m);
    sum += p;
    acc += p * widen(v[((b * Hkv + hk) * Skv + j) * Dv + e]);
  }
  out[o] = static_cast<T>(acc / sum);
}
/// One block per query row (b, h, i): the threads compute the row's scores
/// (double) into shared memory, the block reduces their max and the sum of
/// exponentials, then each thread owns output elements e of the row.
/// Dynamic shared memory: Skv + blockDim.x doubles.
constexpr int kAttentionThreads = 128;
template <typename T>
__global__ void
attentionRowKernel(const T *q, const T *k, const T *v, const T *mask,
                   Dims scoreShape, Dims maskStrides, T *out, int64_t B,
                   int64_t Hq, int64_t Sq, int64_t D, int64_t Hkv, int64_t Skv,
                   int64_t Dv, float scale, bool causal) {
  extern __shared__ double scores[];
  double *red = scores + Skv;
  int64_t row = blockIdx.x;
  int64_t i = row % Sq, h = (row / Sq) % Hq, b = row / (Sq * Hq);
  int64_t hk = h / (Hq / Hkv);
  const T *qr = q + row * D;
  int64_t last = causal ? i + (Skv - Sq) : Skv - 1;
  if (last > Skv - 1)
    last = Skv - 1;
  double m = -1e300;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    double dot = attentionScore(qr, k, mask, scoreShape, maskStrides, row,
                                b * Hkv + hk, j, D, Skv, scale);
    scores[j] = dot;
    m = dot > m ? dot : m;
  }
  m = blockReduce(m, red, true);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    double p = ::exp(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  sum = blockReduce(sum, red, false); // also orders the writes to scores
  const T *vb = v + (b * Hkv + hk) * Skv * Dv;
  for (int64_t e = threadIdx.x; e < Dv; e += blockDim.x) {
    double acc = 0;
    for (int64_t j = 0; j <= last; ++j)
      acc += scores[j] * widen(vb[j * Dv + e]);
    out[row * Dv + e] = static_cast<T>(acc / sum);
  }
}
template <typename T>
void attention(Context &ctx, const Tensor<T> &q, const Tensor<T> &k,
               const Tensor<T> &v, const Tensor<T> *mask,
               const Shape &maskShape, Tensor<T> &out, int64_t B, int64_t Hq,
               int64_t Sq, int64_t D, int64_t Hkv, int64_t Skv, int64_t Dv,
               float scale, bool causal) {
  Shape scoreShape = {B, Hq, Sq, Skv};
  int64_t rows = B * Hq * Sq;
  // One block per query row, its scores in shared memory, where they fit.
  size_t shared = static_cast<size_t>(Skv + kAttentionThreads) * sizeof(double);
  int device = 0, optin = 0;
  STP_CUDA(cudaGetDevice(&device));
  STP_CUDA(cudaDeviceGetAttribute(
      &optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (rows > 0 && shared <= static_cast<size_t>(optin)) {
    if (shared > 48 * 1024)
      STP_CUDA(cudaFuncSetAttribute(attentionRowKernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(shared)));
    attentionRowKernel<<<static_cast<unsigned>(rows), kAttentionThreads, shared,
                         ctx.compute>>>(
        q.data(), k.data(), v.data(), mask ? mask->data() : nullptr,
        dims(scoreShape),
        dims(mask ? broadcastStrides(maskShape, scoreShape) : Shape(4, 0)),
        out.data(), B, Hq, Sq, D, Hkv, Skv, Dv, scale, causal);
    STP_CUDA(cudaGetLastError());
    return;
  }
  int64_t n = rows * Dv;
  attentionKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(
      q.data(), k.data(), v.data(), mask ? mask->data() : nullptr,
      dims(scoreShape),
      dims(mask ? broadcastStrides(maskShape, scoreShape) : Shape(4, 0)),
      out.data(), B, Hq, Sq, D, Hkv, Skv, Dv, scale, causal);
  STP_CUDA(cudaGetLastError());
}

/// stp.moe_route: one block per token; its threads compute the router
/// logits into shared memory (e floats), thread 0 the softmax and top-k.
template <typename T>
__global__ void moeRouteKernel(const T *tokens, const T *router, T *gates,
                               int64_t *experts, int64_t d, int64_t e,
                               int64_t k, bool normalize) {
  extern __shared__ float logits[];
  int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < e; j += blockDim.x) {
    float acc = 0;
    for (int64_t h = 0; h < d; ++h)
      acc += float(widen(tokens[t * d + h])) * float(widen(router[h * e + j]));
    logits[j] = acc;
  }
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  float top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < e; ++j)
    top = fmaxf(top, logits[j]);
  for (int64_t j = 0; j < e; ++j)
    sum += (logits[j] = expf(logits[j] - top));
  // k selection passes over the probabilities (ties: lower expert first).
  int64_t prev = -1;
  float chosen = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t c = 0; c < e; ++c) {
      if (prev >= 0 && (logits[c] > logits[prev] ||
                        (logits[c] == logits[prev] && c <= prev)))
        continue;
      if (best < 0 || logits[c] > logits[best])
        best = c;
    }
    experts[t * k + j] = best;
    chosen += logits[best] / sum;
    prev = best;
  }
  for (int64_t j = 0; j < k; ++j) {
    float g = logits[experts[t * k + j]] / sum;
    gates[t * k + j] = static_cast<T>(normalize ? g / chosen : g);
  }
}
template <typename T>
void moeRoute(Context &ctx, const Tensor<T> &tokens, const Tensor<T> &router,
              Tensor<T> &gates, Tensor<int64_t> &experts, int64_t n, int64_t d,
              int64_t e, int64_t k, bool normalize) {
  moeRouteKernel<<<unsigned(n), 128, sizeof(float) * e, ctx.compute>>>(
      tokens.data(), router.data(), gates.data(), experts.data(), d, e, k,
      normalize);
  STP_CUDA(cudaGetLastError());
}

/// f32 sums stored in the element type.
template <typename T>
__global__ void moeStoreKernel(const float *o, T *out, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = static_cast<T>(o[i]);
}

/// stp.moe_dispatch's slots: one thread, in token order (the order every
/// target uses, so slots are deterministic).
template <typename I>
__global__ void moeSlotsKernel(const I *experts, I *counts, I *slots, I n, I k,
                               I e, I c) {
  for (I x = 0; x < e; ++x)
    counts[x] = 0;
  for (I p = 0; p < n * k; ++p) {
    I x = experts[p];
    slots[p] = (x < 0 || x >= e || counts[x] >= c) ? -1 : counts[x]++;
  }
}
/// The rows of the kept choices (times their weight when `weights` is
/// given).
template <typename T>
__global__ void moeCopyRowsKernel(const T *tokens, const int64_t *experts,
                                  const int64_t *slots, const T *weights,
                                  T *buffer, int64_t n, int64_t d, int64_t k,
                                  int64_t c) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * k * d)
    return;
  int64_t p = i / d, h = i % d, slot = slots[p];
  if (slot < 0)
    return;
  T *to = buffer + (experts[p] * c + slot) * d + h;
  if (weights)
    *to = static_cast<T>(float(widen(weights[p])) *
                         float(widen(tokens[(p / k) * d + h])));
  else
    *to = tokens[(p / k) * d + h];
}
template <typename T>
void moeDispatch(Context &ctx, const Tensor<T> &tokens,
                 const Tensor<int64_t> &experts, const Tensor<T> *weights,
                 Tensor<T> &buffer, Tensor<int64_t> &counts,
                 Tensor<int64_t> &slots, int64_t n, int64_t d, int64_t k,
                 int64_t e, int64_t c) {
  STP_CUDA(
      cudaMemsetAsync(buffer.data(), 0, sizeof(T) * e * c * d, ctx.compute));
  moeSlotsKernel<int64_t><<<1, 1, 0, ctx.compute>>>(
      experts.data(), counts.data(), slots.data(), n, k, e, c);
  moeCopyRowsKernel<<<blocksFor(n * k * d), 256, 0, ctx.compute>>>(
      tokens.data(), experts.data(), slots.data(),
      weights ? weights->data() : nullptr, buffer.data(), n, d, k, c);
  STP_CUDA(cudaGetLastError());
}

/// stp.moe_gate_grad: one thread per (token, choice).
template <typename T>
__global__ void moeGateGradKernel(const T *outputs, const int64_t *slots,
                                  const int64_t *experts, const T *dy, T *dg,
                                  int64_t n, int64_t k, int64_t c, int64_t d) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * k)
    dg[i] = static_cast<T>(
        moeGateGradElement(outputs, slots, experts, dy, i / k, i % k, k, c, d));
}
template <typename T>
void moeGateGrad(Context &ctx, const Tensor<T> &outputs,
                 const Tensor<int64_t> &slots, const Tensor<int64_t> &experts,
                 const Tensor<T> &dy, Tensor<T> &dg, int64_t n, int64_t k,
                 int64_t c, int64_t d) {
  moeGateGradKernel<<<blocksFor(n * k), 256, 0, ctx.compute>>>(
      outputs.data(), slots.data(), experts.data(), dy.data(), dg.data(), n, k,
      c, d);
  STP_CUDA(cudaGetLastError());
}

/// stp.moe_route_grad's logit gradient: one block per token; its threads
/// compute the logits into shared memory (e floats), thread 0 the softmax
/// (as moeRouteKernel), then each thread dl of its experts (moeLogitGrad).
template <typename T>
__global__ void moeLogitGradKernel(const T *tokens, const T *router,
                                   const int64_t *experts, const T *dg, T *dl,
                                   int64_t d, int64_t e, int64_t k,
                                   bool normalize) {
  extern __shared__ float p[];
  int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < e; j += blockDim.x) {
    float acc = 0;
    for (int64_t h = 0; h < d; ++h)
      acc += float(widen(tokens[t * d + h])) * float(widen(router[h * e + j]));
    p[j] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < e; ++j)
      top = fmaxf(top, p[j]);
    for (int64_t j = 0; j < e; ++j)
      sum += (p[j] = expf(p[j] - top));
    for (int64_t j = 0; j < e; ++j)
      p[j] /= sum;
  }
  __syncthreads();
  for (int64_t x = threadIdx.x; x < e; x += blockDim.x)
    dl[t * e + x] = static_cast<T>(
        moeLogitGrad(p, experts + t * k, dg + t * k, k, normalize, x));
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
/// stp.moe_route_grad: the logits' gradient dl [n, e] (moeLogitGradKernel),
/// then dTokens = dl router^T and dRouter = tokens^T dl (cuBLAS, f32 sums).
template <typename T>
void moeRouteGrad(Context &ctx, const Tensor<T> &tokens,
                  const Tensor<T> &router, const Tensor<int64_t> &experts,
                  const Tensor<T> &dg, Tensor<T> &dTokens, Tensor<T> &dRouter,
                  int64_t n, int64_t d, int64_t e, int64_t k, bool normalize) {
  auto dl = alloc<T>(ctx, n * e);
  auto dx = alloc<float>(ctx, n * d), dr = alloc<float>(ctx, d * e);
  moeLogitGradKernel<<<unsigned(n), 128, sizeof(float) * e, ctx.compute>>>(
      tokens.data(), router.data(), experts.data(), dg.data(), dl.data(), d, e,
      k, normalize);
  STP_CUDA(cudaMemsetAsync(dx.data(), 0, sizeof(float) * n * d, ctx.compute));
  STP_CUDA(cudaMemsetAsync(dr.data(), 0, sizeof(float) * d * e, ctx.compute));
  rowMajorGemm(ctx, false, true, n, d, e, dl.data(), router.data(), dx.data());
  rowMajorGemm(ctx, true, false, d, e, n, tokens.data(), dl.data(), dr.data());
  moeStoreKernel<<<blocksFor(n * d), 256, 0, ctx.compute>>>(
      dx.data(), dTokens.data(), n * d);
  moeStoreKernel<<<blocksFor(d * e), 256, 0, ctx.compute>>>(
      dr.data(), dRouter.data(), d * e);
  STP_CUDA(cudaGetLastError());
}

/// H = act(A) (* U) in the element type (stp.moe_experts' activation).
template <typename T>
__global__ void moeActivationKernel(const float *a, const float *u, T *h,
                                    int64_t n, int activation) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    h[i] = static_cast<T>(moeActivation(activation, a[i]) * (u ? u[i] : 1.0f));
}
/// Element-wise copy converting T to the GEMM operand type Op.
template <typename Op, typename T>
__global__ void moeOperandKernel(const T *in, Op *out, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = static_cast<Op>(static_cast<float>(in[i]));
}
/// `src` (n elements) as GEMM operands of type Op: itself where Op is T,
/// else rounded into `dst` on the compute stream (mixed precision).
template <typename Op, typename T>
const Op *moeOperand(Context &ctx, const T *src, int64_t n, Tensor<Op> &dst) {
  if constexpr (std::is_same<Op, T>::value) {
    return src;
  } else {
    moeOperandKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(src, dst.data(), n);
    return dst.data();
  }
}
/// One stage of stp.moe_experts: for every (local expert, segment) pair
/// with used rows, C_i = A_i B_i (column-major, m_i x n_i x k_i; C zeroed
/// beforehand, alpha 1, beta 0) as one grouped cuBLAS call
/// (cublasGemmGroupedBatchedEx, one group per pair), or, where cuBLAS
/// declines the types, one `gemm` per pair (the same products; a profiled
/// run notes it once).
template <typename Op>
void moeGroupedGemm(Context &ctx, const std::vector<int> &m,
                    const std::vector<int> &n, const std::vector<int> &k,
                    const std::vector<const void *> &a,
                    const std::vector<int> &lda,
                    const std::vector<const void *> &b,
                    const std::vector<int> &ldb, const std::vector<void *> &c,
                    const std::vector<int> &ldc) {
  const int groups = static_cast<int>(m.size());
  if (groups == 0)
    return;
  static bool grouped = true;
  if (grouped) {
    std::vector<cublasOperation_t> ops(groups, CUBLAS_OP_N);
    std::vector<float> alpha(groups, 1.0f), beta(groups, 0.0f);
    std::vector<int> sizes(groups, 1);
    // The device arrays of A, B and C pointers cuBLAS reads.
    auto ptrs = alloc<void *>(ctx, 3 * groups);
    std::vector<void *> host;
    for (const void *x : a)
      host.push_back(const_cast<void *>(x));
    for (const void *x : b)
      host.push_back(const_cast<void *>(x));
    host.insert(host.end(), c.begin(), c.end());
    STP_CUDA(cudaMemcpyAsync(ptrs.data(), host.data(),
                             sizeof(void *) * 3 * groups,
                             cudaMemcpyHostToDevice, ctx.compute));
    cublasStatus_t st = cublasGemmGroupedBatchedEx(
        ctx.blas, ops.data(), ops.data(), m.data(), n.data(), k.data(),
        alpha.data(), ptrs.data(), BlasType<Op>::value, lda.data(),
        ptrs.data() + groups, BlasType<Op>::value, ldb.data(), beta.data(),
        ptrs.data() + 2 * groups, CUDA_R_32F, ldc.data(), groups, sizes.data(),
        CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
      return;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
      fatal("cublasGemmGroupedBatchedEx: cuBLAS status " +
            std::to_string(static_cast<int>(st)));
    // CUDA 13.0's cuBLAS declines bf16 operands with an f32 result
    // (CUBLAS_STATUS_NOT_SUPPORTED, seen on an H200, bench/gpu/RESULTS.md).
    grouped = false;
    if (ctx.profile.enabled)
      std::fprintf(stderr,
                   "stpar_program: note: cuBLAS has no grouped GEMM for "
                   "these operand types (status %d): the experts run one "
                   "GEMM per segment\n",
                   static_cast<int>(st));
  }
  for (int i = 0; i < groups; ++i)
    gemm(ctx, false, false, m[i], n[i], k[i], static_cast<const Op *>(a[i]),
         lda[i], 0, static_cast<const Op *>(b[i]), ldb[i], 0,
         static_cast<float *>(c[i]), ldc[i], 0, 1);
}

/// stp.moe_experts: three stages over every (local expert, segment) pair
/// with n > 0 used rows, each one grouped GEMM (`moeGroupedGemm`; the cpu
/// target runs the same products with the semantics of `gemm`):
/// A[n, f] = rows @ wIn[x] (U likewise with wMul), then H = act(A) (* U)
/// in the operand type for all rows at once, then O[n, d] = H @ wOut[x].
/// A, U, H and O are laid out like the buffer ([el, s, .], unused rows
/// zero), so the activation and the store are one kernel each. Op is the
/// GEMM operand type: T, or bf16 under -stp-mixed-precision (the rows and
/// weights rounded into temporary buffers first; the products accumulate
/// in f32). The row counts are copied to the host first (a compute stream
/// synchronization: they size the GEMMs). `keptA`, `keptU` (training; may
/// be null): A and U stored for the backward.
template <typename Op, typename T>
void moeExpertsAs(Context &ctx, const Tensor<T> &buffer,
                  const Tensor<int64_t> &counts, const Tensor<T> &wIn,
                  const Tensor<T> *wMul, const Tensor<T> &wOut, Tensor<T> &out,
                  Tensor<T> *keptA, Tensor<T> *keptU, int64_t el, int64_t s,
                  int64_t p, int64_t d, int64_t f, int activation) {
  constexpr bool round = !std::is_same<Op, T>::value;
  const int64_t c = s / p;
  std::vector<int64_t> used(el * p);
  STP_CUDA(cudaMemcpyAsync(used.data(), counts.data(), sizeof(int64_t) * el * p,
                           cudaMemcpyDeviceToHost, ctx.compute));
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  auto a = alloc<float>(ctx, el * s * f),
       u = alloc<float>(ctx, wMul ? el * s * f : 1),
       o = alloc<float>(ctx, el * s * d);
  auto h = alloc<Op>(ctx, el * s * f);
  // Rounded operands (bf16 under mixed precision), else unused.
  auto rows = alloc<Op>(ctx, round ? el * s * d : 1),
       wi = alloc<Op>(ctx, round ? el * d * f : 1),
       wm = alloc<Op>(ctx, round && wMul ? el * d * f : 1),
       wo = alloc<Op>(ctx, round ? el * f * d : 1);
  auto operand = [&](const T *src, int64_t n, Tensor<Op> &dst) {
    return moeOperand<Op>(ctx, src, n, dst);
  };
  const Op *rows_ = operand(buffer.data(), el * s * d, rows);
  const Op *wIn_ = operand(wIn.data(), el * d * f, wi);
  const Op *wMul_ = wMul ? operand(wMul->data(), el * d * f, wm) : nullptr;
  const Op *wOut_ = operand(wOut.data(), el * f * d, wo);
  // Row-major [n, d] x [d, f] is column-major [f, d] x [d, n].
  std::vector<int> ms, ns, ks, lda, ldb, ldc;
  std::vector<const void *> as, mulAs, bs;
  std::vector<void *> cs, us, os;
  std::vector<const void *> hs, wos;
  for (int64_t x = 0; x < el; ++x)
    for (int64_t g = 0; g < p; ++g) {
      const int64_t n = std::min(c, used[x * p + g]);
      if (n <= 0)
        continue;
      const int64_t row = x * s + g * c;
      ms.push_back(static_cast<int>(f));
      ns.push_back(static_cast<int>(n));
      ks.push_back(static_cast<int>(d));
      as.push_back(wIn_ + x * d * f);
      if (wMul_)
        mulAs.push_back(wMul_ + x * d * f);
      bs.push_back(rows_ + row * d);
      cs.push_back(a.data() + row * f);
      if (wMul_)
        us.push_back(u.data() + row * f);
      hs.push_back(h.data() + row * f);
      wos.push_back(wOut_ + x * f * d);
      os.push_back(o.data() + row * d);
    }
  const size_t pairs = ns.size();
  lda.assign(pairs, static_cast<int>(f));
  ldb.assign(pairs, static_cast<int>(d));
  ldc.assign(pairs, static_cast<int>(f));
  moeGroupedGemm<Op>(ctx, ms, ns, ks, as, lda, bs, ldb, cs, ldc);
  if (wMul_)
    moeGroupedGemm<Op>(ctx, ms, ns, ks, mulAs, lda, bs, ldb, us, ldc);
  moeActivationKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
      a.data(), wMul_ ? u.data() : nullptr, h.data(), el * s * f, activation);
  std::vector<int> dm(pairs, static_cast<int>(d)),
      fk(pairs, static_cast<int>(f));
  moeGroupedGemm<Op>(ctx, dm, ns, fk, wos, dm, hs, fk, os, dm);
  moeStoreKernel<<<blocksFor(el * s * d), 256, 0, ctx.compute>>>(
      o.data(), out.data(), el * s * d);
  if (keptA)
    moeStoreKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
        a.data(), keptA->data(), el * s * f);
  if (keptU && wMul_)
    moeStoreKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
        u.data(), keptU->data(), el * s * f);
  STP_CUDA(cudaGetLastError());
}
template <typename T>
void moeExperts(Context &ctx, const Tensor<T> &buffer,
                const Tensor<int64_t> &counts, const Tensor<T> &wIn,
                const Tensor<T> *wMul, const Tensor<T> &wOut, Tensor<T> &out,
                Tensor<T> *keptA, Tensor<T> *keptU, int64_t el, int64_t s,
                int64_t p, int64_t d, int64_t f, int activation,
                bool bf16Operands) {
  if (bf16Operands)
    moeExpertsAs<bf16>(ctx, buffer, counts, wIn, wMul, wOut, out, keptA, keptU,
                       el, s, p, d, f, activation);
  else
    moeExpertsAs<T>(ctx, buffer, counts, wIn, wMul, wOut, out, keptA, keptU, el,
                    s, p, d, f, activation);
}

/// stp.moe_experts_grad's element-wise step: from dH (f32) and the
/// recomputed A (and U), dA = dH (* U) act'(A) and dU = dH act(A) in the
/// element type, and H = act(A) (* U).
template <typename T>
__global__ void moeActivationGradKernel(const float *dh, const float *a,
                                        const float *u, T *h, T *da, T *du,
                                        int64_t n, int activation) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float act = moeActivation(activation, a[i]);
  h[i] = static_cast<T>(act * (u ? u[i] : 1.0f));
  da[i] = static_cast<T>(dh[i] * (u ? u[i] : 1.0f) *
                         moeActivationGrad(activation, a[i]));
  if (u)
    du[i] = static_cast<T>(dh[i] * act);
}
/// stp.moe_experts_grad: per (local expert, segment) pair with used rows
/// (counts copied to the host first, as moeExperts), A and U recomputed,
/// then dW_out += H^T dO, dH = dO W_out^T, dA = dH (* U) act'(A), dU =
/// dH act(A), dW_in += X^T dA, dW_mul += X^T dU, dX = dA W_in^T (+ dU
/// W_mul^T): one cuBLAS GEMM per pair and product (not grouped), f32 sums,
/// the same products as the cpu target's. Op is the GEMM operand type: T,
/// or bf16 under -stp-mixed-precision (rows, output gradients and weights
/// rounded into temporary buffers; H, dA and dU made in bf16). With
/// `keptA` (and `keptU`) A and U are read as the forward kept them.
template <typename Op, typename T>
void moeExpertsGradAs(Context &ctx, const Tensor<T> &buffer,
                      const Tensor<T> &dOut, const Tensor<int64_t> &counts,
                      const Tensor<T> &wIn, const Tensor<T> *wMul,
                      const Tensor<T> &wOut, const Tensor<T> *keptA,
                      const Tensor<T> *keptU, Tensor<T> &dRows, Tensor<T> &dWIn,
                      Tensor<T> *dWMul, Tensor<T> &dWOut, int64_t el, int64_t s,
                      int64_t p, int64_t d, int64_t f, int activation) {
  constexpr bool round = !std::is_same<Op, T>::value;
  const int64_t c = s / p;
  std::vector<int64_t> used(el * p);
  STP_CUDA(cudaMemcpyAsync(used.data(), counts.data(), sizeof(int64_t) * el * p,
                           cudaMemcpyDeviceToHost, ctx.compute));
  STP_CUDA(cudaStreamSynchronize(ctx.compute));
  // U, dU and dW_mul only for gated experts (else one unused element).
  const int64_t gatedRows = wMul ? el * s * f : 1;
  auto a = alloc<float>(ctx, el * s * f), u = alloc<float>(ctx, gatedRows),
       dh = alloc<float>(ctx, el * s * f), dx = alloc<float>(ctx, el * s * d),
       dwi = alloc<float>(ctx, el * d * f),
       dwm = alloc<float>(ctx, wMul ? el * d * f : 1),
       dwo = alloc<float>(ctx, el * f * d);
  auto h = alloc<Op>(ctx, el * s * f), da = alloc<Op>(ctx, el * s * f),
       du = alloc<Op>(ctx, gatedRows);
  for (auto *z : {&a, &u, &dh, &dx, &dwi, &dwm, &dwo})
    STP_CUDA(
        cudaMemsetAsync(z->data(), 0, sizeof(float) * z->size, ctx.compute));
  // Rounded operands (bf16 under mixed precision), else unused.
  auto rows = alloc<Op>(ctx, round ? el * s * d : 1),
       grads = alloc<Op>(ctx, round ? el * s * d : 1),
       wi = alloc<Op>(ctx, round ? el * d * f : 1),
       wm = alloc<Op>(ctx, round && wMul ? el * d * f : 1),
       wo = alloc<Op>(ctx, round ? el * f * d : 1);
  auto operand = [&](const T *src, int64_t n, Tensor<Op> &dst) {
    return moeOperand<Op>(ctx, src, n, dst);
  };
  const Op *x_ = operand(buffer.data(), el * s * d, rows),
           *dO = operand(dOut.data(), el * s * d, grads),
           *w1 = operand(wIn.data(), el * d * f, wi),
           *w2 = operand(wOut.data(), el * f * d, wo),
           *w3 = wMul ? operand(wMul->data(), el * d * f, wm) : nullptr;
  auto eachPair = [&](auto &&body) {
    for (int64_t x = 0; x < el; ++x)
      for (int64_t g = 0; g < p; ++g)
        if (int64_t n = std::min(c, used[x * p + g]); n > 0)
          body(x, x * s + g * c, n);
  };
  if (keptA)
    moeOperandKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
        keptA->data(), a.data(), el * s * f);
  if (keptU && w3)
    moeOperandKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
        keptU->data(), u.data(), el * s * f);
  eachPair([&](int64_t x, int64_t row, int64_t n) {
    if (!keptA)
      rowMajorGemm(ctx, false, false, n, f, d, x_ + row * d, w1 + x * d * f,
                   a.data() + row * f);
    if (w3 && !keptU)
      rowMajorGemm(ctx, false, false, n, f, d, x_ + row * d, w3 + x * d * f,
                   u.data() + row * f);
    rowMajorGemm(ctx, false, true, n, f, d, dO + row * d, w2 + x * f * d,
                 dh.data() + row * f);
  });
  moeActivationGradKernel<<<blocksFor(el * s * f), 256, 0, ctx.compute>>>(
      dh.data(), a.data(), w3 ? u.data() : nullptr, h.data(), da.data(),
      du.data(), el * s * f, activation);
  eachPair([&](int64_t x, int64_t row, int64_t n) {
    rowMajorGemm(ctx, true, false, f, d, n,
                 static_cast<const Op *>(h.data()) + row * f, dO + row * d,
                 dwo.data() + x * f * d);
    rowMajorGemm(ctx, true, false, d, f, n, x_ + row * d,
                 static_cast<const Op *>(da.data()) + row * f,
                 dwi.data() + x * d * f);
    rowMajorGemm(ctx, false, true, n, d, f,
                 static_cast<const Op *>(da.data()) + row * f, w1 + x * d * f,
                 dx.data() + row * d);
    if (w3) {
      rowMajorGemm(ctx, true, false, d, f, n, x_ + row * d,
                   static_cast<const Op *>(du.data()) + row * f,
                   dwm.data() + x * d * f);
      rowMajorGemm(ctx, false, true, n, d, f,
                   static_cast<const Op *>(du.data()) + row * f, w3 + x * d * f,
                   dx.data() + row * d);
    }
  });
  auto store = [&](const Tensor<float> &from, T *to, int64_t n) {
    moeStoreKernel<<<blocksFor(n), 256, 0, ctx.compute>>>(from.data(), to, n);
  };
  store(dx, dRows.data(), el * s * d);
  store(dwi, dWIn.data(), el * d * f);
  if (dWMul)
    store(dwm, dWMul->data(), el * d * f);
  store(dwo, dWOut.data(), el * f * d);
  STP_CUDA(cudaGetLastError());
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
  if (bf16Operands)
    moeExpertsGradAs<bf16>(ctx, buffer, dOut, counts, wIn, wMul, wOut, keptA,
                           keptU, dRows, dWIn, dWMul, dWOut, el, s, p, d, f,
                           activation);
  else
    moeExpertsGradAs<T>(ctx, buffer, dOut, counts, wIn, wMul, wOut, keptA,
                        keptU, dRows, dWIn, dWMul, dWOut, el, s, p, d, f,
                        activation);
}

/// stp.moe_combine: one thread per output element.
template <typename T>
__global__ void moeCombineKernel(const T *outputs, const int64_t *slots,
                                 const int64_t *experts, const T *gates, T *out,
                                 int64_t n, int64_t k, int64_t c, int64_t d) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * d)
    return;
  out[i] = static_cast<T>(
      moeCombineElement(outputs, slots, experts, gates, i / d, i % d, k, c, d));
}
template <typename T>
void moeCombine(Context &ctx, const Tensor<T> &outputs,
                const Tensor<int64_t> &slots, const Tensor<int64_t> &experts,
                const Tensor<T> &gates, Tensor<T> &out, int64_t n, int64_t k,
                int64_t c, int64_t d) {
  moeCombineKernel<<<blocksFor(n * d), 256, 0, ctx.compute>>>(
      outputs.data(), slots.data(), experts.data(), gates.data(), out.data(), n,
      k, c, d);
  STP_CUDA(cudaGetLastError());
}

/// One thread per row: k selection passes (ties: lower index first).
template <typename T>
__global__ void topkKernel(const T *in, T *values, int64_t *indices,
                           int64_t outer, int64_t n, int64_t inner, int64_t k,
                           bool largest) {
  int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= outer * inner)
    return;
  int64_t o = r / inner, i = r % inner;
  const T *x = in + o * n * inner + i;
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t c = 0; c < n; ++c) {
      // Skip the elements chosen before: those ranking above `prev`.
      if (prev >= 0) {
        auto pv = widen(x[prev * inner]), cv = widen(x[c * inner]);
        bool before = largest ? (cv > pv || (cv == pv && c <= prev))
                              : (cv < pv || (cv == pv && c <= prev));
        if (before)
          continue;
      }
      if (best < 0 || (largest ? widen(x[c * inner]) > widen(x[best * inner])
                               : widen(x[c * inner]) < widen(x[best * inner])))
        best = c;
    }
    values[(o * k + j) * inner + i] = x[best * inner];
    indices[(o * k + j) * inner + i] = best;
    prev = best;
  }
}
template <typename T>
void topk(Context &ctx, const Tensor<T> &in, Tensor<T> &values,
          Tensor<int64_t> &indices, const Shape &shape, int64_t axis,
          int64_t k, bool largest) {
  int64_t outer = prod(shape, 0, axis), n = shape[axis],
          inner = prod(shape, axis + 1, shape.size());
  topkKernel<<<blocksFor(outer * inner), 256, 0, ctx.compute>>>(
      in.data(), values.data(), indices.data(), outer, n, inner, k, largest);
  STP_CUDA(cudaGetLastError());
}

/// One thread in order (duplicate indices accumulate deterministically).
template <typename T, typename I>
__global__ void scatterKernel(T *out, Dims dataShape, const I *indices,
                              const T *updates, Dims indexShape, int axis,
                              int reduction, int64_t n) {
  for (int64_t p = 0; p < n; ++p) {
    int64_t rest = p, target = 0, stride = 1;
    for (int d = indexShape.n; d-- > 0;) {
      int64_t c = rest % indexShape.v[d];
      rest /= indexShape.v[d];
      if (d == axis) {
        c = static_cast<int64_t>(indices[p]);
        if (c < 0)
          c += dataShape.v[d];
      }
      target += c * stride;
      stride *= dataShape.v[d];
    }
    T &t = out[target];
    auto a = widen(t), u = widen(updates[p]);
    switch (reduction) {
    case 0: t = updates[p]; break;
    case 1:
      t = static_cast<T>(a + u);
      break;
    case 2:
      t = static_cast<T>(a * u);
      break;
    case 3:
      t = a > u ? t : updates[p];
      break;
    case 4:
      t = a < u ? t : updates[p];
      break;
    }
  }
}
template <typename T, typename I>
void scatterElements(Context &ctx, Tensor<T> &out, const Shape &dataShape,
                     const Tensor<I> &indices, const Tensor<T> &updates,
                     const Shape &indexShape, int64_t axis, int reduction) {
  scatterKernel<<<1, 1, 0, ctx.compute>>>(
      out.data(), dims(dataShape), indices.data(), updates.data(),
      dims(indexShape), static_cast<int>(axis), reduction,
      numElements(indexShape));
  STP_CUDA(cudaGetLastError());
}

} // namespace stpar_rt

#endif // STPAR_RUNTIME_CUDA_H
