//===- stpar-import-fuzzer.cpp - libFuzzer target over the importer -------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Feeds each input to stpar::onnximport::importONNXFile exactly as
// `stpar import` would read a model file: the bytes are written to
// model.onnx in a private temporary folder (so external-data locations
// resolve against that folder only) and imported into a fresh MLIRContext
// with diagnostics discarded. Every symbolic dim of the graph inputs is
// bound to 2, so inputs reach node import instead of stopping at the
// missing --dim. A crash, a sanitizer report, a timeout or a memory blow-up
// is a finding; a rejected model is the expected outcome for most inputs.
//
// Built only with -DSTPAR_ENABLE_FUZZER=ON (Clang's libFuzzer);
// scripts/fuzz-import.sh builds, seeds and runs it (docs/fuzzing.md).
//
//===----------------------------------------------------------------------===//

#include "stpar/Import/ONNX/ONNXImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {

/// A private folder for this process's model file, made once.
const std::string &workDir() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/stpar-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("stpar-import-fuzzer: mkdtemp");
      std::abort();
    }
    return pattern;
  }();
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = workDir() + "/model.onnx";
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    std::abort();
  if (size && std::fwrite(data, 1, size, file) != size)
    std::abort();
  std::fclose(file);

  stpar::onnximport::ImportOptions options;
  onnx::ModelProto model;
  if (model.ParseFromArray(data, static_cast<int>(size)))
    for (const onnx::ValueInfoProto &input : model.graph().input())
      for (const auto &dim : input.type().tensor_type().shape().dim())
        if (dim.has_dim_param() && !dim.dim_param().empty())
          options.dims[dim.dim_param()] = 2;

  mlir::DialectRegistry registry;
  stpar::onnximport::registerImportDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });
  (void)stpar::onnximport::importONNXFile(path, context, options);
  return 0;
}
