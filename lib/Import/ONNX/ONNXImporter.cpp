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
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>

#include <sys/wait.h>
#include <unistd.h>

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
  // Saturates instead of overflowing (shapes computed from hostile
  // constants); a negative dim gives a negative count.
  int64_t n = 1;
  for (int64_t d : shape)
    if (llvm::MulOverflow(n, d, n))
      return d < 0 ? std::numeric_limits<int64_t>::min()
                   : std::numeric_limits<int64_t>::max();
  return n;
}

double ConstTensor::getFloat(int64_t i) const {
  return isFloat() ? floats[i] : static_cast<double>(ints[i]);
}

int64_t stpar::onnximport::saturatingToInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 0x1p63)
    return std::numeric_limits<int64_t>::max();
  if (v < -0x1p63)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

int64_t ConstTensor::getInt(int64_t i) const {
  return isFloat() ? saturatingToInt64(floats[i]) : ints[i];
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
  int64_t elements = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0) {
      error = "has a negative dim " + std::to_string(d);
      return std::nullopt;
    }
    if (d > kMaxDimValue || (d && elements > (int64_t(1) << 50) / d)) {
      error = "has too many elements";
      return std::nullopt;
    }
    elements *= d;
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
  if (!node.name().empty())
    return "node '" + node.name() + "' (" + op + ")";
  // Unnamed nodes are named by their first output.
  for (const std::string &out : node.output())
    if (!out.empty())
      return "unnamed node with output '" + out + "' (" + op + ")";
  return "unnamed node (" + op + ")";
}

static StringRef attrTypeName(int type) {
  if (onnx::AttributeProto_AttributeType_IsValid(type))
    return onnx::AttributeProto_AttributeType_Name(
        static_cast<onnx::AttributeProto_AttributeType>(type));
  return "UNKNOWN";
}

/// The type of attribute `a`: its `type` field, or (old models leave it
/// out) the kind of value it holds; UNDEFINED when it cannot tell.
static onnx::AttributeProto::AttributeType
attrTypeOf(const onnx::AttributeProto &a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED)
    return a.type();
  if (a.has_f())
    return onnx::AttributeProto::FLOAT;
  if (a.has_i())
    return onnx::AttributeProto::INT;
  if (a.has_s())
    return onnx::AttributeProto::STRING;
  if (a.has_t())
    return onnx::AttributeProto::TENSOR;
  if (a.has_g())
    return onnx::AttributeProto::GRAPH;
  if (a.has_sparse_tensor())
    return onnx::AttributeProto::SPARSE_TENSOR;
  if (a.floats_size())
    return onnx::AttributeProto::FLOATS;
  if (a.ints_size())
    return onnx::AttributeProto::INTS;
  if (a.strings_size())
    return onnx::AttributeProto::STRINGS;
  if (a.tensors_size())
    return onnx::AttributeProto::TENSORS;
  if (a.graphs_size())
    return onnx::AttributeProto::GRAPHS;
  return onnx::AttributeProto::UNDEFINED;
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

/// Attribute `name` if it is present and of type `type`. An attribute of
/// another type is reported (the driver then fails the node) and treated as
/// absent.
static const onnx::AttributeProto *
typedAttr(const NodeContext &ctx, StringRef name,
          onnx::AttributeProto::AttributeType type) {
  const onnx::AttributeProto *a = ctx.attr(name);
  if (!a)
    return nullptr;
  onnx::AttributeProto::AttributeType actual = attrTypeOf(*a);
  // An empty INTS/FLOATS attribute without a type field is ambiguous.
  if (actual == type || actual == onnx::AttributeProto::UNDEFINED)
    return a;
  emitError(ctx.loc()) << nodeLabel(ctx.node) << ": attribute '" << name
                       << "' has type " << attrTypeName(actual)
                       << ", expected " << attrTypeName(type);
  return nullptr;
}

int64_t NodeContext::getInt(StringRef name, int64_t dflt) const {
  const onnx::AttributeProto *a =
      typedAttr(*this, name, onnx::AttributeProto::INT);
  return a ? a->i() : dflt;
}

