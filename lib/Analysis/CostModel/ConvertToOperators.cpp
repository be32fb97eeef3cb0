//===- ConvertToOperators.cpp - imported IR to an operator graph -*- C++ -*-=//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Walks an imported func.func in program order and builds the
// OperatorGraph: tensors for values, views for free ops, operators for
// compute ops (loops and operand dims from indexing maps), then the
// transformer layers and layer kinds. docs/cost-model.md, "The IR route".
//
//===----------------------------------------------------------------------===//

#include "stpar/Analysis/CostModel.h"

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <set>

using namespace mlir;
using namespace stpar::cost;

namespace stpar::analysis {

double OperatorGraph::getParameterCount() const {
  llvm::StringSet<> seen;
  double count = 0;
  for (const GraphTensor &t : tensors) {
    if (t.kind != TensorKind::Parameter || !seen.insert(t.name).second)
      continue;
    double n = 1;
    for (int64_t d : t.shape)
      n *= double(d);
    count += n;
  }
  return count;
}

double OperatorGraph::getForwardFlops(unsigned i) const {
  const Operator &op = ops[i].op;
  if (op.kind == OpKind::Embedding)
    return 0;
  double points = 1;
  for (const LoopDim &l : op.loops)
    points *= double(l.extent);
  return op.flopsPerPoint * points;
}

namespace {

/// Builds the graph; one instance per conversion.
class Converter {
public:
  Converter(const ConversionOptions &options) : options(options) {}

  FailureOr<OperatorGraph> run(func::FuncOp func);

private:
  int64_t getElementBytes(Type type) const {
    Type elem = getElementTypeOrSelf(type);
    if (isa<FloatType>(elem))
      return options.fp32 ? 4 : 2;
    if (elem.isIndex())
      return 8;
    if (elem.isIntOrFloat())
      return std::max<int64_t>(1, int64_t(elem.getIntOrFloatBitWidth() / 8));
    return 4;
  }
  static bool isFloat(Type type) {
    return isa<FloatType>(getElementTypeOrSelf(type));
  }

  /// The tensor of `value`, created on first use (a constant or a value
  /// of an op the walk skipped is a Buffer).
  unsigned getTensor(Value value);
  unsigned addTensor(Value value, TensorKind kind, StringRef name);
  /// Records a free view `result` of `source`.
  void addView(Operation *op, Value source, Value result,
               std::vector<int> sourceDimOf);
  /// Adds an operator; its tensors' producers and gradients follow.
  void addOperator(GraphOperator gop, ArrayRef<Value> outputs);

  LogicalResult convertGeneric(linalg::GenericOp op);
  void convertSoftmax(linalg::SoftmaxOp op);
  void convertTranspose(linalg::TransposeOp op);
  void convertNorm(Operation *op, Value input, Value scale, Value bias,
                   int64_t axis, double flopsPerPoint);
  void convertAttention(stp::AttentionOp op);
  void convertMoE(stp::MoEOp op);
  void convertFallback(Operation *op, double flopsPerPoint, StringRef why);

  void findLayers();
  std::string getName(Operation *op);

