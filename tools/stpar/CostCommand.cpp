//===- CostCommand.cpp - `stpar cost` ---------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Costs one training step under a Megatron strategy, from either
//
//   stpar cost MODEL.onnx --dim NAME=VALUE ... [--batch-dim NAME]
//       --cluster C --strategy megatron:tp=T,pp=P,dp=D[,mb=M][,gb=G]...
//   stpar cost --model gpt:layers=L,... --cluster C --strategy megatron:...
//
// Both are costed by the search objective, the one step composition
// (docs/cost-model.md): the first plans the model as `stpar plan
// --strategy megatron:...` does (lib/Pipelines/Plan.cpp; the bound batch
// dim is the micro-batch size here and `gb=` the global batch, default
// mb * dp), the second costs the plan search::costMegatronGPT makes
// (stpar/Search/GPTProblem.h). Both print the same breakdown (table or
// `--json`).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"
#include "ModelInput.h"
#include "ModelPlan.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/TrainingStep.h"
#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Pipelines/Plan.h"
#include "stpar/Search/GPTProblem.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace llvm;
using namespace stpar::cost;

static cl::SubCommand costCmd("cost",
                              "Cost one training step under a strategy");
static cl::opt<std::string> costInput(cl::Positional, cl::Optional,
                                      cl::desc("[<model.onnx>]"),
                                      cl::sub(costCmd));
static cl::opt<std::string>
    costModel("model", cl::sub(costCmd),
              cl::desc("Instead of an ONNX model: gpt:layers=L,hidden=H,"
                       "heads=A,seq=S,vocab=V,batch=B[,ffn=F]"));
static cl::opt<std::string> costCluster("cluster", cl::sub(costCmd),
                                        cl::Required,
                                        cl::desc("Preset name or JSON file"));
static cl::opt<std::string> costStrategy(
    "strategy", cl::sub(costCmd), cl::Required,
    cl::desc("megatron:tp=T,pp=P,dp=D[,mb=M][,gb=G][,vp=V]"
             "[,zero=Z][,recompute=none|selective|full][,sp=0|1]"
             "[,distopt=0|1][,overlap=0|1][,schedule=1f1b|gpipe] (missing "
             "keys are "
             "1, zero, sp and distopt 0, recompute full; "
             "distopt=1: ZeRO-1; overlap: gradient sync "
             "overlapped with backward; mb: ONNX models: the bound "
             "batch dim, gpt: 1 by default; gb: ONNX models "
             "only; vp: virtual stages per rank, also "
             "'interleave'; sp: sequence parallelism; schedule: the "
             "pipeline schedule, 1F1B by default)"));
static cl::list<std::string>
    costDims("dim", cl::sub(costCmd), cl::value_desc("NAME=VALUE"),
             cl::desc("ONNX models: bind a symbolic dim; the batch dim's "
                      "value is the micro-batch size"));
static cl::opt<std::string> costBatchDim(
    "batch-dim", cl::sub(costCmd), cl::value_desc("NAME"),
    cl::desc("ONNX models: the symbolic batch dim (default: the one --dim "
             "whose name contains 'batch')"));
static cl::opt<std::string>
    costPrecision("precision", cl::sub(costCmd), cl::init("mixed"),
                  cl::desc("ONNX models: mixed (2-byte activations and "
                           "weights, bf16 peak; default) or fp32"));
static cl::opt<bool> costJSON("json", cl::sub(costCmd),
                              cl::desc("Print the breakdown as JSON"));
static cl::opt<bool> costPrintOperators(
    "print-operators", cl::sub(costCmd),
    cl::desc("ONNX models: print the plan table (each planned operator's "
             "layer kind and partition) before the breakdown"));

static int fail(Error e) {
  errs() << "stpar: error: " << toString(std::move(e)) << "\n";
  return 1;
}

static int fail(const Twine &msg) {
  return fail(createStringError(inconvertibleErrorCode(), msg));
}

static int runGPT(const Cluster &cluster) {
  Expected<GPTConfig> model = parseGPTSpec(costModel);
  if (!model)
    return fail(model.takeError());
  Expected<MegatronStrategy> strategy = parseMegatronSpec(costStrategy);
  if (!strategy)
    return fail(strategy.takeError());
  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster.device.bf16 <= 0)
    eff.dtype = DType::FP16;
  Expected<stpar::search::CostedPlan> costed =
      stpar::search::costMegatronGPT(*model, *strategy, cluster, eff);
  if (!costed)
    return fail(costed.takeError());
  const StepBreakdown *b = &costed->step;
  if (costJSON) {
    json::Value v = toJSON(*b);
    (*v.getAsObject())["parameters"] = getGPTParameterCount(*model);
    (*v.getAsObject())["recompute"] = getRecomputeName(strategy->recompute);
    outs() << formatv("{0:2}", v) << "\n";
    return 0;
  }
  outs() << "model " << costModel << "\ncluster " << cluster.name
         << "\nstrategy " << costStrategy << "\n";
  printBreakdown(outs(), *b);
  return 0;
}

