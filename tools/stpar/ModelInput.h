//===- ModelInput.h - ONNX models as subcommands read them ------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The common front of `stpar cost` and `stpar plan` on an ONNX model: bind
// the dims, find the batch dim, import, and convert the function into the
// cost model's operator graph.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TOOLS_STPAR_MODELINPUT_H
#define STPAR_TOOLS_STPAR_MODELINPUT_H

#include "Diagnostics.h"

#include "stpar/Analysis/CostModel.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stpar::tools {

/// An imported model and its operator graph. Owns the MLIR context (and
/// the diagnostic printer on it), which outlive the module.
struct AnalyzedModel {
  std::unique_ptr<mlir::MLIRContext> context;
  std::unique_ptr<DiagnosticPrinter> printer;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp func;
  stpar::analysis::OperatorGraph graph;
  /// The symbolic dim holding the batch, and its bound value (>= 1).
  std::string batchDim;
  int64_t batch = 0;
};

/// Binds `dims` (NAME=VALUE) and imports the ONNX model at `path` (the
/// module records the bindings as `stp.dims`); `graph` and `batch` stay
/// empty. Prints the errors and returns std::nullopt on failure.
std::optional<AnalyzedModel> importModel(llvm::StringRef path,
                                         const std::vector<std::string> &dims);

/// Binds `dims` (NAME=VALUE), finds the batch dim (`batchDimName` when
/// given, else the one bound dim whose name contains "batch"), imports the
/// ONNX model at `path`, normalizes it (-stp-normalize, as the pipeline
/// does) and converts its function with `options` (whose
/// batchSize is set to the batch). Prints `stpar: error: ...` (or the
/// importer's diagnostics) and returns std::nullopt on failure.
std::optional<AnalyzedModel>
importForAnalysis(llvm::StringRef path, const std::vector<std::string> &dims,
                  llvm::StringRef batchDimName,
                  stpar::analysis::ConversionOptions options);

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_MODELINPUT_H
