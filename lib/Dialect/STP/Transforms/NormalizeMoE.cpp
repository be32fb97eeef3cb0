//===- NormalizeMoE.cpp - dense exported MoE layers -> stp.moe --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The MoE rewrite of -stp-normalize. Exporters write a top-k MoE layer
// densely so that it has static shapes (torch113_moe_top2_op17, the zoo's
// Mixtral): every expert runs on every token and the results are summed
// with the gates scattered into a [tokens, experts] matrix, zero for the
// experts a token did not choose. That computes the same numbers as the
// sparse layer, so a layer whose every piece matches is replaced by one
// `stp.moe`:
//
//   logits = tokens @ router              (a contraction; router [D, E] or
//                                          [E, D])
//   p = softmax(logits, 1); v, i = topk(p, k, 1)
//   g = v, or v / sum(v, 1)               (normalize)
//   gates = scatter_elements(zeros [N, E], i, g, axis 1)
//   x_e = tokens @ w_in[e]; u_e = tokens @ w_mul[e]       ([E, N, F])
//   h = act(x) (* u)                      (elementwise ops; the activation
//                                          found by evaluating them)
//   y = h @ w_out                         ([E, N, D])
//   out = sum_e y * transpose(gates)[:, :, None]
//
// A layer that differs anywhere stays as it is (and is marked by
// markMoELayers).
//
//===----------------------------------------------------------------------===//

#include "NormalizeMatchers.h"

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace stpar::stp;
using namespace stpar::stp::normalize;

namespace {

/// Whether `generic` has the indexing maps `dims` (per operand, the loop of
/// each tensor dim) and the iterator types `reductions` says.
bool hasMaps(linalg::GenericOp generic, ArrayRef<SmallVector<unsigned>> dims,
             ArrayRef<bool> reductions) {
  auto maps = generic.getIndexingMapsArray();
  if (maps.size() != dims.size() ||
      generic.getNumLoops() != static_cast<unsigned>(reductions.size()))
    return false;
  for (auto [map, want] : llvm::zip(maps, dims)) {
    if (map.getNumResults() != want.size() || map.getNumSymbols() != 0)
      return false;
    for (auto [expr, loop] : llvm::zip(map.getResults(), want)) {
      auto dim = dyn_cast<AffineDimExpr>(expr);
      if (!dim || dim.getPosition() != loop)
        return false;
    }
  }
  for (auto [type, red] :
       llvm::zip(generic.getIteratorTypesArray(), reductions))
    if ((type == utils::IteratorType::reduction) != red)
      return false;
  return true;
}

/// Whether `v` is a tensor filled with zeros (linalg.fill of 0 or a zero
/// splat constant).
bool isZeros(Value v) {
  if (auto fill = v.getDefiningOp<linalg::FillOp>()) {
    auto c = getConstantScalar(fill.getInputs()[0]);
    return c && *c == 0.0;
  }
  auto c = getConstantScalar(v);
  return c && *c == 0.0;
}

/// A contraction generic `out + a * b` over a zero-filled init.
std::optional<linalg::GenericOp> matchContraction(Value v) {
  auto generic = v.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumDpsInputs() != 2 ||
      generic.getNumResults() != 1 || !isZeros(generic.getDpsInits()[0]))
    return std::nullopt;
  Block &body = generic.getRegion().front();
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  auto add = yield.getValues()[0].getDefiningOp<arith::AddFOp>();
  if (!add || body.getOperations().size() != 3)
    return std::nullopt;
  Value out = body.getArgument(2);
  Value prod = add.getLhs() == out ? add.getRhs() : add.getLhs();
  auto mul = prod.getDefiningOp<arith::MulFOp>();
  if (!mul || (add.getLhs() != out && add.getRhs() != out))
    return std::nullopt;
  Value a = body.getArgument(0), b = body.getArgument(1);
  if (!((mul.getLhs() == a && mul.getRhs() == b) ||
        (mul.getLhs() == b && mul.getRhs() == a)))
    return std::nullopt;
  return generic;
}

