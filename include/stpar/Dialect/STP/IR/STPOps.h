//===- STPOps.h - stp graph ops ---------------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPOPS_H
#define STPAR_DIALECT_STP_IR_STPOPS_H

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"

#define GET_OP_CLASSES
#include "stpar/Dialect/STP/IR/STPOps.h.inc"

namespace stpar::stp {
/// Whether `name` is an activation stp.moe and stp.moe_experts accept:
/// silu, gelu (erf form), gelu_tanh or relu.
bool isMoEActivation(llvm::StringRef name);
} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_IR_STPOPS_H
