//===- Diagnostics.h - diagnostics and shared options of stpar --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// How the driver prints MLIR diagnostics (`FILE: error: message`, the ONNX
// node named in the message) and parses options shared by subcommands.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TOOLS_STPAR_DIAGNOSTICS_H
#define STPAR_TOOLS_STPAR_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace stpar::tools {

/// Prints every diagnostic of `context` to stderr as
/// `FILE: error|warning|note|remark: message` (FILE from the location's
/// innermost file location, `stpar` when there is none) while alive.
class DiagnosticPrinter {
public:
  explicit DiagnosticPrinter(mlir::MLIRContext &context);
  ~DiagnosticPrinter();

private:
  mlir::MLIRContext &context;
  mlir::DiagnosticEngine::HandlerID id;
};

/// Parses `NAME=VALUE` bindings (VALUE a non-negative integer) into `dims`;
/// prints an error and returns false on a malformed one.
/// How every .mlir file the driver writes is printed: with locations (the
/// ONNX node names), so that a later `stpar-opt` run names operators as the
/// driver does.
mlir::OpPrintingFlags getPrintingFlags();

/// The runtime/ folder copied next to emitted programs: $STPAR_RUNTIME_DIR
/// when set, else <bin>/../share/stpar/runtime beside the running stpar (the
/// build tree and an installed prefix have the same layout).
std::string getRuntimeDir();

bool parseDimBindings(const std::vector<std::string> &bindings,
                      llvm::StringMap<int64_t> &dims);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_DIAGNOSTICS_H
