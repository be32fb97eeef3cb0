//===- Diagnostics.h - diagnostics and shared options of stpar --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// How the driver prints MLIR diagnostics (`FILE: error: message`, the ONNX
// node named in the message), and the settings its subcommands share (dim
// bindings, how .mlir files are printed, where runtime/ is).
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
/// `FILE: error|warning|note|remark: [node 'NAME': ]message` (FILE from the
/// location's innermost file location, `stpar` when there is none; NAME the
/// ONNX node of the location unless the message names it already) while
/// alive. Switches off printing the op with a diagnostic.
class DiagnosticPrinter {
public:
  explicit DiagnosticPrinter(mlir::MLIRContext &context);
  ~DiagnosticPrinter();

private:
  mlir::MLIRContext &context;
  mlir::DiagnosticEngine::HandlerID id;
};

/// How every .mlir file the driver writes is printed: with locations (the
/// ONNX node names), so that a later `stpar-opt` run names operators as the
/// driver does.
mlir::OpPrintingFlags getPrintingFlags();

/// The runtime/ folder copied next to emitted programs: $STPAR_RUNTIME_DIR
/// when set, else <bin>/../share/stpar/runtime beside the running stpar (the
/// build tree and an installed prefix have the same layout).
std::string getRuntimeDir();

/// onnximport::parseDimBindings for `--dim`; prints `stpar: error: ...` and
/// returns false on a malformed or conflicting binding.
bool parseDimBindings(const std::vector<std::string> &bindings,
                      llvm::StringMap<int64_t> &dims);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_DIAGNOSTICS_H
