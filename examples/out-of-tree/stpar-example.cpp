//===- stpar-example.cpp - stpar's passes from an out-of-tree program -----===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Builds against an installed stpar (find_package(STPAR)): registers stpar's
// dialects and passes, parses a planned module (stp.mesh / stp.spec), runs
// a pass pipeline on it (default: -stp-partition, the per-device SPMD
// program) and prints the result and how many collectives it holds.
//
//   stpar-example PLANNED.mlir ['PIPELINE']
//
//===----------------------------------------------------------------------===//

#include "stpar/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    llvm::errs() << "usage: stpar-example PLANNED.mlir ['PIPELINE']\n";
    return 2;
  }
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  stpar::registerAllPasses();
  mlir::MLIRContext context(registry);

  llvm::SourceMgr sources;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(argv[1], sources, &context);
  if (!module)
    return 1;

  mlir::PassManager pm(&context);
  std::string errors;
  llvm::raw_string_ostream es(errors);
  const char *pipeline = argc == 3 ? argv[2] : "stp-partition";
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm, es))) {
    llvm::errs() << "stpar-example: bad pipeline '" << pipeline
                 << "': " << errors << "\n";
    return 1;
  }
  if (mlir::failed(pm.run(*module)))
    return 1;
  unsigned collectives = 0;
  module->walk([&](mlir::Operation *op) {
    if (op->getDialect() &&
        op->getDialect()->getNamespace() == "shard" &&
        op->getName().getStringRef() != "shard.grid")
      ++collectives;
  });
  module->print(llvm::outs());
  llvm::outs() << "\n// stpar-example: " << collectives
               << " shard op(s) after '" << pipeline << "'\n";
  return 0;
}
