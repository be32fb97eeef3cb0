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
// The first imports the model (stpar/Import/ONNX), converts it into an
// operator graph and partitions that (stpar/Analysis); the bound batch dim
// is the micro-batch size and `gb=` the global batch (default mb * dp, one
// micro-batch per step). The second builds a GPT from its dimensions
// (stpar/Cost/GPTModel.h). Both print the same breakdown (table or
// `--json`). docs/cost-model.md, "The IR route".
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"
#include "ModelInput.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/TrainingStep.h"
#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Search/GPTProblem.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

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
             "[,distopt=0|1][,overlap=0|1] (missing keys are "
             "1, zero, sp and distopt 0, recompute full; "
             "distopt=1: ZeRO-1; overlap: gradient sync "
             "overlapped with backward; mb: ONNX models: the bound "
             "batch dim, gpt: 1 by default; gb: ONNX models "
             "only; vp: virtual stages per rank, also "
             "'interleave'; sp: sequence parallelism)"));
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
    cl::desc("ONNX models: list the operators with their layer kind, stage "
             "and partition before the breakdown"));

static int fail(Error e) {
  errs() << "stpar: error: " << toString(std::move(e)) << "\n";
  return 1;
}

static int fail(const Twine &msg) {
  return fail(createStringError(inconvertibleErrorCode(), msg));
}

static Expected<StepBreakdown> evaluate(const CostProblem &problem,
                                        const Cluster &cluster,
                                        const EfficiencyModel &eff) {
  if (problem.mesh.getNumDevices() > cluster.getNumDevices())
    return createStringError(
        inconvertibleErrorCode(),
        "the mesh has " + Twine(problem.mesh.getNumDevices()) +
            " devices but the cluster only " + Twine(cluster.getNumDevices()));
  return evaluateTrainingStep(problem.ops, problem.mesh, cluster,
                              problem.config, eff);
}

/// One line per operator: kind, layer kind, stage, loops as
/// `EXTENT[r]{AXES}` (r: reduction).
static void printOperators(raw_ostream &os, const CostProblem &problem) {
  for (const Operator &op : problem.ops) {
    os << "  op " << op.name << ": " << getOpKindName(op.kind) << ", "
       << op.layerKind << ", stage " << op.stage << ", loops [";
    for (auto [i, loop] : llvm::enumerate(op.loops)) {
      os << (i ? " " : "") << loop.extent
         << (loop.kind == LoopKind::Reduction ? "r" : "");
      if (!loop.axes.empty()) {
        os << "{";
        for (auto [k, axis] : llvm::enumerate(loop.axes))
          os << (k ? "," : "") << problem.mesh.axes[axis].name;
        os << "}";
      }
    }
    os << "]\n";
  }
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

/// The symbolic dim holding the batch: --batch-dim, else the only bound
/// dim whose name contains "batch".
static int runONNX(const Cluster &cluster) {
  if (costPrecision != "mixed" && costPrecision != "fp32")
    return fail("--precision: expected 'mixed' or 'fp32', got '" +
                costPrecision + "'");
  Expected<stpar::analysis::IRStrategy> strategy =
      stpar::analysis::parseIRStrategy(costStrategy);
  if (!strategy)
    return fail(strategy.takeError());
  stpar::analysis::ConversionOptions convOptions;
  convOptions.fp32 = costPrecision == "fp32";
  std::optional<stpar::tools::AnalyzedModel> model =
      stpar::tools::importForAnalysis(costInput, costDims, costBatchDim,
                                      convOptions);
  if (!model)
    return 1;
  stpar::analysis::OperatorGraph *graph = &model->graph;
  int64_t microBatch = model->batch;
  Expected<stpar::analysis::MegatronPlan> plan =
      stpar::analysis::assignMegatron(*graph, *strategy, microBatch);
  if (!plan)
    return fail(plan.takeError());
  for (const std::string &note : graph->notes)
    errs() << costInput << ": note: " << note << "\n";
  for (const std::string &warning : plan->warnings)
    errs() << costInput << ": warning: " << warning << "\n";

  EfficiencyModel eff = getDefaultEfficiency();
  if (convOptions.fp32)
    eff.dtype = DType::FP32;
  Expected<StepBreakdown> b = evaluate(plan->problem, cluster, eff);
  if (!b)
    return fail(b.takeError());
  int64_t globalBatch =
      microBatch * strategy->megatron.dp * plan->problem.config.microBatches;
  if (costJSON) {
    json::Value v = toJSON(*b);
    json::Object &o = *v.getAsObject();
    o["parameters"] = graph->getParameterCount();
    o["operators"] = int64_t(graph->ops.size());
    o["layers"] = int64_t(graph->layers.size());
    o["micro_batch_size"] = microBatch;
    o["global_batch"] = globalBatch;
    o["recompute"] = getRecomputeName(strategy->megatron.recompute);
    json::Array warnings;
    for (const std::string &w : plan->warnings)
      warnings.push_back(w);
    o["warnings"] = std::move(warnings);
    outs() << formatv("{0:2}", v) << "\n";
    return 0;
  }
  outs() << "model " << costInput << " (" << graph->ops.size() << " operators, "
         << graph->layers.size() << " layers, "
         << formatv("{0:e3}", graph->getParameterCount())
         << " parameters)\ncluster " << cluster.name << "\nstrategy "
         << costStrategy << "\nmicro-batch " << microBatch
         << " sequences, global batch " << globalBatch << " sequences\n";
  if (costPrintOperators)
    printOperators(outs(), plan->problem);
  printBreakdown(outs(), *b);
  return 0;
}

static int runCost() {
  if (costInput.empty() == costModel.empty())
    return fail("give either MODEL.onnx or --model gpt:...");
  if (!costModel.empty() && !StringRef(costModel).starts_with("gpt:"))
    return fail("--model: only 'gpt:...' is supported; pass an ONNX model "
                "as the positional argument");
  if (!costModel.empty() && !costDims.empty())
    return fail("--dim applies to ONNX models only");
  Expected<Cluster> cluster = loadCluster(costCluster);
  if (!cluster)
    return fail(cluster.takeError());
  return costModel.empty() ? runONNX(*cluster) : runGPT(*cluster);
}

static stpar::tools::CommandRegistration reg(costCmd, runCost);
