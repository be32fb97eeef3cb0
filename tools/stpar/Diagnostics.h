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
#include "llvm/Support/CommandLine.h"

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

/// The value of a byte-size option such as `--memory-limit`: a number of
/// bytes, optionally with a unit, powers of 1000 (kB, MB, GB, TB) or of
/// 1024 (KiB, MiB, GiB, TiB), e.g. `80GiB`, `40GB`, `8.5e10`. A negative or
/// non-numeric value is an error naming the option.
class ByteSizeParser : public llvm::cl::parser<double> {
public:
  explicit ByteSizeParser(llvm::cl::Option &option)
      : llvm::cl::parser<double>(option) {}
  bool parse(llvm::cl::Option &option, llvm::StringRef argName,
             llvm::StringRef arg, double &value);
  llvm::StringRef getValueName() const override { return "bytes"; }
};

/// The folder `path` would be written into (absolute) when that folder
/// does not exist, else an empty string.
std::string getMissingParent(llvm::StringRef path);

/// Checks, before any long work, that an output file can be written at
/// `path`: its folder exists, and `path` is not a folder. Returns the
/// message of the first problem, or an empty string.
std::string checkOutputFile(llvm::StringRef path);

/// Checks an explicitly given `--devices` (count > 0 occurrences): at least
/// 1. Returns the message, or an empty string.
std::string checkDevices(const llvm::cl::opt<int64_t> &devices);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_DIAGNOSTICS_H
