//===- VerifyCommand.cpp - `stpar verify` -----------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Checks numerically that the partitioned program computes what the model
// computes (DESIGN.md, "Correctness oracle"; docs/verify.md):
//
//   stpar verify MODEL.onnx --cluster C --dim NAME=VALUE ... [--devices N]
//       [--plan plan.json] [--mesh AxB] [--strategy S] [--seed K]
//       [--rtol 1e-4] [--atol 1e-5] [--inputs DIR] [--keep DIR]
//
// Phases, each a subprocess, each reported on stderr:
//   1. compile  `stpar compile ... --emit=cpu -o WORK/compile` (this very
//               executable);
//   2. build    the CPU/MPI project WORK/compile/cpu (copied to WORK/src)
//               with cmake + ninja -j2;
//   3. inputs   random inputs (`ort-run.js gen-inputs`, fixed seed) or the
//               ONNX test data of --inputs (`ort-run.js from-pb`);
//   4. run      `mpirun --oversubscribe -np N stpar_program --weights
//               MODELDIR --inputs WORK/inputs --outputs WORK/outputs` (the
//               program reads its weight blocks in place from the model's
//               folder);
//   5. ort      the unpartitioned model on ONNX Runtime (`ort-run.js run`),
//               or, with --expected DIR, the test data's output_<i>.pb;
//   6. compare  `ort-run.js compare`: one line per output (max abs and rel
//               error, PASS/FAIL).
// With --train (docs/training.md) the program is a training step (`stpar
// compile --loss ...`) and phases 4-6 are one: tools/torch-ref/
// stpar-train-ref.py runs it once per step (--steps) and compares loss,
// gradients and updated parameters with PyTorch autograd on the
// unpartitioned model.
// Exit code 0 only when every output passes. WORK is a fresh temporary
// folder removed at the end, or --keep DIR (kept).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

using namespace llvm;

static cl::SubCommand
    verifyCmd("verify",
              "Run the partitioned CPU/MPI program and compare its outputs "
              "with ONNX Runtime on the unpartitioned model (--train: a "
              "training step against PyTorch autograd)");
static cl::opt<std::string> verifyInput(cl::Positional, cl::Required,
                                        cl::desc("<model.onnx>"),
                                        cl::sub(verifyCmd));
static cl::opt<std::string>
    verifyCluster("cluster", cl::sub(verifyCmd),
                  cl::desc("Preset name or JSON file (required unless "
                           "--compiled)"));
static cl::list<std::string>
    verifyDims("dim", cl::sub(verifyCmd), cl::value_desc("NAME=VALUE"),
               cl::desc("Bind a symbolic dim (as for stpar compile)"));
static cl::opt<std::string> verifyBatchDim(
    "batch-dim", cl::sub(verifyCmd), cl::value_desc("NAME"),
    cl::desc("The symbolic batch dim (passed to stpar compile)"));
static cl::opt<int64_t> verifyDevices(
    "devices", cl::sub(verifyCmd), cl::init(0),
    cl::desc("Devices = MPI ranks (passed to stpar compile; default: the "
             "cluster's, or the plan's with --plan or --compiled)"));
static cl::opt<std::string> verifyPlan("plan", cl::sub(verifyCmd),
                                       cl::value_desc("plan.json"),
                                       cl::desc("Use this plan (passed to "
                                                "stpar compile)"));
static cl::opt<std::string> verifyMesh("mesh", cl::sub(verifyCmd),
                                       cl::value_desc("AxB..."),
                                       cl::desc("Logical mesh shape (passed "
                                                "to stpar compile)"));
static cl::opt<std::string>
    verifyStrategy("strategy", cl::sub(verifyCmd), cl::value_desc("NAME"),
                   cl::desc("How the plan is chosen (passed to stpar "
                            "compile): search (default), spatial, temporal, "
                            "megatron, megatron-sp, dp, or "
                            "megatron:tp=T,pp=P,dp=D,... as for stpar "
                            "compile"));
static cl::opt<int>
    verifyZero("zero", cl::sub(verifyCmd), cl::init(-1), cl::value_desc("0-3"),
               cl::desc("Force the ZeRO stage (passed to stpar compile)"));
static cl::opt<unsigned>
    verifySeed("seed", cl::sub(verifyCmd), cl::init(0),
               cl::desc("Seed of the random inputs (default: 0)"));
// The default tolerances of --precision mixed (docs/verify.md, "Mixed
// precision": what bf16 GEMM operands reach against the float64 reference).
#define STPAR_MIXED_RTOL 2e-2
#define STPAR_MIXED_ATOL 1e-2
#define STPAR_TEXT_(x) #x
#define STPAR_TEXT(x) STPAR_TEXT_(x)
#define STPAR_MIXED_TOLERANCES                                                 \
  "--rtol " STPAR_TEXT(STPAR_MIXED_RTOL) " and --atol " STPAR_TEXT(            \
      STPAR_MIXED_ATOL)
static cl::opt<double> verifyRtol(
    "rtol", cl::sub(verifyCmd), cl::init(1e-4),
    cl::desc("Relative tolerance of float outputs (default 1e-4)"));
static cl::opt<double> verifyAtol(
    "atol", cl::sub(verifyCmd), cl::init(1e-5),
    cl::desc("Absolute tolerance of float outputs near zero (default 1e-5): "
             "element error allowed = max(rtol * |expected|, atol)"));