/// Evaluates the elementwise expression `v` of `x` (and `u`) at a point by
/// interpreting the bodies of the all-parallel generics it is made of;
/// every generic visited goes into `ops`. std::nullopt where something else
/// (another tensor, an op the evaluator does not know) is reached.
class PointEvaluator {
public:
  PointEvaluator(Value x, Value u, RankedTensorType shape)
      : x(x), u(u), shape(shape) {}

  std::optional<double> eval(Value v, double xv, double uv,
                             SmallPtrSetImpl<Operation *> &ops, int depth = 0) {
    if (v == x)
      return xv;
    if (u && v == u)
      return uv;
    if (auto c = getConstantScalar(v))
      return c;
    auto generic = v.getDefiningOp<linalg::GenericOp>();
    if (depth > 16 || !generic || generic.getNumResults() != 1 ||
        generic.getNumReductionLoops() != 0 ||
        cast<RankedTensorType>(v.getType()) != shape)
      return std::nullopt;
    ops.insert(generic);
    Block &body = generic.getRegion().front();
    DenseMap<Value, double> values;
    for (OpOperand *in : generic.getDpsInputOperands()) {
      Value operand = in->get();
      std::optional<double> value;
      if (auto c = getConstantScalar(operand))
        value = c;
      else if (cast<RankedTensorType>(operand.getType()) == shape &&
               generic.getMatchingIndexingMap(in).isIdentity())
        value = eval(operand, xv, uv, ops, depth + 1);
      if (!value)
        return std::nullopt;
      values[body.getArgument(in->getOperandNumber())] = *value;
    }
    for (Operation &op : body.without_terminator()) {
      std::optional<double> r = evalScalar(op, values);
      if (!r)
        return std::nullopt;
      values[op.getResult(0)] = *r;
    }
    Value yielded = body.getTerminator()->getOperand(0);
    auto it = values.find(yielded);
    if (it == values.end())
      return std::nullopt;
    return it->second;
  }

private:
  static std::optional<double> evalScalar(Operation &op,
                                          const DenseMap<Value, double> &env) {
    if (op.getNumResults() != 1)
      return std::nullopt;
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      if (auto f = dyn_cast<FloatAttr>(c.getValue()))
        return f.getValueAsDouble();
      return std::nullopt;
    }
    SmallVector<double, 3> a;
    for (Value operand : op.getOperands()) {
      auto it = env.find(operand);
      if (it == env.end())
        return std::nullopt;
      a.push_back(it->second);
    }
    auto unary = [&](double (*f)(double)) -> std::optional<double> {
      return a.size() == 1 ? std::optional<double>(f(a[0])) : std::nullopt;
    };
    StringRef name = op.getName().getStringRef();
    if (isa<arith::SelectOp>(op))
      return a[0] != 0 ? a[1] : a[2];
    if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
      using P = arith::CmpFPredicate;
      switch (cmp.getPredicate()) {
      case P::OGT:
      case P::UGT:
        return a[0] > a[1];
      case P::OGE:
      case P::UGE:
        return a[0] >= a[1];
      case P::OLT:
      case P::ULT:
        return a[0] < a[1];
      case P::OLE:
      case P::ULE:
        return a[0] <= a[1];
      default:
        return std::nullopt;
      }
    }
    if (a.size() == 2) {
      if (name == "arith.addf")
        return a[0] + a[1];
      if (name == "arith.subf")
        return a[0] - a[1];
      if (name == "arith.mulf")
        return a[0] * a[1];
      if (name == "arith.divf")
        return a[0] / a[1];
      if (name == "arith.maximumf" || name == "arith.maxnumf")
        return std::max(a[0], a[1]);
      if (name == "arith.minimumf" || name == "arith.minnumf")
        return std::min(a[0], a[1]);
      if (name == "math.powf")
        return std::pow(a[0], a[1]);
      return std::nullopt;
    }
    if (name == "arith.negf")
      return a.size() == 1 ? std::optional<double>(-a[0]) : std::nullopt;
    if (name == "math.exp")
      return unary(std::exp);
    if (name == "math.tanh")
      return unary(std::tanh);
    if (name == "math.erf")
      return unary(std::erf);
    if (name == "math.sqrt")
      return unary(std::sqrt);
    if (name == "math.log")
      return unary(std::log);
    if (name == "math.absf")
      return unary(std::fabs);
    if (name == "math.rsqrt" && a.size() == 1)
      return 1.0 / std::sqrt(a[0]);
    return std::nullopt;
  }

  Value x, u;
  RankedTensorType shape;
};

