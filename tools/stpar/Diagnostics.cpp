//===- Diagnostics.cpp - diagnostics and shared options of stpar -*- C++ -*-=//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

static std::string fileOf(Location loc) {
  std::string file;
  loc->walk([&](Location inner) {
    if (auto fileLoc = dyn_cast<FileLineColLoc>(inner)) {
      file = fileLoc.getFilename().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
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
  id = context.getDiagEngine().registerHandler([](Diagnostic &diag) {
    auto print = [](Diagnostic &d) {
      llvm::errs() << fileOf(d.getLocation()) << ": "
                   << severityName(d.getSeverity()) << ": " << d.str() << "\n";
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

bool stpar::tools::parseDimBindings(const std::vector<std::string> &bindings,
                                    llvm::StringMap<int64_t> &dims) {
  for (const std::string &binding : bindings) {
    auto [name, value] = StringRef(binding).split('=');
    int64_t v = 0;
    if (name.empty() || value.empty() || value.getAsInteger(10, v)) {
      llvm::errs() << "stpar: error: --dim expects NAME=VALUE with an integer "
                      "VALUE, got '"
                   << binding << "'\n";
      return false;
    }
    auto [it, inserted] = dims.try_emplace(name, v);
    if (!inserted && it->second != v) {
      llvm::errs() << "stpar: error: --dim binds '" << name << "' twice ("
                   << it->second << " and " << v << ")\n";
      return false;
    }
  }
  return true;
}
