//===- STPOps.cpp - stp graph ops -------------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Verifiers of the stp graph ops.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace stpar::stp;

void STPDialect::registerOps() {
  addOperations<
#define GET_OP_LIST
#include "stpar/Dialect/STP/IR/STPOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "stpar/Dialect/STP/IR/STPOps.cpp.inc"

/// Checks a normalization's axis and that `scale` (and `bias`) broadcast
/// against the normalized dims `axis .. rank-1` of `input`.
static LogicalResult verifyNorm(Operation *op, RankedTensorType input,
                                int64_t axis, ArrayRef<Value> params,
                                Type result) {
  if (input != result)
    return op->emitOpError("result type must equal the input type");
  if (!isa<FloatType>(input.getElementType()))
    return op->emitOpError("input must be a tensor of floats");
  int64_t rank = input.getRank();
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis << " out of range for rank "
                             << rank;
  ArrayRef<int64_t> normalized = input.getShape().drop_front(axis);
  for (Value param : params) {
    auto type = cast<RankedTensorType>(param.getType());
    if (type.getRank() > static_cast<int64_t>(normalized.size()))
      return op->emitOpError() << "scale/bias of rank " << type.getRank()
                               << " cannot broadcast to the "
                               << normalized.size() << " normalized dims";
    ArrayRef<int64_t> tail = normalized.take_back(type.getRank());
    for (auto [have, want] : llvm::zip(type.getShape(), tail))
      if (have != 1 && have != want)
        return op->emitOpError()
               << "scale/bias shape " << type << " does not broadcast to the "
               << "normalized dims of " << input;
  }
  return success();
}

LogicalResult LayerNormOp::verify() {
  SmallVector<Value> params = {getScale()};
  if (getBias())
    params.push_back(getBias());
  return verifyNorm(*this, getInput().getType(), getAxis(), params,
                    getResult().getType());
}

LogicalResult RMSNormOp::verify() {
  return verifyNorm(*this, getInput().getType(), getAxis(), {getScale()},
                    getResult().getType());
}

LogicalResult AttentionOp::verify() {
  auto q = getQuery().getType(), k = getKey().getType(),
       v = getValue().getType(), r = getResult().getType();
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4 ||
      r.getRank() != 4)
    return emitOpError("query, key, value and result must have rank 4 "
                       "[batch, heads, seq, head_dim]");
  if (q.getDimSize(0) != k.getDimSize(0) || k.getDimSize(0) != v.getDimSize(0))
    return emitOpError("query, key and value must have the same batch size");
  if (q.getDimSize(3) != k.getDimSize(3))
    return emitOpError("query and key must have the same head dim");
  if (k.getDimSize(1) != v.getDimSize(1) || k.getDimSize(2) != v.getDimSize(2))
    return emitOpError("key and value must have the same heads and length");
  int64_t hq = q.getDimSize(1), hkv = k.getDimSize(1);
  if (hkv <= 0 || hq % hkv != 0)
    return emitOpError() << "query heads (" << hq
                         << ") must be a multiple of key/value heads (" << hkv
                         << ")";
  SmallVector<int64_t> expected = {q.getDimSize(0), hq, q.getDimSize(2),
                                   v.getDimSize(3)};
  if (r.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result must be [batch, query heads, query length, "
                       "value head dim]");
  return success();
}

LogicalResult TopKOp::verify() {
  auto input = getInput().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= input.getRank())
    return emitOpError() << "axis " << axis << " out of range";
  // I64Attr getters are unsigned: read the values as signed.
  int64_t k = static_cast<int64_t>(getK());
  if (k < 0 || k > input.getDimSize(axis))
    return emitOpError() << "k = " << k << " exceeds the axis size "
                         << input.getDimSize(axis);
  SmallVector<int64_t> shape(input.getShape());
  shape[axis] = getK();
  if (getValues().getType().getShape() != ArrayRef<int64_t>(shape) ||
      getIndices().getType().getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("results must have the input shape with k at axis");
  if (!getIndices().getType().getElementType().isInteger(64))
    return emitOpError("indices must be i64");
  return success();
}

LogicalResult ScatterElementsOp::verify() {
  auto data = getData().getType();
  if (getResult().getType() != data)
    return emitOpError("result type must equal the data type");
  if (getIndices().getType().getShape() != getUpdates().getType().getShape())
    return emitOpError("indices and updates must have the same shape");
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < 0 || axis >= data.getRank())
    return emitOpError() << "axis " << axis << " out of range";
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"},
                          getReduction()))
    return emitOpError() << "unknown reduction '" << getReduction()
                         << "' (expected none, add, mul, max or min)";
  return success();
}