/// The activations stp.moe knows, by name.
double activation(StringRef name, double x) {
  if (name == "silu")
    return x / (1 + std::exp(-x));
  if (name == "gelu")
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (name == "gelu_tanh")
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return x > 0 ? x : 0; // relu
}

/// The activation `h` computes from `x` (times `u` when `u` is set), found
/// by evaluating `h` at points where the candidates differ; every generic
/// of the expression goes into `ops`.
std::optional<StringRef> findActivation(Value h, Value x, Value u,
                                        SmallPtrSetImpl<Operation *> &ops) {
  static const double xs[] = {-2.5, -0.7, -0.1, 0.3, 1.2, 3.1};
  static const double us[] = {1.5, -0.8, 0.25, 2.0, -1.3, 0.9};
  PointEvaluator eval(x, u, cast<RankedTensorType>(x.getType()));
  SmallVector<double, 6> got;
  for (auto [xv, uv] : llvm::zip(xs, us)) {
    std::optional<double> r = eval.eval(h, xv, uv, ops);
    if (!r)
      return std::nullopt;
    got.push_back(*r);
  }
  for (StringRef name : {"silu", "gelu", "gelu_tanh", "relu"}) {
    bool same = true;
    for (auto [xv, uv, r] : llvm::zip(xs, us, got)) {
      double want = activation(name, xv) * (u ? uv : 1.0);
      same &= std::fabs(r - want) <= 1e-6 * std::max(1.0, std::fabs(want));
    }
    if (same)
      return name;
  }
  return std::nullopt;
}

/// Whether every op of `ops` has uses only inside `ops` or by `root`.
bool onlyUsedInside(const SmallPtrSetImpl<Operation *> &ops, Operation *root) {
  for (Operation *op : ops)
    for (Operation *user : op->getUsers())
      if (user != root && !ops.contains(user))
        return false;
  return true;
}

