//===- Passes.h - stp dialect passes ----------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_TRANSFORMS_PASSES_H
#define STPAR_DIALECT_STP_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace stpar::stp {

#define GEN_PASS_DECL
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_TRANSFORMS_PASSES_H
