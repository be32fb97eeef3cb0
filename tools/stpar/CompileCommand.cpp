//===- CompileCommand.cpp - `stpar compile` ---------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar compile MODEL.onnx --cluster C --dim NAME=VALUE ... [--devices N]
// [--plan plan.json | --strategy S [--mesh AxB]] [--emit=plan,mlir,cuda,cpu]
// [--stop-after=plan|partition|emit] -o OUTDIR`: the main job. Phases:
//
//   1. plan       import, then the planning half of the pipeline
//                 (stpar/Pipelines/Pipelines.h: -stp-normalize, -stp-plan or
//                 -stp-apply-plan with --plan); writes plan.json, plan.txt
//                 and planned.mlir (the IR with the plan's attributes)
//   2. partition  the rest of the pipeline (-stp-partition): the per-device
//                 SPMD program
//                 (docs/spmd-ir.md); writes partitioned.mlir
//   3. emit       per-rank code: cuda/ (NCCL, cuBLAS, CUDA kernels) and
//                 cpu/ (MPI, plain C++), docs/emitted-code.md
//
// Everything is written into a temporary directory next to OUTDIR and
// renamed onto it at the end, so a failure never leaves a half-written
// OUTDIR. An existing OUTDIR is replaced only when it is empty or an
// earlier output of this command (it holds `.stpar-compile`).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"
#include "ModelPlan.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/InitAll.h"
#include "stpar/Target/Emit.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>

using namespace llvm;

static cl::SubCommand compileCmd(
    "compile", "Plan, partition and emit per-rank code for an ONNX model");
static cl::opt<std::string> compileInput(cl::Positional, cl::Required,
                                         cl::desc("<model.onnx>"),
                                         cl::sub(compileCmd));
static cl::list<std::string>
    compileDims("dim", cl::sub(compileCmd), cl::value_desc("NAME=VALUE"),
                cl::desc("Bind a symbolic dim; the batch dim's value is the "
                         "global batch of one step"));
static cl::opt<std::string>
    compileBatchDim("batch-dim", cl::sub(compileCmd), cl::value_desc("NAME"),
                    cl::desc("The symbolic batch dim (default: the one --dim "
                             "whose name contains 'batch')"));
static cl::opt<std::string>
    compileCluster("cluster", cl::sub(compileCmd), cl::Required,
                   cl::desc("Cluster preset or JSON file"));
static cl::opt<int64_t>
    compileDevices("devices", cl::sub(compileCmd), cl::init(0),
                   cl::desc("Devices (default: the cluster's; with --plan: "
                            "must equal the plan's)"));
static cl::opt<double, false, stpar::tools::ByteSizeParser> compileMemoryLimit(
    "memory-limit", cl::sub(compileCmd), cl::init(0),
    cl::desc("Per-device memory limit, in bytes or with a unit (80GiB, "
             "40GB; default: the device's memory)"));
static cl::opt<std::string>
    compilePlan("plan", cl::sub(compileCmd), cl::value_desc("plan.json"),
                cl::desc("Use this plan (from `stpar plan -o`) instead of "
                         "searching"));
static cl::opt<std::string>
    compileStrategy("strategy", cl::sub(compileCmd), cl::init("search"),
                    cl::value_desc("NAME"),
                    cl::desc(stpar::pipelines::kStrategyHelp));
static cl::opt<std::string> compileExpertLoad(
    "expert-load", cl::sub(compileCmd), cl::value_desc("FILE"),
    cl::desc("The token distribution over the experts of every MoE layer, a "
             "JSON array of E counts or shares (default: uniform); it "
             "changes the plan, not the program"));
static cl::opt<int> compileZero(
    "zero", cl::sub(compileCmd), cl::init(-1), cl::value_desc("0-3"),
    cl::desc("Force the ZeRO stage of the data-parallel axes (default: "
             "searched; dp: 0); the training step (--loss) shards "
             "optimizer states (1), gradients (2) and parameters (3)"));
static cl::opt<std::string>
    compileMesh("mesh", cl::sub(compileCmd), cl::value_desc("AxB..."),
                cl::desc("Force the logical mesh shape (no pipeline stages); "
                         "megatron: AxB = dp x tp"));
static cl::list<std::string> compileEmit(
    "emit", cl::sub(compileCmd), cl::CommaSeparated,
    cl::value_desc("plan,mlir,cuda,cpu"),
    cl::desc("Outputs (default: all): plan (plan.json, "
             "plan.txt, plan.html), mlir (planned.mlir, partitioned.mlir), "
             "cuda (cuda/), cpu (cpu/)"));
