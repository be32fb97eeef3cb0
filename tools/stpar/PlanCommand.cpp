//===- PlanCommand.cpp - `stpar plan` ---------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar plan --problem FILE [--devices N] [--memory-limit BYTES]
// [--compare] [--spatial-only] [--exact]`: solves a partition-search
// problem in the text format of docs/search.md and prints the chosen
// partition per operator, the step time and memory; with --compare the
// Megatron grid (with and without sequence parallelism), ZeRO-1/2/3 data
// parallelism and spatial-only search beside it.
//
// `stpar plan diff A.json B.json [--json] [-o FILE]`: what changed between
// two plan files (stpar::pipelines::diffPlans).
//
// `stpar plan MODEL.onnx --cluster C --dim NAME=VALUE ... [--devices N]
// [-o plan.json] [--emit-mlir out.mlir]` imports the model, converts it
// into an operator graph (stpar/Analysis/CostModel.h), bridges that into a
// search problem (stpar/Analysis/SearchBridge.h), searches, and writes the
// plan three ways: a table on stdout, a JSON file (docs/plan-format.md) and
// the IR with `stp.mesh` on the module and `stp.spec` on every planned op.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"
#include "ModelInput.h"
#include "ModelPlan.h"

#include "stpar/Analysis/CostModel.h"
#include "stpar/Analysis/SearchBridge.h"
#include "stpar/Cost/Cluster.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Import/ONNX/ONNXImporter.h"
#include "stpar/InitAll.h"
#include "stpar/Search/Solver.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

static cl::SubCommand planCmd("plan", "Search the partition plan of a problem");
static cl::opt<std::string> planProblem("problem", cl::sub(planCmd),
                                        cl::desc("Problem file (docs/search.md)"));
static cl::list<std::string>
    planInputs(cl::Positional, cl::desc("[<model.onnx> | diff A.json B.json]"),
               cl::sub(planCmd));
static cl::opt<bool> planDiffJSON(
    "json", cl::sub(planCmd),
    cl::desc("plan diff: print the diff as JSON (docs/plan-format.md)"));
/// The model (the one positional that is not `diff`).
static std::string planInput;
static cl::list<std::string>
    planDims("dim", cl::sub(planCmd), cl::value_desc("NAME=VALUE"),
             cl::desc("ONNX models: bind a symbolic dim; the batch dim's "
                      "value is the global batch of one step"));
static cl::opt<std::string> planBatchDim(
    "batch-dim", cl::sub(planCmd), cl::value_desc("NAME"),
    cl::desc("ONNX models: the symbolic batch dim (default: the one --dim "
             "whose name contains 'batch')"));
static cl::opt<std::string> planOutput("o", cl::sub(planCmd),
                                       cl::value_desc("plan.json"),
                                       cl::desc("ONNX models: write the plan "
                                                "as JSON (docs/plan-format.md)"));
static cl::opt<std::string> planHTML(
    "html", cl::sub(planCmd), cl::value_desc("plan.html"),
    cl::desc("ONNX models: write the plan as one self-contained HTML page "
             "(mesh, timeline, memory, baselines with --compare, tensor "
             "layouts)"));
static cl::opt<std::string>
    planEmitMLIR("emit-mlir", cl::sub(planCmd), cl::value_desc("out.mlir"),
                 cl::desc("ONNX models: write the IR with stp.mesh and "
                          "stp.spec attributes"));
static cl::opt<std::string>
    planCluster("cluster", cl::sub(planCmd),
                cl::desc("Cluster preset or JSON file (default: the "
                         "problem's)"));
static cl::opt<int64_t> planDevices("devices", cl::sub(planCmd), cl::init(0),
                                    cl::desc("Devices (default: the problem's)"));
static cl::opt<double, false, stpar::tools::ByteSizeParser> planMemoryLimit(
    "memory-limit", cl::sub(planCmd), cl::init(0),
    cl::desc("Per-device memory limit, in bytes or with a unit (80GiB, "
             "40GB; default: the device's memory)"));
static cl::opt<bool> planCompare("compare", cl::sub(planCmd),
                                 cl::desc("Print the baselines too"));
static cl::opt<bool> planSpatialOnly("spatial-only", cl::sub(planCmd),
                                     cl::desc("Switch the temporal primitive "
                                              "off"));
static cl::opt<bool> planExact("exact", cl::sub(planCmd),
                               cl::desc("No caps on candidates, states and "
                                        "fronts (exact DP)"));
