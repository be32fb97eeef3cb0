//===- Linear.cpp - MatMul, Gemm, Einsum ------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Contractions become `linalg.generic`s whose indexing maps name every loop
// (batch, output and reduction dims), the iteration-space view the search
// partitions (../shared/DESIGN.md, "Iteration-space view of an operator").
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/StringExtras.h"

#include <cctype>
#include <map>

using namespace mlir;
using namespace stpar::onnximport;

namespace {

LogicalResult importMatMul(NodeContext &node) {
  Value a = node.input(0), b = node.input(1);
  if (!a || !b)
    return failure();
  FailureOr<Value> result = buildMatMul(node, a, b);
  if (failed(result))
    return failure();
  node.setOutput(0, *result);
  return success();
}

/// Gemm: Y = alpha * op(A) * op(B) + beta * C, op = optional transpose.
LogicalResult importGemm(NodeContext &node) {
  Value a = node.input(0), b = node.input(1);
  if (!a || !b)
    return failure();
  OpBuilder &builder = node.b();
  Location loc = node.loc();
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(b.getType());
  if (aType.getRank() != 2 || bType.getRank() != 2)
    return node.error() << "Gemm expects 2-D A and B, got " << aType
                        << " and " << bType;
  if (node.getInt("transA", 0))
    a = buildTranspose(builder, loc, a, {1, 0});
  if (node.getInt("transB", 0))
    b = buildTranspose(builder, loc, b, {1, 0});
  FailureOr<Value> product = buildMatMul(node, a, b);
  if (failed(product))
    return failure();
  Value y = *product;
  Type elem = aType.getElementType();
  float alpha = node.getFloat("alpha", 1.0f), beta = node.getFloat("beta", 1.0f);
  if (alpha != 1.0f)
    y = buildElementwise(builder, loc, y, elem,
                         [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                           return arith::MulFOp::create(
                               nb, l, args[0], scalarConstant(nb, l, elem, alpha));
                         });
  if (node.hasInput(2) && beta != 0.0f) {
    Value c = node.input(2);
    auto yShape = cast<RankedTensorType>(y.getType()).getShape();
    auto merged =
        broadcastShapes(yShape, cast<RankedTensorType>(c.getType()).getShape());
    if (!merged || ArrayRef<int64_t>(*merged) != yShape)
      return node.error() << "C " << c.getType()
                          << " does not broadcast to the product " << y.getType();
    y = buildElementwise(builder, loc, {y, c}, elem,
                         [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                           Value cv = args[1];
                           if (beta != 1.0f)
                             cv = arith::MulFOp::create(
                                 nb, l, cv, scalarConstant(nb, l, elem, beta));
                           return arith::AddFOp::create(nb, l, args[0], cv);
                         });
  }
  node.setOutput(0, y);
  return success();
}

/// Einsum (ONNX Einsum-12): explicit (`ij,jk->ik`) or implicit (`ij,jk`:
/// the output is the letters used once, in alphabetical order) outputs,
/// `...` for broadcast dims, repeated letters in one term for diagonals.
LogicalResult importEinsum(NodeContext &node) {
  std::string equation = node.getString("equation", "");
  equation.erase(std::remove(equation.begin(), equation.end(), ' '),
                 equation.end());
  size_t arrow = equation.find("->");
  SmallVector<StringRef> rawTerms;
  StringRef(equation).take_front(arrow).split(rawTerms, ',');
  if (rawTerms.size() != node.numInputs())
    return node.error() << "equation '" << equation << "' has "
                        << rawTerms.size() << " operands but the node has "
                        << node.numInputs() << " inputs";
  // Expand `...` into fresh upper-case letters, right-aligned as numpy
  // broadcasting aligns the dims it stands for.
  std::string ellipsisLetters;
  SmallVector<std::string> terms;
  for (auto [i, raw] : llvm::enumerate(rawTerms)) {
    Value v = node.input(i);
    if (!v)
      return failure();
    int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
    size_t dots = raw.find("...");
    if (dots == StringRef::npos) {
      terms.push_back(raw.str());
      continue;
    }
    int64_t explicitDims = raw.size() - 3;
    int64_t broadcastDims = rank - explicitDims;
    if (broadcastDims < 0)
      return node.error() << "term '" << raw << "' has more letters than "
                          << "operand " << i << " has dims";
    while (static_cast<int64_t>(ellipsisLetters.size()) < broadcastDims)
      ellipsisLetters.insert(ellipsisLetters.begin(),
                             static_cast<char>('Z' - ellipsisLetters.size()));
    std::string mine = ellipsisLetters.substr(ellipsisLetters.size() -
                                              broadcastDims);
    terms.push_back(raw.substr(0, dots).str() + mine +
                    raw.substr(dots + 3).str());
  }
  std::string outTermStr;
  if (arrow != std::string::npos) {
    StringRef out = StringRef(equation).drop_front(arrow + 2);
    size_t dots = out.find("...");
    outTermStr = dots == StringRef::npos
                     ? out.str()
                     : out.substr(0, dots).str() + ellipsisLetters +
                           out.substr(dots + 3).str();
  } else {
    // Implicit output: broadcast dims first, then letters used once, sorted.
    std::map<char, int> uses;
    for (const std::string &term : terms)
      for (char c : term)
        ++uses[c];
    outTermStr = ellipsisLetters;
    for (auto [c, count] : uses)
      if (count == 1 && ellipsisLetters.find(c) == std::string::npos &&
          std::islower(static_cast<unsigned char>(c)))
        outTermStr.push_back(c);
  }
  StringRef outTerm = outTermStr;
  for (auto [i, term] : llvm::enumerate(terms))
    if (static_cast<int64_t>(term.size()) !=
        cast<RankedTensorType>(node.input(i).getType()).getRank())
      return node.error() << "operand " << i << " term '" << rawTerms[i]
                          << "' does not match its rank";
  // Loop dims: output letters first (parallel), then the others (reduction).
  std::string letters(outTerm);
  for (StringRef term : terms)
    for (char c : term)
      if (letters.find(c) == std::string::npos)
        letters.push_back(c);
  SmallVector<int64_t> extents(letters.size(), -1);
  SmallVector<Value> inputs;
  for (auto [i, termStr] : llvm::enumerate(terms)) {
    StringRef term = termStr;
    Value v = node.input(i);
    if (!v)
      return failure();
    auto type = cast<RankedTensorType>(v.getType());
    for (auto [d, c] : llvm::enumerate(term)) {
      int64_t &extent = extents[letters.find(c)];
      int64_t size = type.getDimSize(d);
      if (extent >= 0 && extent != size && extent != 1 && size != 1)
        return node.error() << "letter '" << c << "' has sizes " << extent
                            << " and " << size;
      extent = std::max(extent, size);
    }
    inputs.push_back(v);
  }
  MLIRContext *ctx = node.ctx();
  SmallVector<AffineMap> maps;
  for (auto [i, termStr] : llvm::enumerate(terms)) {
    StringRef term = termStr;
    auto type = cast<RankedTensorType>(inputs[i].getType());
    SmallVector<AffineExpr> exprs;
    for (auto [d, c] : llvm::enumerate(term)) {
      int64_t loop = letters.find(c);
      exprs.push_back(type.getDimSize(d) == 1 && extents[loop] != 1
                          ? getAffineConstantExpr(0, ctx)
                          : getAffineDimExpr(loop, ctx));
    }
    maps.push_back(AffineMap::get(letters.size(), 0, exprs, ctx));
  }
  for (auto [d, c] : llvm::enumerate(outTerm))
    if (extents[d] < 0)
      return node.error() << "output letter '" << c
                          << "' appears in no operand of '" << equation << "'";
  SmallVector<int64_t> outShape;
  SmallVector<AffineExpr> outExprs;
  for (auto [d, c] : llvm::enumerate(outTerm)) {
    outShape.push_back(extents[d]);
    outExprs.push_back(getAffineDimExpr(d, ctx));
  }
  maps.push_back(AffineMap::get(letters.size(), 0, outExprs, ctx));
  SmallVector<utils::IteratorType> iterators;
  for (size_t i = 0; i < letters.size(); ++i)
    iterators.push_back(i < outTerm.size() ? utils::IteratorType::parallel
                                           : utils::IteratorType::reduction);
  Type elem = cast<RankedTensorType>(inputs[0].getType()).getElementType();
  bool isFloat = isa<FloatType>(elem);
  Value init = buildFilled(node.b(), node.loc(), outShape, elem, 0.0);
  auto generic = linalg::GenericOp::create(
      node.b(), node.loc(), TypeRange{init.getType()}, inputs, ValueRange{init},
      maps, iterators, [&](OpBuilder &b, Location loc, ValueRange args) {
        Value product = args[0];
        for (Value v : args.drop_front().drop_back())
          product = isFloat ? arith::MulFOp::create(b, loc, product, v).getResult()
                            : arith::MulIOp::create(b, loc, product, v).getResult();
        Value sum = isFloat
                        ? arith::AddFOp::create(b, loc, args.back(), product)
                              .getResult()
                        : arith::AddIOp::create(b, loc, args.back(), product)
                              .getResult();
        linalg::YieldOp::create(b, loc, sum);
      });
  node.setOutput(0, generic.getResult(0));
  return success();
}

} // namespace

void stpar::onnximport::registerLinearHandlers(HandlerRegistry &r) {
  r.add("", "MatMul", 1, importMatMul);
  r.add("", "Gemm", 7, importGemm);
  r.add("", "Einsum", 12, importEinsum);
}
