//===- CostCommand.cpp - `stpar cost` ---------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar cost --model gpt:... --cluster C --strategy megatron:... [--json]`:
// costs one training step of a GPT described by its dimensions under a
// Megatron strategy. Costing an imported ONNX model (`stpar cost
// MODEL.onnx`) is not wired yet: it needs the importer to produce the
// operator list (stpar/Cost/Operator.h).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "stpar/Cost/Cluster.h"
#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/TrainingStep.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace stpar::cost;

static cl::SubCommand costCmd("cost",
                              "Cost one training step under a strategy");
static cl::opt<std::string>
    costModel("model", cl::sub(costCmd), cl::Required,
              cl::desc("gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V,batch=B"
                       "[,ffn=F]"));
static cl::opt<std::string> costCluster("cluster", cl::sub(costCmd),
                                        cl::Required,
                                        cl::desc("Preset name or JSON file"));
static cl::opt<std::string>
    costStrategy("strategy", cl::sub(costCmd), cl::Required,
                 cl::desc("megatron:tp=T,pp=P,dp=D,mb=M[,interleave=V]"
                          "[,zero=Z][,recompute=0|1]"));
static cl::opt<bool> costJSON("json", cl::sub(costCmd),
                              cl::desc("Print the breakdown as JSON"));

static int fail(Error e) {
  errs() << "stpar: error: " << toString(std::move(e)) << "\n";
  return 1;
}

static int runCost() {
  if (!StringRef(costModel).starts_with("gpt:"))
    return fail(createStringError(
        inconvertibleErrorCode(),
        "--model: only 'gpt:...' is supported; costing an ONNX model needs "
        "the importer and is not wired yet"));
  Expected<GPTConfig> model = parseGPTSpec(costModel);
  if (!model)
    return fail(model.takeError());
  Expected<MegatronStrategy> strategy = parseMegatronSpec(costStrategy);
  if (!strategy)
    return fail(strategy.takeError());
  Expected<Cluster> cluster = loadCluster(costCluster);
  if (!cluster)
    return fail(cluster.takeError());
  Expected<CostProblem> problem = buildMegatronGPT(*model, *strategy);
  if (!problem)
    return fail(problem.takeError());
  Expected<StepBreakdown> b =
      evaluateTrainingStep(problem->ops, problem->mesh, *cluster,
                           problem->config, getDefaultEfficiency());
  if (!b)
    return fail(b.takeError());
  if (costJSON) {
    outs() << formatv("{0:2}", toJSON(*b)) << "\n";
    return 0;
  }
  outs() << "model " << costModel << "\ncluster " << cluster->name
         << "\nstrategy " << costStrategy << "\n";
  printBreakdown(outs(), *b);
  return 0;
}

static stpar::tools::CommandRegistration reg(costCmd, runCost);
