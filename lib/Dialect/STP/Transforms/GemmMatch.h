//===- GemmMatch.h - contractions that are one GEMM call --------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The test -stp-lower-contractions applies (and -stp-mixed-precision, which
// rounds the operands of exactly those contractions to bf16), kept in one
// place so the two passes cannot disagree.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_LIB_DIALECT_STP_TRANSFORMS_GEMMMATCH_H
#define STPAR_LIB_DIALECT_STP_TRANSFORMS_GEMMMATCH_H

#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"

#include <optional>

namespace stpar::stp {

/// The arguments of one `stpar_rt::gemm` call (cublasGemmStridedBatchedEx
/// semantics, column-major): C (rows x cols, leading dim ldc) += op(X) *
/// op(Y), `batch` times; X and Y are the op's inputs #x and #y; leading
/// dims and batch strides in elements.
struct GemmCall {
  bool transX, transY;
  int64_t rows, cols, k;
  unsigned x;
  int64_t ldx, strideX;
  unsigned y;
  int64_t ldy, strideY, ldc, strideC, batch;
};

/// The GEMM call that computes `op`, or nullopt when `op` is not one
/// strided-batched GEMM: a contraction of two static-shape tensors into one
/// whose m, n, k and batch loop groups are each one contiguous run in
/// memory. Element types are not checked (see hasGemmElementTypes).
std::optional<GemmCall> matchStridedBatchedGemm(mlir::linalg::LinalgOp op);

/// The element types the runtime's GEMM takes: an f32 result and two
/// inputs that are both f32 or both bf16 (fp32 accumulation either way).
bool hasGemmElementTypes(mlir::linalg::LinalgOp op);

} // namespace stpar::stp

#endif // STPAR_LIB_DIALECT_STP_TRANSFORMS_GEMMMATCH_H
