//===- ONNXImporter.cpp - ONNX to MLIR import -------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The import driver: parse and validate the model, bind symbolic dims, run
// ONNX shape inference, order the nodes topologically, turn initializers
// into parameters, and import every node through the handler registry
// (folding shape computations on the host).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/shape_inference/implementation.h>

#include <cstring>
#include <deque>

using namespace mlir;
using namespace stpar::onnximport;
namespace stp = stpar::stp;

//===----------------------------------------------------------------------===//
// ConstTensor
//===----------------------------------------------------------------------===//

bool stpar::onnximport::isFloatDType(int32_t dtype) {
  return dtype == onnx::TensorProto::FLOAT ||
         dtype == onnx::TensorProto::DOUBLE ||
         dtype == onnx::TensorProto::FLOAT16 ||
         dtype == onnx::TensorProto::BFLOAT16;
}

StringRef stpar::onnximport::dtypeName(int32_t dtype) {
  if (onnx::TensorProto_DataType_IsValid(dtype))
    return onnx::TensorProto_DataType_Name(
        static_cast<onnx::TensorProto_DataType>(dtype));
  return "UNKNOWN";
}

bool ConstTensor::isFloat() const { return isFloatDType(dtype); }

int64_t ConstTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double ConstTensor::getFloat(int64_t i) const {
  return isFloat() ? floats[i] : static_cast<double>(ints[i]);
}

int64_t ConstTensor::getInt(int64_t i) const {
  return isFloat() ? static_cast<int64_t>(floats[i]) : ints[i];
}

SmallVector<int64_t> ConstTensor::toInts() const {
  SmallVector<int64_t> out;
  for (int64_t i = 0, e = numElements(); i < e; ++i)
    out.push_back(getInt(i));
  return out;
}

ConstTensor ConstTensor::ofInts(ArrayRef<int64_t> values,
                                ArrayRef<int64_t> shape, int32_t dtype) {
  ConstTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  t.ints.assign(values.begin(), values.end());
  return t;
}

ConstTensor ConstTensor::ofFloats(ArrayRef<double> values,
                                  ArrayRef<int64_t> shape, int32_t dtype) {
  ConstTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  t.floats.assign(values.begin(), values.end());
  return t;
}