static cl::opt<std::string>
    compileStopAfter("stop-after", cl::sub(compileCmd), cl::init("emit"),
                     cl::value_desc("plan|partition|emit"),
                     cl::desc("Last phase to run (default: emit)"));
static cl::OptionCategory
    trainingCategory("Training step (-stp-training-step; docs/training.md)");
static cl::opt<std::string> compileLoss(
    "loss", cl::sub(compileCmd), cl::value_desc("KIND"),
    cl::cat(trainingCategory),
    cl::desc("Compile a whole training step with this loss: next-token, "
             "cross-entropy=NAME, sum or mean-square (default: the forward "
             "pass only)"));
static cl::opt<std::string>
    compileLossOutput("loss-output", cl::sub(compileCmd),
                      cl::value_desc("NAME"), cl::cat(trainingCategory),
                      cl::desc("The model output the loss reads (default: "
                               "the first floating-point one)"));
static cl::opt<std::string>
    compileOptimizer("optimizer", cl::sub(compileCmd), cl::init("sgd"),
                     cl::value_desc("sgd|adamw"), cl::cat(trainingCategory),
                     cl::desc("Optimizer of the training step (default: sgd)"));
static cl::opt<double> compileLr("lr", cl::sub(compileCmd), cl::init(1e-3),
                                 cl::cat(trainingCategory),
                                 cl::desc("Learning rate (default: 1e-3)"));
static cl::opt<double> compileWeightDecay(
    "weight-decay", cl::sub(compileCmd), cl::init(0.0),
    cl::cat(trainingCategory),
    cl::desc("Weight decay (decoupled for adamw; default: 0)"));
static cl::opt<double> compileBeta1("beta1", cl::sub(compileCmd), cl::init(0.9),
                                    cl::cat(trainingCategory),
                                    cl::desc("AdamW beta1 (default: 0.9)"));
static cl::opt<double> compileBeta2("beta2", cl::sub(compileCmd),
                                    cl::init(0.999), cl::cat(trainingCategory),
                                    cl::desc("AdamW beta2 (default: 0.999)"));
static cl::opt<double> compileEps("eps", cl::sub(compileCmd), cl::init(1e-8),
                                  cl::cat(trainingCategory),
                                  cl::desc("AdamW epsilon (default: 1e-8)"));
static cl::opt<bool> compileReturnGradients(
    "return-gradients", cl::sub(compileCmd), cl::cat(trainingCategory),
    cl::desc("The training step also returns every trained parameter's "
             "gradient"));
static cl::opt<int64_t> compileMicroBatches(
    "micro-batches", cl::sub(compileCmd), cl::init(-1), cl::value_desc("M"),
    cl::cat(trainingCategory),
    cl::desc("Run the step's forward and backward pass once per micro-batch "
             "(the batch each rank holds split in M) and accumulate the "
             "gradients before the sync and the update (default: the "
             "plan's micro-batch count)"));
static cl::opt<std::string> compileRecompute(
    "recompute", cl::sub(compileCmd), cl::init("plan"),
    cl::value_desc("on|off|plan"), cl::cat(trainingCategory),
    cl::desc("Activation recomputation: the backward pass recomputes each "
             "layer's activations from its saved inputs (default: as the "
             "plan says)"));
static cl::opt<std::string> compilePrecision(
    "precision", cl::sub(compileCmd), cl::init("auto"),
    cl::value_desc("auto|mixed|fp32"),
    cl::desc("mixed: the operands of every GEMM rounded to bf16 with fp32 "
             "accumulation and fp32 master weights (-stp-mixed-precision; "
             "activations and collectives stay f32); fp32: every op in f32; "
             "auto (default): mixed where the cluster's devices have bf16 "
             "tensor cores, else fp32"));
static cl::opt<std::string> compileCheckPlan(
    "check-plan", cl::sub(compileCmd), cl::ValueOptional, cl::init("off"),
    cl::value_desc("fail|report|off"),
    cl::desc("Compare the partitioned program's communication with the "
             "plan's, per operator and phase (-stp-check-communication; "
             "docs/plan-format.md, \"Plan check\"): fail (the default of a "
             "bare --check-plan) prints the table and fails on a "
             "difference, report writes plan-check.txt into OUTDIR and "
             "prints its summary, off (default) skips it"));