LogicalResult GridPermuteOp::verify() {
  ArrayRef<int16_t> axes = getGridAxes();
  if (axes.empty())
    return emitOpError("needs at least one grid axis");
  for (auto [i, a] : llvm::enumerate(axes))
    if (a < 0 || llvm::is_contained(axes.take_front(i), a))
      return emitOpError() << "grid axis " << a
                           << " is negative or listed twice";
  ArrayRef<int64_t> sources = getSources();
  SmallVector<bool> seen(sources.size(), false);
  for (int64_t s : sources) {
    if (s < 0 || s >= static_cast<int64_t>(sources.size()) || seen[s])
      return emitOpError("sources must be a permutation of 0 .. ")
             << static_cast<int64_t>(sources.size()) - 1;
    seen[s] = true;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

bool stpar::stp::isMoEActivation(StringRef name) {
  return name == "silu" || name == "gelu" || name == "gelu_tanh" ||
         name == "relu";
}

/// Checks `type` has rank `rank` and, where `dims` gives a size >= 0, that
/// size; `what` names the operand.
static LogicalResult checkShape(Operation *op, Type type, StringRef what,
                                ArrayRef<int64_t> dims) {
  auto t = cast<RankedTensorType>(type);
  if (t.getRank() != static_cast<int64_t>(dims.size()))
    return op->emitOpError()
           << what << " must have rank " << dims.size() << ", got " << t;
  for (auto [d, want] : llvm::enumerate(dims))
    if (want >= 0 && t.getDimSize(d) != want)
      return op->emitOpError()
             << what << " dim " << d << " must be " << want << ", got " << t;
  return success();
}

/// The expert weights of stp.moe and stp.moe_experts: w_in (and w_mul)
/// [E, D, F], w_out [E, F, D].
static LogicalResult verifyExpertWeights(Operation *op, int64_t e, int64_t d,
                                         Value wIn, Value wMul, Value wOut,
                                         StringRef activation) {
  if (!isMoEActivation(activation))
    return op->emitOpError() << "activation must be silu, gelu, gelu_tanh or "
                                "relu, got '"
                             << activation << "'";
  if (failed(checkShape(op, wIn.getType(), "w_in", {e, d, -1})))
    return failure();
  int64_t f = cast<RankedTensorType>(wIn.getType()).getDimSize(2);
  if (wMul && failed(checkShape(op, wMul.getType(), "w_mul", {e, d, f})))
    return failure();
  return checkShape(op, wOut.getType(), "w_out", {e, f, d});
}

/// The operands of a whole MoE layer (stp.moe and its gradient): tokens
/// [N, D], router [D, E], 1 <= top_k <= E, the expert weights.
static LogicalResult verifyMoELayer(Operation *op, Value tokens, Value router,
                                    Value wIn, Value wMul, Value wOut,
                                    uint64_t topK, StringRef activation) {
  auto t = cast<RankedTensorType>(tokens.getType());
  if (failed(checkShape(op, t, "tokens", {-1, -1})))
    return failure();
  int64_t d = t.getDimSize(1);
  if (failed(checkShape(op, router.getType(), "router", {d, -1})))
    return failure();
  int64_t e = cast<RankedTensorType>(router.getType()).getDimSize(1);
  if (static_cast<int64_t>(topK) < 1 || static_cast<int64_t>(topK) > e)
    return op->emitOpError()
           << "top_k must be in [1, " << e << "], got " << topK;
  return verifyExpertWeights(op, e, d, wIn, wMul, wOut, activation);
}

LogicalResult MoEOp::verify() {
  if (failed(verifyMoELayer(*this, getTokens(), getRouter(), getWIn(),
                            getWMul(), getWOut(), getTopK(), getActivation())))
    return failure();
  auto tokens = getTokens().getType();
  return checkShape(*this, getResult().getType(), "result",
                    {tokens.getDimSize(0), tokens.getDimSize(1)});
}

LogicalResult MoERouteOp::verify() {
  auto tokens = getTokens().getType();
  if (failed(checkShape(*this, tokens, "tokens", {-1, -1})))
    return failure();
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1);
  if (failed(checkShape(*this, getRouter().getType(), "router", {d, -1})))
    return failure();
  int64_t e = getRouter().getType().getDimSize(1),
          k = static_cast<int64_t>(getTopK());
  if (k < 1 || k > e)
    return emitOpError() << "top_k must be in [1, " << e << "], got " << k;
  if (failed(checkShape(*this, getGates().getType(), "gates", {n, k})) ||
      failed(checkShape(*this, getExperts().getType(), "experts", {n, k})))
    return failure();
  if (!getExperts().getType().getElementType().isInteger(64))
    return emitOpError("experts must be a tensor of i64");
  return success();
}

LogicalResult MoEDispatchOp::verify() {
  auto tokens = getTokens().getType();
  if (failed(checkShape(*this, tokens, "tokens", {-1, -1})))
    return failure();
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1);
  if (failed(checkShape(*this, getExperts().getType(), "experts", {n, -1})) ||
      failed(checkShape(*this, getBuffer().getType(), "buffer", {-1, -1, d})))
    return failure();
  int64_t e = getBuffer().getType().getDimSize(0);
  int64_t k = getExperts().getType().getDimSize(1);
  if (failed(checkShape(*this, getCounts().getType(), "counts", {e, 1})) ||
      failed(checkShape(*this, getSlots().getType(), "slots", {n, k})))
    return failure();
  for (Value v : {getExperts(), getCounts(), getSlots()})
    if (!cast<RankedTensorType>(v.getType()).getElementType().isInteger(64))
      return emitOpError("experts, counts and slots must be tensors of i64");
  if (getWeights() &&
      failed(checkShape(*this, getWeights().getType(), "weights", {n, k})))
    return failure();
  return success();
}