static cl::opt<std::string> verifyPrecision(
    "precision", cl::sub(verifyCmd), cl::init("fp32"),
    cl::value_desc("fp32|mixed"),
    cl::desc("Precision of the compiled program (passed to stpar compile): "
             "fp32 (default, the exact check) or mixed (bf16 GEMM operands, "
             "fp32 accumulation; checked with " STPAR_MIXED_TOLERANCES
             " unless given)"));
/// The program's precision: --precision, or with --compiled and no
/// --precision the one its io.json states.
static std::string programPrecision = "fp32";

/// The tolerances in force: --rtol/--atol when given, else those of the
/// program's precision.
static double effectiveRtol() {
  return programPrecision == "mixed" && !verifyRtol.getNumOccurrences()
             ? STPAR_MIXED_RTOL
             : double(verifyRtol);
}
static double effectiveAtol() {
  return programPrecision == "mixed" && !verifyAtol.getNumOccurrences()
             ? STPAR_MIXED_ATOL
             : double(verifyAtol);
}
static cl::opt<std::string> verifyInputs(
    "inputs", cl::sub(verifyCmd), cl::value_desc("DIR"),
    cl::desc("Read the inputs from DIR/input_<i>.pb (ONNX TensorProto, the "
             "backend-test layout) instead of generating them; with --train "
             "the model's inputs there, the step's others generated"));
static cl::opt<std::string> verifyExpected(
    "expected", cl::sub(verifyCmd), cl::value_desc("DIR"),
    cl::desc("Compare with DIR/output_<i>.pb (ONNX TensorProto, the "
             "backend-test layout) instead of running ONNX Runtime"));
static cl::opt<std::string>
    verifyKeep("keep", cl::sub(verifyCmd), cl::value_desc("DIR"),
               cl::desc("Work in DIR and keep everything (compiled project, "
                        "build, inputs, outputs, logs); a DIR reused by later "
                        "runs keeps its build folder (incremental builds) "
                        "and replaces the rest"));
static cl::opt<std::string> verifyCompiled(
    "compiled", cl::sub(verifyCmd), cl::value_desc("DIR"),
    cl::desc("Skip the compile phase: DIR is an output folder of stpar "
             "compile (with cpu/ and plan.json) or of stpar emit --target "
             "cpu; give --devices unless DIR has plan.json"));
static cl::opt<std::string> verifyCxxFlags(
    "cxx-flags", cl::sub(verifyCmd), cl::value_desc("FLAGS"),
    cl::desc("Compile the emitted program with FLAGS instead of its "
             "Release flags (-O3 -DNDEBUG), e.g. -O0 for quick builds"));
static cl::opt<std::string>
    verifyMpirun("mpirun", cl::sub(verifyCmd), cl::init("mpirun"),
                 cl::desc("The mpirun to use (default: from PATH)"));
static cl::opt<std::string>
    verifyNode("node", cl::sub(verifyCmd), cl::init("node"),
               cl::desc("The Node.js to use (default: from PATH)"));
static cl::OptionCategory
    verifyTrainingCategory("Training step (--train; docs/training.md)");
static cl::opt<bool> verifyCheckPlan(
    "check-plan", cl::sub(verifyCmd),
    cl::desc("Fail when the partitioned program communicates other than the "
             "plan predicts (stpar compile --check-plan); without it the "
             "check is only reported"));
static cl::opt<bool> verifyNoPlanCheck(
    "no-plan-check", cl::sub(verifyCmd),
    cl::desc("Skip the plan <=> program check (e.g. for a plan file made "
             "before plans carried their communication)"));
static cl::opt<bool> verifyTrain(
    "train", cl::sub(verifyCmd), cl::cat(verifyTrainingCategory),
    cl::desc("Verify a whole training step (loss, gradients, optimizer "
             "update) against PyTorch autograd instead of the forward pass "
             "against ONNX Runtime"));
static cl::opt<unsigned> verifySteps(
    "steps", cl::sub(verifyCmd), cl::init(1), cl::cat(verifyTrainingCategory),
    cl::desc("Training steps to run and compare (--train; default: 1)"));
static cl::opt<std::string> verifyLoss(
    "loss", cl::sub(verifyCmd), cl::init("next-token"), cl::value_desc("KIND"),
    cl::cat(verifyTrainingCategory),
    cl::desc("Loss of the training step: next-token, cross-entropy=NAME, "
             "sum or mean-square (--train; default: next-token)"));
static cl::opt<std::string>
    verifyOptimizer("optimizer", cl::sub(verifyCmd), cl::init("sgd"),
                    cl::value_desc("sgd|adamw"),
                    cl::cat(verifyTrainingCategory),
                    cl::desc("Optimizer (--train; default: sgd)"));
static cl::opt<double>
    verifyLr("lr", cl::sub(verifyCmd), cl::init(1e-3),
             cl::cat(verifyTrainingCategory),
             cl::desc("Learning rate (--train; default: 1e-3)"));
static cl::opt<double>
    verifyWeightDecay("weight-decay", cl::sub(verifyCmd), cl::init(0.0),
                      cl::cat(verifyTrainingCategory),
                      cl::desc("Weight decay (--train; default: 0)"));
static cl::opt<int64_t> verifyMicroBatches(
    "micro-batches", cl::sub(verifyCmd), cl::init(-1), cl::value_desc("M"),
    cl::cat(verifyTrainingCategory),
    cl::desc("Micro-batches per step, gradients accumulated (--train; "
             "passed to stpar compile; default: the plan's)"));