/// The IR route: the model is planned as `stpar plan MODEL.onnx --strategy
/// megatron:...` plans it (the same pipeline, search problem and
/// objective), with the bound batch dim, here the micro-batch size,
/// rebound to the global batch of one step (mb * dp * micro-batches).
static int runONNX(const Cluster &cluster) {
  if (costPrecision != "mixed" && costPrecision != "fp32")
    return fail("--precision: expected 'mixed' or 'fp32', got '" +
                costPrecision + "'");
  Expected<stpar::analysis::IRStrategy> strategy =
      stpar::analysis::parseIRStrategy(costStrategy);
  if (!strategy)
    return fail(strategy.takeError());
  const MegatronStrategy &m = strategy->megatron;
  // The bound batch dim and its value (the micro-batch size): imported
  // once to find it as the plan pipeline does.
  std::string batchDim;
  int64_t microBatch = 0;
  {
    std::optional<stpar::tools::AnalyzedModel> model =
        stpar::tools::importModel(costInput, costDims);
    if (!model)
      return 1;
    Expected<std::pair<std::string, int64_t>> found =
        stpar::pipelines::findBatchDim(*model->module, costBatchDim);
    if (!found)
      return fail(found.takeError());
    if (found->first.empty())
      return fail(costInput + ": the model has no symbolic batch dim to bind "
                              "the micro-batch size to; `stpar plan "
                              "--strategy megatron:...` plans its static "
                              "batch as the global batch");
    batchDim = found->first;
    microBatch = found->second;
  }
  if (strategy->microBatchGiven && m.mb != microBatch)
    return fail("megatron: mb=" + Twine(m.mb) +
                " but the model's batch dim is bound to " + Twine(microBatch) +
                "; the bound batch dim is the micro-batch size (drop mb= or "
                "make them equal)");
  int64_t perStep = microBatch * m.dp;
  int64_t globalBatch = strategy->globalBatch.value_or(perStep);
  if (globalBatch % perStep)
    return fail("megatron: gb=" + Twine(globalBatch) +
                " must be a multiple of mb*dp=" + Twine(perStep));
  // The plan's strategy: the same keys, the micro-batch size as mb.
  std::string planStrategy = "megatron:";
  {
    SmallVector<StringRef> parts;
    StringRef(costStrategy)
        .drop_front(strlen("megatron:"))
        .split(parts, ',', -1, false);
    for (StringRef part : parts) {
      StringRef key = part.split('=').first.trim();
      if (key != "gb" && key != "mb")
        planStrategy += part.str() + ",";
    }
    planStrategy += "mb=" + std::to_string(microBatch);
  }
  stpar::tools::ModelPlanOptions o;
  o.model = costInput;
  for (const std::string &d : costDims)
    if (StringRef(d).split('=').first.trim() != batchDim)
      o.dims.push_back(d);
  o.dims.push_back(batchDim + "=" + std::to_string(globalBatch));
  stpar::pipelines::PlanOptions &p = o.pipeline.plan;
  p.cluster = costCluster;
  p.strategy = planStrategy;
  p.batchDim = batchDim;
  p.fp32 = costPrecision == "fp32";
  // Costed whether or not it fits: the breakdown says.
  p.memoryLimit = 1e30; // bytes: no limit
  p.notes = &errs();
  std::string table;
  raw_string_ostream tableStream(table);
  if (costPrintOperators)
    p.table = &tableStream;
  o.pipeline.stopAfter = "plan";
  std::optional<stpar::tools::PlannedModel> planned =
      stpar::tools::planModel(o);
  if (!planned)
    return 1;
  const json::Object *root = planned->planJSON.getAsObject();
  const json::Value *stepJSON = root ? root->get("step") : nullptr;
  const json::Object *graph = root ? root->getObject("graph") : nullptr;
  if (!stepJSON || !graph)
    return fail(costInput + ": the model has no operator to cost (its "
                            "outputs are graph inputs, constants or views of "
                            "them)");
  StepBreakdown b;
  json::Path::Root jsonRoot("step");
  if (!fromJSON(*stepJSON, b, jsonRoot))
    return fail("internal error: the plan's step breakdown: " +
                toString(jsonRoot.getError()));
  int64_t operators = graph->getInteger("operators").value_or(0);
  int64_t layers = graph->getInteger("layers").value_or(0);
  double parameters = graph->getNumber("parameters").value_or(0);
  if (costJSON) {
    json::Value v = toJSON(b);
    json::Object &out = *v.getAsObject();
    out["parameters"] = parameters;
    out["operators"] = operators;
    out["layers"] = layers;
    out["micro_batch_size"] = microBatch;
    out["global_batch"] = globalBatch;
    out["recompute"] = getRecomputeName(m.recompute);
    const json::Array *warnings = root->getArray("warnings");
    out["warnings"] = warnings ? json::Value(json::Array(*warnings))
                               : json::Value(json::Array());
    outs() << formatv("{0:2}", v) << "\n";
    return 0;
  }
  outs() << "model " << costInput << " (" << operators << " operators, "
         << layers << " layers, " << formatv("{0:e3}", parameters)
         << " parameters)\ncluster " << cluster.name << "\nstrategy "
         << costStrategy << "\nmicro-batch " << microBatch
         << " sequences, global batch " << globalBatch << " sequences\n";
  if (costPrintOperators)
    outs() << table;
  printBreakdown(outs(), b);
  return 0;
}

static int runCost() {
  if (costInput.empty() == costModel.empty())
    return fail("give either MODEL.onnx or --model gpt:...");
  if (!costModel.empty() && !StringRef(costModel).starts_with("gpt:"))
    return fail("--model: only 'gpt:...' is supported; pass an ONNX model "
                "as the positional argument");
  if (!costModel.empty() &&
      (!costDims.empty() || !costBatchDim.empty() || costPrintOperators ||
       costPrecision.getNumOccurrences()))
    return fail("--dim, --batch-dim, --precision and --print-operators apply "
                "to ONNX models only");
  Expected<Cluster> cluster = loadCluster(costCluster);
  if (!cluster)
    return fail(cluster.takeError());
  return costModel.empty() ? runONNX(*cluster) : runGPT(*cluster);
}

static stpar::tools::CommandRegistration reg(costCmd, runCost);
