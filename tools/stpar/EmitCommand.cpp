//===- EmitCommand.cpp - `stpar emit` ---------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// stpar emit --target cpu|cuda MODULE.mlir -o DIR
//
// Prints the per-rank program of MODULE (partitioned or not) as C++ for the
// target and writes DIR/{CMakeLists.txt, program.cpp|program.cu, runtime
// headers, io.json} (stpar/Target/Emit.h,
// docs/emitted-code.md). On an error nothing is written and the exit code
// is 1.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"

#include "stpar/InitAll.h"
#include "stpar/Target/Emit.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>

using namespace llvm;

static cl::SubCommand emitCmd("emit",
                              "Emit the per-rank program as C++ (cpu: MPI, "
                              "cuda: NCCL/cuBLAS)");
static cl::opt<std::string> emitInput(cl::Positional, cl::Required,
                                      cl::desc("<module.mlir>"),
                                      cl::sub(emitCmd));
static cl::opt<std::string> emitTarget("target", cl::Required,
                                       cl::desc("cpu or cuda"),
                                       cl::sub(emitCmd));
static cl::opt<std::string> emitOutput("o", cl::Required,
                                       cl::value_desc("dir"),
                                       cl::desc("Output directory"),
                                       cl::sub(emitCmd));

static int runEmit() {
  std::optional<stpar::target::EmitTarget> target =
      stpar::target::parseEmitTarget(emitTarget);
  if (!target) {
    errs() << "stpar: error: unknown target '" << emitTarget
           << "' (expected cpu or cuda)\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  registry.insert<mlir::scf::SCFDialect>();
  mlir::MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  // MLIR input: diagnostics as FILE:LINE:COL: error: ... with the line.
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(emitInput, sourceMgr,
                                            mlir::ParserConfig(&context));
  if (!module)
    return 1;
  std::string runtimeDir = stpar::tools::getRuntimeDir();
  if (failed(stpar::target::emitDirectory(*module, *target, emitOutput,
                                          runtimeDir)))
    return 1;
  return 0;
}

static stpar::tools::CommandRegistration registration(emitCmd, runEmit);
