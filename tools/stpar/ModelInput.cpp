//===- ModelInput.cpp - ONNX models as subcommands read them ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "ModelInput.h"

#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Dialect/STP/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"

#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static void printError(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
}

/// The batch dim: `name` if given (it must be bound), else the one bound
/// dim whose name contains "batch".
static std::optional<std::string> findBatchDim(const StringMap<int64_t> &dims,
                                               StringRef name) {
  if (!name.empty()) {
    if (!dims.count(name)) {
      printError("--batch-dim " + name + ": not bound with --dim " + name +
                 "=VALUE");
      return std::nullopt;
    }
    return name.str();
  }
  std::vector<std::string> found;
  for (const auto &entry : dims)
    if (entry.getKey().lower().find("batch") != std::string::npos)
      found.push_back(entry.getKey().str());
  if (found.size() != 1) {
    printError(Twine(found.empty() ? "no" : "more than one") +
               " bound --dim name contains 'batch'; name the batch dim with "
               "--batch-dim NAME");
    return std::nullopt;
  }
  return found.front();
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
  stpar::onnximport::ImportOptions importOptions;
  if (!parseDimBindings(dims, importOptions.dims))
    return std::nullopt;
  // Import first: its errors name the model's unbound dims.
  AnalyzedModel model;
  mlir::DialectRegistry registry;
  stpar::registerAllDialects(registry);
  model.context = std::make_unique<mlir::MLIRContext>(registry);
  model.printer = std::make_unique<DiagnosticPrinter>(*model.context);
  model.module =
      stpar::onnximport::importONNXFile(path, *model.context, importOptions);
  if (!model.module)
    return std::nullopt;
  // The cost route sees the model as the pipeline does: normalized.
  mlir::PassManager pm(model.context.get());
  pm.addPass(stpar::stp::createNormalizePass());
  if (mlir::failed(pm.run(*model.module)))
    return std::nullopt;
  std::optional<std::string> batchDim =
      findBatchDim(importOptions.dims, batchDimName);
  if (!batchDim)
    return std::nullopt;
  model.batchDim = *batchDim;
  model.batch = importOptions.dims.lookup(*batchDim);
  if (model.batch < 1) {
    printError("--dim " + *batchDim + ": the batch size must be >= 1");
    return std::nullopt;
  }
  for (auto f : model.module->getOps<mlir::func::FuncOp>())
    if (!f.isExternal())
      model.func = f;
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
  return model;
}
