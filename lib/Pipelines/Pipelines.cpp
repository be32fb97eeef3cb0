//===- Pipelines.cpp - the stpar compile pipeline ---------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Pipelines/Pipelines.h"

#include "stpar/Dialect/STP/Transforms/Passes.h"
#include "stpar/Pipelines/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace stpar::pipelines;

void stpar::pipelines::buildPlanningPipeline(
    OpPassManager &pm, const CompilePipelineOptions &options) {
  pm.addPass(stpar::stp::createNormalizePass());
  if (options.planFile.empty()) {
    pm.addPass(createPlanPass(options.plan));
    return;
  }
  stpar::stp::ApplyPlanPassOptions apply;
  apply.planFile = options.planFile;
  apply.cluster = options.plan.cluster;
  apply.devices = options.plan.devices;
  pm.addPass(stpar::stp::createApplyPlanPass(apply));
}

void stpar::pipelines::buildTrainingPipeline(
    OpPassManager &pm, const CompilePipelineOptions &options) {
  if (!options.training.enabled)
    return;
  const TrainingOptions &t = options.training;
  stpar::stp::TrainingStepPassOptions pass;
  pass.loss = t.loss;
  pass.lossOutput = t.lossOutput;
  pass.optimizer = t.optimizer;
  pass.learningRate = t.learningRate;
  pass.beta1 = t.beta1;
  pass.beta2 = t.beta2;
  pass.epsilon = t.epsilon;
  pass.weightDecay = t.weightDecay;
  pass.returnGradients = t.returnGradients;
  pass.microBatches = t.microBatches;
  pass.recompute = t.recompute;
  pm.addPass(stpar::stp::createTrainingStepPass(pass));
}

void stpar::pipelines::buildPartitioningPipeline(
    OpPassManager &pm, const CompilePipelineOptions &options) {
  // With pipeline stages (pp > 1): the schedule as IR, then each pipeline
  // rank's program (both do nothing otherwise).
  stpar::stp::PipelineSchedulePassOptions schedule;
  schedule.ifPipelined = true;
  pm.addPass(stpar::stp::createPipelineSchedulePass(schedule));
  pm.addPass(stpar::stp::createPartitionPass());
  pm.addPass(stpar::stp::createPipelineStagesPass());
  if (options.checkPlan) {
    stpar::stp::CheckCommunicationPassOptions check;
    check.report = options.checkPlanReport;
    check.failOnDifference = options.checkPlanFail;
    pm.addPass(stpar::stp::createCheckCommunicationPass(check));
  }
  if (options.precision != "fp32") {
    // Any other word reaches the pass, which rejects all but bf16 and auto.
    stpar::stp::MixedPrecisionPassOptions mixed;
    mixed.computeType = options.precision == "mixed"  ? "bf16"
                        : options.precision == "auto" ? "auto"
                                                      : options.precision;
    pm.addPass(stpar::stp::createMixedPrecisionPass(mixed));
  }
  pm.addPass(stpar::stp::createBucketGradientsPass());
  pm.addPass(stpar::stp::createScheduleCollectivesPass());
  pm.addPass(stpar::stp::createPlanMemoryPass());
}

void stpar::pipelines::buildCompilePipeline(
    OpPassManager &pm, const CompilePipelineOptions &options) {
  buildPlanningPipeline(pm, options);
  if (options.stopAfter == "plan")
    return;
  buildTrainingPipeline(pm, options);
  buildPartitioningPipeline(pm, options);
}