static cl::opt<std::string> verifyRecompute(
    "recompute", cl::sub(verifyCmd), cl::init("plan"),
    cl::value_desc("on|off|plan"), cl::cat(verifyTrainingCategory),
    cl::desc("Activation recomputation (--train; passed to stpar compile; "
             "default: as the plan says)"));
static cl::opt<bool> verifyProfile(
    "profile", cl::sub(verifyCmd), cl::cat(verifyTrainingCategory),
    cl::desc("Run the last step with STPAR_PROFILE and print per-op times "
             "next to the plan's predictions (--train)"));
static cl::opt<std::string> verifyPython(
    "python", cl::sub(verifyCmd), cl::init("/usr/bin/python3"),
    cl::cat(verifyTrainingCategory),
    cl::desc("The Python with torch, onnx and numpy (default: Debian's "
             "/usr/bin/python3)"));
static cl::opt<unsigned> verifyTimeout(
    "timeout", cl::sub(verifyCmd), cl::init(600),
    cl::desc("Seconds each phase may take (default 600)"));

namespace {

/// One phase's subprocess: program, arguments, where its output goes.
struct Step {
  std::string program;
  std::vector<std::string> args; // without argv[0]
  /// stdout/stderr go to these files (empty: inherited).
  std::string outLog, errLog;
};

/// The verification of one model: work folder, phases, failure reporting.
class Verifier {
public:
  explicit Verifier(std::string work) : work(std::move(work)) {}

  int run();

private:
  std::string path(const Twine &a, const Twine &b = "") const {
    SmallString<256> p(work);
    sys::path::append(p, a, b);
    return std::string(p);
  }
  int fail(const Twine &message) const {
    errs() << "stpar verify: error: " << message << "\n";
    if (!verifyKeep.empty())
      errs() << "stpar verify: note: files kept in " << work << "\n";
    return 1;
  }
  /// Finds `name` on PATH (or takes it as a path); empty when missing.
  std::string findProgram(StringRef name) const;
  /// Runs `step`, printing `verify: [phase] ...` and its time on stderr.
  /// Returns the exit code, or -1 when it could not start or timed out
  /// (message in `error`).
  int execute(StringRef phase, const Step &step, std::string &error) const;
  /// Runs the mpirun `step` like execute(), and once more when it failed
  /// although no rank reported a failure (launcherFault()); the first
  /// attempt's logs are kept with the suffix ".1".
  int executeMpirun(const Step &step, std::string &error) const;
  int compileModel(const std::string &self, const std::string &model);
  /// Phases 4-6 of --train: the reference script runs the program once per
  /// step and compares with PyTorch.
  int runTraining(const std::string &model, const std::string &ioFile,
                  const std::string &inputs, const std::string &mpirun,
                  const std::string &program, int64_t ranks,
                  const std::string &planFile);
  /// The last `lines` lines of `file`, indented, after the lines holding
  /// "error:" that come before them (at most 10).
  std::string tail(StringRef file, unsigned lines = 25) const;

  std::string work;
};

} // namespace

std::string Verifier::findProgram(StringRef name) const {
  if (name.contains('/'))
    return sys::fs::can_execute(name) ? name.str() : "";
  ErrorOr<std::string> found = sys::findProgramByName(name);
  return found ? *found : "";
}

int Verifier::execute(StringRef phase, const Step &step,
                      std::string &error) const {
  std::vector<StringRef> argv{step.program};
  for (const std::string &a : step.args)
    argv.push_back(a);
  std::string line = step.program;
  for (const std::string &a : step.args)
    line += " " + a;
  errs() << "verify: [" << phase << "] " << line << "\n";
  errs().flush();
  outs().flush();
  std::optional<StringRef> redirects[3] = {std::nullopt, std::nullopt,
                                           std::nullopt};
  // ExecuteAndWait opens a redirect without truncating it: a log left by an
  // earlier run in a reused --keep folder would keep its longer tail.
  for (const std::string &log : {step.outLog, step.errLog})
    if (!log.empty())
      sys::fs::remove(log);
  if (!step.outLog.empty())
    redirects[1] = StringRef(step.outLog);
  if (!step.errLog.empty())
    redirects[2] = StringRef(step.errLog);
  auto start = std::chrono::steady_clock::now();
  bool failedToStart = false;
  int rc = sys::ExecuteAndWait(step.program, argv, /*Env=*/std::nullopt,
                               redirects, verifyTimeout, /*MemoryLimit=*/0,
                               &error, &failedToStart);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  errs() << formatv("verify: [{0}] done in {1:F1} s (exit {2})\n", phase,
                    seconds, rc);
  if (failedToStart || rc == -1) {
    if (error.empty())
      error = "could not run " + step.program;
    if (rc == -1 && !failedToStart)
      error += formatv(" (timeout {0} s?)", unsigned(verifyTimeout)).str();
    return -1;
  }
  return rc;
}

/// Whether mpirun's stderr `log` (of a run that exited non-zero) shows the
/// launcher failing while no rank reported a failure of its own: no
/// `error:` line (every fatal error of an emitted program prints
/// `stpar_program: error: ...`, runtime/common/stpar_io.h), no MPI error
/// handler's report and no rank killed by a signal. Open MPI 4's launcher
/// has races of its own: two mpiruns starting at once can both try to
/// create the user's session directory (/tmp/ompi.HOST.UID, removed by the
/// last one to finish) and one fails in orte_init with "File exists" (exit
/// 1; here once in 3,000 runs of two concurrent loops), and it now and then
/// loses track of a rank that finished normally, "exiting improperly" with
/// PID 0 (open-mpi/ompi#7833, not fixed on the 4.x branches). Once in CI an
/// mpirun of the conformance test failed with exit 1 and no `error:` line.
static bool launcherFault(StringRef log) {
  return !log.contains("error:") &&
         !log.contains("An error occurred in MPI_") &&
         !log.contains("exited on signal");
}