static cl::opt<std::string> compileOutput("o", cl::sub(compileCmd),
                                          cl::Required,
                                          cl::value_desc("OUTDIR"),
                                          cl::desc("Output directory"));

static int fail(const Twine &message) {
  errs() << "stpar: error: " << message << "\n";
  return 1;
}

static void progress(const Twine &message) {
  errs() << "stpar compile: " << message << "\n";
}

static const char *const kMarker = ".stpar-compile";

/// Writes `text` to `dir`/`name`.
static bool writeFile(StringRef dir, StringRef name,
                      function_ref<void(raw_ostream &)> write) {
  SmallString<256> path(dir);
  sys::path::append(path, name);
  std::error_code ec;
  raw_fd_ostream os(path, ec, sys::fs::OF_Text);
  if (ec) {
    fail("cannot write '" + path + "': " + ec.message());
    return false;
  }
  write(os);
  return !os.has_error();
}

/// OUTDIR may be replaced: it does not exist, is empty, or holds the marker.
static bool canReplace(StringRef dir) {
  if (!sys::fs::exists(dir))
    return true;
  if (!sys::fs::is_directory(dir))
    return false;
  SmallString<256> marker(dir);
  sys::path::append(marker, kMarker);
  if (sys::fs::exists(marker))
    return true;
  std::error_code ec;
  sys::fs::directory_iterator it(dir, ec);
  return !ec && it == sys::fs::directory_iterator();
}

/// Runs the stages after the plan (-stp-partition) on the planned module.
static bool partition(mlir::ModuleOp module,
                      const stpar::pipelines::CompilePipelineOptions &options) {
  mlir::PassManager pm(module.getContext());
  stpar::pipelines::buildPartitioningPipeline(pm, options);
  if (mlir::failed(pm.run(module))) {
    fail("partitioning failed (see the errors above)");
    return false;
  }
  return true;
}

/// Runs -stp-training-step on the planned module.
static bool
buildTrainingStep(mlir::ModuleOp module,
                  const stpar::pipelines::CompilePipelineOptions &options) {
  mlir::PassManager pm(module.getContext());
  stpar::pipelines::buildTrainingPipeline(pm, options);
  if (mlir::failed(pm.run(module))) {
    fail("building the training step failed (see the errors above)");
    return false;
  }
  return true;
}