/// Reads the values of an in-file TensorProto. Returns std::nullopt with
/// `error` set when the data is external, missing or inconsistent.
static std::optional<ConstTensor> readTensor(const onnx::TensorProto &proto,
                                             std::string &error) {
  ConstTensor t;
  t.dtype = proto.data_type();
  for (int64_t d : proto.dims()) {
    if (d < 0) {
      error = "has a negative dim " + std::to_string(d);
      return std::nullopt;
    }
    t.shape.push_back(d);
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    error = "has its data in an external file";
    return std::nullopt;
  }
  int64_t n = t.numElements();
  const std::string &raw = proto.raw_data();
  bool hasRaw = proto.has_raw_data();
  auto fromRaw = [&](size_t width, auto convert) -> bool {
    if (raw.size() != static_cast<size_t>(n) * width) {
      error = "raw data holds " + std::to_string(raw.size()) +
              " bytes, expected " + std::to_string(n * width);
      return false;
    }
    for (int64_t i = 0; i < n; ++i)
      convert(raw.data() + i * width);
    return true;
  };
  auto halfToDouble = [&](uint16_t bits, bool isBF16) {
    APFloat f(isBF16 ? APFloat::BFloat() : APFloat::IEEEhalf(),
              APInt(16, bits));
    return f.convertToDouble();
  };
  switch (t.dtype) {
  case onnx::TensorProto::FLOAT:
    if (hasRaw)
      return fromRaw(4, [&](const char *p) {
               float v;
               std::memcpy(&v, p, 4);
               t.floats.push_back(v);
             })
                 ? std::optional(t)
                 : std::nullopt;
    t.floats.assign(proto.float_data().begin(), proto.float_data().end());
    break;
  case onnx::TensorProto::DOUBLE:
    if (hasRaw)
      return fromRaw(8, [&](const char *p) {
               double v;
               std::memcpy(&v, p, 8);
               t.floats.push_back(v);
             })
                 ? std::optional(t)
                 : std::nullopt;
    t.floats.assign(proto.double_data().begin(), proto.double_data().end());
    break;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: {
    bool isBF16 = t.dtype == onnx::TensorProto::BFLOAT16;
    if (hasRaw)
      return fromRaw(2, [&](const char *p) {
               uint16_t v;
               std::memcpy(&v, p, 2);
               t.floats.push_back(halfToDouble(v, isBF16));
             })
                 ? std::optional(t)
                 : std::nullopt;
    for (int32_t v : proto.int32_data())
      t.floats.push_back(halfToDouble(static_cast<uint16_t>(v), isBF16));
    break;
  }
  case onnx::TensorProto::INT64:
    if (hasRaw)
      return fromRaw(8, [&](const char *p) {
               int64_t v;
               std::memcpy(&v, p, 8);
               t.ints.push_back(v);
             })
                 ? std::optional(t)
                 : std::nullopt;
    t.ints.assign(proto.int64_data().begin(), proto.int64_data().end());
    break;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL: {
    size_t width = t.dtype == onnx::TensorProto::INT32   ? 4
                   : t.dtype == onnx::TensorProto::INT16 ? 2
                                                         : 1;
    bool isUnsigned = t.dtype == onnx::TensorProto::UINT8 ||
                      t.dtype == onnx::TensorProto::BOOL;
    if (hasRaw)
      return fromRaw(width, [&](const char *p) {
               int64_t v = 0;
               if (width == 4) {
                 int32_t x;
                 std::memcpy(&x, p, 4);
                 v = x;
               } else if (width == 2) {
                 int16_t x;
                 std::memcpy(&x, p, 2);
                 v = x;
               } else {
                 v = isUnsigned ? static_cast<uint8_t>(*p)
                                : static_cast<int8_t>(*p);
               }
               t.ints.push_back(v);
             })
                 ? std::optional(t)
                 : std::nullopt;
    t.ints.assign(proto.int32_data().begin(), proto.int32_data().end());
    break;
  }
  default:
    error = "has unsupported dtype " + dtypeName(t.dtype).str();
    return std::nullopt;
  }
  int64_t have = t.isFloat() ? t.floats.size() : t.ints.size();
  if (have != n) {
    error = "holds " + std::to_string(have) + " values, expected " +
            std::to_string(n);
    return std::nullopt;
  }
  return t;
}

std::optional<ConstTensor>
stpar::onnximport::readTensorForNode(const onnx::TensorProto &proto,
                                     std::string &error) {
  return readTensor(proto, error);
}

//===----------------------------------------------------------------------===//
// ImportState, NodeContext
//===----------------------------------------------------------------------===//

Location ImportState::fileLoc() const {
  return FileLineColLoc::get(ctx, path, 0, 0);
}

static std::string nodeLabel(const onnx::NodeProto &node) {
  std::string op = node.domain().empty() || node.domain() == "ai.onnx"
                       ? node.op_type()
                       : node.domain() + "." + node.op_type();
  return "node '" + node.name() + "' (" + op + ")";
}

Location NodeContext::loc() const {
  return NameLoc::get(StringAttr::get(state.ctx, node.name()),
                      state.fileLoc());
}

InFlightDiagnostic NodeContext::error() {
  InFlightDiagnostic diag = emitError(loc());
  diag << nodeLabel(node) << ": ";
  return diag;
}

bool NodeContext::hasInput(size_t i) const {
  return static_cast<int>(i) < node.input_size() && !node.input(i).empty();
}

bool NodeContext::hasOutput(size_t i) const {
  return static_cast<int>(i) < node.output_size() && !node.output(i).empty();
}

