//===- OperatorGraph.h - an imported model as a graph of operators -*- C++ -*-//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// What the IR route of the cost model hands over, without MLIR: the
// operators of one micro-batch's forward pass (stpar/Cost/Operator.h, loops
// and operands, *no partition*), the tensors they read and write, the free
// ops between them (reshapes, slices, concatenations, transposes of
// parameters) as dim mappings, the transformer layers found and each
// operator's layer kind. stpar/Analysis/CostModel.h fills it from an
// imported `func.func`; this header then partitions it with a Megatron
// strategy (the search, issue 5, will partition the same graph with its own
// candidates). docs/cost-model.md, "The IR route".
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_ANALYSIS_OPERATORGRAPH_H
#define STPAR_ANALYSIS_OPERATORGRAPH_H

#include "stpar/Cost/GPTModel.h"
#include "stpar/Cost/Operator.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stpar::analysis {

/// Where a tensor comes from.
enum class TensorKind {
  /// Produced by an operator or a view.
  Activation,
  /// A graph input (`stp.name` function argument).
  GraphInput,
  /// A trainable parameter (`#stp.param<..., trainable = true>`).
  Parameter,
  /// A non-trainable initializer or a constant (masks, index tables).
  Buffer,
};

/// One tensor of the graph (static shape).
struct GraphTensor {
  std::string name;
  std::vector<int64_t> shape;
  /// Bytes per element in training (docs/cost-model.md, "The IR route":
  /// floats 2 under mixed precision, 4 in fp32; integers their width).
  int64_t elementBytes = 2;
  TensorKind kind = TensorKind::Activation;
  /// Whether backward computes a gradient for it: parameters, and what is
  /// computed from them; not graph inputs, buffers or integer tensors.
  bool requiresGrad = false;
  /// For parameters reached through views: the parameter's name (tied
  /// weights share it); otherwise `name`.
  std::string parameterName;
  /// Producer: an index into OperatorGraph::ops or ::views, or -1.
  int producerOp = -1, producerView = -1;
  /// Graph inputs only: the dim holding the batch (the micro-batch).
  std::optional<unsigned> batchDim;
};

/// A free op: `result` is a re-indexing of `source` (reshape, slice,
/// concatenation input, transpose of a parameter). `sourceDimOf[r]` is the
/// source dim whose split carries over to result dim r (a split of any
/// other source dim is lost), or -1.
struct GraphView {
  std::string name;
  unsigned source = 0, result = 0;
  std::vector<int> sourceDimOf;
  /// What the partitioned program keeps (-stp-partition's rule for views,
  /// PartitionableOpInterface's LayoutRule): sourceDimOf without the source
  /// dims that must be whole (a slice's sliced dim, a concatenation's dim)
  /// or whose size changes at the same rank.
  std::vector<int> splitDimOf;
  /// Index of the view's op in the function body (as
  /// GraphOperator::sourceOp), or -1.
  int sourceOp = -1;
};

/// One operator with the tensors behind its operands.
struct GraphOperator {
  /// Loops, operands, kind, FLOPs per point, layer kind; `loops[i].axes`
  /// empty and `stage` 0 (the partition is assigned later).
  cost::Operator op;
  /// Per operand of `op`: the tensor (index into OperatorGraph::tensors).
  std::vector<unsigned> tensors;
  /// Per operand, per tensor dim: the loop indexing it, or -1 for a unit
  /// (broadcast) dim or an index that is not a plain loop (approximation).
  std::vector<std::vector<int>> tensorDimLoops;
  /// Part of an attention core (the scores/context batched matmuls, the
  /// softmax between them, stp.attention's operators).
  bool attentionCore = false;
  /// Index of the transformer layer it belongs to, -1 outside layers.
  int layer = -1;
  /// Position of the IR op it came from among the converted function's
  /// top-level ops (its entry block, in order), -1 if none; lets plans be
  /// written back onto the IR (stp.attention yields three operators with
  /// the same position).
  int sourceOp = -1;
};

/// A transformer layer: operators [begin, end) and its attention heads
/// (0 when the heads could not be told apart from the batch).
struct GraphLayer {
  unsigned begin = 0, end = 0;
  int64_t heads = 0;
};

/// One micro-batch's forward pass as operators (program order, which is a
/// topological order).
struct OperatorGraph {
  std::vector<GraphTensor> tensors;
  std::vector<GraphView> views;
  std::vector<GraphOperator> ops;
  std::vector<GraphLayer> layers;
  /// Approximations made while converting (one line each).
  std::vector<std::string> notes;

