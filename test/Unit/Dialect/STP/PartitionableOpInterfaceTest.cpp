//===- PartitionableOpInterfaceTest.cpp - per-op partitioning rules -------===//
//
// Part of stpar. The rules the external models give upstream ops, and the
// error when the models are not registered.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace stpar::stp;

namespace {

const char *kModule = R"mlir(
func.func @main(%x: tensor<4x6x8xf32>, %w: tensor<8x8xf32>, %g: tensor<8xf32>)
    -> tensor<4x48xf32> {
  %e = tensor.empty() : tensor<4x6x8xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x6x8xf32>) -> tensor<4x6x8xf32>
  %splat = arith.constant dense<1.0> : tensor<4x6x8xf32>
  %m = linalg.generic {
      indexing_maps = [affine_map<(b, s, n, k) -> (b, s, k)>,
                       affine_map<(b, s, n, k) -> (k, n)>,
                       affine_map<(b, s, n, k) -> (b, s, n)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<4x6x8xf32>, tensor<8x8xf32>) outs(%f : tensor<4x6x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x6x8xf32>
  %n = stp.layer_norm %m, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<4x6x8xf32>, tensor<8xf32>) -> tensor<4x6x8xf32>
  %sm = linalg.softmax dimension(2) ins(%n : tensor<4x6x8xf32>)
      outs(%e : tensor<4x6x8xf32>) -> tensor<4x6x8xf32>
  %sl = tensor.extract_slice %sm[0, 0, 0] [4, 6, 4] [1, 1, 1]
      : tensor<4x6x8xf32> to tensor<4x6x4xf32>
  %cat = tensor.concat dim(2) %sl, %sl : (tensor<4x6x4xf32>, tensor<4x6x4xf32>) -> tensor<4x6x8xf32>
  %c = tensor.collapse_shape %cat [[0], [1, 2]] : tensor<4x6x8xf32> into tensor<4x48xf32>
  return %c : tensor<4x48xf32>
}
)mlir";

class PartitionableOpInterfaceTest : public ::testing::Test {
protected:
  void load(MLIRContext &ctx) {
    ctx.loadDialect<func::FuncDialect, arith::ArithDialect,
                    linalg::LinalgDialect, tensor::TensorDialect,
                    STPDialect>();
  }

  template <typename OpTy>
  PartitionableOpInterface first(ModuleOp module) {
    PartitionableOpInterface found;
    module.walk([&](OpTy op) {
      if (!found)
        found = dyn_cast<PartitionableOpInterface>(op.getOperation());
    });
    return found;
  }
};

TEST_F(PartitionableOpInterfaceTest, RulesOfUpstreamAndStpOps) {
  DialectRegistry registry;
  registerPartitionableOpModels(registry);
  MLIRContext ctx(registry);
  load(ctx);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kModule, &ctx);
  ASSERT_TRUE(module);
  EXPECT_TRUE(succeeded(checkPartitionableOpModels(&ctx, module->getLoc())));

  auto generic = first<linalg::GenericOp>(*module);
  ASSERT_TRUE(generic);
  EXPECT_EQ(generic.getPartitionRule(), PartitionRule::Loops);
  EXPECT_EQ(generic.getReductionKind(), shard::ReductionKind::Sum);
  EXPECT_EQ(generic.getCostRule().kind, CostKind::Loops);

  // A fill of a scalar into tensor.empty, the empty and a splat constant
  // are created on demand; the scalar constant is replicated.
  EXPECT_EQ(first<linalg::FillOp>(*module).getPartitionRule(),
            PartitionRule::Lazy);
  EXPECT_EQ(first<tensor::EmptyOp>(*module).getPartitionRule(),
            PartitionRule::Lazy);
  unsigned lazy = 0, replicated = 0;
  module->walk([&](arith::ConstantOp op) {
    PartitionRule rule =
        cast<PartitionableOpInterface>(op.getOperation()).getPartitionRule();
    lazy += rule == PartitionRule::Lazy;
    replicated += rule == PartitionRule::Replicated;
  });
  EXPECT_EQ(lazy, 1u);
  EXPECT_EQ(replicated, 1u);

  auto norm = first<LayerNormOp>(*module);
  EXPECT_EQ(norm.getPartitionRule(), PartitionRule::Norm);
  EXPECT_EQ(norm.getCostRule().flopsPerPoint, 8);
  auto normIface = cast<NormalizationOpInterface>(norm.getOperation());
  EXPECT_EQ(normIface.getNormalizedAxis(), 2);
  EXPECT_TRUE(normIface.isCentered());
  EXPECT_FALSE(normIface.getNormBias());

  // Softmax and concat: identity, their dim whole.
  for (PartitionableOpInterface op :
       {first<linalg::SoftmaxOp>(*module), first<tensor::ConcatOp>(*module)}) {
    ASSERT_TRUE(op);
    EXPECT_EQ(op.getPartitionRule(), PartitionRule::Layout);
    LayoutRule rule = op.getLayoutRule();
    EXPECT_EQ(rule.resultDims, (SmallVector<int64_t>{0, 1, 2}));
    EXPECT_EQ(rule.wholeDims, (SmallVector<int64_t>{2}));
  }
  // A slice of half of dim 2: dim 2 must be whole (gathered) first.
  LayoutRule slice = first<tensor::ExtractSliceOp>(*module).getLayoutRule();
  EXPECT_EQ(slice.resultDims, (SmallVector<int64_t>{0, 1, 2}));
  EXPECT_EQ(slice.wholeDims, (SmallVector<int64_t>{2}));
  // A collapse of [6, 8] keeps the split of dim 1 (its outer non-unit dim).
  auto collapse = first<tensor::CollapseShapeOp>(*module);
  EXPECT_EQ(collapse.getLayoutRule().resultDims, (SmallVector<int64_t>{0, 1}));
  EXPECT_EQ(collapse.getCostRule().kind, CostKind::View);

  EXPECT_EQ(first<func::ReturnOp>(*module).getPartitionRule(),
            PartitionRule::Terminator);
}

TEST_F(PartitionableOpInterfaceTest, MissingModelsAreAnError) {
  MLIRContext ctx;
  load(ctx);
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  EXPECT_TRUE(failed(checkPartitionableOpModels(&ctx, UnknownLoc::get(&ctx))));
  EXPECT_NE(message.find("registerPartitionableOpModels"), std::string::npos)
      << message;
}

} // namespace
