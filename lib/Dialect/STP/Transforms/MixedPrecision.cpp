//===- MixedPrecision.cpp - -stp-mixed-precision ----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-mixed-precision: the operands of every contraction that
// -stp-lower-contractions turns into a GEMM are rounded to bf16, the
// product still accumulates into an f32 result (cuBLAS with bf16 inputs
// and CUBLAS_COMPUTE_32F on cuda; the same rounding and an f32 loop on
// cpu). Parameters, optimizer states and the other ops stay f32 (fp32
// master weights). Rules in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "GemmMatch.h"

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseMap.h"

namespace stpar::stp {
#define GEN_PASS_DEF_MIXEDPRECISIONPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;

namespace {

/// `value` (an f32 tensor) rounded to bf16 element by element, built
/// before `user` with its location and training-step phase.
Value roundToBF16(RewriterBase &rewriter, Operation *user, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  auto bf16Type =
      RankedTensorType::get(type.getShape(), rewriter.getBF16Type());
  Location loc = user->getLoc();
  Value init = tensor::EmptyOp::create(rewriter, loc, type.getShape(),
                                       rewriter.getBF16Type());
  AffineMap identity = rewriter.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  auto round = linalg::GenericOp::create(
      rewriter, loc, TypeRange{bf16Type}, ValueRange{value}, ValueRange{init},
      ArrayRef<AffineMap>{identity, identity}, iterators,
      [](OpBuilder &b, Location l, ValueRange args) {
        Value r = arith::TruncFOp::create(b, l, b.getBF16Type(), args[0]);
        linalg::YieldOp::create(b, l, r);
      });
  if (Attribute phase = user->getAttr(STPDialect::kPhaseAttrName))
    round->setAttr(STPDialect::kPhaseAttrName, phase);
  return round.getResult(0);
}

struct MixedPrecisionPass
    : public stpar::stp::impl::MixedPrecisionPassBase<MixedPrecisionPass> {
  using MixedPrecisionPassBase::MixedPrecisionPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (computeType != "bf16" && computeType != "auto") {
      module.emitError() << "-stp-mixed-precision: compute type '"
                         << computeType
                         << "' is not supported (only 'bf16' or 'auto'; fp16 "
                            "needs loss scaling, which is not implemented)";
      return signalPassFailure();
    }
    // The plan's device (stp.mesh) must multiply bf16 on its tensor cores
    // (cuBLAS takes CUDA_R_16BF from sm_80 on; a V100 does not).
    if (auto mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
        mesh && !mesh.getCluster().getDevice().getBf16()) {
      if (computeType == "auto") {
        module.emitRemark()
            << "-stp-mixed-precision: the devices of cluster '"
            << mesh.getCluster().getName()
            << "' have no bf16 tensor cores: the program stays fp32 (fp16 "
               "with loss scaling is not implemented)";
        return;
      }
      module.emitError() << "-stp-mixed-precision: the devices of cluster '"
                         << mesh.getCluster().getName()
                         << "' have no bf16 tensor cores (no 'bf16' peak): "
                            "use fp32 precision (fp16 with loss scaling is "
                            "not implemented)";
      return signalPassFailure();
    }
    SmallVector<linalg::LinalgOp> gemms;
    module.walk([&](linalg::LinalgOp op) {
      // f32 x f32 -> f32 GEMMs (an already rounded one has bf16 inputs).
      if (hasGemmElementTypes(op) &&
          getElementTypeOrSelf(op.getDpsInputOperand(0)->get().getType())
              .isF32() &&
          matchStridedBatchedGemm(op))
        gemms.push_back(op);
    });
    module->setAttr(STPDialect::kPrecisionAttrName,
                    StringAttr::get(&getContext(), "mixed"));
    // The experts of MoE layers: their runtime call rounds its own GEMM
    // operands (rows, weights, activation).
    module.walk([&](MoEExpertsOp op) {
      if (!op.getBf16Operands()) {
        op.setBf16Operands(true);
        numGemms += op.getWMul() ? 3 : 2;
      }
    });
    // Their backward: A, dH, dW_out, dW_in, dX (and U, dW_mul, dX's
    // second term when gated).
    module.walk([&](MoEExpertsGradOp op) {
      if (!op.getBf16Operands()) {
        op.setBf16Operands(true);
        numGemms += op.getWMul() ? 8 : 5;
      }
    });
    IRRewriter rewriter(&getContext());
    Type bf16 = rewriter.getBF16Type(), f32 = rewriter.getF32Type();
    // One rounded copy per value and block: a weight read by the forward
    // GEMM and by its input-gradient GEMM is rounded once.
    llvm::DenseMap<std::pair<Value, Block *>, Value> rounded;
    for (linalg::LinalgOp op : gemms) {
      linalg::GenericOp generic = dyn_cast<linalg::GenericOp>(*op);
      if (!generic) {
        rewriter.setInsertionPoint(op);
        DictionaryAttr attrs = op->getDiscardableAttrDictionary();
        FailureOr<linalg::GenericOp> g =
            linalg::generalizeNamedOp(rewriter, op);
        if (failed(g))
          continue; // stays an f32 GEMM
        generic = *g;
        // Keep the plan step, phase and the like of the named op.
        generic->setDiscardableAttrs(attrs);
      }
      for (unsigned i = 0; i < 2; ++i) {
        OpOperand *input = generic.getDpsInputOperand(i);
        Value &copy = rounded[{input->get(), generic->getBlock()}];
        if (!copy) {
          rewriter.setInsertionPoint(generic);
          copy = roundToBF16(rewriter, generic, input->get());
          ++numRounded;
        }
        input->set(copy);
        // The body reads the bf16 element and computes in f32.
        BlockArgument arg = generic.getMatchingBlockArgument(input);
        arg.setType(bf16);
        rewriter.setInsertionPointToStart(generic.getBody());
        Value wide =
            arith::ExtFOp::create(rewriter, generic.getLoc(), f32, arg);
        rewriter.replaceAllUsesExcept(arg, wide, wide.getDefiningOp());
      }
      ++numGemms;
    }
  }
};

} // namespace
