//===- STPARPlugin.cpp - the stp dialect and passes for mlir-opt -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// A plugin that stock `mlir-opt` (LLVM/MLIR 22, linked against the shared
// libMLIR.so) loads at run time:
//
//   mlir-opt-22 --load-dialect-plugin=lib/STPARPlugin.so \
//               --load-pass-plugin=lib/STPARPlugin.so \
//               planned.mlir --stp-partition
//
// The dialect entry point registers the `stp` dialect; the pass entry point
// registers every stp pass (-stp-normalize, -stp-plan, -stp-apply-plan,
// -stp-export-plan, -stp-partition, -stp-print-mesh-placement) and the
// stp-compile-pipeline (stpar/Pipelines/Pipelines.h). The
// upstream dialects the passes create (shard, linalg, scf, ...) are part of
// mlir-opt already.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/Passes.h"
#include "stpar/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "stpar", LLVM_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            registry->insert<stpar::stp::STPDialect>();
            stpar::stp::registerPartitionableOpModels(*registry);
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "stpar", LLVM_VERSION_STRING,
          []() {
            stpar::stp::registerSTPPasses();
            stpar::pipelines::registerPipelines();
          }};
}