/// The rows and weights of stp.moe_experts(_grad): `buffer [El, S, D]`,
/// `counts [El, P]` (i64, P dividing S), the experts' weights.
static LogicalResult verifyExpertRows(Operation *op, RankedTensorType buffer,
                                      Value counts, Value wIn, Value wMul,
                                      Value wOut, StringRef activation) {
  if (failed(checkShape(op, buffer, "buffer", {-1, -1, -1})))
    return failure();
  int64_t e = buffer.getDimSize(0), s = buffer.getDimSize(1),
          d = buffer.getDimSize(2);
  auto countsType = cast<RankedTensorType>(counts.getType());
  if (failed(checkShape(op, countsType, "counts", {e, -1})))
    return failure();
  int64_t p = countsType.getDimSize(1);
  if (p < 1 || s % p != 0)
    return op->emitOpError()
           << "buffer rows (" << s << ") must split evenly into the " << p
           << " segments of counts";
  if (!countsType.getElementType().isInteger(64))
    return op->emitOpError("counts must be a tensor of i64");
  return verifyExpertWeights(op, e, d, wIn, wMul, wOut, activation);
}

/// The kept pre-activation products of stp.moe_experts(_grad): none, or
/// A (and U when gated), each [El, S, Fl] of the buffer's element type.
static LogicalResult verifyHidden(Operation *op, TypeRange hidden,
                                  RankedTensorType buffer, Value wIn,
                                  Value wMul) {
  if (hidden.empty())
    return success();
  size_t want = wMul ? 2 : 1;
  if (hidden.size() != want)
    return op->emitOpError()
           << "hidden must be empty or hold " << want << " tensor(s) (A"
           << (wMul ? " and U" : "") << "), got " << hidden.size();
  auto w = cast<RankedTensorType>(wIn.getType());
  auto type = RankedTensorType::get(
      {buffer.getDimSize(0), buffer.getDimSize(1), w.getDimSize(2)},
      buffer.getElementType());
  for (Type t : hidden)
    if (t != type)
      return op->emitOpError()
             << "hidden tensors must be " << type << ", got " << t;
  return success();
}

LogicalResult MoEExpertsOp::verify() {
  auto buffer = getBuffer().getType();
  if (failed(verifyExpertRows(*this, buffer, getCounts(), getWIn(), getWMul(),
                              getWOut(), getActivation())))
    return failure();
  if (getResult().getType() != buffer)
    return emitOpError("result type must equal the buffer type");
  return verifyHidden(*this, getHidden().getTypes(), buffer, getWIn(),
                      getWMul());
}

