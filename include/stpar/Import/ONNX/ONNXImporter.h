//===- ONNXImporter.h - ONNX to MLIR import ---------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The first stage of the pipeline: an ONNX model becomes one `func.func`
// with static shapes. Graph inputs become function arguments (`stp.name`),
// initializers become arguments carrying `#stp.param` (never inlined),
// compute ops become upstream func/arith/math/tensor/linalg ops or `stp`
// graph ops, and shape-computation subgraphs are folded away once the
// symbolic dims are bound.
//
// This header does not include ONNX or protobuf headers.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_IMPORT_ONNX_ONNXIMPORTER_H
#define STPAR_IMPORT_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace mlir {
class MLIRContext;
class DialectRegistry;
} // namespace mlir

namespace stpar::onnximport {

/// Options of one import.
struct ImportOptions {
  /// Values of the model's symbolic dims (ONNX `dim_param`), e.g.
  /// {"batch_size": 8, "seq_len": 2048}. Every symbolic dim of a graph input
  /// must be bound; 0 is allowed (e.g. an empty past key/value cache).
  llvm::StringMap<int64_t> dims;
  /// Name of the created function.
  std::string functionName = "main";
  /// Largest tensor, in elements, that shape-computation folding evaluates
  /// on the host; larger computed constants stay ops in the IR.
  int64_t maxFoldElements = int64_t(1) << 16;
};

/// Largest dim value accepted (2^40): larger values are reported as
/// overflowing.
constexpr int64_t kMaxDimValue = int64_t(1) << 40;

/// Newest default-domain opset the importer handles.
constexpr int64_t kMaxOpsetVersion = 24;

/// Imports the ONNX model file at `path`.
///
/// Errors (unreadable or malformed file, unsupported op/opset/dtype, cycle,
/// unbound or invalid dims, ...) are reported through `context`'s
/// diagnostic handler, located at the ONNX node (an `mlir::NameLoc` with the
/// node's name around a `FileLineColLoc` of the file) and with the node's
/// name and op type in the message; the result is then null and nothing has
/// been written anywhere. Weights are never read: external data files are
/// only checked for existence (missing ones make `#stp.param<data = absent>`).
mlir::OwningOpRef<mlir::ModuleOp> importONNXFile(llvm::StringRef path,
                                                 mlir::MLIRContext &context,
                                                 const ImportOptions &options);

/// Parses `NAME=VALUE` bindings of symbolic dims (VALUE an integer; the
/// importer rejects negative and overflowing values) into `dims`. Errors:
/// "FLAG expects NAME=VALUE with an integer VALUE, got '...'" and "FLAG
/// binds 'NAME' twice (A and B)", FLAG being `flag` (the command-line flag
/// the bindings came from).
llvm::Error parseDimBindings(llvm::ArrayRef<std::string> bindings,
                             llvm::StringMap<int64_t> &dims,
                             llvm::StringRef flag = "--dim");

/// Adds the dialects the importer produces to `registry`.
void registerImportDialects(mlir::DialectRegistry &registry);

} // namespace stpar::onnximport

#endif // STPAR_IMPORT_ONNX_ONNXIMPORTER_H
