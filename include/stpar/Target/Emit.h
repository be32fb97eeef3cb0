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
/// (named linalg ops -> linalg.generic), runs the lowering passes not run
/// yet (-stp-schedule-collectives, -stp-plan-memory,
/// -stp-lower-collectives) and checks that everything else can be printed
/// for `target`; emits an error naming the op and its location for each op
/// that cannot.
mlir::LogicalResult legalizeForEmission(mlir::ModuleOp module,
                                        EmitTarget target);

/// Prints the program of a legalized module.
mlir::FailureOr<EmittedProgram> emitProgram(mlir::ModuleOp module,
                                            EmitTarget target);

/// Legalizes, prints and writes DIR/{CMakeLists.txt, program source,
/// runtime files, io.json}. Writes into a temporary sibling directory and
/// renames it to `dir` at the end; on failure nothing is left. `runtimeDir`
/// is stpar's runtime/ folder (<prefix>/share/stpar/runtime). No weight is
/// read or copied: the programs read each rank's block of every parameter
/// at run time from the file and offset its `#stp.param` records
/// (docs/emitted-code.md, "Weights").
mlir::LogicalResult emitDirectory(mlir::ModuleOp module, EmitTarget target,
                                  llvm::StringRef dir,
                                  llvm::StringRef runtimeDir);

} // namespace stpar::target

#endif // STPAR_TARGET_EMIT_H