  const ConversionOptions &options;
  OperatorGraph graph;
  llvm::DenseMap<Value, unsigned> tensorOf;
  unsigned counter = 0;
  /// Position of the op being converted in the function's entry block.
  int currentOp = -1;
};

std::string Converter::getName(Operation *op) {
  if (auto name = op->getLoc()->findInstanceOf<NameLoc>())
    return name.getName().str();
  return (op->getName().getStringRef() + "#" + Twine(counter++)).str();
}

unsigned Converter::addTensor(Value value, TensorKind kind, StringRef name) {
  GraphTensor t;
  auto type = cast<RankedTensorType>(value.getType());
  t.shape.assign(type.getShape().begin(), type.getShape().end());
  t.elementBytes = getElementBytes(type);
  t.kind = kind;
  t.name = name.str();
  t.parameterName = t.name;
  t.requiresGrad = kind == TensorKind::Parameter && isFloat(type);
  graph.tensors.push_back(std::move(t));
  unsigned id = unsigned(graph.tensors.size() - 1);
  tensorOf[value] = id;
  return id;
}

unsigned Converter::getTensor(Value value) {
  auto it = tensorOf.find(value);
  if (it != tensorOf.end())
    return it->second;
  std::string name = "const";
  if (Operation *def = value.getDefiningOp())
    name = getName(def);
  return addTensor(value, TensorKind::Buffer, name);
}

void Converter::addView(Operation *op, Value source, Value result,
                        std::vector<int> sourceDimOf) {
  unsigned src = getTensor(source);
  GraphTensor copy = graph.tensors[src];
  // A view of a parameter is still that parameter (tied weights, transposed
  // head weights); of anything else an activation.
  TensorKind kind =
      copy.kind == TensorKind::Activation ? TensorKind::Activation : copy.kind;
  if (copy.kind == TensorKind::GraphInput)
    kind = TensorKind::Buffer;
  unsigned id = addTensor(result, kind, getName(op));
  GraphTensor &t = graph.tensors[id];
  t.requiresGrad = copy.requiresGrad && isFloat(result.getType());
  t.parameterName = copy.parameterName;
  t.producerView = int(graph.views.size());
  if (copy.kind == TensorKind::Parameter)
    t.name = copy.name;
  std::vector<int> splitDimOf = sourceDimOf;
  graph.views.push_back({getName(op), src, id, std::move(sourceDimOf),
                         std::move(splitDimOf), currentOp});
}

void Converter::addOperator(GraphOperator gop, ArrayRef<Value> outputs) {
  bool grad = false;
  for (auto [i, operand] : llvm::enumerate(gop.op.operands)) {
    if (operand.role == OperandRole::Output)
      continue;
    const GraphTensor &t = graph.tensors[gop.tensors[i]];
    if (operand.role == OperandRole::Input)
      operand.needsGrad = t.requiresGrad;
    grad |= t.requiresGrad;
  }
  unsigned index = unsigned(graph.ops.size());
  for (auto [i, operand] : llvm::enumerate(gop.op.operands)) {
    if (operand.role != OperandRole::Output)
      continue;
    GraphTensor &t = graph.tensors[gop.tensors[i]];
    t.producerOp = int(index);
    t.requiresGrad = grad && t.kind == TensorKind::Activation;
  }
  // Integer and boolean results (masks, indices) carry no gradient.
  for (Value v : outputs)
    graph.tensors[tensorOf[v]].requiresGrad &= isFloat(v.getType());
  gop.sourceOp = currentOp;
  graph.ops.push_back(std::move(gop));
}

/// Operand dims from an indexing map: per result, the loop of a dim
/// expression, -1 for a constant; other expressions (non-projections) map
/// to the first loop they use (an approximation), reported via `inexact`.
static std::vector<int> getDimLoops(AffineMap map, bool &inexact) {
  std::vector<int> loops;
  for (AffineExpr e : map.getResults()) {
    if (auto d = dyn_cast<AffineDimExpr>(e)) {
      loops.push_back(int(d.getPosition()));
      continue;
    }
    if (isa<AffineConstantExpr>(e)) {
      loops.push_back(-1);
      continue;
    }
    inexact = true;
    int first = -1;
    e.walk([&](AffineExpr sub) {
      if (auto d = dyn_cast<AffineDimExpr>(sub); d && first < 0)
        first = int(d.getPosition());
    });
    loops.push_back(first);
  }
  return loops;
}

/// Whether `index` (a value in `body`) depends on tensor data: a block
/// argument of the body (an input element) or an element read by
/// tensor.extract, possibly through arithmetic; linalg.index, constants and
/// values captured from outside do not.
static bool dependsOnData(Value index, Block *body) {
  SmallVector<Value> work{index};
  llvm::SmallPtrSet<Value, 8> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == body)
        return true;
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (!def || !body->getParentOp()->isAncestor(def) ||
        isa<linalg::IndexOp>(def))
      continue;
    if (isa<tensor::ExtractOp>(def))
      return true;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

static std::vector<unsigned> toDims(ArrayRef<int> loops) {
  std::vector<unsigned> dims;
  for (int l : loops)
    if (l >= 0)
      dims.push_back(unsigned(l));
  return dims;
}

static LoopDim makeLoop(unsigned i, int64_t extent, bool reduction) {
  return {"d" + std::to_string(i),
          extent,
          reduction ? LoopKind::Reduction : LoopKind::Parallel,
          {}};
}

LogicalResult Converter::convertGeneric(linalg::GenericOp op) {
  GraphOperator gop;
  Operator &o = gop.op;
  o.name = getName(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  for (auto [i, extent] : llvm::enumerate(ranges)) {
    if (ShapedType::isDynamic(extent))
      return op.emitError("cost model: dynamic loop range");
    o.loops.push_back(makeLoop(unsigned(i), extent,
                               iters[i] == utils::IteratorType::reduction));
  }
  bool inexact = false;
  auto addOperand = [&](Value v, std::vector<int> loops, OperandRole role) {
    unsigned t = getTensor(v);
    if (role == OperandRole::Input &&
        graph.tensors[t].kind == TensorKind::Parameter) {
      role = OperandRole::Parameter;
    }
    Operand operand;
    operand.name = role == OperandRole::Parameter
                       ? graph.tensors[t].parameterName
                       : graph.tensors[t].name;
    operand.role = role;
    operand.dims = toDims(loops);
    operand.elementBytes = graph.tensors[t].elementBytes;
    o.operands.push_back(std::move(operand));
    gop.tensors.push_back(t);
    gop.tensorDimLoops.push_back(std::move(loops));
  };
  for (OpOperand *in : op.getDpsInputOperands())
    addOperand(in->get(), getDimLoops(op.getMatchingIndexingMap(in), inexact),
               OperandRole::Input);

  // Gathers: tensor.extract in the body from a tensor defined outside.
  int64_t arithOps = 0;
  bool gathersParameter = false;
  for (Operation &bodyOp : op.getBody()->without_terminator()) {
    if (auto extract = dyn_cast<tensor::ExtractOp>(bodyOp)) {
      Value source = extract.getTensor();
      if (source.getParentRegion() == &op.getRegion())
        continue;
      auto type = cast<RankedTensorType>(source.getType());
      std::vector<int> loops;
      bool rowsLoop = false;
      for (auto [d, index] : llvm::enumerate(extract.getIndices())) {
        if (auto idx = index.getDefiningOp<linalg::IndexOp>()) {
          loops.push_back(int(idx.getDim()));
          continue;
        }
        // A data-dependent index: the gathered rows become a reduction loop
        // (as the vocabulary of GPTModel.h's embedding); one per op, the
        // extra loop -stp-partition knows. Any other index (computed from
        // the loops, as a reversed or strided Slice does, or a second data
        // index) reads the whole dim on every device, as -stp-partition
        // keeps such a source replicated.
        if (!rowsLoop && dependsOnData(index, op.getBody())) {
          rowsLoop = true;
          o.loops.push_back(makeLoop(unsigned(o.loops.size()),
                                     type.getDimSize(d), /*reduction=*/true));
          loops.push_back(int(o.loops.size() - 1));
          continue;
        }
        loops.push_back(-1);
      }
      unsigned t = getTensor(source);
      gathersParameter |= graph.tensors[t].kind == TensorKind::Parameter;
      addOperand(source, std::move(loops), OperandRole::Input);
      continue;
    }
    Dialect *dialect = bodyOp.getDialect();
    if (bodyOp.getNumResults() == 1 && isFloat(bodyOp.getResult(0).getType()) &&
        dialect &&
        (isa<arith::ArithDialect>(dialect) ||
         isa<math::MathDialect>(dialect)) &&
        !isa<arith::ConstantOp>(bodyOp))
      ++arithOps;
  }
  for (OpOperand &out : op.getDpsInitsMutable()) {
    addTensor(op.getTiedOpResult(&out), TensorKind::Activation, o.name);
    addOperand(op.getTiedOpResult(&out),
               getDimLoops(op.getMatchingIndexingMap(&out), inexact),
               OperandRole::Output);
  }
  if (inexact)
    graph.notes.push_back("'" + o.name +
                          "': an indexing map is not a projection; operand "
                          "sizes approximated by the first loop of each "
                          "expression");

  if (gathersParameter && op.getNumDpsInputs() == 1) {
    o.kind = OpKind::Embedding;
    o.flopsPerPoint = 0;
  } else if (linalg::isaContractionOpInterface(
                 cast<linalg::LinalgOp>(op.getOperation()))) {
    o.kind = OpKind::MatMul;
    o.flopsPerPoint = 2;
  } else {
    o.kind = OpKind::Elementwise;
    o.flopsPerPoint = double(arithOps);
  }
  SmallVector<Value> results(op->getResults());
  addOperator(std::move(gop), results);
  return success();
}

void Converter::convertSoftmax(linalg::SoftmaxOp op) {
  GraphOperator gop;
  Operator &o = gop.op;
  o.name = getName(op);
  o.kind = OpKind::Softmax;
  // max, subtract, exp, sum, divide (Milakov & Gimelshein 2018, Alg. 1).
  o.flopsPerPoint = 5;
  auto type = cast<RankedTensorType>(op.getInput().getType());
  std::vector<int> loops;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    o.loops.push_back(makeLoop(unsigned(d), type.getDimSize(d),
                               d == int64_t(op.getDimension())));
    loops.push_back(int(d));
  }
  unsigned in = getTensor(op.getInput());
  Value result = op->getResult(0);
  unsigned out = addTensor(result, TensorKind::Activation, o.name);
  o.operands = {{graph.tensors[in].name, OperandRole::Input, toDims(loops),
                 graph.tensors[in].elementBytes, true},
                {o.name, OperandRole::Output, toDims(loops),
                 graph.tensors[out].elementBytes, true}};
  gop.tensors = {in, out};
  gop.tensorDimLoops = {loops, loops};
  addOperator(std::move(gop), {result});
}

void Converter::convertTranspose(linalg::TransposeOp op) {
  ArrayRef<int64_t> perm = op.getPermutation();
  unsigned in = getTensor(op.getInput());
  // Result dim i is input dim perm[i].
  std::vector<int> sourceDimOf(perm.begin(), perm.end());
  if (graph.tensors[in].kind != TensorKind::Activation) {
    // Weights are transposed once, or read transposed by the GEMM: free.
    addView(op, op.getInput(), op.getResult()[0], sourceDimOf);
    return;
  }
  GraphOperator gop;
  Operator &o = gop.op;
  o.name = getName(op);
  o.kind = OpKind::Elementwise;
  o.flopsPerPoint = 0;
  auto type = cast<RankedTensorType>(op.getResult()[0].getType());
  std::vector<int> outLoops, inLoops(perm.size());
  for (int64_t d = 0; d < type.getRank(); ++d) {
    o.loops.push_back(makeLoop(unsigned(d), type.getDimSize(d), false));
    outLoops.push_back(int(d));
    inLoops[perm[d]] = int(d);
  }
  unsigned out = addTensor(op.getResult()[0], TensorKind::Activation, o.name);
  o.operands = {{graph.tensors[in].name, OperandRole::Input, toDims(inLoops),
                 graph.tensors[in].elementBytes, true},
                {o.name, OperandRole::Output, toDims(outLoops),
                 graph.tensors[out].elementBytes, true}};
  gop.tensors = {in, out};
  gop.tensorDimLoops = {inLoops, outLoops};
  addOperator(std::move(gop), {Value(op.getResult()[0])});
}

void Converter::convertNorm(Operation *op, Value input, Value scale, Value bias,
                            int64_t axis, double flopsPerPoint) {
  GraphOperator gop;
  Operator &o = gop.op;
  o.name = getName(op);
  o.kind = OpKind::Norm;
  o.flopsPerPoint = flopsPerPoint;
  auto type = cast<RankedTensorType>(input.getType());
  int64_t rank = type.getRank();
  std::vector<int> all;
  for (int64_t d = 0; d < rank; ++d) {
    o.loops.push_back(makeLoop(unsigned(d), type.getDimSize(d), d >= axis));
    all.push_back(int(d));
  }
  auto add = [&](Value v, std::vector<int> loops, OperandRole role) {
    unsigned t = getTensor(v);
    if (role == OperandRole::Input &&
        graph.tensors[t].kind == TensorKind::Parameter)
      role = OperandRole::Parameter;
    o.operands.push_back(
        {role == OperandRole::Parameter ? graph.tensors[t].parameterName
                                        : graph.tensors[t].name,
         role, toDims(loops), graph.tensors[t].elementBytes, true});
    gop.tensors.push_back(t);
    gop.tensorDimLoops.push_back(std::move(loops));
  };
  add(input, all, OperandRole::Input);
  for (Value p : {scale, bias}) {
    if (!p)
      continue;
    // Right-aligned broadcast against the input (unit dims are -1).
    auto pt = cast<RankedTensorType>(p.getType());
    std::vector<int> loops;
    for (int64_t d = 0; d < pt.getRank(); ++d) {
      int64_t loop = rank - pt.getRank() + d;
      loops.push_back(
          pt.getDimSize(d) == 1 && type.getDimSize(loop) != 1 ? -1 : int(loop));
    }
    add(p, loops, OperandRole::Input);
  }
  addTensor(op->getResult(0), TensorKind::Activation, o.name);
  add(op->getResult(0), all, OperandRole::Output);
  addOperator(std::move(gop), {Value(op->getResult(0))});
}

void Converter::convertAttention(stp::AttentionOp op) {
  // Loops as GPTModel.h: b, heads, q, k, d; three operators.
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  int64_t b = q.getDimSize(0), h = q.getDimSize(1), sq = q.getDimSize(2),
          d = q.getDimSize(3), dv = v.getDimSize(3);
  int64_t sk = cast<RankedTensorType>(op.getKey().getType()).getDimSize(2);
  std::string name = getName(op);
  unsigned qt = getTensor(op.getQuery()), kt = getTensor(op.getKey()),
           vt = getTensor(op.getValue());
  if (cast<RankedTensorType>(op.getKey().getType()).getDimSize(1) != h)
    graph.notes.push_back("'" + name +
                          "': grouped-query key/value heads costed as if "
                          "there were one per query head");
  int64_t bytes = getElementBytes(q);
  auto makeVirtual = [&](StringRef suffix) {
    GraphTensor t;
    t.name = name + suffix.str();
    t.parameterName = t.name;
    t.shape = {b, h, sq, sk};
    t.elementBytes = bytes;
    graph.tensors.push_back(std::move(t));
    return unsigned(graph.tensors.size() - 1);
  };
  auto operand = [&](unsigned t, OperandRole role, std::vector<int> loops) {
    return Operand{graph.tensors[t].name, role, toDims(loops),
                   graph.tensors[t].elementBytes, true};
  };
  // The partitioned program's stp.attention splits its batch and head
  // loops only (Partition.cpp, planAttention).
  auto loopsOf = [&](std::initializer_list<std::pair<int64_t, bool>> ls) {
    std::vector<LoopDim> loops;
    for (auto [extent, red] : ls) {
      loops.push_back(makeLoop(unsigned(loops.size()), extent, red));
      loops.back().splittable = loops.size() <= 2;
    }
    return loops;
  };

  unsigned scores = makeVirtual(".scores");
  GraphOperator s;
  s.attentionCore = true;
  s.op.name = name + ".scores";
  s.op.kind = OpKind::MatMul;
  s.op.flopsPerPoint = 2;
  s.op.loops =
      loopsOf({{b, false}, {h, false}, {sq, false}, {sk, false}, {d, true}});
  s.tensors = {qt, kt, scores};
  s.tensorDimLoops = {{0, 1, 2, 4}, {0, 1, 3, 4}, {0, 1, 2, 3}};
  s.op.operands = {operand(qt, OperandRole::Input, s.tensorDimLoops[0]),
                   operand(kt, OperandRole::Input, s.tensorDimLoops[1]),
                   operand(scores, OperandRole::Output, s.tensorDimLoops[2])};
  addOperator(std::move(s), {});

  unsigned probs = makeVirtual(".probs");
  GraphOperator p;
  p.attentionCore = true;
  p.op.name = name + ".softmax";
  p.op.kind = OpKind::Softmax;
  // scale, mask, max, subtract, exp, sum, divide.
  p.op.flopsPerPoint = 7;
  p.op.loops = loopsOf({{b, false}, {h, false}, {sq, false}, {sk, true}});
  p.tensors = {scores};
  p.tensorDimLoops = {{0, 1, 2, 3}};
  if (Value mask = op.getMask()) {
    auto mt = cast<RankedTensorType>(mask.getType());
    std::vector<int> loops;
    for (int64_t i = 0; i < mt.getRank(); ++i) {
      int64_t loop = 4 - mt.getRank() + i;
      loops.push_back(mt.getDimSize(i) == 1 ? -1 : int(loop));
    }
    p.tensors.push_back(getTensor(mask));
    p.tensorDimLoops.push_back(loops);
  }
  p.tensors.push_back(probs);
  p.tensorDimLoops.push_back({0, 1, 2, 3});
  for (auto [i, t] : llvm::enumerate(p.tensors))
    p.op.operands.push_back(operand(
        t, i + 1 == p.tensors.size() ? OperandRole::Output : OperandRole::Input,
        p.tensorDimLoops[i]));
  addOperator(std::move(p), {});

  unsigned out = addTensor(op.getResult(), TensorKind::Activation, name);
  GraphOperator c;
  c.attentionCore = true;
  c.op.name = name + ".context";
  c.op.kind = OpKind::MatMul;
  c.op.flopsPerPoint = 2;
  c.op.loops =
      loopsOf({{b, false}, {h, false}, {sq, false}, {dv, false}, {sk, true}});
  c.tensors = {probs, vt, out};
  c.tensorDimLoops = {{0, 1, 2, 4}, {0, 1, 4, 3}, {0, 1, 2, 3}};
  c.op.operands = {operand(probs, OperandRole::Input, c.tensorDimLoops[0]),
                   operand(vt, OperandRole::Input, c.tensorDimLoops[1]),
                   operand(out, OperandRole::Output, c.tensorDimLoops[2])};
  addOperator(std::move(c), {Value(op.getResult())});
}

void Converter::convertMoE(stp::MoEOp op) {
  // Two operators: the layer (OpKind::MoE, FasterMoE's model; its spec is
  // the op's) and the router's matmul. Loops of the layer as
  // GPTProblem.cpp's: tokens n, model dim h, experts e, expert hidden f.
  auto tokens = cast<RankedTensorType>(op.getTokens().getType());
  auto wIn = cast<RankedTensorType>(op.getWIn().getType());
  int64_t n = tokens.getDimSize(0), d = tokens.getDimSize(1),
          e = wIn.getDimSize(0), f = wIn.getDimSize(2);
  std::string name = getName(op);
  unsigned xt = getTensor(op.getTokens());
  auto operand = [&](unsigned t, OperandRole role, ArrayRef<int> loops) {
    if (role == OperandRole::Input &&
        graph.tensors[t].kind == TensorKind::Parameter)
      role = OperandRole::Parameter;
    return Operand{graph.tensors[t].name, role, toDims(loops),
                   graph.tensors[t].elementBytes, true};
  };

  GraphOperator layer;
  Operator &o = layer.op;
  o.name = name;
  o.kind = OpKind::MoE;
  o.layerKind = "mlp";
  o.loops = {makeLoop(0, n, false), makeLoop(1, d, false),
             makeLoop(2, e, false), makeLoop(3, f, false)};
  o.loops[0].name = "n";
  o.loops[1].name = "h";
  o.loops[2].name = "e";
  o.loops[3].name = "f";
  // The model dim is never split; the experts only by expert parallelism
  // (Space.cpp), the expert hidden dim like any loop.
  o.loops[1].splittable = false;
  o.loops[2].splittable = false;
  MoESpec spec;
  spec.hiddenLoop = 1;
  spec.expertLoop = 2;
  spec.ffnLoop = 3;
  spec.topK = int64_t(op.getTopK());
  spec.ffnMatrices = op.getWMul() ? 3 : 2;
  // The generated program runs what the cost chooses (-stp-partition,
  // docs/moe.md): FasterMoE's smart scheduling (its group size) and
  // dynamic shadowing (its experts), BaGuaLu's hierarchical all-to-all.
  spec.smartSchedule = spec.hierarchical = spec.shadowing = true;
  // Its buffers have the no-drop bound (stp.moe_dispatch's C = the rank's
  // tokens): the plan charges them so.
  spec.staticBuffers = true;
  o.moe = std::move(spec);
  layer.tensors.push_back(xt);
  layer.tensorDimLoops.push_back({0, 1});
  for (Value w : {op.getWIn(), op.getWMul()}) {
    if (!w)
      continue;
    layer.tensors.push_back(getTensor(w));
    layer.tensorDimLoops.push_back({2, 1, 3});
  }
  layer.tensors.push_back(getTensor(op.getWOut()));
  layer.tensorDimLoops.push_back({2, 3, 1});
  unsigned out = addTensor(op.getResult(), TensorKind::Activation, name);
  layer.tensors.push_back(out);
  layer.tensorDimLoops.push_back({0, 1});
  for (auto [i, t] : llvm::enumerate(layer.tensors))
    o.operands.push_back(operand(t,
                                 i + 1 == layer.tensors.size()
                                     ? OperandRole::Output
                                     : OperandRole::Input,
                                 layer.tensorDimLoops[i]));
  addOperator(std::move(layer), {Value(op.getResult())});

  // The router: logits [n, e] = tokens [n, h] @ router [h, e], split over
  // the tokens only (the program runs it on each rank's tokens with the
  // router replicated).
  GraphTensor logits;
  logits.name = name + ".router_logits";
  logits.parameterName = logits.name;
  logits.shape = {n, e};
  logits.elementBytes = graph.tensors[xt].elementBytes;
  graph.tensors.push_back(std::move(logits));
  unsigned lt = unsigned(graph.tensors.size() - 1);
  GraphOperator router;
  router.op.name = name + ".router";
  router.op.kind = OpKind::MatMul;
  router.op.layerKind = "mlp";
  router.op.loops = {makeLoop(0, n, false), makeLoop(1, e, false),
                     makeLoop(2, d, true)};
  router.op.loops[1].splittable = false;
  router.op.loops[2].splittable = false;
  router.tensors = {xt, getTensor(op.getRouter()), lt};
  router.tensorDimLoops = {{0, 2}, {2, 1}, {0, 1}};
  for (auto [i, t] : llvm::enumerate(router.tensors))
    router.op.operands.push_back(
        operand(t, i == 2 ? OperandRole::Output : OperandRole::Input,
                router.tensorDimLoops[i]));
  addOperator(std::move(router), {});
}

void Converter::convertFallback(Operation *op, double flopsPerPoint,
                                StringRef why) {
  // Elementwise over the first result's shape; same-rank operands indexed
  // like it, others by their trailing dims.
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  GraphOperator gop;
  Operator &o = gop.op;
  o.name = getName(op);
  o.kind = OpKind::Elementwise;
  o.flopsPerPoint = flopsPerPoint;
  int64_t rank = type.getRank();
  for (int64_t d = 0; d < rank; ++d)
    o.loops.push_back(makeLoop(unsigned(d), type.getDimSize(d), false));
  auto add = [&](Value v, OperandRole role) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      return;
    std::vector<int> loops;
    for (int64_t d = 0; d < t.getRank(); ++d) {
      int64_t loop = rank - t.getRank() + d;
      loops.push_back(loop >= 0 && t.getDimSize(d) == type.getDimSize(loop)
                          ? int(loop)
                          : -1);
    }
    unsigned id = role == OperandRole::Output
                      ? addTensor(v, TensorKind::Activation, o.name)
                      : getTensor(v);
    if (role == OperandRole::Input &&
        graph.tensors[id].kind == TensorKind::Parameter)
      role = OperandRole::Parameter;
    o.operands.push_back({graph.tensors[id].name, role, toDims(loops),
                          graph.tensors[id].elementBytes, true});
    gop.tensors.push_back(id);
    gop.tensorDimLoops.push_back(std::move(loops));
  };
  for (Value v : op->getOperands())
    add(v, OperandRole::Input);
  SmallVector<Value> results(op->getResults());
  for (Value v : results)
    add(v, OperandRole::Output);
  if (!why.empty())
    graph.notes.push_back("'" + o.name + "' (" +
                          op->getName().getStringRef().str() +
                          "): " + why.str());
  addOperator(std::move(gop), results);
}

void Converter::findLayers() {
  // Segments between norms; a segment holding an attention core is the
  // attention half of a layer, which starts at the norm before it.
  std::vector<GraphOperator> &ops = graph.ops;
  unsigned n = unsigned(ops.size());
  // Attention cores of decomposed attention: a batched matmul (no
  // parameter), a softmax reading it (through elementwise ops), a batched
  // matmul reading the softmax.
  auto isBatchedMatMul = [&](const GraphOperator &g) {
    if (g.op.kind != OpKind::MatMul)
      return false;
    for (const Operand &o : g.op.operands)
      if (o.role == OperandRole::Parameter)
        return false;
    return true;
  };
  // Delimiters: norms, and the statistics of decomposed norms (a reduction
  // that is not a contraction, e.g. RMSNorm's ReduceMean before the
  // normalize pass fuses it).
  auto isDelimiter = [&](const GraphOperator &g) {
    if (g.op.kind == OpKind::Norm)
      return true;
    if (g.op.kind != OpKind::Elementwise)
      return false;
    for (const LoopDim &l : g.op.loops)
      if (l.kind == LoopKind::Reduction)
        return true;
    return false;
  };
  std::vector<unsigned> norms;
  for (unsigned i = 0; i < n; ++i)
    if (isDelimiter(ops[i]))
      norms.push_back(i);
  auto segmentOf = [&](unsigned i) {
    // Index of the last norm before op i (-1 if none).
    int s = -1;
    for (unsigned k = 0; k < norms.size() && norms[k] < i; ++k)
      s = int(k);
    return s;
  };
  // Mark softmaxes with batched matmuls in their segment.
  std::vector<bool> segmentHasCore(norms.size() + 1, false);
  std::vector<bool> segmentHasGemm(norms.size() + 1, false);
  std::vector<int64_t> segmentHeads(norms.size() + 1, 0);
  for (unsigned i = 0; i < n; ++i) {
    int seg = segmentOf(i) + 1;
    if (ops[i].op.kind == OpKind::MatMul)
      segmentHasGemm[seg] = true;
    if (ops[i].attentionCore)
      segmentHasCore[seg] = true;
  }
  for (unsigned i = 0; i < n; ++i) {
    if (ops[i].op.kind != OpKind::Softmax || ops[i].attentionCore)
      continue;
    int seg = segmentOf(i) + 1;
    bool before = false, after = false;
    for (unsigned j = 0; j < n; ++j)
      if (segmentOf(j) + 1 == seg && isBatchedMatMul(ops[j]))
        (j < i ? before : after) = true;
    if (!before || !after)
      continue;
    segmentHasCore[seg] = true;
    for (unsigned j = 0; j < n; ++j)
      if (segmentOf(j) + 1 == seg && isBatchedMatMul(ops[j]))
        ops[j].attentionCore = true;
    ops[i].attentionCore = true;
  }
  // Heads: the innermost batch loop (indexed by every operand, parallel) of
  // the segment's first batched matmul, when there are two or more batch
  // loops (b, heads, ...).
  for (unsigned i = 0; i < n; ++i) {
    int seg = segmentOf(i) + 1;
    if (!ops[i].attentionCore || !isBatchedMatMul(ops[i]) || segmentHeads[seg])
      continue;
    const Operator &o = ops[i].op;
    std::vector<unsigned> batch;
    for (unsigned l = 0; l < o.loops.size(); ++l) {
      if (o.loops[l].kind != LoopKind::Parallel)
        continue;
      bool all = true;
      for (const Operand &operand : o.operands)
        all &= llvm::is_contained(operand.dims, l);
      if (all)
        batch.push_back(l);
    }
    segmentHeads[seg] = batch.size() >= 2 ? o.loops[batch.back()].extent : 0;
  }

  // Layers: start at the norm before each attention segment (or the
  // segment's first op), end where the next layer starts; the last layer
  // ends at the last norm after it (the final norm), if any.
  std::vector<unsigned> starts;
  std::vector<int64_t> heads;
  for (unsigned seg = 0; seg <= norms.size(); ++seg) {
    if (!segmentHasCore[seg])
      continue;
    unsigned start = 0;
    if (seg > 0)
      start = norms[seg - 1];
    else
      for (unsigned i = 0; i < n; ++i)
        if (ops[i].op.kind != OpKind::Embedding) {
          start = i;
          break;
        }
    starts.push_back(start);
    heads.push_back(segmentHeads[seg]);
  }
  if (starts.empty()) {
    for (GraphOperator &g : ops)
      g.op.layerKind = g.op.kind == OpKind::Embedding ? "embedding"
                       : g.op.kind == OpKind::Norm    ? "norm"
                                                      : "other";
    return;
  }
  unsigned lastStart = starts.back();
  unsigned end = n;
  // The final norm: the last norm after the last layer's attention
  // segment whose segment after it holds no attention and sits after at
  // least one other segment of the layer.
  int lastSeg = -1;
  for (unsigned seg = 0; seg <= norms.size(); ++seg)
    if (segmentHasCore[seg])
      lastSeg = int(seg);
  if (!norms.empty() && norms.back() > lastStart &&
      unsigned(lastSeg) + 1 < norms.size())
    end = norms.back();
  for (unsigned l = 0; l < starts.size(); ++l) {
    GraphLayer layer;
    layer.begin = starts[l];
    layer.end = l + 1 < starts.size() ? starts[l + 1] : end;
    layer.heads = heads[l];
    graph.layers.push_back(layer);
  }

  // Layer kinds.
  for (unsigned i = 0; i < n; ++i) {
    Operator &o = ops[i].op;
    int seg = segmentOf(i) + 1;
    if (o.kind == OpKind::Norm)
      o.layerKind = "norm";
    else if (o.kind == OpKind::Embedding || i < starts.front())
      o.layerKind = "embedding";
    else if (i >= end)
      o.layerKind = "head";
    else if (segmentHasCore[seg])
      o.layerKind = "attention";
    else if (segmentHasGemm[seg])
      o.layerKind = "mlp";
    else
      o.layerKind = "other";
  }
  for (auto [l, layer] : llvm::enumerate(graph.layers))
    for (unsigned i = layer.begin; i < layer.end; ++i) {
      ops[i].layer = int(l);
      ops[i].op.recomputable = true;
      ops[i].op.checkpoint = i == layer.begin;
    }
  // Selective recomputation (cost::Operator::attentionCore): a core's
  // softmax re-runs and regenerates its outputs; a core matmul reading them
  // (the context) regenerates that input and does not re-run; the other
  // core matmul (QK^T) re-runs. Score-sized tensors of decomposed cores
  // that pass through elementwise ops between (scale, mask, dropout) stay
  // stashed (an overestimate).
  std::set<unsigned> probs;
  for (GraphOperator &g : ops)
    if (g.attentionCore && g.op.kind == OpKind::Softmax) {
      g.op.attentionCore = true;
      for (auto [j, o] : llvm::enumerate(g.op.operands))
        if (o.role == OperandRole::Output && j < g.tensors.size()) {
          o.selectiveRecomputed = true;
          probs.insert(g.tensors[j]);
        }
    }
  for (GraphOperator &g : ops) {
    if (!g.attentionCore || g.op.kind != OpKind::MatMul)
      continue;
    bool context = false;
    for (auto [j, o] : llvm::enumerate(g.op.operands))
      if (o.role == OperandRole::Input && j < g.tensors.size() &&
          probs.count(g.tensors[j])) {
        o.selectiveRecomputed = true;
        context = true;
      }
    g.op.attentionCore = !context;
  }
}

FailureOr<OperatorGraph> Converter::run(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !type.hasStaticShape())
      return func.emitError("cost model: argument #")
             << arg.getArgNumber() << " is not a statically shaped tensor";
    unsigned n = arg.getArgNumber();
    if (auto param = func.getArgAttrOfType<stp::ParamAttr>(n, "stp.param")) {
      bool trainable = param.getTrainable() && isFloat(type);
      addTensor(arg, trainable ? TensorKind::Parameter : TensorKind::Buffer,
                param.getName().getValue());
      continue;
    }
    std::string name = "arg" + std::to_string(n);
    if (auto s = func.getArgAttrOfType<StringAttr>(n, "stp.name"))
      name = s.getValue().str();
    unsigned t = addTensor(arg, TensorKind::GraphInput, name);
    GraphTensor &gt = graph.tensors[t];
    if (type.getRank() > 0 &&
        (!options.batchSize || type.getDimSize(0) == *options.batchSize))
      gt.batchDim = 0;
  }

  for (Operation &op : func.getBody().front()) {
    ++currentOp;
    auto partitionable = dyn_cast<stp::PartitionableOpInterface>(op);
    stp::CostRule rule =
        partitionable ? partitionable.getCostRule() : stp::CostRule();
    if (rule.kind == stp::CostKind::Free || op.getNumResults() == 0)
      continue;
    for (Value r : op.getResults())
      if (auto t = dyn_cast<RankedTensorType>(r.getType());
          t && !t.hasStaticShape())
        return op.emitError("cost model: dynamic shape");
    if (!isa<RankedTensorType>(op.getResult(0).getType()))
      continue; // scalars (tensor.extract) are free
    switch (rule.kind) {
    case stp::CostKind::Free:
      break;
    case stp::CostKind::View: {
      stp::LayoutRule layout = partitionable.getLayoutRule();
      // The operand whose split the view takes: operand 0, or the first
      // computed one where the first split operand leads (graph inputs,
      // parameters and constants start replicated in the program).
      Value lead = op.getOperand(0);
      if (layout.firstSplitOperandLeads)
        for (Value v : op.getOperands())
          if (auto it = tensorOf.find(v);
              isa<RankedTensorType>(v.getType()) && it != tensorOf.end() &&
              graph.tensors[it->second].kind == TensorKind::Activation) {
            lead = v;
            break;
          }
      addView(
          &op, lead, op.getResult(0),
          std::vector<int>(layout.resultDims.begin(), layout.resultDims.end()));
      // The split the partitioned program keeps (Partition.cpp,
      // planLayout): not on dims that must be whole, nor on dims whose
      // size changes at the same rank.
      auto src = cast<RankedTensorType>(lead.getType());
      auto res = cast<RankedTensorType>(op.getResult(0).getType());
      std::vector<int> &kept = graph.views.back().splitDimOf;
      for (int &d : kept)
        if (d >= 0 && (llvm::is_contained(layout.wholeDims, d) ||
                       (src.getRank() == res.getRank() &&
                        src.getDimSize(d) != res.getDimSize(d))))
          d = -1;
      break;
    }
    case stp::CostKind::Loops:
      if (failed(convertGeneric(cast<linalg::GenericOp>(op))))
        return failure();
      break;
    case stp::CostKind::Softmax:
      convertSoftmax(cast<linalg::SoftmaxOp>(op));
      break;
    case stp::CostKind::Transpose:
      convertTranspose(cast<linalg::TransposeOp>(op));
      break;
    case stp::CostKind::Norm: {
      auto norm = cast<stp::NormalizationOpInterface>(op);
      convertNorm(&op, op.getOperand(0), norm.getNormScale(),
                  norm.getNormBias(), norm.getNormalizedAxis(),
                  rule.flopsPerPoint);
      break;
    }
    case stp::CostKind::Attention:
      convertAttention(cast<stp::AttentionOp>(op));
      break;
    case stp::CostKind::MoE:
      convertMoE(cast<stp::MoEOp>(op));
      break;
    case stp::CostKind::Elementwise:
      convertFallback(&op, rule.flopsPerPoint, rule.note);
      break;
    }
  }
  findLayers();
  return std::move(graph);
}

} // namespace

FailureOr<OperatorGraph>
convertToOperatorGraph(func::FuncOp func, const ConversionOptions &options) {
  if (failed(stp::checkPartitionableOpModels(func.getContext(), func.getLoc())))
    return failure();
  Converter converter(options);
  return converter.run(func);
}

} // namespace stpar::analysis