LogicalResult MoEGradOp::verify() {
  if (failed(verifyMoELayer(*this, getTokens(), getRouter(), getWIn(),
                            getWMul(), getWOut(), getTopK(), getActivation())))
    return failure();
  auto tokens = getTokens().getType();
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1);
  if (bool(getWMul()) != bool(getDWMul()))
    return emitOpError("d_w_mul must be present exactly when w_mul is");
  for (auto [grad, of] : {std::pair{getDTokens(), getTokens()},
                          {getDRouter(), getRouter()},
                          {getDWIn(), getWIn()},
                          {getDWMul(), getWMul()},
                          {getDWOut(), getWOut()}})
    if (grad && grad.getType() != of.getType())
      return emitOpError("each gradient must have its operand's type");
  if (failed(checkShape(*this, getDy().getType(), "dy", {n, d})) ||
      failed(checkShape(*this, getForward().getType(), "forward", {n, d})))
    return failure();
  return success();
}

LogicalResult MoEExpertsGradOp::verify() {
  auto buffer = getBuffer().getType();
  if (failed(verifyExpertRows(*this, buffer, getCounts(), getWIn(), getWMul(),
                              getWOut(), getActivation())))
    return failure();
  if (getDOut().getType() != buffer || getDRows().getType() != buffer)
    return emitOpError("d_out and d_rows must have the buffer's type");
  if (bool(getWMul()) != bool(getDWMul()))
    return emitOpError("d_w_mul must be present exactly when w_mul is");
  if (getDWIn().getType() != getWIn().getType() ||
      getDWOut().getType() != getWOut().getType() ||
      (getWMul() && getDWMul().getType() != getWMul().getType()))
    return emitOpError("each weight gradient must have its weight's type");
  return verifyHidden(*this, getHidden().getTypes(), buffer, getWIn(),
                      getWMul());
}

LogicalResult MoEGateGradOp::verify() {
  auto outputs = getOutputs().getType();
  if (failed(checkShape(*this, outputs, "outputs", {-1, -1, -1})))
    return failure();
  auto slots = getSlots().getType();
  if (failed(checkShape(*this, slots, "slots", {-1, -1})))
    return failure();
  int64_t n = slots.getDimSize(0), k = slots.getDimSize(1);
  if (failed(checkShape(*this, getExperts().getType(), "experts", {n, k})) ||
      failed(checkShape(*this, getDy().getType(), "dy",
                        {n, outputs.getDimSize(2)})) ||
      failed(checkShape(*this, getResult().getType(), "result", {n, k})))
    return failure();
  return success();
}

LogicalResult MoERouteGradOp::verify() {
  auto tokens = getTokens().getType();
  if (failed(checkShape(*this, tokens, "tokens", {-1, -1})))
    return failure();
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1);
  if (failed(checkShape(*this, getRouter().getType(), "router", {d, -1})) ||
      failed(checkShape(*this, getExperts().getType(), "experts", {n, -1})))
    return failure();
  int64_t e = getRouter().getType().getDimSize(1),
          k = getExperts().getType().getDimSize(1);
  if (k < 1 || k > e)
    return emitOpError() << "experts must hold 1 to " << e
                         << " choices per token, got " << k;
  if (failed(checkShape(*this, getDGates().getType(), "d_gates", {n, k})) ||
      getDTokens().getType() != tokens ||
      getDRouter().getType() != getRouter().getType())
    return emitOpError("d_tokens and d_router must have the types of tokens "
                       "and router");
  return success();
}

LogicalResult MoECombineOp::verify() {
  auto outputs = getOutputs().getType();
  if (failed(checkShape(*this, outputs, "outputs", {-1, -1, -1})))
    return failure();
  auto gates = getGates().getType();
  if (failed(checkShape(*this, gates, "gates", {-1, -1})))
    return failure();
  int64_t n = gates.getDimSize(0), k = gates.getDimSize(1);
  if (failed(checkShape(*this, getSlots().getType(), "slots", {n, k})) ||
      failed(checkShape(*this, getExperts().getType(), "experts", {n, k})) ||
      failed(checkShape(*this, getResult().getType(), "result",
                        {n, outputs.getDimSize(2)})))
    return failure();
  return success();
}

