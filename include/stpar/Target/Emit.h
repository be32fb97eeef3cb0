//===- Emit.h - C++ emitters of the per-rank program ------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Prints the per-rank program of a module (partitioned, docs/spmd-ir.md, or
// unpartitioned: one rank, everything replicated) as C++ for the `cpu`
// target (loops + MPI) or the `cuda` target (CUDA kernels, cuBLAS, NCCL).
// Emission is legalize-then-print: `legalizeForEmission` rewrites named
// linalg ops to linalg.generic and reports every op the target cannot print;
// `emitProgram` then prints. The files and the IO contract are documented in
// docs/emitted-code.md.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TARGET_EMIT_H
#define STPAR_TARGET_EMIT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace stpar::target {

enum class EmitTarget { Cpu, Cuda };

/// Parses "cpu" / "cuda".
std::optional<EmitTarget> parseEmitTarget(llvm::StringRef name);
llvm::StringRef getEmitTargetName(EmitTarget target);

/// The files of one emitted program (contents, not yet written).
struct EmittedProgram {
  std::string sourceName; ///< "program.cpp" or "program.cu"
  std::string source;
  std::string cmakeLists;
  std::string ioJson;
  /// Runtime files to copy next to the program, relative to runtime/.
  llvm::SmallVector<std::string> runtimeFiles;
};

/// Rewrites the ops of `module` the printer handles through another op
/// (named linalg ops -> linalg.generic) and checks that everything else can
/// be printed for `target`; emits an error naming the op and its location
/// for each op that cannot.
mlir::LogicalResult legalizeForEmission(mlir::ModuleOp module,
                                        EmitTarget target);

/// Prints the program of a legalized module.
mlir::FailureOr<EmittedProgram> emitProgram(mlir::ModuleOp module,
                                            EmitTarget target);

/// Writes weights.bin (format in docs/emitted-code.md): the global data of
/// every `stp.param` argument of the module's entry function, read from the
/// ONNX model at `onnxPath` (and its external data files). Returns false
/// with `error` set when the model cannot be read or a parameter's data is
/// missing or has another type or shape than the argument.
bool writeWeights(llvm::StringRef onnxPath, mlir::ModuleOp module,
                  llvm::StringRef path, std::string &error);

/// Legalizes, prints and writes DIR/{CMakeLists.txt, program source,
/// runtime files, io.json, weights.bin}. Writes into a temporary sibling
/// directory and renames it to `dir` at the end; on failure nothing is left.
/// `runtimeDir` is the runtime/ folder of the stpar sources; `modelPath` may
/// be empty when the function has no `stp.param` arguments.
mlir::LogicalResult emitDirectory(mlir::ModuleOp module, EmitTarget target,
                                  llvm::StringRef modelPath,
                                  llvm::StringRef dir,
                                  llvm::StringRef runtimeDir);

} // namespace stpar::target

#endif // STPAR_TARGET_EMIT_H