static cl::opt<std::string>
    planStrategy("strategy", cl::sub(planCmd), cl::init("search"),
                 cl::value_desc("NAME"),
                 cl::desc(stpar::pipelines::kStrategyHelp));
static cl::opt<std::string> planExpertLoad(
    "expert-load", cl::sub(planCmd), cl::value_desc("FILE"),
    cl::desc("ONNX models: the token distribution over the experts of every "
             "MoE layer, a JSON array of E counts or shares (e.g. measured "
             "routing counts; default: uniform)"));
static cl::opt<int> planZero(
    "zero", cl::sub(planCmd), cl::init(-1), cl::value_desc("0-3"),
    cl::desc("ONNX models: force the ZeRO stage of the data-parallel axes "
             "(default: searched; dp: 0)"));
static cl::opt<std::string>
    planMesh("mesh", cl::sub(planCmd), cl::value_desc("AxB..."),
             cl::desc("ONNX models: force the logical mesh shape (no "
                      "pipeline stages); megatron: AxB = dp x tp"));
static cl::list<std::string> planFix(
    "fix", cl::sub(planCmd), cl::value_desc("NAME=SPEC"),
    cl::desc("ONNX models: keep operator NAME (the table's name; a layer "
             "operator by its first layer's, for every layer) partitioned as "
             "SPEC in the table's words over the search's axes x0, x1, ... "
             "('b{x0} d2{x1}', 'replicated'; the table's axes: line gives "
             "the search name of an axis named by its role) and search the "
             "rest; repeatable"));
static cl::opt<std::string> planExplain(
    "explain", cl::sub(planCmd), cl::value_desc("NAME"),
    cl::desc("ONNX models: after the table, every candidate partition of "
             "operator NAME in the chosen plan with its cost, and why the "
             "chosen one won"));
static cl::opt<unsigned>
    planMaxAxes("max-mesh-axes", cl::sub(planCmd), cl::init(3),
                cl::desc("Most logical mesh axes (default: 3)"));

static int fail(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
  return 1;
}

static SearchOptions makeSearchOptions() {
  SearchOptions opts =
      stpar::pipelines::makeSearchOptions(planMaxAxes, planExact, true);
  opts.solver.space.temporal = !planSpatialOnly;
  return opts;
}

static int runONNX();

/// `stpar plan diff A.json B.json [--json] [-o FILE]`.
static int runDiff() {
  if (planInputs.size() != 3)
    return fail("plan diff takes two plan files: stpar plan diff A.json "
                "B.json");
  json::Value plans[2] = {nullptr, nullptr};
  for (unsigned k = 0; k < 2; ++k) {
    const std::string &path = planInputs[k + 1];
    ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(path);
    if (!buffer)
      return fail("cannot read '" + path + "': " + buffer.getError().message());
    Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
    if (!parsed)
      return fail(path + ": not JSON: " + toString(parsed.takeError()));
    plans[k] = std::move(*parsed);
  }
  Expected<json::Value> diff = stpar::pipelines::diffPlans(
      plans[0], planInputs[1], plans[1], planInputs[2]);
  if (!diff)
    return fail(toString(diff.takeError()));
  std::error_code ec;
  ToolOutputFile file(planOutput.empty() ? std::string("-") : planOutput, ec,
                      sys::fs::OF_Text);
  if (ec)
    return fail("cannot write '" + planOutput + "': " + ec.message());
  if (planDiffJSON)
    file.os() << formatv("{0:2}", *diff) << "\n";
  else
    stpar::pipelines::printPlanDiff(file.os(), *diff);
  file.keep();
  return 0;
}