int Verifier::executeMpirun(const Step &step, std::string &error) const {
  int rc = execute("run", step, error);
  if (rc <= 0)
    return rc;
  ErrorOr<std::unique_ptr<MemoryBuffer>> log =
      MemoryBuffer::getFile(step.errLog);
  if (!log || !launcherFault((*log)->getBuffer()))
    return rc;
  errs() << "verify: [run] warning: mpirun failed (exit " << rc
         << ") but no rank reported an error; running it once more (Open "
            "MPI 4's launcher has races: concurrent session directories, "
            "open-mpi/ompi#7833). Its stderr ended with:\n"
         << tail(step.errLog, 12);
  for (const std::string &file : {step.outLog, step.errLog})
    if (std::error_code ec = sys::fs::rename(file, file + ".1")) {
      error = "cannot rename " + file + ": " + ec.message();
      return -1;
    }
  return execute("run", step, error);
}

std::string Verifier::tail(StringRef file, unsigned lines) const {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(file);
  if (!buffer)
    return "";
  SmallVector<StringRef> all;
  (*buffer)->getBuffer().rtrim().split(all, '\n');
  std::string text;
  size_t first = all.size() > lines ? all.size() - lines : 0;
  // Diagnostics before the tail (a long IR dump can follow them) come
  // first, so the failing command's own error lines are always shown.
  unsigned shown = 0;
  for (size_t i = 0; i < first && shown < 10; ++i)
    if (all[i].contains("error:")) {
      text += "    " + all[i].str() + "\n";
      ++shown;
    }
  if (shown)
    text += "    ...\n";
  for (size_t i = first; i < all.size(); ++i)
    text += "    " + all[i].str() + "\n";
  return text;
}

/// Makes the files of folder `from` (not its subfolders) appear in `to`,
/// copying only those whose contents differ; files of `to` that `from` lacks
/// are removed.
static Error syncFolder(StringRef from, StringRef to) {
  if (std::error_code ec = sys::fs::create_directories(to))
    return createStringError(ec, "cannot create " + to + ": " + ec.message());
  StringSet<> present;
  std::error_code ec;
  for (sys::fs::directory_iterator it(from, ec), end; it != end && !ec;
       it.increment(ec)) {
    if (it->type() != sys::fs::file_type::regular_file)
      continue;
    StringRef name = sys::path::filename(it->path());
    present.insert(name);
    SmallString<256> target(to);
    sys::path::append(target, name);
    ErrorOr<std::unique_ptr<MemoryBuffer>> a = MemoryBuffer::getFile(it->path());
    ErrorOr<std::unique_ptr<MemoryBuffer>> b = MemoryBuffer::getFile(target);
    if (a && b && (*a)->getBuffer() == (*b)->getBuffer())
      continue;
    if (std::error_code copyEc = sys::fs::copy_file(it->path(), target))
      return createStringError(copyEc, "cannot copy " + it->path() + " to " +
                                           target + ": " + copyEc.message());
  }
  if (ec)
    return createStringError(ec, "cannot list " + from + ": " + ec.message());
  for (sys::fs::directory_iterator it(to, ec), end; it != end && !ec;
       it.increment(ec))
    if (it->type() == sys::fs::file_type::regular_file &&
        !present.count(sys::path::filename(it->path())))
      sys::fs::remove(it->path());
  return Error::success();
}

/// `value` in full precision (%g).
static std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

/// The ranks of the compiled program: plan.json's "devices" (the plan the
/// program implements), else --devices, else the --plan file's "devices",
/// else the product of --mesh.
static std::optional<int64_t> rankCount(StringRef planFile) {
  if (ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
          MemoryBuffer::getFile(planFile)) {
    Expected<json::Value> plan = json::parse((*buffer)->getBuffer());
    if (plan) {
      if (const json::Object *object = plan->getAsObject())
        if (std::optional<int64_t> devices = object->getInteger("devices"))
          return devices;
    } else {
      consumeError(plan.takeError());
    }
  }
  if (verifyDevices > 0)
    return int64_t(verifyDevices);
  if (!verifyPlan.empty() && verifyPlan != planFile)
    return rankCount(verifyPlan);
  if (!verifyMesh.empty()) {
    int64_t product = 1;
    SmallVector<StringRef> parts;
    StringRef(verifyMesh).split(parts, 'x');
    for (StringRef part : parts) {
      int64_t size;
      if (part.getAsInteger(10, size) || size <= 0)
        return std::nullopt;
      product *= size;
    }
    return product;
  }
  return std::nullopt;
}

