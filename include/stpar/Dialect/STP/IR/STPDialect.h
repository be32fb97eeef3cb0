//===- STPDialect.h - stp dialect declaration -------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The `stp` dialect: cluster, mesh and partition-spec attributes for
// spatial-temporal partitioning (see STPBase.td for the overview).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STPDIALECT_H
#define STPAR_DIALECT_STP_IR_STPDIALECT_H

#include "mlir/IR/Dialect.h"

#include "stpar/Dialect/STP/IR/STPDialect.h.inc"

#endif // STPAR_DIALECT_STP_IR_STPDIALECT_H