float NodeContext::getFloat(StringRef name, float dflt) const {
  const onnx::AttributeProto *a =
      typedAttr(*this, name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : dflt;
}

std::string NodeContext::getString(StringRef name, StringRef dflt) const {
  const onnx::AttributeProto *a =
      typedAttr(*this, name, onnx::AttributeProto::STRING);
  return a ? a->s() : dflt.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::getInts(StringRef name) const {
  const onnx::AttributeProto *a =
      typedAttr(*this, name, onnx::AttributeProto::INTS);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

bool NodeContext::checkDims(ArrayRef<int64_t> shape, StringRef what) {
  for (int64_t d : shape)
    if (d < 0 || d > kMaxDimValue) {
      error() << what << " has an invalid dim " << d
              << " (dims must be in [0, " << kMaxDimValue << "])";
      return false;
    }
  return true;
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
    registerAttentionHandlers(r);
    registerContribAttentionHandlers(r);
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

/// A readable dtype for messages: the ONNX name, or the number when it is
/// not a valid ONNX data type.
static std::string dtypeLabel(int32_t dtype) {
  if (onnx::TensorProto_DataType_IsValid(dtype))
    return dtypeName(dtype).str();
  return "UNKNOWN (" + std::to_string(dtype) + ")";
}

/// Bytes per element of the dtypes convertDType accepts; 0 for others.
static int64_t dtypeWidth(int32_t dtype) {
  switch (dtype) {
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
    return 8;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
    return 4;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

/// Number of values an embedded TensorProto holds in its typed field.
static int64_t typedValueCount(const onnx::TensorProto &proto) {
  switch (proto.data_type()) {
  case onnx::TensorProto::FLOAT:
    return proto.float_data_size();
  case onnx::TensorProto::DOUBLE:
    return proto.double_data_size();
  case onnx::TensorProto::INT64:
    return proto.int64_data_size();
  default:
    return proto.int32_data_size();
  }
}

/// Largest element count of one tensor (graph input or initializer).
constexpr int64_t kMaxElements = int64_t(1) << 50;

namespace {
/// A diagnostic held back while a node is imported.
struct CapturedDiag {
  DiagnosticSeverity severity;
  Location loc;
  std::string message;
  SmallVector<std::pair<Location, std::string>> notes;
};

bool hasError(ArrayRef<CapturedDiag> diags) {
  return llvm::any_of(diags, [](const CapturedDiag &d) {
    return d.severity == DiagnosticSeverity::Error;
  });
}

/// Holds back every diagnostic emitted while it lives (handlers, folders
/// and verifiers report at the node; the driver decides what to show).
class DiagCapture {
public:
  explicit DiagCapture(MLIRContext *ctx)
      : handler(ctx, [this](Diagnostic &diag) {
          CapturedDiag captured{diag.getSeverity(), diag.getLocation(),
                                diag.str(), {}};
          for (Diagnostic &note : diag.getNotes())
            captured.notes.push_back({note.getLocation(), note.str()});
          diags.push_back(std::move(captured));
          return success();
        }) {}

  SmallVector<CapturedDiag> diags;

private:
  ScopedDiagnosticHandler handler;
};

/// Emits `diags`, each prefixed with `label` ("node 'NAME' (OpType)") unless
/// it already starts with it. Only the first error is shown: later ones
/// are usually its consequences (a handler reading an attribute of the
/// wrong type as absent, a folder and a handler reporting the same problem).
void emitCaptured(ArrayRef<CapturedDiag> diags, StringRef label) {
  bool errorShown = false;
  for (const CapturedDiag &d : diags) {
    if (d.severity == DiagnosticSeverity::Error) {
      if (errorShown)
        continue;
      errorShown = true;
    }
    std::string message = StringRef(d.message).starts_with(label)
                              ? d.message
                              : label.str() + ": " + d.message;
    InFlightDiagnostic diag = d.severity == DiagnosticSeverity::Error
                                  ? emitError(d.loc)
                              : d.severity == DiagnosticSeverity::Warning
                                  ? emitWarning(d.loc)
                                  : emitRemark(d.loc);
    diag << message;
    for (const auto &[loc, note] : d.notes)
      diag.attachNote(loc) << note;
  }
}

/// Where the bytes of an embedded initializer lie inside the model file.
struct EmbeddedData {
  int64_t offset = 0, length = 0;
};

/// Finds, in the serialized model `bytes`, the byte range of each top-level
/// initializer's values when the file stores them in the little-endian
/// layout the emitted programs read: `raw_data`, or packed `float_data`
/// (FLOAT) / `double_data` (DOUBLE). Varint-coded typed fields are not
/// listed. The emitted programs read embedded weights from there at run
/// time (docs/emitted-code.md, "Weights"); nothing is copied. Walks the
/// protobuf wire format (ModelProto.graph = 7, GraphProto.initializer = 5,
/// TensorProto: data_type = 2, float_data = 4, name = 8, raw_data = 9,
/// double_data = 10).
static llvm::StringMap<EmbeddedData> findEmbeddedData(StringRef bytes) {
  using google::protobuf::io::CodedInputStream;
  llvm::StringMap<EmbeddedData> found;
  CodedInputStream in(reinterpret_cast<const uint8_t *>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetRecursionLimit(8);
  auto skip = [&](uint32_t tag) {
    switch (tag & 7) {
    case 0: {
      uint64_t v;
      return in.ReadVarint64(&v);
    }
    case 1:
      return in.Skip(8);
    case 2: {
      uint32_t n;
      return in.ReadVarint32(&n) && in.Skip(static_cast<int>(n));
    }
    case 5:
      return in.Skip(4);
    default:
      return false;
    }
  };
  // Reads one TensorProto of `size` bytes at the current position.
  auto tensor = [&](uint32_t size) {
    CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(size));
    std::string name;
    int32_t dtype = 0;
    EmbeddedData raw, floats, doubles;
    bool hasRaw = false, hasFloats = false, hasDoubles = false;
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = tag >> 3;
      uint32_t n = 0;
      if ((tag & 7) == 2 && (field == 4 || field == 8 || field == 9 ||
                             field == 10)) {
        if (!in.ReadVarint32(&n))
          break;
        EmbeddedData range{in.CurrentPosition(), n};
        if (field == 8) {
          if (!in.ReadString(&name, static_cast<int>(n)))
            break;
          continue;
        }
        (field == 9 ? raw : field == 4 ? floats : doubles) = range;
        (field == 9 ? hasRaw : field == 4 ? hasFloats : hasDoubles) = true;
        if (!in.Skip(static_cast<int>(n)))
          break;
      } else if (field == 2 && (tag & 7) == 0) {
        uint32_t v = 0;
        if (!in.ReadVarint32(&v))
          break;
        dtype = static_cast<int32_t>(v);
      } else if (!skip(tag)) {
        break;
      }
    }
    in.PopLimit(limit);
    if (hasRaw)
      found[name] = raw;
    else if (hasFloats && dtype == onnx::TensorProto::FLOAT)
      found[name] = floats;
    else if (hasDoubles && dtype == onnx::TensorProto::DOUBLE)
      found[name] = doubles;
  };
  while (uint32_t tag = in.ReadTag()) {
    if (tag != ((7u << 3) | 2)) {
      if (!skip(tag))
        break;
      continue;
    }
    uint32_t graphSize = 0;
    if (!in.ReadVarint32(&graphSize))
      break;
    CodedInputStream::Limit graph = in.PushLimit(static_cast<int>(graphSize));
    while (uint32_t inner = in.ReadTag()) {
      uint32_t size = 0;
      if (inner == ((5u << 3) | 2)) {
        if (!in.ReadVarint32(&size))
          break;
        tensor(size);
      } else if (!skip(inner)) {
        break;
      }
    }
    in.PopLimit(graph);
  }
  return found;
}

/// Whether ONNX data of type `onnxType` is stored (raw) as the IR's `t`.
static bool hasIRLayout(int32_t onnxType, Type t) {
  using TP = onnx::TensorProto;
  return (onnxType == TP::FLOAT && t.isF32()) ||
         (onnxType == TP::DOUBLE && t.isF64()) ||
         (onnxType == TP::INT64 && t.isInteger(64)) ||
         (onnxType == TP::INT32 && t.isInteger(32)) ||
         (onnxType == TP::INT16 && t.isInteger(16)) ||
         (onnxType == TP::INT8 && t.isInteger(8)) ||
         (onnxType == TP::FLOAT16 && t.isF16()) ||
         (onnxType == TP::BFLOAT16 && t.isBF16()) ||
         (onnxType == TP::BOOL && t.isInteger(1));
}

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef path, const ImportOptions &options)
      : state(&ctx) {
    state.options = &options;
    state.path = path.str();
  }

  OwningOpRef<ModuleOp> run();

private:
  InFlightDiagnostic fileError() { return emitError(state.fileLoc()); }
  Location nodeLoc(const onnx::NodeProto &node) {
    return NameLoc::get(StringAttr::get(state.ctx, node.name()),
                        state.fileLoc());
  }
  InFlightDiagnostic nodeError(const onnx::NodeProto &node) {
    InFlightDiagnostic diag = emitError(nodeLoc(node));
    diag << nodeLabel(node) << ": ";
    return diag;
  }
  OwningOpRef<ModuleOp> build();
  LogicalResult parse();
  LogicalResult checkOpsets();
  LogicalResult collectGraphNames();
  LogicalResult checkNode(const onnx::NodeProto &node);
  LogicalResult checkSchema(const onnx::NodeProto &node, StringRef domain,
                            int64_t opset);
  LogicalResult bindDims();
  void inferShapes(ArrayRef<const onnx::NodeProto *> order);
  /// Reports what ONNX's checker found: an error when the model is within
  /// what this ONNX library knows (its IR version and opsets), a warning
  /// otherwise.
  LogicalResult reportChecker(StringRef message);
  LogicalResult orderNodes(std::vector<const onnx::NodeProto *> &order);
  LogicalResult checkExternalData(const onnx::TensorProto &init,
                                  int64_t elements, StringAttr &file,
                                  int64_t &offset, int64_t &length,
                                  stp::DataLocation &location);
  LogicalResult importNode(const onnx::NodeProto &node);
  LogicalResult checkNodeOutputs(NodeContext &ctx);

  ImportState state;
  onnx::ModelProto model;
  /// Embedded initializers' byte ranges in the model file.
  llvm::StringMap<EmbeddedData> embedded;
  llvm::StringSet<> initializerNames;
  /// What ONNX's checker found (empty: nothing), reported once the import
  /// got through stpar's own, more specific validation.
  std::string checkerFinding;
  /// Graph inputs and initializers: the values there before any node runs.
  llvm::StringSet<> graphNames;
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
  if (!model.has_graph())
    return fileError() << "not a valid ONNX model: it has no graph";
  if (model.ir_version() <= 0)
    return fileError() << "not a valid ONNX model: no IR version";
  if (model.graph().node_size() == 0)
    return fileError() << "the model's graph is empty (no nodes)";
  embedded = findEmbeddedData(bytes);
  return success();
}

LogicalResult Importer::checkOpsets() {
  for (const onnx::OperatorSetIdProto &opset : model.opset_import()) {
    StringRef domain = canonicalDomain(opset.domain());
    if (opset.version() < 1)
      return fileError() << "the model imports an invalid opset version "
                         << opset.version() << " for domain '"
                         << (domain.empty() ? "ai.onnx" : domain) << "'";
    state.opsets[domain] = opset.version();
  }
  if (!state.opsets.count(""))
    state.opsets[""] = 1;
  int64_t version = state.opsets[""];
  if (version > kMaxOpsetVersion)
    return fileError() << "the model uses opset " << version
                       << " of the default domain; the newest supported is "
                       << kMaxOpsetVersion;
  return success();
}

LogicalResult Importer::collectGraphNames() {
  const onnx::GraphProto &graph = model.graph();
  for (const onnx::TensorProto &init : graph.initializer()) {
    if (init.name().empty())
      return fileError() << "an initializer has no name";
    if (!initializerNames.insert(init.name()).second)
      return fileError() << "initializer '" << init.name()
                         << "' is defined twice";
  }
  llvm::StringSet<> inputs;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    if (input.name().empty())
      return fileError() << "a graph input has no name";
    if (!inputs.insert(input.name()).second)
      return fileError() << "graph input '" << input.name()
                         << "' is declared twice";
  }
  // A graph input that an initializer gives its default value (IR >= 4)
  // must declare the initializer's dtype and shape.
  for (const onnx::TensorProto &init : graph.initializer()) {
    for (const onnx::ValueInfoProto &input : graph.input()) {
      if (input.name() != init.name() || !input.type().has_tensor_type())
        continue;
      const auto &type = input.type().tensor_type();
      auto shapeText = [](auto dims) {
        std::string text = "[";
        for (auto [i, d] : llvm::enumerate(dims))
          text += (i ? ", " : "") + d;
        return text + "]";
      };
      SmallVector<std::string> declared, stored;
      for (const auto &dim : type.shape().dim())
        declared.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value())
                                               : dim.dim_param());
      for (int64_t d : init.dims())
        stored.push_back(std::to_string(d));
      bool dtypeDiffers =
          type.elem_type() != 0 && type.elem_type() != init.data_type();
      bool shapeDiffers = false;
      if (type.has_shape()) {
        shapeDiffers = type.shape().dim_size() != init.dims_size();
        for (int i = 0; !shapeDiffers && i < init.dims_size(); ++i)
          shapeDiffers = type.shape().dim(i).has_dim_value() &&
                         type.shape().dim(i).dim_value() != init.dims(i);
      }
      if (dtypeDiffers || shapeDiffers)
        return fileError() << "graph input '" << input.name()
                           << "' is declared as "
                           << dtypeLabel(type.elem_type()) << " "
                           << shapeText(declared) << " but its initializer is "
                           << dtypeLabel(init.data_type()) << " "
                           << shapeText(stored);
    }
  }
  llvm::StringSet<> outputs;
  for (const onnx::ValueInfoProto &output : graph.output()) {
    if (output.name().empty())
      return fileError() << "a graph output has no name";
    if (!outputs.insert(output.name()).second)
      return fileError() << "graph output '" << output.name()
                         << "' is declared twice";
  }
  for (const auto &name : inputs)
    graphNames.insert(name.getKey());
  for (const auto &name : initializerNames)
    graphNames.insert(name.getKey());
  return success();
}

LogicalResult Importer::checkNode(const onnx::NodeProto &node) {
  if (node.op_type().empty())
    return nodeError(node) << "the node has no op type";
  StringRef domain = canonicalDomain(node.domain());
  auto opsetIt = state.opsets.find(domain);
  if (opsetIt == state.opsets.end())
    return nodeError(node) << "the model imports no opset for domain '"
                           << domain << "'";
  int64_t opset = opsetIt->second;
  const HandlerRegistry &registry = getRegistry();
  if (!registry.lookup(domain, node.op_type(), opset)) {
    if (registry.knows(domain, node.op_type()))
      return nodeError(node) << "opset " << opset
                             << " of this op is older than any version "
                                "stpar imports";
    if (domain != "" && domain != "com.microsoft")
      return nodeError(node) << "domain '" << domain << "' is not supported";
    return nodeError(node) << "op '" << node.op_type()
                           << "' is not supported";
  }
  llvm::StringSet<> attrNames;
  for (const onnx::AttributeProto &a : node.attribute()) {
    if (!attrNames.insert(a.name()).second)
      return nodeError(node) << "attribute '" << a.name()
                             << "' is given twice";
    if (a.has_g() || a.graphs_size())
      return nodeError(node)
             << "control flow with subgraphs is not supported";
  }
  return checkSchema(node, domain, opset);
}

/// Checks the node's arity and attributes against its ONNX schema, when
/// ONNX knows the op: handlers may then rely on required inputs and
/// attributes being present and attributes having their declared types.
LogicalResult Importer::checkSchema(const onnx::NodeProto &node,
                                    StringRef domain, int64_t opset) {
  const onnx::OpSchema *schema = nullptr;
  try {
    schema = onnx::OpSchemaRegistry::Schema(node.op_type(),
                                            static_cast<int>(opset),
                                            domain.str());
  } catch (const std::exception &) {
    return success();
  }
  if (!schema)
    return success();
  // Newer opsets than this ONNX knows reuse its newest schema: only the
  // lower bounds and attribute types are checked then (later versions may
  // take more inputs).
  const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance()
                           .Map();
  auto range = ranges.find(domain.str());
  bool knownVersion = range != ranges.end() && opset <= range->second.second;

  int numInputs = node.input_size();
  if (numInputs < schema->min_input())
    return nodeError(node) << "expects at least " << schema->min_input()
                           << " input" << (schema->min_input() == 1 ? "" : "s")
                           << ", got " << numInputs;
  if (knownVersion && numInputs > schema->max_input())
    return nodeError(node) << "expects at most " << schema->max_input()
                           << " input" << (schema->max_input() == 1 ? "" : "s")
                           << ", got " << numInputs;
  const auto &formals = schema->inputs();
  for (int i = 0; i < numInputs && !formals.empty(); ++i) {
    const auto &formal = formals[std::min<size_t>(i, formals.size() - 1)];
    if (formal.GetOption() != onnx::OpSchema::Single || !node.input(i).empty())
      continue;
    return nodeError(node) << "required input " << i << " ('"
                           << formal.GetName() << "') is empty";
  }
  int numOutputs = node.output_size();
  if (numOutputs < schema->min_output())
    return nodeError(node) << "expects at least " << schema->min_output()
                           << " output"
                           << (schema->min_output() == 1 ? "" : "s")
                           << ", got " << numOutputs;
  if (knownVersion && numOutputs > schema->max_output())
    return nodeError(node) << "expects at most " << schema->max_output()
                           << " output"
                           << (schema->max_output() == 1 ? "" : "s")
                           << ", got " << numOutputs;
  const auto &attrs = schema->attributes();
  for (const auto &[name, formal] : attrs) {
    if (!formal.required)
      continue;
    const std::string &required = name;
    bool present =
        llvm::any_of(node.attribute(), [&](const onnx::AttributeProto &a) {
          return a.name() == required;
        });
    if (!present)
      return nodeError(node) << "missing required attribute '" << name << "'";
  }
  for (const onnx::AttributeProto &a : node.attribute()) {
    auto it = attrs.find(a.name());
    if (it == attrs.end() || it->second.type == onnx::AttributeProto::UNDEFINED)
      continue;
    onnx::AttributeProto::AttributeType actual = attrTypeOf(a);
    if (actual == onnx::AttributeProto::UNDEFINED)
      return nodeError(node) << "attribute '" << a.name()
                             << "' has no value (expected "
                             << attrTypeName(it->second.type) << ")";
    if (actual != it->second.type)
      return nodeError(node) << "attribute '" << a.name() << "' has type "
                             << attrTypeName(actual) << ", expected "
                             << attrTypeName(it->second.type);
  }
  return success();
}

LogicalResult Importer::bindDims() {
  const ImportOptions &options = *state.options;
  std::vector<std::string> unbound;
  llvm::StringSet<> used;
  std::vector<std::string> symbolic;
  onnx::GraphProto *graph = model.mutable_graph();
  for (auto &[name, value] : options.dims) {
    if (value < 0)
      return fileError() << "dim '" << name.str() << "' = " << value
                         << " is negative";
    if (value > kMaxDimValue)
      return fileError() << "dim '" << name.str() << "' = " << value
                         << " overflows (largest accepted: " << kMaxDimValue
                         << ")";
  }
  auto bind = [&](onnx::ValueInfoProto &info, bool required) -> LogicalResult {
    if (!info.has_type())
      return required ? fileError() << "graph input '" << info.name()
                                    << "' has no type"
                      : success();
    if (!info.type().has_tensor_type())
      return required ? fileError() << "graph input '" << info.name()
                                    << "' is not a tensor"
                      : success();
    if (!info.type().tensor_type().has_shape())
      return required ? fileError() << "graph input '" << info.name()
                                    << "' has no shape"
                      : success();
    auto *shape = info.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto [index, dim] : llvm::enumerate(*shape->mutable_dim())) {
      if (dim.has_dim_value()) {
        if (!required)
          continue;
        if (dim.dim_value() < 0)
          return fileError() << "graph input '" << info.name()
                             << "' has a negative dim " << dim.dim_value();
        if (dim.dim_value() > kMaxDimValue)
          return fileError() << "graph input '" << info.name() << "' dim "
                             << index << " = " << dim.dim_value()
                             << " overflows (largest accepted: "
                             << kMaxDimValue << ")";
        continue;
      }
      std::string name = dim.has_dim_param() ? dim.dim_param() : "";
      if (!name.empty() && !llvm::is_contained(symbolic, name))
        symbolic.push_back(name);
      auto it = options.dims.find(name);
      if (name.empty() || it == options.dims.end()) {
        if (required) {
          std::string label =
              name.empty() ? "<unnamed dim " + std::to_string(index) +
                                 " of '" + info.name() + "'>"
                           : name;
          if (!llvm::is_contained(unbound, label))
            unbound.push_back(label);
        }
        continue;
      }
      used.insert(name);
      dim.set_dim_value(it->second);
    }
    return success();
  };
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
  // Element counts (each dim is at most 2^40; their product may overflow).
  for (const onnx::ValueInfoProto &input : graph->input()) {
    if (initializerNames.contains(input.name()))
      continue;
    int64_t elements = 1;
    for (const auto &dim : input.type().tensor_type().shape().dim()) {
      if (dim.dim_value() == 0) {
        elements = 0;
        break;
      }
      if (elements > kMaxElements / dim.dim_value())
        return fileError() << "graph input '" << input.name()
                           << "' has more than " << kMaxElements
                           << " elements";
      elements *= dim.dim_value();
    }
  }
  for (onnx::ValueInfoProto &info : *graph->mutable_output())
    (void)bind(info, /*required=*/false);
  for (onnx::ValueInfoProto &info : *graph->mutable_value_info())
    (void)bind(info, /*required=*/false);
  // A --dim that names no symbolic dim is a typo, not a no-op.
  for (const auto &entry : options.dims) {
    if (used.contains(entry.getKey()))
      continue;
    InFlightDiagnostic diag = fileError();
    diag << "--dim " << entry.getKey() << " names no symbolic dim of the model";
    if (symbolic.empty()) {
      diag << " (it has none)";
    } else {
      diag << " (its symbolic dims: ";
      llvm::interleaveComma(symbolic, diag);
      diag << ")";
    }
    return failure();
  }
  return success();
}