/// Phase 1: `stpar compile ... --emit=cpu -o WORK/compile`; 0 on success.
int Verifier::compileModel(const std::string &self, const std::string &model) {
  std::string compiled = path("compile");
  Step compile{self, {"compile", model, "--cluster", verifyCluster}, "", ""};
  for (const std::string &dim : verifyDims)
    compile.args.insert(compile.args.end(), {"--dim", dim});
  if (!verifyBatchDim.empty())
    compile.args.insert(compile.args.end(), {"--batch-dim", verifyBatchDim});
  if (verifyDevices > 0)
    compile.args.insert(compile.args.end(),
                        {"--devices", std::to_string(verifyDevices)});
  if (!verifyPlan.empty())
    compile.args.insert(compile.args.end(), {"--plan", verifyPlan});
  if (!verifyMesh.empty())
    compile.args.insert(compile.args.end(), {"--mesh", verifyMesh});
  if (!verifyStrategy.empty())
    compile.args.insert(compile.args.end(), {"--strategy", verifyStrategy});
  if (verifyZero.getNumOccurrences())
    compile.args.insert(compile.args.end(),
                        {"--zero", std::to_string(verifyZero)});
  if (verifyTrain)
    compile.args.insert(compile.args.end(),
                        {"--loss", verifyLoss, "--optimizer", verifyOptimizer,
                         "--lr", formatNumber(verifyLr), "--weight-decay",
                         formatNumber(verifyWeightDecay),
                         "--return-gradients"});
  if (verifyTrain && verifyRecompute.getNumOccurrences())
    compile.args.insert(compile.args.end(), {"--recompute", verifyRecompute});
  if (verifyTrain && verifyMicroBatches.getNumOccurrences())
    compile.args.insert(
        compile.args.end(),
        {"--micro-batches", std::to_string(verifyMicroBatches)});
  compile.args.insert(compile.args.end(), {"--precision", verifyPrecision});
  // The plan <=> program check: reported on every run, fatal with
  // --check-plan (docs/verify.md).
  if (!verifyNoPlanCheck)
    compile.args.push_back(verifyCheckPlan ? "--check-plan=fail"
                                           : "--check-plan=report");
  compile.args.insert(compile.args.end(), {"--emit=plan,cpu", "-o", compiled});
  compile.outLog = path("compile.out.log");
  compile.errLog = path("compile.err.log");
  std::string error;
  int rc = execute("compile", compile, error);
  if (rc != 0)
    return fail(rc < 0 ? error
                       : "stpar compile failed (exit " + std::to_string(rc) +
                             "):\n" + tail(compile.errLog));
  // The check's summary line (compile's standard output).
  if (ErrorOr<std::unique_ptr<MemoryBuffer>> log =
          MemoryBuffer::getFile(compile.outLog)) {
    SmallVector<StringRef> lines;
    (*log)->getBuffer().split(lines, '\n');
    for (StringRef line : lines)
      if (line.starts_with("plan check: ") && line.contains(" pairs agree"))
        outs() << "verify: " << line << "\n";
  }
  return 0;
}

static bool printMemory(StringRef log, StringRef planFile);

