//===- LowerContractions.cpp - -stp-lower-contractions ----------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-lower-contractions: a contraction into f32 whose operands
// (both f32, or both bf16 under -stp-mixed-precision) are (batched)
// matrices in memory becomes one strided-batched GEMM call,
// stpar_rt::gemm (cuBLAS on cuda, a loop on cpu), with the transposes and
// leading dims decided here (rules in Passes.td).
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "GemmMatch.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace stpar::stp {
#define GEN_PASS_DEF_LOWERCONTRACTIONSPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// Element strides of each loop in an operand indexed by `map`, a projected
/// permutation (0 for loops that do not index it); nullopt otherwise.
std::optional<SmallVector<int64_t>> loopStrides(AffineMap map,
                                                ArrayRef<int64_t> shape) {
  if (!map.isProjectedPermutation(/*allowZeroInResults=*/false))
    return std::nullopt;
  SmallVector<int64_t> strides = computeSuffixProduct(shape);
  SmallVector<int64_t> result(map.getNumDims(), 0);
  for (unsigned i = 0; i < map.getNumResults(); ++i)
    result[cast<AffineDimExpr>(map.getResult(i)).getPosition()] = strides[i];
  return result;
}

/// Collapses loop dims `group` of one operand into one (size, stride);
/// nullopt when they are not one contiguous run or only partly present.
std::optional<std::pair<int64_t, int64_t>>
collapse(ArrayRef<unsigned> group, ArrayRef<int64_t> loopSizes,
         ArrayRef<int64_t> strides) {
  int64_t size = 1;
  SmallVector<unsigned> present;
  for (unsigned d : group) {
    size *= loopSizes[d];
    if (strides[d] != 0 || loopSizes[d] == 1)
      present.push_back(d);
  }
  if (present.empty())
    return std::make_pair(size, int64_t(0));
  if (present.size() != group.size())
    return std::nullopt;
  SmallVector<unsigned> sorted(group.begin(), group.end());
  llvm::sort(sorted, [&](unsigned a, unsigned b) {
    return strides[a] > strides[b];
  });
  for (size_t i = 0; i + 1 < sorted.size(); ++i)
    if (loopSizes[sorted[i]] != 1 &&
        strides[sorted[i]] != strides[sorted[i + 1]] * loopSizes[sorted[i + 1]])
      return std::nullopt;
  return std::make_pair(size, strides[sorted.back()]);
}

} // namespace

bool stpar::stp::hasGemmElementTypes(linalg::LinalgOp op) {
  if (op.getNumDpsInputs() != 2 || op->getNumResults() != 1)
    return false;
  Type a = getElementTypeOrSelf(op.getDpsInputOperand(0)->get().getType());
  Type b = getElementTypeOrSelf(op.getDpsInputOperand(1)->get().getType());
  Type c = getElementTypeOrSelf(op->getResult(0).getType());
  return c.isF32() && a == b && (a.isF32() || a.isBF16());
}

