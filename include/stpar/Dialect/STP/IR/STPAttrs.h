//===- STPAttrs.h - stp attributes ------------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Cluster, mesh and partition-spec attributes of the `stp` dialect. The
// attribute classes are generated from STPAttrs.td; this header adds the
// plain data types their methods return.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPATTRS_H
#define STPAR_DIALECT_STP_IR_STPATTRS_H

#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "stpar/Cost/Mesh.h"

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/bit.h"

#include <cstdint>
#include <optional>

namespace stpar::stp {

/// The three matmuls of a training step for a linear layer
/// `O = I * W` (PrimePar, Section 2): forward `F` (O = I * W), input
/// gradient `B` (dI = dO * W^T) and weight gradient `G` (dW = I^T * dO).
enum class Phase { Forward, InputGrad, WeightGrad };

/// Link levels a mesh axis crosses (derived by MeshAttr::getAxisPlacement):
/// the cost model's struct, so the dialect and the cost model share one
/// placement rule (stpar/Cost/Mesh.h).
using AxisPlacement = stpar::cost::AxisPlacement;

/// A double as an attribute parameter: hashable (by bit pattern) and
/// comparable, converting implicitly to `double` for readers.
class F64Value {
public:
  F64Value() = default;
  explicit F64Value(double value) : value(value) {}
  operator double() const { return value; }
  double getValue() const { return value; }
  bool operator==(const F64Value &other) const {
    return llvm::bit_cast<uint64_t>(value) ==
           llvm::bit_cast<uint64_t>(other.value);
  }
  bool operator!=(const F64Value &other) const { return !(*this == other); }

private:
  double value = 0;
};

/// Parses a number written as an integer (`0`, `100`) or a float
/// (`3.0e11`) into `value`, as the float parameters of stp attributes accept.
mlir::ParseResult parseNumber(mlir::AsmParser &parser, double &value);

inline llvm::hash_code hash_value(F64Value v) {
  return llvm::hash_value(llvm::bit_cast<uint64_t>(v.getValue()));
}

} // namespace stpar::stp

#include "stpar/Dialect/STP/IR/STPEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "stpar/Dialect/STP/IR/STPAttrs.h.inc"

namespace stpar::stp {

/// Checks that `rule` (an affine map `(r, c, t)[d] -> (M, N, K)` taken
/// modulo `q`) is a valid schedule of `phase` on a `q x q` grid: every block
/// product (M, N, K) is computed exactly once over all devices and steps,
/// and at every step no slice of either input operand of the phase is used
/// by two devices. Reports the first violation through `emitError` and
/// returns failure. Cost: O(q^3) map evaluations.
mlir::LogicalResult
verifyTemporalRule(llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
                   Phase phase, mlir::AffineMap rule, int64_t q);

/// Evaluates `rule` at grid position (r, c), step t of q, modulo q.
/// Returns the (M, N, K) slice indices, each in [0, q).
std::array<int64_t, 3> evaluateTemporalRule(mlir::AffineMap rule, int64_t r,
                                            int64_t c, int64_t t, int64_t q);

/// Name of a phase as used in the syntax: "forward", "input_grad",
/// "weight_grad".
llvm::StringRef stringifyPhase(Phase phase);

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_IR_STPATTRS_H