int Verifier::run() {
  std::string model = verifyInput;
  if (!sys::fs::exists(model))
    return fail("cannot open '" + model + "'");
  if (!(verifyRtol > 0) || !(verifyAtol >= 0))
    return fail("--rtol must be > 0 and --atol >= 0");
  if (verifyCheckPlan && verifyNoPlanCheck)
    return fail("--check-plan and --no-plan-check contradict each other");
  if (verifyPrecision != "fp32" && verifyPrecision != "mixed")
    return fail("--precision must be fp32 or mixed, got '" + verifyPrecision +
                "'");
  programPrecision = verifyPrecision;
  if (verifyCompiled.empty() && verifyCluster.empty())
    return fail("give --cluster (the cluster the plan is searched for), or "
                "--compiled DIR for a program compiled already");
  if (std::string m = stpar::tools::checkDevices(verifyDevices); !m.empty())
    return fail(m);
  if (!verifyTrain &&
      (verifySteps.getNumOccurrences() || verifyLoss.getNumOccurrences() ||
       verifyProfile.getNumOccurrences() ||
       verifyOptimizer.getNumOccurrences() || verifyLr.getNumOccurrences() ||
       verifyWeightDecay.getNumOccurrences() ||
       verifyMicroBatches.getNumOccurrences() ||
       verifyRecompute.getNumOccurrences()))
    return fail("--steps, --loss, --optimizer, --lr, --weight-decay, "
                "--micro-batches, --recompute and --profile describe a "
                "training step: give --train");
  if (verifyTrain && verifySteps < 1)
    return fail("--steps must be at least 1");
  if (verifyTrain && !verifyExpected.empty())
    return fail("--expected (ONNX test data outputs) applies to the forward "
                "check, not to --train (its reference is PyTorch)");
  if (!verifyExpected.empty() && verifyInputs.empty())
    return fail("--expected needs the inputs those outputs come from: give "
                "--inputs");

  // Tools first: a missing one is reported before any work is done.
  std::string node = findProgram(verifyNode);
  if (node.empty())
    return fail("Node.js ('" + verifyNode +
                "') not found; run scripts/install-deps.sh");
  std::string runner;
  if (std::optional<std::string> env = sys::Process::GetEnv("STPAR_ORT_RUN"))
    runner = *env;
  else
    runner = STPAR_SOURCE_DIR "/tools/ort-run/ort-run.js";
  if (!sys::fs::exists(runner))
    return fail("the ONNX Runtime runner '" + runner +
                "' is missing (set STPAR_ORT_RUN)");
  std::string mpirun = findProgram(verifyMpirun);
  if (mpirun.empty())
    return fail("mpirun ('" + verifyMpirun +
                "') not found; run scripts/install-deps.sh (openmpi-bin)");
  std::string cmake = findProgram("cmake");
  std::string ninja = findProgram("ninja");
  if (cmake.empty() || ninja.empty())
    return fail("cmake and ninja are needed to build the emitted program");
  std::string self = sys::fs::getMainExecutable(
      "stpar", reinterpret_cast<void *>(&rankCount));
  if (self.empty())
    return fail("cannot find the stpar executable itself");

  std::string error;
  int rc;

  // 1. Compile (or take --compiled).
  std::string cpuDir, planFile;
  if (verifyCompiled.empty()) {
    if (int rc = compileModel(self, model))
      return rc;
    cpuDir = path("compile", "cpu");
    planFile = path("compile", "plan.json");
  } else {
    SmallString<256> dir(verifyCompiled);
    sys::fs::make_absolute(dir);
    cpuDir = sys::fs::exists(dir + "/cpu/CMakeLists.txt")
                 ? std::string(dir) + "/cpu"
                 : std::string(dir);
    planFile = std::string(dir) + "/plan.json";
    errs() << "verify: [compile] skipped: using " << cpuDir << "\n";
  }
  std::string ioFile = cpuDir + "/io.json";
  if (!sys::fs::exists(cpuDir + "/CMakeLists.txt") ||
      !sys::fs::exists(ioFile))
    return fail("no CPU project with io.json in " + cpuDir);
  // The weights: read in place from the model's folder (its external data
  // or the .onnx file itself), unless io.json names another folder
  // (relative to the project).
  SmallString<256> weights(model);
  sys::fs::make_absolute(weights);
  sys::path::remove_filename(weights);
  if (ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
          MemoryBuffer::getFile(ioFile)) {
    Expected<json::Value> io = json::parse((*buffer)->getBuffer());
    if (!io)
      return fail(ioFile + ": " + toString(io.takeError()));
    if (const json::Object *object = io->getAsObject()) {
      if (std::optional<StringRef> w = object->getString("weights"))
        weights = sys::path::is_absolute(*w) ? w->str()
                                             : cpuDir + "/" + w->str();
      // A program compiled elsewhere (--compiled) is checked at the
      // tolerance of its own precision unless --precision says otherwise.
      std::string stated =
          object->getString("precision").value_or("fp32").str();
      if (!verifyPrecision.getNumOccurrences())
        programPrecision = stated;
      else if (stated != verifyPrecision)
        return fail("--precision " + verifyPrecision + ": the program in " +
                    cpuDir + " is " + stated);
      if (programPrecision == "mixed")
        errs() << "verify: precision mixed (bf16 GEMM operands): rtol "
               << formatNumber(effectiveRtol()) << ", atol "
               << formatNumber(effectiveAtol()) << "\n";
    }
  }
  std::optional<int64_t> ranks = rankCount(planFile);
  if (!ranks || *ranks <= 0)
    return fail("cannot tell the number of ranks: no 'devices' in "
                "plan.json and no --devices or --mesh");

  // 2. Build, from a copy of the project in WORK/src that keeps the files
  // whose contents did not change (so a reused --keep folder rebuilds only
  // what changed, without re-running cmake).
  std::string srcDir = path("src");
  if (Error e = syncFolder(cpuDir, srcDir))
    return fail(toString(std::move(e)));
  std::string buildDir = path("build");
  Step configure{cmake,
                 {"-G", "Ninja", "-S", srcDir, "-B", buildDir,
                  "-DCMAKE_BUILD_TYPE=Release"},
                 path("build.out.log"),
                 path("build.err.log")};
  if (!verifyCxxFlags.empty())
    configure.args.push_back("-DCMAKE_CXX_FLAGS_RELEASE=" + verifyCxxFlags);
  std::string ccache = findProgram("ccache");
  if (!ccache.empty())
    configure.args.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" + ccache);
  // A kept build folder is reused: ninja re-runs cmake when needed.
  rc = sys::fs::exists(buildDir + "/build.ninja")
           ? 0
           : execute("build", configure, error);
  if (rc != 0)
    return fail(rc < 0 ? error
                       : "cmake could not configure " + cpuDir + ":\n" +
                             tail(configure.errLog) + tail(configure.outLog));
  Step build{ninja, {"-C", buildDir, "-j2"}, path("ninja.out.log"),
             path("ninja.err.log")};
  rc = execute("build", build, error);
  if (rc != 0)
    return fail(rc < 0 ? error
                       : "building the emitted program failed:\n" +
                             tail(build.outLog) + tail(build.errLog));
  std::string program = buildDir + "/stpar_program";
  if (!sys::fs::can_execute(program))
    return fail("the build produced no " + program);

  // 3. Inputs. Results of an earlier run in a reused --keep folder go first.
  std::string inputs = path("inputs");
  for (const char *stale : {"inputs", "outputs", "reference"})
    if (std::error_code ec = sys::fs::remove_directories(path(stale)))
      return fail("cannot remove " + path(stale) + ": " + ec.message());
  Step gen{node, {runner}, "", path("inputs.err.log")};
  // --train with --inputs: the step's other inputs (labels, optimizer
  // state) are generated, then the model's inputs come from DIR.
  if (verifyInputs.empty() || verifyTrain)
    gen.args.insert(gen.args.end(),
                    {"gen-inputs", "--model", model, "--io", ioFile, "--seed",
                     std::to_string(verifySeed), "--outputs", inputs});
  else
    gen.args.insert(gen.args.end(), {"from-pb", "--io", ioFile, "--pb",
                                     verifyInputs, "--outputs", inputs});
  rc = execute("inputs", gen, error);
  if (rc != 0)
    return fail(rc < 0 ? error : "preparing the inputs failed:\n" +
                                     tail(gen.errLog));
  if (verifyTrain && !verifyInputs.empty()) {
    Step pb{node,
            {runner, "from-pb", "--io", ioFile, "--pb", verifyInputs,
             "--outputs", inputs, "--partial=1"},
            "",
            path("inputs-pb.err.log")};
    rc = execute("inputs", pb, error);
    if (rc != 0)
      return fail(rc < 0 ? error
                         : "reading the --inputs failed:\n" + tail(pb.errLog));
  }
  if (!verifyTrain) {
    errs() << tail(gen.errLog, 64);
  } else {
    // The optimizer state inputs are not random: the reference starts them
    // at zero (step 1) and feeds the program's own state afterwards.
    std::string log = tail(gen.errLog, 64);
    SmallVector<StringRef> lines;
    StringRef(log).split(lines, '\n', -1, /*KeepEmpty=*/false);
    unsigned state = 0;
    for (StringRef line : lines) {
      if (line.contains("'adam_m:") || line.contains("'adam_v:") ||
          line.contains("'adam_step'")) {
        ++state;
        continue;
      }
      errs() << line << "\n";
    }
    if (state)
      errs() << "verify: [inputs] the " << state
             << " AdamW state inputs (adam_step, adam_m:*, adam_v:*) start "
                "at step 1 and zeros, then carry the program's state\n";
    // The model's inputs that --inputs replaced (after the generated ones'
    // lines, which they override).
    if (!verifyInputs.empty())
      errs() << tail(path("inputs-pb.err.log"), 8);
  }

  if (verifyTrain)
    return runTraining(model, ioFile, inputs, mpirun, program, *ranks,
                       planFile);

  // 4. The partitioned program.
  std::string outputs = path("outputs");
  if (std::error_code ec = sys::fs::create_directories(outputs))
    return fail("cannot create " + outputs + ": " + ec.message());
  Step mpi{mpirun, {"--oversubscribe"}, path("mpirun.out.log"),
           path("mpirun.err.log")};
  if (geteuid() == 0)
    mpi.args.push_back("--allow-run-as-root");
  mpi.args.insert(mpi.args.end(),
                  {"-np", std::to_string(*ranks), program, "--weights",
                   std::string(weights), "--inputs", inputs, "--outputs", outputs});
  rc = executeMpirun(mpi, error);
  if (rc != 0)
    return fail(rc < 0 ? error
                       : "mpirun failed (exit " + std::to_string(rc) +
                             "); its stderr ends with:\n" +
                             tail(mpi.errLog) + "its stdout ends with:\n" +
                             tail(mpi.outLog, 10));
  printMemory(mpi.errLog, planFile);

  // 5. The reference: ONNX Runtime, or the test data's outputs.
  std::string reference = verifyExpected;
  if (reference.empty()) {
    reference = path("reference");
    Step ort{node,
             {runner, "run", "--model", model, "--io", ioFile, "--inputs",
              inputs, "--outputs", reference},
             "",
             path("ort.err.log")};
    rc = execute("ort", ort, error);
    if (rc != 0)
      return fail(rc < 0 ? error : "ONNX Runtime failed:\n" + tail(ort.errLog));
  }

  // 6. Compare (prints its table on our stdout).
  Step compare{node,
               {runner, "compare", "--io", ioFile, "--actual", outputs,
                "--expected", reference, "--rtol",
                formatNumber(effectiveRtol()), "--atol",
                formatNumber(effectiveAtol())},
               "",
               path("compare.err.log")};
  rc = execute("compare", compare, error);
  if (rc < 0 || rc > 1)
    return fail(rc < 0 ? error
                       : "comparing the outputs failed:\n" +
                             tail(compare.errLog));
  if (rc == 1) {
    errs() << "stpar verify: outputs differ from "
           << (verifyExpected.empty() ? "ONNX Runtime's"
                                      : "the --expected ones")
           << "\n";
    if (!verifyKeep.empty())
      errs() << "stpar verify: note: files kept in " << work << "\n";
  }
  return rc;
}

