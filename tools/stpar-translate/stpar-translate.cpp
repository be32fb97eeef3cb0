//===- stpar-translate.cpp - stpar's translations ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// mlir-translate with stpar's translations, the entry points MLIR users
// expect next to the opt tool:
//
//   stpar-translate --import-onnx model.onnx --onnx-dim batch=8 -o model.mlir
//   stpar-translate --stp-to-cpu partitioned.mlir -o program.cpp
//   stpar-translate --stp-to-cuda partitioned.mlir -o program.cu
//
// --import-onnx is `stpar import` (docs/import.md; locations are the ONNX
// node names); --stp-to-cpu / --stp-to-cuda print the per-rank program of a
// partitioned module (docs/emitted-code.md), the `program.cpp` /
// `program.cu` that `stpar compile` writes (the build files, runtime headers
// and io.json of the program folder come from `stpar emit`).
//
//===----------------------------------------------------------------------===//

#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Target/Emit.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

static llvm::cl::list<std::string>
    onnxDims("onnx-dim", llvm::cl::value_desc("NAME=VALUE"),
             llvm::cl::desc("--import-onnx: bind a symbolic dim"));

static OwningOpRef<Operation *> importONNX(llvm::SourceMgr &sources,
                                           MLIRContext *context) {
  const llvm::MemoryBuffer *input = sources.getMemoryBuffer(1);
  StringRef path = input->getBufferIdentifier();
  auto fail = [&](const Twine &message) -> OwningOpRef<Operation *> {
    emitError(UnknownLoc::get(context)) << message;
    return nullptr;
  };
  if (path.empty() || path == "<stdin>")
    return fail("--import-onnx reads a file (external data is found next "
                "to it), not standard input");
  stpar::onnximport::ImportOptions options;
  if (llvm::Error error = stpar::onnximport::parseDimBindings(
          onnxDims, options.dims, "--onnx-dim"))
    return fail(llvm::toString(std::move(error)));
  OwningOpRef<ModuleOp> module =
      stpar::onnximport::importONNXFile(path, *context, options);
  if (!module)
    return nullptr;
  return OwningOpRef<Operation *>(module.release());
}

static LogicalResult emit(Operation *op, llvm::raw_ostream &os,
                          stpar::target::EmitTarget target) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError("expected a builtin.module");
  if (failed(stpar::target::legalizeForEmission(module, target)))
    return failure();
  FailureOr<stpar::target::EmittedProgram> program =
      stpar::target::emitProgram(module, target);
  if (failed(program))
    return failure();
  os << program->source;
  return success();
}

int main(int argc, char **argv) {
  auto registerDialects = [](DialectRegistry &registry) {
    stpar::registerAllDialects(registry);
    stpar::onnximport::registerImportDialects(registry);
  };
  TranslateToMLIRRegistration importReg(
      "import-onnx", "ONNX model file to MLIR (stpar import)", importONNX,
      registerDialects);
  TranslateFromMLIRRegistration cpuReg(
      "stp-to-cpu", "partitioned module to the cpu (MPI) program",
      [](Operation *op, llvm::raw_ostream &os) {
        return emit(op, os, stpar::target::EmitTarget::Cpu);
      },
      registerDialects);
  TranslateFromMLIRRegistration cudaReg(
      "stp-to-cuda", "partitioned module to the cuda (NCCL, cuBLAS) program",
      [](Operation *op, llvm::raw_ostream &os) {
        return emit(op, os, stpar::target::EmitTarget::Cuda);
      },
      registerDialects);
  return failed(mlirTranslateMain(argc, argv, "stpar translations\n"));
}