/// The shadowed experts of stp.moe_shadow_broadcast / _reduce: ascending
/// indices below E, E a multiple of the El local experts of `local`.
static LogicalResult verifyShadowedExperts(Operation *op,
                                           RankedTensorType local,
                                           RankedTensorType shadow,
                                           int64_t numExperts,
                                           ArrayRef<int64_t> experts) {
  if (failed(checkShape(op, local, "local experts", {-1, -1, -1})))
    return failure();
  int64_t el = local.getDimSize(0);
  if (el < 1 || numExperts < el || numExperts % el != 0)
    return op->emitOpError()
           << "num_experts " << numExperts << " is not a multiple of the " << el
           << " local experts";
  if (experts.empty())
    return op->emitOpError("has no shadowed experts");
  for (auto [i, e] : llvm::enumerate(experts))
    if (e < 0 || e >= numExperts || (i > 0 && e <= experts[i - 1]))
      return op->emitOpError() << "experts must ascend and lie in [0, "
                               << numExperts << "), got " << e;
  return checkShape(
      op, shadow, "shadowed experts",
      {int64_t(experts.size()), local.getDimSize(1), local.getDimSize(2)});
}

LogicalResult MoEShadowBroadcastOp::verify() {
  if (getWeights().getType().getElementType() !=
      getResult().getType().getElementType())
    return emitOpError("weights and result differ in element type");
  return verifyShadowedExperts(*this, getWeights().getType(),
                               getResult().getType(), getNumExperts(),
                               getExperts());
}

LogicalResult MoEShadowReduceOp::verify() {
  if (getLocal().getType() != getResult().getType())
    return emitOpError("result must have the type of local");
  if (getPartial().getType().getElementType() !=
      getLocal().getType().getElementType())
    return emitOpError("partial and local differ in element type");
  return verifyShadowedExperts(*this, getLocal().getType(),
                               getPartial().getType(), getNumExperts(),
                               getExperts());
}

LogicalResult MoEAllToAllOp::verify() {
  auto in = getRows().getType(), out = getResultRows().getType();
  if (failed(checkShape(*this, in, "rows", {-1, -1, -1})) ||
      failed(checkShape(*this, out, "result rows", {-1, -1, in.getDimSize(2)})))
    return failure();
  // Dispatch [E, C, D] -> [El, P C, D]; return the other way.
  RankedTensorType whole = getReverse() ? out : in,
                   local = getReverse() ? in : out;
  int64_t e = whole.getDimSize(0), c = whole.getDimSize(1);
  int64_t el = local.getDimSize(0);
  if (el < 1 || e % el != 0 || local.getDimSize(1) != (e / el) * c)
    return emitOpError() << "rows " << whole << " and " << local
                         << " are not [E, C, D] and [E / P, P * C, D]";
  int64_t p = e / el;
  SmallVector<int64_t> wholeCounts = {e, 1}, localCounts = {el, p};
  if (failed(checkShape(*this, getCounts().getType(), "counts",
                        getReverse() ? localCounts : wholeCounts)) ||
      failed(checkShape(*this, getResultCounts().getType(), "result counts",
                        getReverse() ? wholeCounts : localCounts)))
    return failure();
  if (static_cast<int64_t>(getRoutedRows()) < 0)
    return emitOpError("routed_rows must not be negative");
  int64_t g = getGroupSize(), step = getStep();
  if (g < 0 || (g > 0 && p % g != 0))
    return emitOpError() << "group_size " << g << " does not divide the " << p
                         << " devices of the group";
  if (step < 0 || (g == 0 && step != 0) || (g > 0 && step >= p / g))
    return emitOpError() << "step " << step << " out of range for "
                         << (g ? p / g : 1) << " steps";
  int64_t l = getIntraNodeSize();
  if (l < 0 || (l > 0 && (l == 1 || l >= p || p % l != 0)))
    return emitOpError() << "intra_node_size " << l
                         << " is not a proper divisor of the " << p
                         << " devices of the group (0: a flat exchange)";
  if (getInit() && (!getReverse() || getInit().getType() != out))
    return emitOpError("init must be a return's earlier result (of the "
                       "result's type)");
  return success();
}