void Importer::inferShapes(ArrayRef<const onnx::NodeProto *> order) {
  // Static shapes ONNX infers are used to cross-check the importer's own.
  // Inference errors are not fatal (ONNX 1.12 does not know newer ops). It
  // runs in a child process: ONNX's inference can crash on malformed models
  // (../shared/bad-inputs), and a dependency's crash must not be stpar's.
  // The child sends back the inferred value infos; if it dies, the import
  // goes on without the cross-check and says so.
  int fds[2];
  if (pipe(fds) != 0)
    return;
  pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (child == 0) {
    close(fds[0]);
    // A crash here ends the child quietly (not LLVM's crash report).
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP})
      signal(sig, SIG_DFL);
    onnx::GraphProto inferred;
    // ONNX's own checker first; its message travels back in the graph's
    // doc_string. It reads the nodes in topological order (stpar, like
    // ONNX Runtime, accepts any order) and, on a model of a newer IR
    // version, as if it were of the library's (so it reports what it can
    // check instead of only the version; reportChecker then warns).
    try {
      onnx::ModelProto checked = model;
      onnx::GraphProto *graph = checked.mutable_graph();
      graph->clear_node();
      int64_t opset = 0;
      for (const auto &entry : checked.opset_import())
        if (entry.domain().empty() || entry.domain() == "ai.onnx")
          opset = entry.version();
      bool extensions = false;
      for (const onnx::NodeProto *node : order) {
        onnx::NodeProto *copy = graph->add_node();
        *copy = *node;
        // Default-domain ops that ONNX Runtime registers beyond the
        // standard (LayerNormalization below opset 17,
        // SimplifiedLayerNormalization) and stpar imports as it does: the
        // checker would stop at "No Op registered"; it skips them under a
        // domain of their own and checks everything else.
        bool standardDomain =
            node->domain().empty() || node->domain() == "ai.onnx";
        if (standardDomain && getRegistry().knows("", node->op_type()) &&
            !onnx::OpSchemaRegistry::Schema(node->op_type(), int(opset), "")) {
          copy->set_domain("ai.stpar.onnxruntime");
          extensions = true;
        }
      }
      if (extensions) {
        auto *entry = checked.add_opset_import();
        entry->set_domain("ai.stpar.onnxruntime");
        entry->set_version(1);
      }
      if (checked.ir_version() > onnx::Version::IR_VERSION)
        checked.set_ir_version(onnx::Version::IR_VERSION);
      onnx::checker::check_model(checked);
    } catch (const std::exception &e) {
      inferred.set_doc_string(e.what()[0] ? e.what() : "(no message)");
    }
    try {
      onnx::ShapeInferenceOptions options;
      options.check_type = false;
      options.error_mode = 0;
      options.enable_data_propagation = true;
      onnx::shape_inference::InferShapes(
          model, onnx::OpSchemaRegistry::Instance(), options);
      *inferred.mutable_value_info() = model.graph().value_info();
    } catch (const std::exception &) {
    }
    std::string bytes;
    inferred.SerializeToString(&bytes);
    const char *p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      ssize_t n = write(fds[1], p, left);
      if (n <= 0)
        _exit(1);
      p += n;
      left -= size_t(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string bytes;
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    bytes.append(buffer, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  onnx::GraphProto inferred;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      !inferred.ParseFromString(bytes)) {
    emitWarning(state.fileLoc())
        << "ONNX shape inference failed on this model ("
        << (WIFSIGNALED(status)
                ? "killed by signal " + std::to_string(WTERMSIG(status))
                : std::string("no result"))
        << "); importing without its cross-check of shapes";
    return;
  }
  // External data is stpar's own check (weights may be absent on purpose
  // when only planning: `data = absent`), so the checker's view of it is
  // not repeated.
  if (!inferred.doc_string().empty() &&
      !StringRef(inferred.doc_string()).starts_with("Data of TensorProto"))
    checkerFinding = inferred.doc_string();
  *model.mutable_graph()->mutable_value_info() = inferred.value_info();
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

LogicalResult Importer::reportChecker(StringRef message) {
  // The checker of this ONNX library (1.12) knows IR versions and
  // default-domain opsets up to its own; on newer models it rejects what it
  // does not know, so there its finding is only a warning.
  int64_t knownOpset = 0, knownMlOpset = 0;
  const auto &ranges =
      onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  if (auto it = ranges.find(""); it != ranges.end())
    knownOpset = it->second.second;
  if (auto it = ranges.find("ai.onnx.ml"); it != ranges.end())
    knownMlOpset = it->second.second;
  int64_t opset = 0, mlOpset = 0;
  for (const auto &entry : model.opset_import()) {
    if (entry.domain().empty() || entry.domain() == "ai.onnx")
      opset = std::max<int64_t>(opset, entry.version());
    else if (entry.domain() == "ai.onnx.ml")
      mlOpset = std::max<int64_t>(mlOpset, entry.version());
  }
  int64_t knownIr = onnx::Version::IR_VERSION;
  bool applies = model.ir_version() <= knownIr && opset <= knownOpset &&
                 mlOpset <= knownMlOpset;
  StringRef first = message.trim().split('\n').first.trim();
  if (applies)
    return emitError(state.fileLoc())
           << "ONNX's checker rejects the model: " << first;
  emitWarning(state.fileLoc())
      << "ONNX's checker reports: " << first
      << " (a warning: this ONNX library knows IR versions up to " << knownIr
      << " and default-domain opsets up to " << knownOpset
      << "; the model has IR version " << model.ir_version() << " and opset "
      << opset << ")";
  return success();
}

LogicalResult
Importer::orderNodes(std::vector<const onnx::NodeProto *> &order) {
  const onnx::GraphProto &graph = model.graph();
  llvm::StringMap<int> producer;
  for (auto [index, node] : llvm::enumerate(graph.node()))
    for (const std::string &out : node.output()) {
      if (out.empty())
        continue;
      if (!producer.try_emplace(out, index).second || graphNames.contains(out))
        return nodeError(node)
               << "output '" << out
               << "' is also produced elsewhere (graph inputs, initializers "
                  "and node outputs must have unique names)";
    }
  std::vector<int> pending(graph.node_size(), 0);
  std::vector<std::vector<int>> users(graph.node_size());
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    for (const std::string &in : node.input()) {
      if (in.empty() || graphNames.contains(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return nodeError(node) << "input '" << in
                               << "' is produced by no node and is neither "
                                  "a graph input nor an initializer";
      ++pending[index];
      users[it->second].push_back(index);
    }
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
        return emitError(nodeLoc(graph.node(i)))
               << "the graph has a cycle through " << nodeLabel(graph.node(i));
  }
  return success();
}

/// Checks an external initializer's location, offset and length (its data
/// is never read) and finds whether its file exists.
LogicalResult Importer::checkExternalData(const onnx::TensorProto &init,
                                          int64_t elements, StringAttr &file,
                                          int64_t &offset, int64_t &length,
                                          stp::DataLocation &location) {
  MLIRContext *ctx = state.ctx;
  for (const onnx::StringStringEntryProto &entry : init.external_data()) {
    if (entry.key() == "location") {
      file = StringAttr::get(ctx, entry.value());
    } else if (entry.key() == "offset" || entry.key() == "length") {
      int64_t v = 0;
      if (StringRef(entry.value()).getAsInteger(10, v) || v < 0)
        return fileError() << "initializer '" << init.name()
                           << "' has an invalid external-data " << entry.key()
                           << " '" << entry.value() << "'";
      (entry.key() == "offset" ? offset : length) = v;
    }
  }
  if (!file || file.getValue().empty())
    return fileError() << "initializer '" << init.name()
                       << "' is external but names no file";
  StringRef rel = file.getValue();
  bool escapes = llvm::sys::path::is_absolute(rel) ||
                 llvm::any_of(llvm::make_range(llvm::sys::path::begin(rel),
                                               llvm::sys::path::end(rel)),
                              [](StringRef c) { return c == ".."; });
  if (escapes)
    return fileError() << "initializer '" << init.name()
                       << "' has its external data at '" << rel
                       << "', outside the model's folder (the location must "
                          "be a relative path without '..')";
  int64_t bytes = elements * dtypeWidth(init.data_type());
  if (length >= 0 && length != bytes)
    return fileError() << "initializer '" << init.name()
                       << "' has an external-data length of " << length
                       << " bytes, but its " << dtypeLabel(init.data_type())
                       << " data of " << elements << " elements takes "
                       << bytes;
  SmallString<256> dataPath(state.path);
  llvm::sys::path::remove_filename(dataPath);
  llvm::sys::path::append(dataPath, rel);
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(dataPath, status) ||
      !llvm::sys::fs::exists(status)) {
    location = stp::DataLocation::Absent;
    return success();
  }
  if (!llvm::sys::fs::is_regular_file(status))
    return fileError() << "initializer '" << init.name()
                       << "' has its external data in '" << rel
                       << "', which is not a regular file";
  // Symbolic links are resolved: the file itself must be inside the
  // model's folder too.
  SmallString<256> folder(state.path), realFolder, realData;
  llvm::sys::path::remove_filename(folder);
  if (folder.empty())
    folder = ".";
  if (llvm::sys::fs::real_path(folder, realFolder) ||
      llvm::sys::fs::real_path(dataPath, realData))
    return fileError() << "initializer '" << init.name()
                       << "': cannot resolve the path of its external data '"
                       << rel << "'";
  StringRef inside(realData);
  if (!inside.consume_front(realFolder) || inside.empty() ||
      !llvm::sys::path::is_separator(inside.front()))
    return fileError() << "initializer '" << init.name()
                       << "' has its external data at '" << rel
                       << "', which resolves (through a symbolic link) to '"
                       << realData << "', outside the model's folder";
  uint64_t size = status.getSize();
  if (static_cast<uint64_t>(offset) > size ||
      static_cast<uint64_t>(bytes) > size - offset)
    return fileError() << "initializer '" << init.name()
                       << "' has its external data at offset " << offset
                       << " (" << bytes << " bytes) past the end of '" << rel
                       << "' (" << size << " bytes)";
  location = stp::DataLocation::External;
  return success();
}

LogicalResult Importer::checkNodeOutputs(NodeContext &ctx) {
  const onnx::NodeProto &node = ctx.node;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (!ctx.hasOutput(i))
      continue;
    auto it = state.values.find(node.output(i));
    if (it == state.values.end() ||
        (!it->second.value && !it->second.constant))
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

LogicalResult Importer::importNode(const onnx::NodeProto &node) {
  StringRef domain = canonicalDomain(node.domain());
  int64_t opset = state.opsets.lookup(domain);
  NodeContext ctx(state, node, opset);
  // checkNode found the handler.
  const OpHandler *handler =
      getRegistry().lookup(domain, node.op_type(), opset);
  std::string label = nodeLabel(node);
  // Host folding: every given input constant, or an op that reads types.
  // The folder's diagnostics are dropped when it gives up (the handler then
  // reports the same problems or builds IR).
  bool allConst = ctx.numInputs() > 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i) && !ctx.constInput(i))
      allConst = false;
  SmallVector<CapturedDiag> foldDiags;
  if (handler->fold && (allConst || handler->foldsFromTypes)) {
    std::optional<std::vector<ConstTensor>> folded;
    {
      DiagCapture capture(state.ctx);
      try {
        folded = handler->fold(ctx);
      } catch (const std::exception &e) {
        // E.g. a shape from hostile constants too large to allocate.
        ctx.error() << "cannot evaluate the node on the host: " << e.what();
        folded = std::nullopt;
      }
      foldDiags = std::move(capture.diags);
    }
    if (folded && hasError(foldDiags)) {
      emitCaptured(foldDiags, label);
      return failure();
    }
    if (folded && llvm::all_of(*folded, [&](const ConstTensor &t) {
          return t.numElements() <= state.options->maxFoldElements;
        })) {
      for (auto [i, value] : llvm::enumerate(*folded))
        ctx.setOutputConst(i, std::move(value));
      SmallVector<CapturedDiag> diags(foldDiags);
      LogicalResult result = success();
      {
        DiagCapture capture(state.ctx);
        result = checkNodeOutputs(ctx);
        diags.append(capture.diags.begin(), capture.diags.end());
      }
      emitCaptured(diags, label);
      return result;
    }
  }
  Block *block = state.builder.getInsertionBlock();
  Operation *last = block->empty() ? nullptr : &block->back();
  LogicalResult result = failure();
  SmallVector<CapturedDiag> diags;
  {
    DiagCapture capture(state.ctx);
    try {
      result = handler->handler(ctx);
    } catch (const std::exception &e) {
      result = ctx.error() << "internal error: " << e.what();
    }
    if (succeeded(result) && !hasError(capture.diags)) {
      // Verify what the node built, so that a malformed op is reported at
      // its node rather than as an internal error of the whole module.
      auto first = last ? std::next(last->getIterator()) : block->begin();
      for (Operation &op : llvm::make_range(first, block->end()))
        if (failed(verify(&op))) {
          result = failure();
          break;
        }
    }
    if (succeeded(result) && !hasError(capture.diags))
      result = checkNodeOutputs(ctx);
    diags = std::move(capture.diags);
  }
  if (hasError(diags))
    result = failure();
  if (failed(result) && !hasError(diags)) {
    if (hasError(foldDiags))
      diags.append(foldDiags.begin(), foldDiags.end());
    else
      diags.push_back({DiagnosticSeverity::Error, ctx.loc(),
                       "the node could not be imported (internal error: no "
                       "reason given, please report)",
                       {}});
  }
  emitCaptured(diags, label);
  return result;
}