namespace {
/// The textual options of `stp-compile-pipeline{...}`.
struct CompilePipelineTextOptions
    : public PassPipelineOptions<CompilePipelineTextOptions> {
  Option<std::string> cluster{*this, "cluster",
                              llvm::cl::desc("Cluster preset or JSON file")};
  Option<int64_t> devices{*this, "devices",
                          llvm::cl::desc("Devices (default: the mesh's "
                                         "product, else the cluster's)"),
                          llvm::cl::init(0)};
  Option<std::string> strategy{
      *this, "strategy",
      llvm::cl::desc("search, spatial, temporal, megatron, megatron-sp or dp"),
      llvm::cl::init("search")};
  Option<int> zero{*this, "zero",
                   llvm::cl::desc("Force the ZeRO stage (0-3; -1: searched)"),
                   llvm::cl::init(-1)};
  Option<double> memoryLimit{*this, "memory-limit",
                             llvm::cl::desc("Per-device memory limit (bytes)"),
                             llvm::cl::init(0)};
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("Force the mesh shape, e.g. 2x4")};
  Option<std::string> batchDim{
      *this, "batch-dim",
      llvm::cl::desc("The stp.dims entry holding the global batch")};
  Option<bool> exact{*this, "exact",
                     llvm::cl::desc("Exact dynamic programming"),
                     llvm::cl::init(false)};
  Option<bool> pipeline{
      *this, "pipeline",
      llvm::cl::desc("Search pipeline stages too (off: -stp-partition does "
                     "not split pipeline stages yet)"),
      llvm::cl::init(false)};
  Option<std::string> plan{
      *this, "plan",
      llvm::cl::desc("Apply this plan.json instead of searching")};
  Option<std::string> stopAfter{*this, "stop-after",
                                llvm::cl::desc("plan or partition (default)"),
                                llvm::cl::init("partition")};
  Option<std::string> loss{
      *this, "loss",
      llvm::cl::desc("Build the training step with this loss: next-token, "
                     "cross-entropy=NAME, sum or mean-square (default: "
                     "none, the forward pass)")};
  Option<std::string> lossOutput{
      *this, "loss-output", llvm::cl::desc("The model output the loss reads")};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd or adamw"),
                                llvm::cl::init("sgd")};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"),
                    llvm::cl::init(1e-3)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(0.999)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.0)};
  Option<bool> returnGradients{
      *this, "return-gradients",
      llvm::cl::desc("Also return the parameters' gradients"),
      llvm::cl::init(false)};
  Option<int64_t> microBatches{
      *this, "micro-batches",
      llvm::cl::desc("Micro-batches per step (default -1: the plan's)"),
      llvm::cl::init(-1)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("Activation recomputation: on, off or plan"),
      llvm::cl::init("plan")};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("auto (default: mixed where the plan's devices have "
                     "bf16 tensor cores, else fp32), mixed "
                     "(-stp-mixed-precision: bf16 GEMM operands, fp32 "
                     "accumulation and master weights) or fp32"),
      llvm::cl::init("auto")};
};
} // namespace

void stpar::pipelines::registerPipelines() {
  registerSTPPipelinesPasses();
  PassPipelineRegistration<CompilePipelineTextOptions>(
      "stp-compile-pipeline",
      "The stpar pipeline: -stp-normalize, -stp-plan (or -stp-apply-plan "
      "with plan=), -stp-training-step (with loss=), -stp-partition, "
      "-stp-mixed-precision (unless precision=fp32), -stp-bucket-gradients, "
      "-stp-schedule-collectives, "
      "-stp-plan-memory (docs/pipeline.md)",
      [](OpPassManager &pm, const CompilePipelineTextOptions &text) {
        CompilePipelineOptions options;
        options.plan.cluster = text.cluster;
        options.plan.devices = text.devices;
        options.plan.strategy = text.strategy;
        options.plan.zeroStage = text.zero;
        options.plan.memoryLimit = text.memoryLimit;
        if (!text.mesh.empty()) {
          if (llvm::Expected<std::vector<int64_t>> shape =
                  parseMeshShape(text.mesh))
            options.plan.mesh = std::move(*shape);
          else {
            // -stp-plan reports the bad shape with the module's location.
            llvm::consumeError(shape.takeError());
            options.plan.meshText = text.mesh;
          }
        }
        options.plan.batchDim = text.batchDim;
        options.plan.exact = text.exact;
        options.plan.pipeline = text.pipeline;
        options.planFile = text.plan;
        options.stopAfter = text.stopAfter;
        options.precision = text.precision;
        if (!text.loss.empty()) {
          TrainingOptions &t = options.training;
          t.enabled = true;
          t.loss = text.loss;
          t.lossOutput = text.lossOutput;
          t.optimizer = text.optimizer;
          t.learningRate = text.lr;
          t.beta1 = text.beta1;
          t.beta2 = text.beta2;
          t.epsilon = text.eps;
          t.weightDecay = text.weightDecay;
          t.returnGradients = text.returnGradients;
          t.microBatches = text.microBatches;
          t.recompute = text.recompute;
        }
        buildCompilePipeline(pm, options);
      });
}
