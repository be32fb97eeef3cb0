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
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
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

bool stpar::tools::ByteSizeParser::parse(llvm::cl::Option &option,
                                         llvm::StringRef argName,
                                         llvm::StringRef arg, double &value) {
  llvm::StringRef text = arg.trim();
  size_t end = 0;
  while (end < text.size() &&
         (llvm::isDigit(text[end]) || llvm::is_contained(".eE+-", text[end])))
    ++end;
  // An exponent's 'e' followed by no digit belongs to a unit such as "EB"
  // (not accepted below), so only the numeric prefix is parsed.
  llvm::StringRef number = text.take_front(end);
  llvm::StringRef unit = text.drop_front(end).trim();
  double scale = llvm::StringSwitch<double>(unit)
                     .Case("", 1.0)
                     .Case("B", 1.0)
                     .Case("kB", 1e3)
                     .Case("KB", 1e3)
                     .Case("MB", 1e6)
                     .Case("GB", 1e9)
                     .Case("TB", 1e12)
                     .Case("KiB", 1024.0)
                     .Case("MiB", 1024.0 * 1024)
                     .Case("GiB", 1024.0 * 1024 * 1024)
                     .Case("TiB", 1024.0 * 1024 * 1024 * 1024)
                     .Default(-1);
  double n = 0;
  if (number.empty() || number.getAsDouble(n) || scale < 0 || n < 0)
    return option.error(
        "'" + arg +
            "' is not a byte size (a number of bytes, optionally "
            "with a unit: kB, MB, GB, TB, KiB, MiB, GiB, TiB; "
            "e.g. 80GiB)",
        argName);
  value = n * scale;
  return false;
}

std::string stpar::tools::getMissingParent(llvm::StringRef path) {
  llvm::SmallString<256> parent(path);
  llvm::sys::fs::make_absolute(parent);
  llvm::sys::path::remove_filename(parent);
  return llvm::sys::fs::is_directory(parent) ? "" : parent.str().str();
}

std::string stpar::tools::checkOutputFile(llvm::StringRef path) {
  if (llvm::sys::fs::is_directory(path))
    return "'" + path.str() + "' is a folder, not a file";
  if (std::string parent = getMissingParent(path); !parent.empty())
    return "cannot write '" + path.str() + "': its folder '" + parent +
           "' does not exist";
  return "";
}

std::string stpar::tools::checkDevices(const llvm::cl::opt<int64_t> &devices) {
  if (devices.getNumOccurrences() && devices < 1)
    return "--devices must be at least 1 (got " + std::to_string(devices) + ")";
  return "";
}