  /// Trainable parameters, elements (each named parameter once).
  double getParameterCount() const;
  /// Forward FLOPs of operator `i` (flopsPerPoint * product of extents; 0
  /// for embeddings).
  double getForwardFlops(unsigned i) const;
  /// The views (indices into `views`) between tensor `t` and the tensor they
  /// are views of, the one reading that tensor first; empty when `t` is no
  /// view.
  /// The tensor `t` is a view of, through every view (`t` itself when it
  /// is no view): its producer is `tensors[getViewRoot(t)].producerOp`.
  unsigned getViewRoot(unsigned t) const {
    while (tensors[t].producerView >= 0)
      t = views[tensors[t].producerView].source;
    return t;
  }
  std::vector<unsigned> getViewChain(unsigned t) const {
    std::vector<unsigned> chain;
    for (; tensors[t].producerView >= 0;
         t = views[tensors[t].producerView].source)
      chain.insert(chain.begin(), unsigned(tensors[t].producerView));
    return chain;
  }

  /// Follows one tracked dim per tensor through views: `dims[t]` is the
  /// tracked dim of tensor `t` (-1 none, -2 not known yet). A tensor a view
  /// produces tracks the dim its source's tracked dim maps to; any other
  /// unknown tensor tracks none. Fills `dims[t]` (memoized) and returns it.
  /// Records in `dims` the tracked dim of each output tensor of `gop`: the
  /// output dim its loop `loop` indexes (-1 when `loop` is -1 or indexes
  /// none).
  static void trackOutputDims(std::vector<int> &dims, const GraphOperator &gop,
                              int loop) {
    for (unsigned j = 0; j < gop.op.operands.size(); ++j) {
      if (gop.op.operands[j].role != cost::OperandRole::Output)
        continue;
      int d = -1;
      if (loop >= 0)
        for (unsigned k = 0; k < gop.tensorDimLoops[j].size(); ++k)
          if (gop.tensorDimLoops[j][k] == loop)
            d = int(k);
      dims[gop.tensors[j]] = d;
    }
  }

  int resolveTrackedDim(std::vector<int> &dims, unsigned t) const {
    if (dims[t] != -2)
      return dims[t];
    int d = -1;
    if (tensors[t].producerView >= 0) {
      const GraphView &v = views[tensors[t].producerView];
      int s = resolveTrackedDim(dims, v.source);
      if (s >= 0)
        for (unsigned r = 0; r < v.sourceDimOf.size(); ++r)
          if (v.sourceDimOf[r] == s)
            d = int(r);
    }
    dims[t] = d;
    return d;
  }
};

/// A Megatron strategy for an imported model: the strategy of GPTModel.h
/// plus the number of micro-batches per step.
struct IRStrategy {
  cost::MegatronStrategy megatron;
  /// Whether `mb=` was given (it must then equal the bound batch dim).
  bool microBatchGiven = false;
  /// Global batch in sequences (`gb=`), if given; global batch = mb * dp *
  /// micro-batches.
  std::optional<int64_t> globalBatch;
};

/// Parses "megatron:tp=T,pp=P,dp=D[,mb=M][,gb=G][,interleave=V|vp=V]
/// [,zero=Z][,recompute=none|selective|full][,sp=0|1][,distopt=0|1]
/// [,overlap=0|1]" (the keys of parseMegatronSpec plus `gb`).
llvm::Expected<IRStrategy> parseIRStrategy(llvm::StringRef spec);

/// Megatron's loops per graph operator (indices into its Operator::loops,
/// -1 for none), from cost/MegatronRule.h with the splits followed through
/// views: the batch from the graph inputs' batch dim, tensor-parallel
/// splits from operator to operator, the sequence (for sequence
/// parallelism) from the dim after a graph input's batch dim 0.
struct MegatronLoops {
  std::vector<int> batchLoop, tpLoop;
  /// Operators replicated across tp, grouped by the reason.
  std::vector<std::string> warnings;
};

/// Fails when tp does not divide the heads of a layer.
llvm::Expected<MegatronLoops> chooseMegatronLoops(const OperatorGraph &graph,
                                                  int64_t tp,
                                                  bool sequenceParallel);

} // namespace stpar::analysis

#endif // STPAR_ANALYSIS_OPERATORGRAPH_H
