//===- InitAll.h - register every dialect and pass stpar uses ---*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// One entry point for tools (stpar-opt, stpar) and plugins: the upstream
// dialects stpar works with (func, arith, tensor, linalg, shard, emitc), the
// `stp` dialect, and their passes.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_INITALL_H
#define STPAR_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace stpar {

/// Adds every dialect stpar uses (upstream and `stp`) to `registry`.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers stpar's passes and the upstream passes its pipelines use with
/// the global pass registry (for command-line parsing). Idempotent.
void registerAllPasses();

} // namespace stpar

#endif // STPAR_INITALL_H