/// The program's measured memory per rank (its "stpar_program: rank R
/// memory: ..." lines in `log`) next to the plan's prediction per device.
static bool printMemory(StringRef log, StringRef planFile) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> text = MemoryBuffer::getFile(log);
  if (!text)
    return false;
  uint64_t arenaMax = 0, residentMax = 0;
  // Per rank (the program runs once per step: the most of its runs).
  std::map<unsigned, uint64_t> arenaOfRank;
  SmallVector<StringRef> lines;
  (*text)->getBuffer().split(lines, '\n');
  for (StringRef line : lines) {
    size_t at = line.find("stpar_program: rank ");
    if (at == StringRef::npos)
      continue;
    StringRef rest = line.drop_front(at);
    size_t a = rest.find("memory: arena "), r = rest.find("peak resident ");
    if (a == StringRef::npos || r == StringRef::npos)
      continue;
    uint64_t arena = 0, resident = 0;
    unsigned rank = 0;
    if (rest.drop_front(20).consumeInteger(10, rank) ||
        rest.drop_front(a + 14).consumeInteger(10, arena) ||
        rest.drop_front(r + 14).consumeInteger(10, resident))
      continue;
    arenaMax = std::max(arenaMax, arena);
    residentMax = std::max(residentMax, resident);
    arenaOfRank[rank] = std::max(arenaOfRank[rank], arena);
  }
  size_t ranks = arenaOfRank.size();
  if (!ranks)
    return false;
  outs() << formatv("verify: memory per rank (measured, max over {0} "
                    "ranks): arena {1} bytes used, peak resident {2:F1} "
                    "MiB\n",
                    ranks, arenaMax, double(residentMax) / (1 << 20));
  ErrorOr<std::unique_ptr<MemoryBuffer>> plan = MemoryBuffer::getFile(planFile);
  if (!plan)
    return true;
  Expected<json::Value> root = json::parse((*plan)->getBuffer());
  if (!root) {
    consumeError(root.takeError());
    return true;
  }
  const json::Object *memory =
      root->getAsObject() ? root->getAsObject()->getObject("memory") : nullptr;
  if (!memory)
    return true;
  auto get = [&](StringRef key) { return memory->getNumber(key).value_or(0); };
  outs() << formatv("verify: memory per device (plan): {0:F0} bytes "
                    "(states {1:F0}, activations {2:F0}, transient {3:F0}) "
                    "for a mixed-precision training step with Adam; the "
                    "arena holds this program's tensors in its own "
                    "precision; measured / plan = {4:F2}\n",
                    get("total"), get("states"), get("activations"),
                    get("transient"),
                    get("total") > 0 ? double(arenaMax) / get("total") : 0.0);
  // With pipeline stages: each stage's plan (its own micro-batches in
  // flight) next to the most its ranks used (the pp axis is the grid's
  // first: rank r is on stage r / (ranks / stages)).
  const json::Array *stages = memory->getArray("stages");
  if (!stages || stages->empty() || ranks % stages->size())
    return true;
  size_t perStage = ranks / stages->size();
  outs() << "verify: memory per pipeline stage (plan, its micro-batches in "
            "flight; measured arena, the most of its ranks):";
  for (auto [s, entry] : llvm::enumerate(*stages)) {
    const json::Object *stage = entry.getAsObject();
    if (!stage)
      return true;
    uint64_t measured = 0;
    for (auto [rank, arena] : arenaOfRank)
      if (rank / perStage == s)
        measured = std::max(measured, arena);
    outs() << formatv("{0} stage {1}: plan {2:F0} bytes ({3} in flight), "
                      "measured {4} bytes",
                      s ? ";" : "", s, stage->getNumber("total").value_or(0),
                      stage->getNumber("in_flight").value_or(0), measured);
  }
  outs() << "\n";
  return true;
}