static int runCompile() {
  static const char *const phases[] = {"plan", "partition", "emit"};
  if (!is_contained(phases, compileStopAfter))
    return fail("unknown --stop-after '" + compileStopAfter +
                "' (plan, partition or emit)");
  StringSet<> emit;
  for (const std::string &e : compileEmit) {
    if (e != "plan" && e != "mlir" && e != "cuda" && e != "cpu")
      return fail("unknown --emit '" + e + "' (plan, mlir, cuda or cpu)");
    emit.insert(e);
  }
  if (emit.empty())
    for (const char *e : {"plan", "mlir", "cuda", "cpu"})
      emit.insert(e);
  // The plan check needs the partitioned program even when nothing of it
  // is written.
  bool toPartition = compileStopAfter != "plan" &&
                     (emit.count("mlir") || emit.count("cuda") ||
                      emit.count("cpu") || compileCheckPlan != "off");
  bool toEmit = compileStopAfter == "emit" &&
                (emit.count("cuda") || emit.count("cpu"));
  if (!compilePlan.empty() &&
      (compileStrategy.getNumOccurrences() || !compileMesh.empty() ||
       compileZero.getNumOccurrences()))
    return fail("--plan fixes the plan; --strategy, --mesh and --zero do not "
                "apply");
  if (compileStopAfter != "emit" && !emit.count("plan") && !emit.count("mlir"))
    return fail("nothing to write: --emit=" +
                join(compileEmit.begin(), compileEmit.end(), ",") +
                " needs --stop-after=emit");
  if (std::string m = stpar::tools::checkDevices(compileDevices); !m.empty())
    return fail(m);
  if (std::string parent = stpar::tools::getMissingParent(compileOutput);
      !parent.empty())
    return fail("the folder of '" + compileOutput + "' ('" + parent +
                "') does not exist");
  if (!canReplace(compileOutput))
    return fail("'" + compileOutput +
                "' exists and is not an earlier stpar compile output; "
                "remove it or choose another -o");

  stpar::tools::ModelPlanOptions o;
  o.model = compileInput;
  o.dims = compileDims;
  stpar::pipelines::CompilePipelineOptions &p = o.pipeline;
  p.plan.batchDim = compileBatchDim;
  p.plan.cluster = compileCluster;
  p.plan.devices = compileDevices;
  p.plan.memoryLimit = compileMemoryLimit;
  p.plan.strategy = compileStrategy;
  p.plan.zeroStage = compileZero;
  p.plan.expertLoad = compileExpertLoad;
  if (!compileMesh.empty()) {
    Expected<std::vector<int64_t>> mesh =
        stpar::pipelines::parseMeshShape(compileMesh);
    if (!mesh)
      return fail(toString(mesh.takeError()));
    p.plan.mesh = std::move(*mesh);
  }
  p.plan.progress = true;
  // The search plans pipeline stages for a training step (with --loss;
  // -stp-pipeline-stages runs its micro-batches through them); a
  // forward-only program would run the batch as one micro-batch, not the
  // plan's m, so its search plans without stages. A Megatron-LM
  // configuration may force them (pp=) either way.
  bool forcedConfiguration =
      StringRef(compileStrategy).starts_with("megatron:");
  p.plan.pipeline = forcedConfiguration || !compileLoss.empty();
  p.plan.forProgram = true;
  p.planFile = compilePlan;
  p.stopAfter = compileStopAfter == "plan" ? "plan" : "partition";
  if (compilePrecision != "fp32" && compilePrecision != "mixed" &&
      compilePrecision != "auto")
    return fail("--precision must be auto, mixed or fp32, got '" +
                compilePrecision + "'");
  p.precision = compilePrecision;
  if (compileCheckPlan.empty())
    compileCheckPlan = "fail";
  if (compileCheckPlan != "fail" && compileCheckPlan != "report" &&
      compileCheckPlan != "off")
    return fail("--check-plan must be fail, report or off, got '" +
                compileCheckPlan + "'");
  if (compileCheckPlan != "off" && compileStopAfter == "plan")
    return fail("--check-plan compares the partitioned program with the "
                "plan: it needs the partition (not --stop-after=plan)");
  if (!compileLoss.empty()) {
    stpar::pipelines::TrainingOptions &t = p.training;
    t.enabled = true;
    t.loss = compileLoss;
    t.lossOutput = compileLossOutput;
    t.optimizer = compileOptimizer;
    t.learningRate = compileLr;
    t.beta1 = compileBeta1;
    t.beta2 = compileBeta2;
    t.epsilon = compileEps;
    t.weightDecay = compileWeightDecay;
    t.returnGradients = compileReturnGradients;
    t.microBatches = compileMicroBatches;
    t.recompute = compileRecompute;
    if (compileRecompute != "on" && compileRecompute != "off" &&
        compileRecompute != "plan")
      return fail("--recompute must be on, off or plan");
    if (compileMicroBatches.getNumOccurrences() && compileMicroBatches < 1)
      return fail("--micro-batches must be at least 1");
  } else if (compileMicroBatches.getNumOccurrences() ||
             compileRecompute.getNumOccurrences() ||
             compileOptimizer.getNumOccurrences() ||
             compileLr.getNumOccurrences() ||
             compileWeightDecay.getNumOccurrences() ||
             compileReturnGradients.getNumOccurrences() ||
             compileLossOutput.getNumOccurrences()) {
    return fail("--optimizer, --lr, --weight-decay, --loss-output, "
                "--return-gradients, --micro-batches and --recompute describe "
                "the training step: give --loss");
  }
  std::string table;
  raw_string_ostream tableOS(table);
  p.plan.table = &tableOS;
  p.plan.notes = &errs();

  // Phase 1: the plan.
  progress(!compilePlan.empty() ? "plan: importing and reading " + compilePlan
           : forcedConfiguration
               ? std::string("plan: importing and costing ") + compileStrategy
           : !compileLoss.empty()
               ? std::string("plan: importing and searching")
               : std::string("plan: importing and searching (no pipeline "
                             "stages: a forward pass runs as one "
                             "micro-batch)"));
  std::optional<stpar::tools::PlannedModel> planned =
      stpar::tools::planModel(o);
  if (!planned)
    return 1;
  if (!compilePlan.empty()) {
    stpar::pipelines::printPlanFile(tableOS, planned->planJSON, compilePlan);
    tableOS << "plan " << compilePlan << " (" << planned->attached
            << " op(s) carry stp.spec) on " << planned->devices
            << " devices\n";
  }
  outs() << tableOS.str();
  outs().flush();

  // Everything goes to a fresh temporary directory first.
  SmallString<256> absOut(compileOutput);
  sys::fs::make_absolute(absOut);
  SmallString<256> tmp;
  std::string model = sys::path::filename(absOut).str();
  std::error_code ec = sys::fs::createUniqueDirectory(
      sys::path::parent_path(absOut) + "/." + model + ".tmp", tmp);
  if (ec)
    return fail("cannot create a directory next to '" + compileOutput +
                "': " + ec.message());
  llvm::scope_exit cleanup([&] {
    if (!tmp.empty())
      sys::fs::remove_directories(tmp);
  });
  if (!writeFile(tmp, kMarker, [&](raw_ostream &os) {
        os << "written by stpar compile " << compileInput << "\n";
      }))
    return 1;
  if (emit.count("plan")) {
    if (!writeFile(tmp, "plan.json",
                   [&](raw_ostream &os) {
                     os << formatv("{0:2}", planned->planJSON) << "\n";
                   }) ||
        !writeFile(tmp, "plan.txt",
                   [&](raw_ostream &os) { os << tableOS.str(); }) ||
        !writeFile(tmp, "plan.html", [&](raw_ostream &os) {
          stpar::pipelines::writePlanHTML(os, planned->planJSON);
        }))
      return 1;
  }
  mlir::ModuleOp module = *planned->model.module;
  if (emit.count("mlir") &&
      !writeFile(tmp, "planned.mlir", [&](raw_ostream &os) {
        module.print(os, stpar::tools::getPrintingFlags());
        os << "\n";
      }))
    return 1;

  // Phase 2: the training step (on the global-shape IR), then partition.
  if (toPartition && p.training.enabled) {
    progress("training step: -stp-training-step (loss " + p.training.loss +
             ", " + p.training.optimizer + ")");
    if (!buildTrainingStep(module, o.pipeline))
      return 1;
    if (emit.count("mlir") &&
        !writeFile(tmp, "training.mlir", [&](raw_ostream &os) {
          module.print(os, stpar::tools::getPrintingFlags());
          os << "\n";
        }))
      return 1;
  }
  if (toPartition) {
    progress("partition: -stp-partition");
    if (compileCheckPlan == "fail") {
      o.pipeline.checkPlan = true;
      o.pipeline.checkPlanReport = "-";
    } else if (compileCheckPlan == "report") {
      o.pipeline.checkPlan = true;
      o.pipeline.checkPlanFail = false;
      o.pipeline.checkPlanReport = (Twine(tmp) + "/plan-check.txt").str();
    }
    if (!partition(module, o.pipeline))
      return 1;
    if (compileCheckPlan == "report") {
      // The table is in OUTDIR; its summary (the last line) goes here.
      if (ErrorOr<std::unique_ptr<MemoryBuffer>> text =
              MemoryBuffer::getFile(o.pipeline.checkPlanReport)) {
        StringRef last = (*text)->getBuffer().rtrim();
        last = last.substr(last.rfind('\n') + 1);
        outs() << last << " (plan-check.txt)\n";
      }
    }
    if (emit.count("mlir") &&
        !writeFile(tmp, "partitioned.mlir", [&](raw_ostream &os) {
          module.print(os, stpar::tools::getPrintingFlags());
          os << "\n";
        }))
      return 1;
  }

  // Phase 3: emit (cpu first: it is the one `stpar verify` runs).
  if (toEmit) {
    std::string runtimeDir = stpar::tools::getRuntimeDir();
    for (stpar::target::EmitTarget target :
         {stpar::target::EmitTarget::Cpu, stpar::target::EmitTarget::Cuda}) {
      StringRef name = stpar::target::getEmitTargetName(target);
      if (!emit.count(name))
        continue;
      progress("emit: " + name + "/");
      SmallString<256> dir(tmp);
      sys::path::append(dir, name);
      if (mlir::failed(stpar::target::emitDirectory(module, target, dir,
                                                       runtimeDir)))
        return fail("emitting the " + name + " program failed (see the "
                    "errors above)");
    }
  }

  // Replace OUTDIR.
  if (sys::fs::exists(absOut) && (ec = sys::fs::remove_directories(absOut)))
    return fail("cannot replace '" + compileOutput + "': " + ec.message());
  if ((ec = sys::fs::rename(tmp, absOut)))
    return fail("cannot move the output to '" + compileOutput +
                "': " + ec.message());
  tmp.clear();
  progress("wrote " + compileOutput);
  return 0;
}

static stpar::tools::CommandRegistration reg(compileCmd, runCompile);