/// Rewrites one layer around `topk`; returns whether it did.
bool rewriteLayer(TopKOp topk) {
  // Router: softmax over the experts of tokens @ router.
  auto softmax = topk.getInput().getDefiningOp<linalg::SoftmaxOp>();
  if (!softmax || softmax.getDimension() != 1 || topk.getAxis() != 1 ||
      !topk.getLargest() || !softmax->hasOneUse() ||
      !topk.getValues().getType().getElementType().isF32())
    return false;
  std::optional<linalg::GenericOp> router =
      matchContraction(softmax.getInput());
  if (!router)
    return false;
  Value tokens = router->getDpsInputs()[0], routerW = router->getDpsInputs()[1];
  bool routerTransposed = false;
  if (hasMaps(*router, {{0, 2}, {1, 2}, {0, 1}}, {false, false, true}))
    routerTransposed = true; // router [E, D]
  else if (!hasMaps(*router, {{0, 2}, {2, 1}, {0, 1}}, {false, false, true}))
    return false;
  auto tokensType = cast<RankedTensorType>(tokens.getType());
  if (tokensType.getRank() != 2 || !tokensType.getElementType().isF32())
    return false;

  // Gates: scatter of v or v / sum(v) at the top-k indices into zeros.
  ScatterElementsOp scatter;
  for (Operation *user : topk.getIndices().getUsers())
    if (auto s = dyn_cast<ScatterElementsOp>(user))
      scatter = s;
  if (!scatter || scatter.getAxis() != 1 || scatter.getReduction() != "none" ||
      !isZeros(scatter.getData()) || !scatter->hasOneUse())
    return false;
  bool normalize = false;
  SmallPtrSet<Operation *, 16> ops = {softmax, *router, topk, scatter};
  if (scatter.getUpdates() != topk.getValues()) {
    std::optional<EwOp> div = matchEw(scatter.getUpdates(), "arith.divf");
    if (!div || div->operands.size() != 2 ||
        div->operands[0].tensor != topk.getValues() || !div->isFull(0))
      return false;
    auto sum = div->operands[1].tensor
                   ? div->operands[1].tensor.getDefiningOp<linalg::GenericOp>()
                   : linalg::GenericOp();
    if (!sum || sum.getNumDpsInputs() != 1 ||
        sum.getDpsInputs()[0] != topk.getValues() ||
        !isZeros(sum.getDpsInits()[0]) || sum.getNumLoops() != 2 ||
        sum.getNumReductionLoops() != 1 ||
        sum.getIteratorTypesArray()[1] != utils::IteratorType::reduction)
      return false;
    // A sum over dim 1 keeping it as a unit dim: maps (d0, d1) -> (d0, 0).
    auto maps = sum.getIndexingMapsArray();
    AffineMap keep = maps[1];
    if (!maps[0].isIdentity() || keep.getNumResults() != 2 ||
        keep.getResult(0) != getAffineDimExpr(0, sum.getContext()) ||
        keep.getResult(1) != getAffineConstantExpr(0, sum.getContext()))
      return false;
    Block &body = sum.getRegion().front();
    if (body.getOperations().size() != 2 || !isa<arith::AddFOp>(body.front()))
      return false;
    normalize = true;
    ops.insert(div->op);
    ops.insert(sum);
  }

  // Combine: sum over e of y * transpose(gates)[:, :, None].
  Value gatesT = scatter.getResult();
  auto transpose = dyn_cast<linalg::TransposeOp>(*gatesT.getUsers().begin());
  if (!transpose ||
      !llvm::equal(transpose.getPermutation(), ArrayRef<int64_t>{1, 0}) ||
      !transpose->hasOneUse())
    return false;
  auto expand = dyn_cast<tensor::ExpandShapeOp>(*transpose->getUsers().begin());
  if (!expand || expand.getResultType().getRank() != 3 ||
      expand.getResultType().getDimSize(2) != 1 || !expand->hasOneUse())
    return false;
  ops.insert(transpose);
  ops.insert(expand);
  Operation *weighOp = *expand->getUsers().begin();
  if (weighOp->getNumResults() != 1)
    return false;
  std::optional<EwOp> weigh = matchEw(weighOp->getResult(0), "arith.mulf");
  if (!weigh || weigh->operands.size() != 2 || !weigh->op->hasOneUse())
    return false;
  unsigned yIndex = weigh->operands[0].tensor == expand.getResult() ? 1 : 0;
  if (weigh->operands[1 - yIndex].tensor != expand.getResult() ||
      !weigh->isFull(yIndex))
    return false;
  ops.insert(weigh->op);
  auto combine = dyn_cast<linalg::GenericOp>(*weigh->op->getUsers().begin());
  if (!combine || combine.getNumDpsInputs() != 1 ||
      !isZeros(combine.getDpsInits()[0]) ||
      !hasMaps(combine, {{0, 1, 2}, {1, 2}}, {true, false, false}) ||
      combine.getRegion().front().getOperations().size() != 2 ||
      !isa<arith::AddFOp>(combine.getRegion().front().front()))
    return false;

  // Experts: y = h @ w_out, h = act(tokens @ w_in) (* tokens @ w_mul).
  Value y = weigh->operands[yIndex].tensor;
  std::optional<linalg::GenericOp> down = matchContraction(y);
  if (!down || !hasMaps(*down, {{0, 1, 3}, {0, 3, 2}, {0, 1, 2}},
                        {false, false, false, true}))
    return false;
  ops.insert(*down);
  Value h = down->getDpsInputs()[0], wOut = down->getDpsInputs()[1];
  // The contractions of the tokens with [E, D, F] weights that h reads.
  SmallVector<linalg::GenericOp, 2> ins;
  auto isExpertIn = [&](Operation *op) {
    auto c = matchContraction(op->getResult(0));
    return c && c->getDpsInputs()[0] == tokens &&
           hasMaps(*c, {{1, 3}, {0, 3, 2}, {0, 1, 2}},
                   {false, false, false, true});
  };
  for (Operation *user : tokens.getUsers())
    if (isa<linalg::GenericOp>(user) && user != *router && isExpertIn(user))
      ins.push_back(cast<linalg::GenericOp>(user));
  if (ins.empty() || ins.size() > 2)
    return false;
  Value wIn, wMul;
  StringRef act;
  SmallPtrSet<Operation *, 8> actOps;
  auto tryOrder = [&](linalg::GenericOp a, linalg::GenericOp b) {
    actOps.clear();
    std::optional<StringRef> found =
        findActivation(h, a.getResult(0), b ? b.getResult(0) : Value(), actOps);
    if (!found)
      return false;
    act = *found;
    wIn = a.getDpsInputs()[1];
    wMul = b ? b.getDpsInputs()[1] : Value();
    return true;
  };
  bool matched = ins.size() == 1
                     ? tryOrder(ins[0], {})
                     : tryOrder(ins[0], ins[1]) || tryOrder(ins[1], ins[0]);
  if (!matched)
    return false;
  ops.insert(actOps.begin(), actOps.end());
  for (linalg::GenericOp c : ins)
    ops.insert(c);
  if (!onlyUsedInside(ops, combine))
    return false;

  // The replacement, where the combine was, named after the layer: the
  // common scope of the router's and the combine's ONNX node names plus
  // "/moe" ("/model/layers.0/block_sparse_moe/moe"), within the combine's
  // location.
  OpBuilder b(combine);
  Location loc = combine.getLoc();
  auto routerName = router->getLoc()->findInstanceOf<NameLoc>();
  auto combineName = loc->findInstanceOf<NameLoc>();
  if (routerName && combineName) {
    StringRef a = routerName.getName().getValue(),
              c = combineName.getName().getValue();
    size_t common = 0;
    while (common < a.size() && common < c.size() && a[common] == c[common])
      ++common;
    size_t scope = a.take_front(common).rfind('/');
    std::string name =
        (scope == StringRef::npos ? "" : a.take_front(scope).str()) + "/moe";
    loc = NameLoc::get(b.getStringAttr(name), combineName.getChildLoc());
  }
  if (routerTransposed) {
    auto type = cast<RankedTensorType>(routerW.getType());
    Value init = tensor::EmptyOp::create(
        b, loc, ArrayRef<int64_t>{type.getDimSize(1), type.getDimSize(0)},
        type.getElementType());
    routerW = linalg::TransposeOp::create(b, loc, routerW, init,
                                          ArrayRef<int64_t>{1, 0})
                  .getResult()[0];
  }
  auto moe =
      MoEOp::create(b, loc, combine.getResult(0).getType(), tokens, routerW,
                    wIn, wMul, wOut, topk.getK(), normalize, act);
  combine.getResult(0).replaceAllUsesWith(moe.getResult());
  // Erase the dense layer, users first.
  ops.insert(combine);
  SmallVector<Operation *> order;
  for (Operation &op : *combine->getBlock())
    if (ops.contains(&op))
      order.push_back(&op);
  SmallVector<Operation *> inits;
  for (Operation *op : llvm::reverse(order)) {
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (!ops.contains(def))
          inits.push_back(def);
    op->erase();
  }
  // Their now unused inits (fills, empties, zero constants).
  for (size_t i = 0; i < inits.size(); ++i) {
    Operation *def = inits[i];
    if (!def || !def->use_empty() ||
        !isa<linalg::FillOp, tensor::EmptyOp, arith::ConstantOp>(def))
      continue;
    for (Value operand : def->getOperands())
      if (Operation *d = operand.getDefiningOp())
        inits.push_back(d);
    for (size_t j = i + 1; j < inits.size(); ++j)
      if (inits[j] == def)
        inits[j] = nullptr;
    def->erase();
  }
  return true;
}

} // namespace

int64_t stpar::stp::normalize::rewriteMoELayers(Operation *root) {
  SmallVector<TopKOp> candidates;
  root->walk([&](TopKOp topk) { candidates.push_back(topk); });
  int64_t rewritten = 0;
  for (TopKOp topk : candidates)
    rewritten += rewriteLayer(topk);
  return rewritten;
}
