//===- Collectives.h - the shard collectives of partitioned programs -*- C++ -*-===//
//
// Part of stpar. Which shard ops -stp-partition emits as collectives, shared
// by -stp-schedule-collectives, -stp-plan-memory and the emitter.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H
#define STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H

#include "stpar/Cost/Collectives.h"

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
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

/// The grid axes whose communicator a collective uses (a pipeline send or
/// receive: the pp axis); std::nullopt for all-slice (local) and ring
/// shifts (the world communicator).
std::optional<llvm::ArrayRef<int16_t>> getCommunicatorAxes(mlir::Operation *op);

/// What one collective of a partitioned program communicates
/// (-stp-check-communication; docs/plan-format.md, "Plan check").
struct ProgramCommunication {
  mlir::Operation *op = nullptr;
  /// The operator and phase its `stp.plan_step` names ("" when it has
  /// none); a gradient op's "<node>/grad<k>" counts as "<node>".
  std::string label, phase;
  /// The collective (a grid_permute is a point-to-point transfer);
  /// cost::getCollectiveName names it.
  cost::Collective kind = cost::Collective::AllReduce;
  /// Grid axes of its group and the group's size.
  llvm::SmallVector<unsigned> axes;
  int64_t group = 1;
  /// Buffer S in elements (Collectives.h: the all-gather's output, the
  /// others' input) and the bytes per element.
  double elements = 0;
  int64_t elementBytes = 4;
  /// Elements one device sends per execution (cost::getRingVolume of S
  /// over the group, as the cost model counts it; a grid_permute that
  /// moves no block sends nothing).
  double sentElements = 0;
  /// Executions per step: the product of the enclosing scf.for trip
  /// counts; `knownCount` is false when one is not constant.
  double count = 1;
  bool knownCount = true;
};

/// The communication of `op` on a grid of `gridShape`, or std::nullopt
/// when it is not a communicating collective (all-slice moves nothing).
std::optional<ProgramCommunication>
getProgramCommunication(mlir::Operation *op, llvm::ArrayRef<int64_t> gridShape);

/// The C++ literal of a `stpar_rt::Shape` (`stpar_rt::Shape{4, 8}`), as the
/// lowered calls and the printer write shapes and grid-axes groups.
std::string getRuntimeShapeLiteral(llvm::ArrayRef<int64_t> values);

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_TRANSFORMS_COLLECTIVES_H
