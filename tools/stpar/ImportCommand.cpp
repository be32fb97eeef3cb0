//===- ImportCommand.cpp - `stpar import` -----------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// stpar import MODEL.onnx [--dim NAME=VALUE ...] [-o out.mlir]
//
// Imports an ONNX model into MLIR (see stpar/Import/ONNX/ONNXImporter.h).
// Errors are printed as `MODEL.onnx: error: node 'NAME' (OpType): ...` and
// exit with 1; the output file is written only when the import succeeds.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"

#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace llvm;

static cl::SubCommand importCmd("import", "Import an ONNX model into MLIR");
static cl::OptionCategory importCat("stpar import options");

static cl::opt<std::string> importInput(cl::Positional, cl::Required,
                                        cl::desc("<model.onnx>"),
                                        cl::sub(importCmd), cl::cat(importCat));
static cl::list<std::string>
    importDims("dim", cl::desc("Bind a symbolic dim: --dim NAME=VALUE"),
               cl::value_desc("NAME=VALUE"), cl::sub(importCmd),
               cl::cat(importCat));
static cl::opt<std::string> importOutput("o", cl::desc("Output file"),
                                         cl::value_desc("file"),
                                         cl::init("-"), cl::sub(importCmd),
                                         cl::cat(importCat));

static int runImport() {
  stpar::onnximport::ImportOptions options;
  if (!stpar::tools::parseDimBindings(importDims, options.dims))
    return 1;
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  stpar::tools::DiagnosticPrinter printer(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      stpar::onnximport::importONNXFile(importInput, context, options);
  if (!module)
    return 1;
  std::string error;
  auto output = mlir::openOutputFile(importOutput, &error);
  if (!output) {
    errs() << "stpar: error: " << error << "\n";
    return 1;
  }
  module->print(output->os(), stpar::tools::getPrintingFlags());
  output->os() << "\n";
  output->os().flush();
  if (std::error_code ec = output->os().error()) {
    // Not kept: the partial file is removed.
    errs() << "stpar: error: cannot write '" << importOutput
           << "': " << ec.message() << "\n";
    output->os().clear_error();
    return 1;
  }
  output->keep();
  return 0;
}

static stpar::tools::CommandRegistration registration(importCmd, runImport);
