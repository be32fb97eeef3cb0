//===- Pipelines.h - the stpar compile pipeline -----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// One pipeline, two front doors (docs/pipeline.md): `stpar-opt
// --stp-compile-pipeline{...}` runs buildCompilePipeline; `stpar compile`
// runs its two halves (buildPlanningPipeline, buildPartitioningPipeline)
// to write planned.mlir between them. Both run the same passes with the
// same options:
//
//   -stp-normalize                   composites (LayerNorm, GELU, attention)
//   -stp-plan | -stp-apply-plan      the plan as attributes
//   -stp-training-step               loss, backward, optimizer (if asked)
//   -stp-partition                   the per-device SPMD program
//   -stp-bucket-gradients            gradient all-reduces in buckets
//   -stp-schedule-collectives        events, waits, communicators
//   -stp-plan-memory                 one arena per rank, every buffer's offset
//
// Emission (C++/CUDA text) is a translation on the partitioned module
// (stpar-translate --stp-to-cpu / --stp-to-cuda; `stpar compile` writes
// both directories).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_PIPELINES_PIPELINES_H
#define STPAR_PIPELINES_PIPELINES_H

#include "stpar/Pipelines/Plan.h"

#include "mlir/Pass/PassManager.h"

#include <string>

namespace stpar::pipelines {

/// The training step (-stp-training-step); off unless `enabled`.
struct TrainingOptions {
  /// Build the training step (a loss was given).
  bool enabled = false;
  /// next-token, cross-entropy=NAME, sum or mean-square.
  std::string loss = "next-token";
  /// The model output the loss reads (empty: the first float one).
  std::string lossOutput;
  /// sgd or adamw.
  std::string optimizer = "sgd";
  double learningRate = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8,
         weightDecay = 0.0;
  /// Also return every trained parameter's gradient.
  bool returnGradients = false;
  /// Micro-batches per step, gradients accumulated (-1: the plan's).
  int64_t microBatches = -1;
  /// Activation recomputation: "on", "off" or "plan".
  std::string recompute = "plan";
};

/// The options of the whole pipeline.
struct CompilePipelineOptions {
  /// The search (cluster, devices, strategy, mesh, memory limit, ...).
  PlanOptions plan;
  /// A plan file (plan.json) to apply instead of searching; `plan.cluster`
  /// and `plan.devices` then check it (0 / empty: the file's).
  std::string planFile;
  /// The last stage: "plan" or "partition" (default).
  std::string stopAfter = "partition";
  /// The training step between the plan and the partition.
  TrainingOptions training;
  /// "mixed" (-stp-mixed-precision after the partition: GEMM operands
  /// rounded to bf16, fp32 accumulation and master weights), "fp32" (every
  /// op in f32) or "auto" (default: mixed where the plan's devices have
  /// bf16 tensor cores, fp32 otherwise).
  std::string precision = "auto";
  /// -stp-check-communication right after -stp-partition: the table goes
  /// to `checkPlanReport` ('-': standard output); a difference fails the
  /// pipeline when `checkPlanFail`.
  bool checkPlan = false;
  bool checkPlanFail = true;
  std::string checkPlanReport = "-";
};

/// Adds the stages up to and including the plan: -stp-normalize, then
/// -stp-plan (or -stp-apply-plan with `planFile`).
void buildPlanningPipeline(mlir::OpPassManager &pm,
                           const CompilePipelineOptions &options);

/// Adds the stages after the plan: -stp-partition,
/// -stp-check-communication (with `checkPlan`), -stp-mixed-precision
/// (unless precision "fp32"), -stp-bucket-gradients, -stp-schedule-collectives,
/// -stp-plan-memory.
/// -stp-training-step when `options.training.enabled` (else nothing).
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const CompilePipelineOptions &options);

void buildPartitioningPipeline(mlir::OpPassManager &pm,
                               const CompilePipelineOptions &options);

/// Adds every stage up to `options.stopAfter`.
void buildCompilePipeline(mlir::OpPassManager &pm,
                          const CompilePipelineOptions &options);

/// Registers the pipeline as `stp-compile-pipeline` (options: cluster,
/// devices, strategy, memory-limit, mesh, batch-dim, exact, pipeline, plan,
/// stop-after, the training step's, precision) and the -stp-plan pass.
void registerPipelines();

} // namespace stpar::pipelines

#endif // STPAR_PIPELINES_PIPELINES_H