Value NodeContext::input(size_t i) {
  if (!hasInput(i)) {
    error() << "missing input " << i;
    return {};
  }
  auto it = state.values.find(node.input(i));
  assert(it != state.values.end() && "inputs are checked before import");
  ImportedValue &v = it->second;
  if (!v.value)
    v.value = materializeConstant(b(), loc(), *v.constant);
  return v.value;
}

const ConstTensor *NodeContext::constInput(size_t i) {
  if (!hasInput(i))
    return nullptr;
  auto it = state.values.find(node.input(i));
  if (it == state.values.end() || !it->second.constant)
    return nullptr;
  return &*it->second.constant;
}

std::optional<SmallVector<int64_t>> NodeContext::requireInts(size_t i,
                                                            StringRef what) {
  const ConstTensor *c = constInput(i);
  if (!c) {
    error() << what << " (input " << i << ", '"
            << (hasInput(i) ? node.input(i) : std::string()) << "')"
            << " is not a constant after binding the symbolic dims; only "
               "static shapes are supported";
    return std::nullopt;
  }
  return c->toInts();
}

RankedTensorType NodeContext::inputType(size_t i) {
  Value v = input(i);
  return v ? cast<RankedTensorType>(v.getType()) : RankedTensorType();
}

void NodeContext::setOutput(size_t i, Value value) {
  if (!hasOutput(i))
    return;
  state.values[node.output(i)] = ImportedValue{value, std::nullopt};
}

void NodeContext::setOutputConst(size_t i, ConstTensor value) {
  if (!hasOutput(i))
    return;
  state.values[node.output(i)] = ImportedValue{Value(), std::move(value)};
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::getInt(StringRef name, int64_t dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->i() : dflt;
}

float NodeContext::getFloat(StringRef name, float dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->f() : dflt;
}

std::string NodeContext::getString(StringRef name, StringRef dflt) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->s() : dflt.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::getInts(StringRef name) const {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    error() << "axis " << axis << " out of range for rank " << rank;
    return std::nullopt;
  }
  return normalized;
}

//===----------------------------------------------------------------------===//
// HandlerRegistry
//===----------------------------------------------------------------------===//

void HandlerRegistry::add(StringRef domain, StringRef opType,
                          int64_t sinceVersion, HandlerFn handler, FoldFn fold,
                          bool foldsFromTypes) {
  handlers.push_back({domain.str(), opType.str(), sinceVersion,
                      std::move(handler), std::move(fold), foldsFromTypes});
}

const OpHandler *HandlerRegistry::lookup(StringRef domain, StringRef opType,
                                         int64_t opset) const {
  const OpHandler *best = nullptr;
  for (const OpHandler &h : handlers)
    if (h.domain == domain && h.opType == opType && h.sinceVersion <= opset &&
        (!best || h.sinceVersion > best->sinceVersion))
      best = &h;
  return best;
}

bool HandlerRegistry::knows(StringRef domain, StringRef opType) const {
  return llvm::any_of(handlers, [&](const OpHandler &h) {
    return h.domain == domain && h.opType == opType;
  });
}

static const HandlerRegistry &getRegistry() {
  static const HandlerRegistry registry = [] {
    HandlerRegistry r;
    registerElementwiseHandlers(r);
    registerLinearHandlers(r);
    registerDataMovementHandlers(r);
    registerReductionHandlers(r);
    registerNormalizationHandlers(r);
    registerSourceHandlers(r);
    registerContribHandlers(r);
    registerRotaryHandlers(r);
    return r;
  }();
  return registry;
}

//===----------------------------------------------------------------------===//
// The import driver
//===----------------------------------------------------------------------===//

void stpar::onnximport::registerImportDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, func::FuncDialect,
                  linalg::LinalgDialect, math::MathDialect,
                  tensor::TensorDialect, stp::STPDialect>();
}

static StringRef canonicalDomain(StringRef domain) {
  return domain == "ai.onnx" ? StringRef() : domain;
}

namespace {
class Importer {
public:
  Importer(MLIRContext &ctx, StringRef path, const ImportOptions &options)
      : state(&ctx) {
    state.options = &options;
    state.path = path.str();
  }