static int runPlan() {
  if (!planInputs.empty() && planInputs[0] == "diff") {
    if (!planOutput.empty())
      if (std::string m = stpar::tools::checkOutputFile(planOutput); !m.empty())
        return fail(m);
    return runDiff();
  }
  if (planDiffJSON)
    return fail("--json applies to plan diff only (the plan itself: -o "
                "plan.json)");
  if (planInputs.size() > 1)
    return fail("one model at a time (got " +
                std::to_string(planInputs.size()) +
                " files; to compare two plans: stpar plan diff A.json "
                "B.json)");
  planInput = planInputs.empty() ? std::string() : planInputs[0];
  if (planInput.empty() == planProblem.empty())
    return fail("give either MODEL.onnx or --problem FILE");
  if (std::string m = stpar::tools::checkDevices(planDevices); !m.empty())
    return fail(m);
  // The outputs' folders are checked before the search, not after it.
  for (const std::string &out :
       {std::string(planOutput), std::string(planEmitMLIR),
        std::string(planHTML)})
    if (!out.empty())
      if (std::string m = stpar::tools::checkOutputFile(out); !m.empty())
        return fail(m);
  if (!planInput.empty())
    return runONNX();
  if (!planDims.empty() || !planOutput.empty() || !planEmitMLIR.empty() ||
      !planHTML.empty() || !planFix.empty() || !planExplain.empty())
    return fail("--dim, -o, --html, --emit-mlir, --fix and --explain apply "
                "to ONNX models only");
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFileOrSTDIN(planProblem);
  if (!buffer)
    return fail("cannot read '" + planProblem + "'");
  Expected<Problem> problem =
      parseProblem((*buffer)->getBuffer(), planProblem);
  if (!problem)
    return fail(toString(problem.takeError()));
  if (!planCluster.empty())
    problem->cluster = planCluster;
  if (planDevices > 0)
    problem->devices = planDevices;
  if (planMemoryLimit > 0)
    problem->memoryLimit = planMemoryLimit;
  if (problem->cluster.empty())
    return fail("no cluster: give --cluster or a 'cluster' line");
  Expected<Cluster> cluster = loadCluster(problem->cluster);
  if (!cluster)
    return fail(toString(cluster.takeError()));
  EfficiencyModel eff = getDefaultEfficiency();
  if (cluster->device.bf16 <= 0)
    eff.dtype = DType::FP16;
  SearchOptions opts = makeSearchOptions();
  auto start = std::chrono::steady_clock::now();
  Expected<SearchResult> result = search(*problem, *cluster, eff, opts);
  if (!result)
    return fail(toString(result.takeError()));
  double searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (!result->best)
    return fail(stpar::pipelines::describeNoPlan(*result));
  outs() << "problem " << problem->name << " on " << problem->devices
         << " devices of " << cluster->name << "\n";
  outs() << "searched " << result->configurations << " configurations"
         << (result->stats.isExact() ? " (exact DP)" : " (capped DP)")
         << "\n";
  (void)searchSeconds;
  printPlan(outs(), *problem, *result->best);
  if (!planCompare)
    return 0;
  stpar::pipelines::printComparison(outs(), *problem, *cluster, eff, opts, *result->best);
  return 0;
}

static int runONNX() {
  stpar::tools::ModelPlanOptions o;
  o.model = planInput;
  o.dims = planDims;
  stpar::pipelines::PlanOptions &p = o.pipeline.plan;
  p.batchDim = planBatchDim;
  p.cluster = planCluster;
  p.devices = planDevices;
  p.memoryLimit = planMemoryLimit;
  p.strategy = planSpatialOnly ? std::string("spatial") : planStrategy;
  p.zeroStage = planZero;
  if (!planMesh.empty()) {
    Expected<std::vector<int64_t>> mesh =
        stpar::pipelines::parseMeshShape(planMesh);
    if (!mesh)
      return fail(toString(mesh.takeError()));
    p.mesh = std::move(*mesh);
  }
  p.exact = planExact;
  p.expertLoad = planExpertLoad;
  p.compare = planCompare;
  p.maxMeshAxes = planMaxAxes;
  p.fixed = planFix;
  p.explain = planExplain;
  p.progress = true;
  p.table = &outs();
  p.notes = &errs();
  o.pipeline.stopAfter = "plan";
  std::optional<stpar::tools::PlannedModel> planned =
      stpar::tools::planModel(o);
  if (!planned)
    return 1;
  if (!planOutput.empty()) {
    std::error_code ec;
    ToolOutputFile file(planOutput, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + planOutput + "': " + ec.message());
    file.os() << formatv("{0:2}", planned->planJSON) << "\n";
    file.keep();
  }
  if (!planHTML.empty()) {
    std::error_code ec;
    ToolOutputFile file(planHTML, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + planHTML + "': " + ec.message());
    stpar::pipelines::writePlanHTML(file.os(), planned->planJSON);
    file.keep();
  }
  if (!planEmitMLIR.empty()) {
    std::error_code ec;
    ToolOutputFile file(planEmitMLIR, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + planEmitMLIR + "': " + ec.message());
    planned->model.module->print(file.os(),
                                  stpar::tools::getPrintingFlags());
    file.os() << "\n";
    file.keep();
    outs().flush(); // keep the table and the note apart when both are piped
    errs() << planInput << ": note: " << planned->attached
           << " op(s) carry stp.spec\n";
  }
  return 0;
}

static stpar::tools::CommandRegistration reg(planCmd, runPlan);