std::optional<GemmCall>
stpar::stp::matchStridedBatchedGemm(linalg::LinalgOp op) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      op->getNumResults() != 1 || !op.hasPureTensorSemantics() ||
      !linalg::isaContractionOpInterface(op))
    return std::nullopt;
  auto aType = dyn_cast<RankedTensorType>(op.getDpsInputOperand(0)->get().getType());
  auto bType = dyn_cast<RankedTensorType>(op.getDpsInputOperand(1)->get().getType());
  auto outType = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!aType || !bType || !outType || !aType.hasStaticShape() ||
      !bType.hasStaticShape() || !outType.hasStaticShape())
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->m.empty() || dims->n.empty() || dims->k.empty())
    return std::nullopt;
  SmallVector<int64_t> sizes = op.getStaticLoopRanges();
  auto maps = op.getIndexingMapsArray();
  auto sa = loopStrides(maps[0], aType.getShape());
  auto sb = loopStrides(maps[1], bType.getShape());
  auto sc = loopStrides(maps[2], outType.getShape());
  if (!sa || !sb || !sc)
    return std::nullopt;
  auto group = [&](ArrayRef<unsigned> g, ArrayRef<int64_t> s) {
    return collapse(g, sizes, s);
  };
  auto am = group(dims->m, *sa), ak = group(dims->k, *sa),
       bk = group(dims->k, *sb), bn = group(dims->n, *sb),
       cm = group(dims->m, *sc), cn = group(dims->n, *sc),
       ab = group(dims->batch, *sa), bb = group(dims->batch, *sb),
       cb = group(dims->batch, *sc);
  if (!am || !ak || !bk || !bn || !cm || !cn || !ab || !bb || !cb)
    return std::nullopt;
  // Operands must hold their matrix dims (a stride-0 m/n/k is a broadcast
  // cuBLAS cannot express).
  if (am->second == 0 || ak->second == 0 || bk->second == 0 ||
      bn->second == 0 || cm->second == 0 || cn->second == 0)
    return std::nullopt;
  int64_t M = am->first, N = bn->first, K = ak->first, batch = cb->first;
  // Column-major view: C^T (N x M) = B^T(N x K) * A^T(K x M) when C is
  // row-major in n; C (M x N) = A * B when it is column-major in m.
  struct Operand {
    int64_t index, rowStride, colStride, batchStride;
  };
  Operand x, y;
  int64_t rows, cols, ldc;
  if (cn->second == 1) {
    rows = N;
    cols = M;
    ldc = cm->second;
    x = {1, bn->second, bk->second, bb->second}; // X(n,k)
    y = {0, ak->second, am->second, ab->second}; // Y(k,m)
  } else if (cm->second == 1) {
    rows = M;
    cols = N;
    ldc = cn->second;
    x = {0, am->second, ak->second, ab->second}; // X(m,k)
    y = {1, bk->second, bn->second, bb->second}; // Y(k,n)
  } else {
    return std::nullopt;
  }
  auto lead = [](const Operand &o, int64_t r, int64_t c, bool &trans,
                 int64_t &ld) {
    if (o.rowStride == 1 && o.colStride >= r) {
      trans = false;
      ld = o.colStride;
      return true;
    }
    if (o.colStride == 1 && o.rowStride >= c) {
      trans = true;
      ld = o.rowStride;
      return true;
    }
    return false;
  };
  bool tx, ty;
  int64_t ldx, ldy;
  if (!lead(x, rows, K, tx, ldx) || !lead(y, K, cols, ty, ldy) || ldc < rows)
    return std::nullopt;
  return GemmCall{tx,
                  ty,
                  rows,
                  cols,
                  K,
                  unsigned(x.index),
                  ldx,
                  x.batchStride,
                  unsigned(y.index),
                  ldy,
                  y.batchStride,
                  ldc,
                  cb->second,
                  batch};
}

namespace {

struct LowerContractionsPass
    : public stpar::stp::impl::LowerContractionsPassBase<
          LowerContractionsPass> {
  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) { ops.push_back(op); });
    OpBuilder builder(&getContext());
    for (linalg::LinalgOp op : ops) {
      if (!hasGemmElementTypes(op))
        continue;
      std::optional<GemmCall> gemm = matchStridedBatchedGemm(op);
      if (!gemm)
        continue;
      auto flag = [&](bool v) {
        return emitc::OpaqueAttr::get(&getContext(), v ? "true" : "false");
      };
      SmallVector<Attribute> args{emitc::OpaqueAttr::get(&getContext(), "ctx"),
                                  flag(gemm->transX),
                                  flag(gemm->transY),
                                  builder.getI64IntegerAttr(gemm->rows),
                                  builder.getI64IntegerAttr(gemm->cols),
                                  builder.getI64IntegerAttr(gemm->k),
                                  builder.getIndexAttr(gemm->x),
                                  builder.getI64IntegerAttr(gemm->ldx),
                                  builder.getI64IntegerAttr(gemm->strideX),
                                  builder.getIndexAttr(gemm->y),
                                  builder.getI64IntegerAttr(gemm->ldy),
                                  builder.getI64IntegerAttr(gemm->strideY),
                                  builder.getI64IntegerAttr(gemm->ldc),
                                  builder.getI64IntegerAttr(gemm->strideC),
                                  builder.getI64IntegerAttr(gemm->batch)};
      builder.setInsertionPoint(op);
      SmallVector<Value> operands{op.getDpsInputOperand(0)->get(),
                                  op.getDpsInputOperand(1)->get(),
                                  op.getDpsInitOperand(0)->get()};
      auto call = emitc::CallOpaqueOp::create(
          builder, op->getLoc(), op->getResultTypes(), "stpar_rt::gemm",
          builder.getArrayAttr(args), ArrayAttr(), operands);
      call->setDiscardableAttrs(op->getDiscardableAttrDictionary());
      // The product accumulates into the init (operand #2).
      call->setAttr(STPDialect::kAccumulateAttrName,
                    builder.getI64IntegerAttr(2));
      op->replaceAllUsesWith(call->getResults());
      op->erase();
    }
  }
};

} // namespace