OwningOpRef<ModuleOp> Importer::run() {
  // The ONNX and protobuf code called here may throw (e.g. std::bad_alloc).
  try {
    return build();
  } catch (const std::exception &e) {
    fileError() << "internal error while importing: " << e.what();
    return {};
  }
}

OwningOpRef<ModuleOp> Importer::build() {
  MLIRContext *ctx = state.ctx;
  DialectRegistry registry;
  registerImportDialects(registry);
  ctx->appendDialectRegistry(registry);
  ctx->loadAllAvailableDialects();
  if (failed(parse()) || failed(checkOpsets()) || failed(collectGraphNames()))
    return {};
  onnx::GraphProto *graph = model.mutable_graph();
  for (const onnx::NodeProto &node : graph->node())
    if (failed(checkNode(node)))
      return {};
  std::vector<const onnx::NodeProto *> order;
  if (failed(orderNodes(order)))
    return {};
  for (const onnx::ValueInfoProto &output : graph->output())
    if (!graphNames.contains(output.name()) &&
        llvm::none_of(graph->node(), [&](const onnx::NodeProto &node) {
          return llvm::is_contained(node.output(), output.name());
        }))
      return fileError() << "graph output '" << output.name()
                         << "' is produced by no node",
             nullptr;
  if (failed(bindDims()))
    return {};
  inferShapes(order);

  OpBuilder &b = state.builder;
  Location fileLoc = state.fileLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());
  // The bound dims, for the passes that need them (the batch of -stp-plan).
  if (!state.options->dims.empty()) {
    SmallVector<NamedAttribute> dims;
    for (const auto &entry : state.options->dims)
      dims.push_back(b.getNamedAttr(entry.getKey(),
                                    b.getI64IntegerAttr(entry.getValue())));
    (*module)->setAttr(stp::STPDialect::kDimsAttrName,
                       b.getDictionaryAttr(dims));
  }
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;

  // Graph inputs (bindDims checked their types and shapes).
  for (const onnx::ValueInfoProto &input : graph->input()) {
    if (initializerNames.contains(input.name()))
      continue;
    const auto &tensorType = input.type().tensor_type();
    Type elem = convertDType(ctx, tensorType.elem_type());
    if (!elem)
      return emitError(fileLoc)
                 << "graph input '" << input.name()
                 << "' has unsupported dtype "
                 << dtypeLabel(tensorType.elem_type()),
             nullptr;
    if (isUnsignedDType(tensorType.elem_type()))
      return emitError(fileLoc)
                 << "graph input '" << input.name() << "' has dtype "
                 << dtypeLabel(tensorType.elem_type())
                 << ": unsigned integer tensors are not supported (stpar "
                    "computes integers as signed)",
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
  SmallVector<std::pair<std::string, ConstTensor>> initConstants;
  for (const onnx::TensorProto &init : graph->initializer()) {
    Type elem = convertDType(ctx, init.data_type());
    if (!elem)
      return emitError(fileLoc) << "initializer '" << init.name()
                                << "' has unsupported dtype "
                                << dtypeLabel(init.data_type()),
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
      if (elements > kMaxElements)
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
    if (isUnsignedDType(init.data_type()))
      return emitError(fileLoc)
                 << "initializer '" << init.name() << "' has dtype "
                 << dtypeLabel(init.data_type())
                 << ": unsigned integer parameters are not supported (stpar "
                    "computes integers as signed; only small tables folded "
                    "on the host may be unsigned)",
             nullptr;
    stp::DataLocation location = stp::DataLocation::Embedded;
    StringAttr file;
    int64_t offset = 0, length = -1;
    if (external) {
      if (failed(checkExternalData(init, elements, file, offset, length,
                                   location)))
        return {};
    } else {
      // Embedded weights are not read, but their size must match.
      int64_t width = dtypeWidth(init.data_type());
      if (init.has_raw_data()) {
        if (static_cast<int64_t>(init.raw_data().size()) != elements * width)
          return emitError(fileLoc)
                     << "initializer '" << init.name() << "' holds "
                     << init.raw_data().size() << " bytes of raw data, but "
                     << "its " << dtypeLabel(init.data_type()) << " data of "
                     << elements << " elements takes " << elements * width,
                 nullptr;
      } else if (typedValueCount(init) != elements) {
        return emitError(fileLoc)
                   << "initializer '" << init.name() << "' holds "
                   << typedValueCount(init) << " values, expected "
                   << elements,
               nullptr;
      }
      // Where the programs read the values at run time: the model file
      // itself, when its bytes are in the IR's layout.
      auto range = embedded.find(init.name());
      if (range != embedded.end() && hasIRLayout(init.data_type(), elem) &&
          range->second.length == elements * dtypeWidth(init.data_type())) {
        file = b.getStringAttr(llvm::sys::path::filename(state.path));
        offset = range->second.offset;
        length = range->second.length;
      }
    }
    argTypes.push_back(RankedTensorType::get(shape, elem));
    // ONNX does not record requires_grad: floating-point initializers with
    // more than one element are trainable unless their doc_string marks
    // them as buffers (as python/stpar-zoo does for masks and rotary
    // tables).
    bool trainable = isFloat && elements > 1 &&
                     !StringRef(init.doc_string()).starts_with("buffer");
    auto param = stp::ParamAttr::get(ctx, b.getStringAttr(init.name()),
                                     location, file, offset, length,
                                     trainable);
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
  if (!checkerFinding.empty() && failed(reportChecker(checkerFinding)))
    return {};
  return module;
}

OwningOpRef<ModuleOp>
stpar::onnximport::importONNXFile(StringRef path, MLIRContext &context,
                                  const ImportOptions &options) {
  Importer importer(context, path, options);
  return importer.run();
}

llvm::Error stpar::onnximport::parseDimBindings(
    llvm::ArrayRef<std::string> bindings, llvm::StringMap<int64_t> &dims,
    llvm::StringRef flag) {
  for (const std::string &binding : bindings) {
    auto [name, value] = llvm::StringRef(binding).split('=');
    int64_t v = 0;
    if (name.empty() || value.empty() || value.getAsInteger(10, v))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          flag + " expects NAME=VALUE with an integer VALUE, got '" +
              binding + "'");
    auto [it, inserted] = dims.try_emplace(name, v);
    if (!inserted && it->second != v)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          flag + " binds '" + name + "' twice (" + llvm::Twine(it->second) +
              " and " + llvm::Twine(v) + ")");
  }
  return llvm::Error::success();
}