  OwningOpRef<ModuleOp> run();

private:
  InFlightDiagnostic fileError() {
    InFlightDiagnostic diag = emitError(state.fileLoc());
    return diag;
  }
  LogicalResult parse();
  LogicalResult checkOpsets();
  LogicalResult bindDims();
  void inferShapes();
  LogicalResult orderNodes(std::vector<const onnx::NodeProto *> &order);
  LogicalResult importNode(const onnx::NodeProto &node);

  ImportState state;
  onnx::ModelProto model;
  llvm::StringSet<> initializerNames;
};
} // namespace

LogicalResult Importer::parse() {
  auto buffer = llvm::MemoryBuffer::getFile(state.path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fileError() << "cannot read the model: "
                       << buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  if (bytes.empty())
    return fileError() << "the file is empty, not an ONNX model";
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    return fileError() << "the model file is larger than 2 GiB; store its "
                          "weights as external data";
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return fileError() << "not a valid ONNX model: the protobuf does not "
                          "parse (truncated, corrupt or not an ONNX file)";
  if (!model.has_graph() || model.ir_version() <= 0)
    return fileError() << "not a valid ONNX model: no graph or no IR version";
  if (model.graph().node_size() == 0)
    return fileError() << "the model's graph is empty (no nodes)";
  return success();
}

LogicalResult Importer::checkOpsets() {
  for (const onnx::OperatorSetIdProto &opset : model.opset_import())
    state.opsets[canonicalDomain(opset.domain())] = opset.version();
  if (!state.opsets.count(""))
    state.opsets[""] = 1;
  int64_t version = state.opsets[""];
  if (version > kMaxOpsetVersion)
    return fileError() << "the model uses opset " << version
                       << " of the default domain; the newest supported is "
                       << kMaxOpsetVersion;
  return success();
}

LogicalResult Importer::bindDims() {
  const ImportOptions &options = *state.options;
  std::vector<std::string> unbound;
  onnx::GraphProto *graph = model.mutable_graph();
  auto bind = [&](onnx::ValueInfoProto &info, bool required) -> LogicalResult {
    if (!info.type().has_tensor_type())
      return required ? fileError() << "graph input '" << info.name()
                                    << "' is not a tensor"
                      : success();
    auto *shape = info.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (!info.type().tensor_type().has_shape())
      return required ? fileError() << "graph input '" << info.name()
                                    << "' has no shape"
                      : success();
    for (onnx::TensorShapeProto_Dimension &dim : *shape->mutable_dim()) {
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0)
          return fileError() << "graph input '" << info.name()
                             << "' has a negative dim " << dim.dim_value();
        continue;
      }
      std::string name = dim.has_dim_param() ? dim.dim_param() : "";
      auto it = options.dims.find(name);
      if (name.empty() || it == options.dims.end()) {
        if (required) {
          std::string label = name.empty() ? "<unnamed dim of '" +
                                                 info.name() + "'>"
                                           : name;
          if (!llvm::is_contained(unbound, label))
            unbound.push_back(label);
        }
        continue;
      }
      dim.set_dim_value(it->second);
    }
    return success();
  };
  for (auto &[name, value] : options.dims) {
    if (value < 0)
      return fileError() << "dim '" << name.str() << "' = " << value
                         << " is negative";
    if (value > kMaxDimValue)
      return fileError() << "dim '" << name.str() << "' = " << value
                         << " overflows (largest accepted: " << kMaxDimValue
                         << ")";
  }
  for (onnx::ValueInfoProto &input : *graph->mutable_input())
    if (!initializerNames.contains(input.name()) &&
        failed(bind(input, /*required=*/true)))
      return failure();
  if (!unbound.empty()) {
    InFlightDiagnostic diag = fileError();
    diag << "unbound symbolic dims: ";
    llvm::interleaveComma(unbound, diag);
    diag << " (bind each with --dim NAME=VALUE)";
    return failure();
  }
  for (onnx::ValueInfoProto &info : *graph->mutable_output())
    (void)bind(info, /*required=*/false);
  for (onnx::ValueInfoProto &info : *graph->mutable_value_info())
    (void)bind(info, /*required=*/false);
  return success();
}

