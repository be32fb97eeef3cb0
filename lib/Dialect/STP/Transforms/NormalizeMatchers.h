//===- NormalizeMatchers.h - IR views used by -stp-normalize ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Private to lib/Dialect/STP/Transforms: read-only views of the importer's
// IR (single-op elementwise `linalg.generic`s, keep-dims means, batched
// matmuls) and a small polynomial evaluator, shared by the normalization
// patterns (Normalize.cpp) and the attention / MoE recognizers
// (NormalizeAttention.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_LIB_DIALECT_STP_TRANSFORMS_NORMALIZEMATCHERS_H
#define STPAR_LIB_DIALECT_STP_TRANSFORMS_NORMALIZEMATCHERS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <map>
#include <optional>

namespace stpar::stp::normalize {

/// Counters the patterns bump; the pass copies them into its statistics.
struct NormalizeCounts {
  int64_t layerNorm = 0;
  int64_t rmsNorm = 0;
  int64_t geluFused = 0;
  int64_t attention = 0;
};

/// One operand of an elementwise op: a tensor (read through a numpy
/// broadcasting map) or a scalar constant (an in-body `arith.constant` or a
/// splat constant tensor input).
struct EwOperand {
  mlir::Value tensor;
  std::optional<double> constant;
  bool isConstant() const { return constant.has_value(); }
};

/// A `linalg.generic` with one result, all-parallel loops, an identity
/// output map and a body of exactly one arith/math op (plus constants)
/// whose result is yielded. `kind` is that op's name (`arith.addf`, ...).
struct EwOp {
  mlir::linalg::GenericOp op;
  mlir::Operation *bodyOp = nullptr;
  llvm::StringRef kind;
  llvm::SmallVector<EwOperand, 3> operands;

  mlir::RankedTensorType type() const;
  /// Whether operand `i` is a tensor of the result's shape read by an
  /// identity map.
  bool isFull(unsigned i) const;
};

/// The elementwise view of `v`'s defining op, or std::nullopt.
std::optional<EwOp> matchEw(mlir::Value v);
/// matchEw restricted to the op kind `kind`.
std::optional<EwOp> matchEw(mlir::Value v, llvm::StringRef kind);

/// The float value of a splat constant tensor or scalar `arith.constant`.
std::optional<double> getConstantScalar(mlir::Value v);

/// `a` and `b` equal within a relative tolerance of `rel`.
bool approxEqual(double a, double b, double rel = 1e-5);

/// A keep-dims mean: `divf(sum_{axis..rank-1}(input), count)` as the
/// importer writes ReduceMean (a sum `linalg.generic` over a zero fill,
/// then an elementwise divide by the number of reduced elements).
struct MeanInfo {
  mlir::Value input;
  int64_t axis;
  /// The divide and the sum (for single-use checks and erasure).
  mlir::Operation *divOp;
  mlir::Operation *sumOp;
};
std::optional<MeanInfo> matchMean(mlir::Value v);

/// A matmul `linalg.generic` as the importer builds it for rank-4 operands
/// without batch broadcasting: loops (b, h, m, n, k), maps
/// (b,h,m,k) x (b,h,k,n) -> (b,h,m,n), body `out + a * b`, zero-filled init.
struct BatchMatmul {
  mlir::linalg::GenericOp op;
  mlir::Value lhs, rhs;
};
std::optional<BatchMatmul> matchBatchMatmul(mlir::Value v);

/// Whether every user of every result of the ops in `ops` except `root` is
/// itself in `ops` (the ops can be replaced together).
bool isClosed(const llvm::SmallPtrSetImpl<mlir::Operation *> &ops,
              mlir::Operation *root);

//===----------------------------------------------------------------------===//
// Polynomials in x and t (for GELU)
//===----------------------------------------------------------------------===//

/// A polynomial in two variables: (degree of x, degree of t) -> coefficient.
using Poly = std::map<std::pair<int, int>, double>;

/// Whether `a` and `b` have the same coefficients within tolerance.
bool polyEqual(const Poly &a, const Poly &b);

/// A node of an arithmetic expression: an op kind and its operands. Used to
/// evaluate the same expression shapes over tensors (elementwise generics)
/// and over scalars (ops in a generic's body).
struct ExprNode {
  llvm::StringRef kind;
  mlir::Operation *op = nullptr;
  llvm::SmallVector<EwOperand, 3> args;
};
using NodeFn = llvm::function_ref<std::optional<ExprNode>(mlir::Value)>;

/// Evaluates `v` as a polynomial in `x` and `t` through addf, subf, mulf,
/// negf, divf by a constant and powf by a small integer constant; every op
/// visited is added to `visited`. std::nullopt if some leaf is neither `x`,
/// `t` nor a constant.
std::optional<Poly> evalPoly(mlir::Value v, mlir::Value x, mlir::Value t,
                             NodeFn node,
                             llvm::SmallPtrSetImpl<mlir::Operation *> &visited,
                             int depth = 0);

/// The distinct non-constant values of `v`'s arithmetic expression, `v`
/// first, then its operands breadth-first (the candidates for a variable of
/// the expression); at most `limit`.
void collectValues(mlir::Value v, NodeFn node,
                   llvm::SmallVectorImpl<mlir::Value> &values,
                   unsigned limit = 32);

/// Whether `arg` (the operand of erf / tanh) is the GELU argument of `x`:
/// x / sqrt(2) for erf, sqrt(2/pi) (x + 0.044715 x^3) for tanh.
bool isGeluArgument(const Poly &arg, bool isTanh);
/// The GELU outer form 0.5 x (1 + t) = 0.5 x + 0.5 x t.
bool isGeluOuter(const Poly &outer);

//===----------------------------------------------------------------------===//
// Pattern population
//===----------------------------------------------------------------------===//

void populateNormPatterns(mlir::RewritePatternSet &patterns,
                          NormalizeCounts &counts);
void populateGeluPatterns(mlir::RewritePatternSet &patterns,
                          NormalizeCounts &counts);
void populateAttentionPatterns(mlir::RewritePatternSet &patterns,
                               NormalizeCounts &counts);

/// Marks single generics whose body computes GELU with
/// `stp.composite = "gelu"`; returns how many it marked.
int64_t markGeluBodies(mlir::Operation *root);
/// Replaces each dense exported MoE layer under `root` whose every piece
/// matches (NormalizeMoE.cpp) by one `stp.moe`; returns how many.
int64_t rewriteMoELayers(mlir::Operation *root);
/// Marks the ops of each MoE layer under `root` with
/// `stp.composite = "moe"` and `stp.group`; returns the number of layers.
int64_t markMoELayers(mlir::Operation *root);

} // namespace stpar::stp::normalize

#endif // STPAR_LIB_DIALECT_STP_TRANSFORMS_NORMALIZEMATCHERS_H
