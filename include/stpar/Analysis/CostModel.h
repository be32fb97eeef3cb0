//===- CostModel.h - imported IR to cost-model operators -------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The IR route of the cost model: an imported `func.func` (the ONNX
// importer's output: linalg, tensor and stp ops) becomes an OperatorGraph
// (stpar/Analysis/OperatorGraph.h): one cost::Operator per compute op with
// loops and operands read off the indexing maps, no partition. The search
// problem is built from that graph (stpar/Analysis/SearchBridge.h) and
// Megatron's loops are chosen on it (chooseMegatronLoops), without MLIR.
// Rules: docs/cost-model.md, "The IR route".
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_ANALYSIS_COSTMODEL_H
#define STPAR_ANALYSIS_COSTMODEL_H

#include "stpar/Analysis/OperatorGraph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace stpar::analysis {

/// Options of the conversion.
struct ConversionOptions {
  /// Float tensors in 4 bytes (fp32 training) instead of 2 (mixed
  /// precision: fp16/bf16 weights and activations in compute).
  bool fp32 = false;
  /// The micro-batch size (the bound batch dim): dim 0 of every graph
  /// input of that extent is its batch dim. Unset: dim 0 of every graph
  /// input.
  std::optional<int64_t> batchSize;
};

/// Converts `func` (statically shaped, as imported) into an operator graph:
/// - linalg.generic: loops = its iteration space; operands from the
///   indexing maps (a dim expression -> that loop, a constant -> a unit
///   dim, anything else -> the first loop it uses, noted); a contraction
///   (mul + add reduction) is a MatMul of 2 FLOPs per point; a generic
///   whose body extracts from a parameter is an Embedding (the table rows
///   become a reduction loop); other generics are Elementwise with one
///   FLOP per float arith/math op of the body;
/// - linalg.softmax: Softmax (5 FLOPs per point); stp.layer_norm (8) and
///   stp.rms_norm (6): Norm; linalg.transpose of an activation: an
///   Elementwise copy (0 FLOPs);
/// - stp.attention: three operators as GPTModel.h (scores MatMul, Softmax,
///   context MatMul), so heads and FLOPs (4 b h s_q s_k d) match Megatron;
/// - tensor reshapes, slices, concatenations and transposes of parameters
///   are free views; tensor.empty, linalg.fill and constants are free;
/// - stp.topk and stp.scatter_elements: Elementwise (noted approximations).
/// Fails, with a diagnostic on the op, on dynamic shapes.
mlir::FailureOr<OperatorGraph>
convertToOperatorGraph(mlir::func::FuncOp func,
                       const ConversionOptions &options);

} // namespace stpar::analysis

#endif // STPAR_ANALYSIS_COSTMODEL_H
