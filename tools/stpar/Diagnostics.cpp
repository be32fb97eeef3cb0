//===- Diagnostics.cpp - diagnostics and shared options of stpar -*- C++ -*-=//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "Diagnostics.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Import/ONNX/ONNXImporter.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

static std::string fileOf(Location loc) {
  std::string file = stpar::stp::getFileName(loc);
  return file.empty() ? "stpar" : file;
}

static StringRef severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Note:
    return "note";
  case DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

stpar::tools::DiagnosticPrinter::DiagnosticPrinter(MLIRContext &context)
    : context(context) {
  // A diagnostic names its node; it never prints the op (for a module, the
  // whole program).
  context.printOpOnDiagnostic(false);
  id = context.getDiagEngine().registerHandler([](Diagnostic &diag) {
    auto print = [](Diagnostic &d) {
      std::string message = d.str();
      std::string node = stpar::stp::getNodeName(d.getLocation());
      llvm::errs() << fileOf(d.getLocation()) << ": "
                   << severityName(d.getSeverity()) << ": ";
      // The importer's messages name their node already.
      if (!node.empty() && !StringRef(message).starts_with("node '") &&
          !StringRef(message).contains("'" + node + "'"))
        llvm::errs() << "node '" << node << "': ";
      llvm::errs() << message << "\n";
    };
    print(diag);
    for (Diagnostic &note : diag.getNotes())
      print(note);
    return success();
  });
}

stpar::tools::DiagnosticPrinter::~DiagnosticPrinter() {
  context.getDiagEngine().eraseHandler(id);
}

std::string stpar::tools::getRuntimeDir() {
  if (const char *env = std::getenv("STPAR_RUNTIME_DIR"))
    return env;
  // /proc/self/exe on Linux; no argv[0] needed.
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(dir, "..", "share", "stpar", "runtime");
  llvm::sys::path::remove_dots(dir, /*remove_dot_dot=*/true);
  return dir.str().str();
}

OpPrintingFlags stpar::tools::getPrintingFlags() {
  OpPrintingFlags flags;
  flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  return flags;
}

bool stpar::tools::parseDimBindings(const std::vector<std::string> &bindings,
                                    llvm::StringMap<int64_t> &dims) {
  if (llvm::Error error = stpar::onnximport::parseDimBindings(bindings, dims)) {
    llvm::errs() << "stpar: error: " << llvm::toString(std::move(error))
                 << "\n";
    return false;
  }
  return true;
}
