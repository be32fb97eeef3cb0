//===- Collectives.h - the shard collectives of partitioned programs -*- C++ -*-===//
//
// Part of stpar. Which shard ops -stp-partition emits as collectives, shared
// by -stp-schedule-collectives, -stp-plan-memory and the emitter.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H
#define STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace stpar::stp {

/// A shard collective of a partitioned program: all-reduce, all-gather,
/// reduce-scatter, all-to-all, ring shift, or all-slice (a local copy of the
/// rank's block, no communication); or the runtime call one was lowered to.
bool isCollective(mlir::Operation *op);

/// A collective that communicates (all of the above but all-slice): it runs
/// on a communication stream and its result is waited for.
bool isCommunicatingCollective(mlir::Operation *op);

/// The grid axes whose communicator a collective uses; std::nullopt for
/// all-slice (local) and ring shifts (the world communicator).
std::optional<llvm::ArrayRef<int16_t>> getCommunicatorAxes(mlir::Operation *op);

/// The C++ literal of a `stpar_rt::Shape` (`stpar_rt::Shape{4, 8}`), as the
/// lowered calls and the printer write shapes and grid-axes groups.
std::string getRuntimeShapeLiteral(llvm::ArrayRef<int64_t> values);

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H