void Importer::inferShapes() {
  // Static shapes ONNX infers are used to cross-check the importer's own.
  // Inference errors are not fatal (ONNX 1.12 does not know newer ops).
  try {
    onnx::ShapeInferenceOptions options;
    options.check_type = false;
    options.error_mode = 0;
    options.enable_data_propagation = true;
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       options);
  } catch (const std::exception &) {
    return;
  }
  for (const onnx::ValueInfoProto &info : model.graph().value_info()) {
    if (!info.type().has_tensor_type() ||
        !info.type().tensor_type().has_shape())
      continue;
    SmallVector<int64_t> shape;
    bool isStatic = true;
    for (const auto &dim : info.type().tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) {
        isStatic = false;
        break;
      }
      shape.push_back(dim.dim_value());
    }
    if (isStatic)
      state.inferredShapes[info.name()] = shape;
  }
}

LogicalResult
Importer::orderNodes(std::vector<const onnx::NodeProto *> &order) {
  const onnx::GraphProto &graph = model.graph();
  llvm::StringMap<int> producer;
  for (auto [index, node] : llvm::enumerate(graph.node()))
    for (const std::string &out : node.output()) {
      if (out.empty())
        continue;
      if (!producer.try_emplace(out, index).second ||
          state.values.count(out)) {
        return emitError(NameLoc::get(StringAttr::get(state.ctx, node.name()),
                                      state.fileLoc()))
               << nodeLabel(node) << ": output '" << out
               << "' is also produced elsewhere (graph inputs, initializers "
                  "and node outputs must have unique names)";
      }
    }
  std::vector<int> pending(graph.node_size(), 0);
  std::vector<std::vector<int>> users(graph.node_size());
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    for (const std::string &in : node.input()) {
      if (in.empty() || state.values.count(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return emitError(NameLoc::get(StringAttr::get(state.ctx, node.name()),
                                      state.fileLoc()))
               << nodeLabel(node) << ": input '" << in
               << "' is produced by no node and is neither a graph input nor "
                  "an initializer";
      ++pending[index];
      users[it->second].push_back(index);
    }
    if (node.attribute_size())
      for (const onnx::AttributeProto &a : node.attribute())
        if (a.has_g() || a.graphs_size())
          return emitError(NameLoc::get(
                     StringAttr::get(state.ctx, node.name()), state.fileLoc()))
                 << nodeLabel(node)
                 << ": control flow with subgraphs is not supported";
  }
  std::deque<int> ready;
  for (int i = 0; i < graph.node_size(); ++i)
    if (pending[i] == 0)
      ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.front();
    ready.pop_front();
    order.push_back(&graph.node(i));
    for (int user : users[i])
      if (--pending[user] == 0)
        ready.push_back(user);
  }
  if (order.size() != static_cast<size_t>(graph.node_size())) {
    for (int i = 0; i < graph.node_size(); ++i)
      if (pending[i] > 0)
        return emitError(NameLoc::get(
                   StringAttr::get(state.ctx, graph.node(i).name()),
                   state.fileLoc()))
               << "the graph has a cycle through " << nodeLabel(graph.node(i));
  }
  return success();
}

