//===- STP.td - the whole stp dialect ----------------------*- tablegen -*-===//
//
// Part of stpar. Includes every .td of the dialect, for the docs and the
// dialect declarations.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_STP_TD
#define STPAR_DIALECT_STP_IR_STP_TD

include "stpar/Dialect/STP/IR/STPAttrs.td"
include "stpar/Dialect/STP/IR/STPOps.td"

#endif // STPAR_DIALECT_STP_IR_STP_TD
