//===- ModelInput.cpp - ONNX models as subcommands read them ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ModelInput.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/Transforms/Passes.h"
#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Pipelines/Plan.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static void printError(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
}

std::optional<stpar::tools::AnalyzedModel>
stpar::tools::importModel(StringRef path,
                          const std::vector<std::string> &dims) {
  stpar::onnximport::ImportOptions importOptions;
  if (!parseDimBindings(dims, importOptions.dims))
    return std::nullopt;
  AnalyzedModel model;
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  model.context = std::make_unique<mlir::MLIRContext>(registry);
  model.printer = std::make_unique<DiagnosticPrinter>(*model.context);
  model.module =
      stpar::onnximport::importONNXFile(path, *model.context, importOptions);
  if (!model.module)
    return std::nullopt;
  for (auto f : model.module->getOps<mlir::func::FuncOp>())
    if (!f.isExternal())
      model.func = f;
  return model;
}

std::optional<stpar::tools::AnalyzedModel> stpar::tools::importForAnalysis(
    StringRef path, const std::vector<std::string> &dims,
    StringRef batchDimName, stpar::analysis::ConversionOptions options) {
  // Import first: its errors name the model's unbound dims.
  std::optional<AnalyzedModel> imported = importModel(path, dims);
  if (!imported)
    return std::nullopt;
  AnalyzedModel &model = *imported;
  // The cost route sees the model as the pipeline does: normalized.
  mlir::PassManager pm(model.context.get());
  pm.addPass(stpar::stp::createNormalizePass());
  if (mlir::failed(pm.run(*model.module)))
    return std::nullopt;
  Expected<std::pair<std::string, int64_t>> batchDim =
      stpar::pipelines::findBatchDim(*model.module, batchDimName);
  if (!batchDim) {
    printError(toString(batchDim.takeError()));
    return std::nullopt;
  }
  model.batchDim = batchDim->first;
  model.batch = batchDim->second;
  if (!model.func) {
    printError(path + ": the model has no function");
    return std::nullopt;
  }
  options.batchSize = model.batch;
  mlir::FailureOr<stpar::analysis::OperatorGraph> graph =
      stpar::analysis::convertToOperatorGraph(model.func, options);
  if (mlir::failed(graph))
    return std::nullopt;
  model.graph = std::move(*graph);
  return imported;
}
