//===- stpar-opt.cpp - stpar's MLIR optimizer driver ------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// mlir-opt with the dialects and passes stpar uses: func, arith, tensor,
// linalg, shard, emitc and stp.
//
//===----------------------------------------------------------------------===//

#include "stpar/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  stpar::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "stpar optimizer driver (spatial-temporal partitioning)\n",
      registry));
}