LogicalResult Importer::importNode(const onnx::NodeProto &node) {
  StringRef domain = canonicalDomain(node.domain());
  auto opsetIt = state.opsets.find(domain);
  NodeContext ctx(state, node,
                  opsetIt == state.opsets.end() ? 0 : opsetIt->second);
  const HandlerRegistry &registry = getRegistry();
  if (opsetIt == state.opsets.end())
    return ctx.error() << "the model imports no opset for domain '"
                       << domain << "'";
  const OpHandler *handler = registry.lookup(domain, node.op_type(), ctx.opset);
  if (!handler) {
    if (registry.knows(domain, node.op_type()))
      return ctx.error() << "opset " << ctx.opset << " of this op is older "
                            "than any version stpar imports";
    if (domain != "" && domain != "com.microsoft")
      return ctx.error() << "domain '" << domain << "' is not supported";
    return ctx.error() << "op '" << node.op_type() << "' is not supported";
  }
  // Host folding: every given input constant, or an op that reads types.
  bool allConst = true;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i) && !ctx.constInput(i))
      allConst = false;
  if (handler->fold && (allConst || handler->foldsFromTypes)) {
    if (std::optional<std::vector<ConstTensor>> folded = handler->fold(ctx)) {
      bool small = llvm::all_of(*folded, [&](const ConstTensor &t) {
        return t.numElements() <= state.options->maxFoldElements;
      });
      if (small) {
        for (auto [i, value] : llvm::enumerate(*folded))
          ctx.setOutputConst(i, std::move(value));
        return success();
      }
    }
  }
  if (failed(handler->handler(ctx)))
    return failure();
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (!ctx.hasOutput(i))
      continue;
    auto it = state.values.find(node.output(i));
    if (it == state.values.end())
      return ctx.error() << "output " << i << " ('" << node.output(i)
                         << "') is not supported by the importer";
    auto inferred = state.inferredShapes.find(node.output(i));
    if (inferred != state.inferredShapes.end() && it->second.value) {
      auto type = cast<RankedTensorType>(it->second.value.getType());
      if (type.getShape() != ArrayRef<int64_t>(inferred->second)) {
        InFlightDiagnostic diag = ctx.error();
        diag << "output '" << node.output(i) << "' imported with shape "
             << type << " but ONNX shape inference says [";
        llvm::interleaveComma(inferred->second, diag);
        return diag << "]";
      }
    }
  }
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  MLIRContext *ctx = state.ctx;
  DialectRegistry registry;
  registerImportDialects(registry);
  ctx->appendDialectRegistry(registry);
  ctx->loadAllAvailableDialects();
  if (failed(parse()) || failed(checkOpsets()))
    return {};
  onnx::GraphProto *graph = model.mutable_graph();
  for (const onnx::TensorProto &init : graph->initializer())
    initializerNames.insert(init.name());
  if (failed(bindDims()))
    return {};
  inferShapes();

  OpBuilder &b = state.builder;
  Location fileLoc = state.fileLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;

  // Graph inputs.
  for (const onnx::ValueInfoProto &input : graph->input()) {
    if (initializerNames.contains(input.name()))
      continue;
    const auto &tensorType = input.type().tensor_type();
    Type elem = convertDType(ctx, tensorType.elem_type());
    if (!elem)
      return emitError(fileLoc)
                 << "graph input '" << input.name() << "' has unsupported dtype "
                 << dtypeName(tensorType.elem_type()),
             nullptr;
    SmallVector<int64_t> shape;
    for (const auto &dim : tensorType.shape().dim())
      shape.push_back(dim.dim_value());
    argTypes.push_back(RankedTensorType::get(shape, elem));
    argAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
        stp::STPDialect::kNameAttrName, b.getStringAttr(input.name()))));
    argNames.push_back(input.name());
  }
  // Initializers: small integer tensors (shape/index tables) and scalars
  // are host constants; everything else is a parameter argument.
  SmallString<256> modelDir(state.path);
  llvm::sys::path::remove_filename(modelDir);
  SmallVector<std::pair<std::string, ConstTensor>> initConstants;
  for (const onnx::TensorProto &init : graph->initializer()) {
    Type elem = convertDType(ctx, init.data_type());
    if (!elem)
      return emitError(fileLoc) << "initializer '" << init.name()
                                << "' has unsupported dtype "
                                << dtypeName(init.data_type()),
             nullptr;
    SmallVector<int64_t> shape;
    int64_t elements = 1;
    for (int64_t d : init.dims()) {
      if (d < 0 || d > kMaxDimValue)
        return emitError(fileLoc) << "initializer '" << init.name()
                                  << "' has an invalid dim " << d,
               nullptr;
      shape.push_back(d);
      elements *= d;
      if (elements > (int64_t(1) << 50))
        return emitError(fileLoc) << "initializer '" << init.name()
                                  << "' has too many elements",
               nullptr;
    }
    bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
    bool isFloat = isFloatDType(init.data_type());
    if (!external && ((!isFloat && elements <= 4096) || elements <= 1)) {
      std::string error;
      std::optional<ConstTensor> value = readTensor(init, error);
      if (!value)
        return emitError(fileLoc) << "initializer '" << init.name() << "' "
                                  << error,
               nullptr;
      initConstants.push_back({init.name(), std::move(*value)});
      continue;
    }
    stp::DataLocation location = stp::DataLocation::Embedded;
    StringAttr file;
    int64_t offset = 0, length = -1;
    if (external) {
      for (const onnx::StringStringEntryProto &entry : init.external_data()) {
        if (entry.key() == "location")
          file = b.getStringAttr(entry.value());
        else if (entry.key() == "offset" || entry.key() == "length") {
          int64_t v = 0;
          if (StringRef(entry.value()).getAsInteger(10, v) || v < 0)
            return emitError(fileLoc) << "initializer '" << init.name()
                                      << "' has an invalid external-data "
                                      << entry.key() << " '" << entry.value()
                                      << "'",
                   nullptr;
          (entry.key() == "offset" ? offset : length) = v;
        }
      }
      if (!file || file.getValue().empty())
        return emitError(fileLoc) << "initializer '" << init.name()
                                  << "' is external but names no file",
               nullptr;
      SmallString<256> dataPath(modelDir);
      llvm::sys::path::append(dataPath, file.getValue());
      location = llvm::sys::fs::exists(dataPath) ? stp::DataLocation::External
                                                 : stp::DataLocation::Absent;
    }
    argTypes.push_back(RankedTensorType::get(shape, elem));
    auto param = stp::ParamAttr::get(ctx, b.getStringAttr(init.name()),
                                     location, file, offset, length,
                                     isFloat && elements > 1);
    argAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(stp::STPDialect::kParamAttrName, param)));
    argNames.push_back(init.name());
  }

  auto func = func::FuncOp::create(b, fileLoc, state.options->functionName,
                                   b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [index, attrs] : llvm::enumerate(argAttrs))
    func.setArgAttrs(index, attrs);
  for (auto [index, name] : llvm::enumerate(argNames))
    state.values[name] = ImportedValue{entry->getArgument(index), std::nullopt};
  for (auto &[name, value] : initConstants)
    state.values[name] = ImportedValue{Value(), std::move(value)};
  b.setInsertionPointToEnd(entry);

  std::vector<const onnx::NodeProto *> order;
  if (failed(orderNodes(order)))
    return {};
  for (const onnx::NodeProto *node : order)
    if (failed(importNode(*node)))
      return {};

  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  for (const onnx::ValueInfoProto &output : graph->output()) {
    auto it = state.values.find(output.name());
    if (it == state.values.end())
      return emitError(fileLoc) << "graph output '" << output.name()
                                << "' is produced by no node",
             nullptr;
    if (!it->second.value)
      it->second.value = materializeConstant(b, fileLoc, *it->second.constant);
    results.push_back(it->second.value);
    resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
        stp::STPDialect::kNameAttrName, b.getStringAttr(output.name()))));
  }
  func::ReturnOp::create(b, fileLoc, results);
  func.setType(b.getFunctionType(argTypes, TypeRange(ValueRange(results))));
  for (auto [index, attrs] : llvm::enumerate(resultAttrs))
    func.setResultAttrs(index, attrs);
  if (failed(verify(*module)))
    return emitError(fileLoc) << "internal error: the imported module does "
                                 "not verify (please report)",
           nullptr;
  return module;
}

OwningOpRef<ModuleOp>
stpar::onnximport::importONNXFile(StringRef path, MLIRContext &context,
                                  const ImportOptions &options) {
  Importer importer(context, path, options);
  return importer.run();
}
