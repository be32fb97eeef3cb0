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

#ifdef __CUDACC__
#define STP_HD __host__ __device__
#else
#define STP_HD
#endif

namespace stpar_rt {

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

} // namespace stpar_rt

#endif // STPAR_RUNTIME_SCALAR_H