int Verifier::runTraining(const std::string &model, const std::string &ioFile,
                          const std::string &inputs, const std::string &mpirun,
                          const std::string &program, int64_t ranks,
                          const std::string &planFile) {
  std::string python = findProgram(verifyPython);
  if (python.empty())
    return fail("Python ('" + verifyPython +
                "') not found; run scripts/install-deps.sh");
  std::string script;
  if (std::optional<std::string> env = sys::Process::GetEnv("STPAR_TRAIN_REF"))
    script = *env;
  else
    script = STPAR_SOURCE_DIR "/tools/torch-ref/stpar-train-ref.py";
  if (!sys::fs::exists(script))
    return fail("the PyTorch reference '" + script +
                "' is missing (set STPAR_TRAIN_REF)");
  std::string steps = path("steps");
  if (std::error_code ec = sys::fs::remove_directories(steps))
    return fail("cannot remove " + steps + ": " + ec.message());
  Step ref{python,
           {script,           "verify",
            "--model",        model,
            "--io",           ioFile,
            "--inputs",       inputs,
            "--work",         steps,
            "--steps",        std::to_string(verifySteps),
            "--loss",         verifyLoss,
            "--optimizer",    verifyOptimizer,
            "--lr",           formatNumber(verifyLr),
            "--weight-decay", formatNumber(verifyWeightDecay),
            "--rtol",         formatNumber(effectiveRtol()),
            "--seed",         std::to_string(verifySeed)},
           "",
           path("train.err.log")};
  if (verifyProfile) {
    if (!sys::fs::exists(planFile))
      return fail("--profile needs the plan (" + planFile + ")");
    ref.args.insert(ref.args.end(), {"--profile", planFile});
  }
  ref.args.insert(ref.args.end(), {"--", mpirun, "--oversubscribe"});
  if (geteuid() == 0)
    ref.args.push_back("--allow-run-as-root");
  ref.args.insert(ref.args.end(), {"-np", std::to_string(ranks), program});
  std::string error;
  int rc = execute("train", ref, error);
  if (rc < 0 || rc > 1)
    return fail(rc < 0 ? error
                       : "the training-step check failed to run:\n" +
                             tail(ref.errLog));
  // The program's stderr: the training check's log, or with --profile the
  // profiled run's.
  if (!printMemory(ref.errLog, planFile))
    printMemory(path("steps", "profile.txt"), planFile);
  if (rc == 1) {
    errs() << "stpar verify: the training step differs from PyTorch's\n";
    if (!verifyKeep.empty())
      errs() << "stpar verify: note: files kept in " << work << "\n";
  }
  return rc;
}

static int runVerify() {
  std::string work;
  bool keep = !verifyKeep.empty();
  if (keep) {
    work = verifyKeep;
    if (std::error_code ec = sys::fs::create_directories(work)) {
      errs() << "stpar verify: error: cannot create " << work << ": "
             << ec.message() << "\n";
      return 1;
    }
    SmallString<256> absolute(work);
    sys::fs::make_absolute(absolute);
    work = std::string(absolute);
  } else {
    SmallString<256> temp;
    if (std::error_code ec =
            sys::fs::createUniqueDirectory("stpar-verify", temp)) {
      errs() << "stpar verify: error: cannot create a temporary folder: "
             << ec.message() << "\n";
      return 1;
    }
    work = std::string(temp);
  }
  int rc = Verifier(work).run();
  if (!keep)
    sys::fs::remove_directories(work);
  return rc;
}

static stpar::tools::CommandRegistration reg(verifyCmd, runVerify);
