//===- ImporterImpl.h - ONNX importer internals -----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Private to lib/Import/ONNX: host constants, the per-node context handed to
// op handlers, the handler registry and the IR-building helpers shared by
// the handlers.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_LIB_IMPORT_ONNX_IMPORTERIMPL_H
#define STPAR_LIB_IMPORT_ONNX_IMPORTERIMPL_H

#include "stpar/Import/ONNX/ONNXImporter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <vector>

namespace stpar::onnximport {

//===----------------------------------------------------------------------===//
// Host constants (shape-computation folding)
//===----------------------------------------------------------------------===//

/// A small tensor known at import time. Integer and boolean elements are
/// held in `ints`, floating ones in `floats`; `dtype` is the ONNX
/// TensorProto data type.
struct ConstTensor {
  int32_t dtype = onnx::TensorProto::INT64;
  llvm::SmallVector<int64_t> shape;
  std::vector<int64_t> ints;
  std::vector<double> floats;

  bool isFloat() const;
  int64_t numElements() const;
  /// Element `i` as a double / as an int64 (converting).
  double getFloat(int64_t i) const;
  int64_t getInt(int64_t i) const;
  /// All elements as int64 (for shapes, axes, indices).
  llvm::SmallVector<int64_t> toInts() const;

  static ConstTensor ofInts(llvm::ArrayRef<int64_t> values,
                            llvm::ArrayRef<int64_t> shape,
                            int32_t dtype = onnx::TensorProto::INT64);
  static ConstTensor ofFloats(llvm::ArrayRef<double> values,
                              llvm::ArrayRef<int64_t> shape,
                              int32_t dtype = onnx::TensorProto::FLOAT);
};

bool isFloatDType(int32_t dtype);
/// `v` converted to int64, saturating at the int64 range (NaN gives 0):
/// the plain conversion of such values is undefined behaviour.
int64_t saturatingToInt64(double v);
/// Reads the values of an in-file TensorProto (initializer or attribute);
/// std::nullopt with `error` set when external, missing or inconsistent.
std::optional<ConstTensor> readTensorForNode(const onnx::TensorProto &proto,
                                             std::string &error);
/// Readable name of an ONNX data type ("FLOAT", "INT64", ...).
llvm::StringRef dtypeName(int32_t dtype);

//===----------------------------------------------------------------------===//
// Import state and node context
//===----------------------------------------------------------------------===//

/// What an ONNX value name stands for during import: an SSA value, a host
/// constant, or both (a constant already materialized).
struct ImportedValue {
  mlir::Value value;
  std::optional<ConstTensor> constant;
};

struct ImportState {
  mlir::MLIRContext *ctx = nullptr;
  const ImportOptions *options = nullptr;
  std::string path;
  mlir::OpBuilder builder;
  llvm::StringMap<ImportedValue> values;
  /// Opset version per domain ("" is the default domain).
  llvm::StringMap<int64_t> opsets;
  /// Static shapes ONNX shape inference found, by value name.
  llvm::StringMap<llvm::SmallVector<int64_t>> inferredShapes;

  explicit ImportState(mlir::MLIRContext *ctx) : ctx(ctx), builder(ctx) {}

  mlir::Location fileLoc() const;
};

/// The node being imported, as handlers see it.
class NodeContext {
public:
  NodeContext(ImportState &state, const onnx::NodeProto &node, int64_t opset)
      : state(state), node(node), opset(opset) {}

  ImportState &state;
  const onnx::NodeProto &node;
  /// The opset version of the node's domain in this model.
  int64_t opset;

  mlir::OpBuilder &b() { return state.builder; }
  mlir::MLIRContext *ctx() { return state.ctx; }
  mlir::Location loc() const;

  /// Reports an error at this node: "node 'NAME' (OpType): ...".
  mlir::InFlightDiagnostic error();

  size_t numInputs() const { return node.input_size(); }
  size_t numOutputs() const { return node.output_size(); }
  /// Whether optional input `i` is given (present and non-empty).
  bool hasInput(size_t i) const;
  /// Whether output `i` is requested (present and non-empty).
  bool hasOutput(size_t i) const;
  /// Input `i` as an SSA value (materializing a constant if needed); null
  /// after reporting an error when it is missing.
  mlir::Value input(size_t i);
  /// Input `i` as a host constant, or null if it is not known at import
  /// time.
  const ConstTensor *constInput(size_t i);
  /// Input `i` as a host constant of integers, with an error naming `what`
  /// when it is not constant.
  std::optional<llvm::SmallVector<int64_t>> requireInts(size_t i,
                                                        llvm::StringRef what);
  /// The static type of input `i`.
  mlir::RankedTensorType inputType(size_t i);

  void setOutput(size_t i, mlir::Value value);
  void setOutputConst(size_t i, ConstTensor value);

  // Attributes.
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t getInt(llvm::StringRef name, int64_t dflt) const;
  float getFloat(llvm::StringRef name, float dflt) const;
  std::string getString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::optional<llvm::SmallVector<int64_t>> getInts(llvm::StringRef name) const;

  /// Checks that every dim of `shape` (named `what` in the message) is in
  /// [0, kMaxDimValue]; reports an error and returns false otherwise.
  bool checkDims(llvm::ArrayRef<int64_t> shape, llvm::StringRef what);

  /// Normalizes `axis` (possibly negative) against `rank`; reports an error
  /// and returns std::nullopt when out of range.
  std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);
};

//===----------------------------------------------------------------------===//
// Handler registry
//===----------------------------------------------------------------------===//

/// Imports one node; returns failure after reporting an error.
using HandlerFn = std::function<mlir::LogicalResult(NodeContext &)>;
/// Evaluates one node on host constants; returns std::nullopt when it cannot
/// (the handler then builds IR). Called only when every given input is a
/// host constant, or for ops that fold from static types (Shape, Size).
using FoldFn =
    std::function<std::optional<std::vector<ConstTensor>>(NodeContext &)>;

struct OpHandler {
  std::string domain;
  std::string opType;
  int64_t sinceVersion;
  HandlerFn handler;
  FoldFn fold;
  /// Fold even when inputs are not constants (the op reads only types).
  bool foldsFromTypes = false;
};

class HandlerRegistry {
public:
  void add(llvm::StringRef domain, llvm::StringRef opType,
           int64_t sinceVersion, HandlerFn handler, FoldFn fold = nullptr,
           bool foldsFromTypes = false);
  /// The handler for `opType` in `domain` with the newest since-version not
  /// above `opset`; null if none.
  const OpHandler *lookup(llvm::StringRef domain, llvm::StringRef opType,
                          int64_t opset) const;
  /// Whether any version of the op is known.
  bool knows(llvm::StringRef domain, llvm::StringRef opType) const;

private:
  std::vector<OpHandler> handlers;
};

// Registration of each group of handlers (one file each).
void registerElementwiseHandlers(HandlerRegistry &registry);
void registerLinearHandlers(HandlerRegistry &registry);
void registerDataMovementHandlers(HandlerRegistry &registry);
void registerReductionHandlers(HandlerRegistry &registry);
void registerNormalizationHandlers(HandlerRegistry &registry);
void registerSourceHandlers(HandlerRegistry &registry);
void registerContribHandlers(HandlerRegistry &registry);
void registerRotaryHandlers(HandlerRegistry &registry);
void registerAttentionHandlers(HandlerRegistry &registry);
void registerContribAttentionHandlers(HandlerRegistry &registry);

//===----------------------------------------------------------------------===//
// IR-building helpers (Builders.cpp)
//===----------------------------------------------------------------------===//

/// The MLIR element type of an ONNX data type, or null if unsupported.
mlir::Type convertDType(mlir::MLIRContext *ctx, int32_t dtype);
/// Whether `dtype` is an unsigned integer type (UINT8..UINT64). The IR holds
/// them signless, so only host-folded tables may be unsigned; graph inputs,
/// parameters and casts of computed values to them are rejected.
bool isUnsignedDType(int32_t dtype);
/// The ONNX data type of an MLIR element type (for constants).
int32_t toDType(mlir::Type type);

/// Numpy-style broadcast of two shapes; std::nullopt if incompatible.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Materializes a host constant as `arith.constant`.
mlir::Value materializeConstant(mlir::OpBuilder &b, mlir::Location loc,
                                const ConstTensor &constant);

/// A scalar constant of `type` (float or integer).
mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Type type, double value);

using BodyFn = llvm::function_ref<mlir::Value(
    mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

/// An elementwise `linalg.generic` over `inputs` broadcast (numpy rules) to
/// `outShape` (or to their common shape when empty), yielding
/// `body(elements)`; the result has element type `resultElem`.
mlir::Value buildElementwise(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::ValueRange inputs, mlir::Type resultElem,
                             BodyFn body,
                             std::optional<llvm::ArrayRef<int64_t>> outShape =
                                 std::nullopt);

/// Float `x + y` with numpy broadcasting (an elementwise generic of x's
/// element type).
mlir::Value buildAddF(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                      mlir::Value y);

/// `tensor.empty` filled with `value`.
mlir::Value buildFilled(mlir::OpBuilder &b, mlir::Location loc,
                        llvm::ArrayRef<int64_t> shape, mlir::Type elem,
                        double value);

/// Reshapes `value` to `shape` (same element count): tensor.collapse_shape
/// or tensor.expand_shape when one suffices, tensor.reshape otherwise.
mlir::Value buildReshape(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Value value, llvm::ArrayRef<int64_t> shape);

/// Converts `value`'s elements to `elem` (arith casts; bool <-> int <->
/// float).
mlir::Value convertElement(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value value, mlir::Type elem);

/// Batched matmul with numpy broadcasting of the batch dims (ONNX MatMul
/// semantics, rank >= 1 each), as one `linalg.generic`.
mlir::FailureOr<mlir::Value> buildMatMul(NodeContext &node, mlir::Value a,
                                         mlir::Value b);

/// `linalg.transpose` by `perm`.
mlir::Value buildTranspose(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value value, llvm::ArrayRef<int64_t> perm);

/// Static `tensor.extract_slice` with unit strides.
mlir::Value buildSlice(mlir::OpBuilder &b, mlir::Location loc,
                       mlir::Value value, llvm::ArrayRef<int64_t> offsets,
                       llvm::ArrayRef<int64_t> sizes,
                       llvm::ArrayRef<int64_t> strides = {});

/// Concatenation along `axis` (`tensor.concat`).
mlir::Value buildConcat(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::ValueRange values, int64_t axis);

/// Gather along `axis` with `indices` (ONNX Gather semantics, negative
/// indices wrap).
mlir::Value buildGather(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value data, mlir::Value indices, int64_t axis);

/// How a reduction combines elements.
enum class Combine { Add, Max, Min, Mul };

/// Reduction over `axes` with `combine` as one linalg.generic (initial
/// value: 0, the lowest, the highest value, 1), keeping reduced dims as size
/// 1 when `keepDims`.
mlir::Value buildReduce(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value value, llvm::ArrayRef<int64_t> axes,
                        bool keepDims, Combine combine);
/// Sum (or max when `isMax`) over `axes`.
inline mlir::Value buildReduce(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Value value, llvm::ArrayRef<int64_t> axes,
                               bool keepDims, bool isMax) {
  return buildReduce(b, loc, value, axes, keepDims,
                     isMax ? Combine::Max : Combine::Add);
}

/// GELU of one scalar in a linalg body: exact (erf) or tanh-approximated.
mlir::Value buildGeluValue(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value x, bool tanhApprox);

/// Rotary position embedding (Su et al. 2021, RoFormer Eq. 34; ONNX
/// RotaryEmbedding-23): rotates the first `rotaryDim` (0: all) of each
/// head's dims of `x` ([B, N, S, D], or [B, S, N*D] with `heads` > 0) by the
/// angles whose cosines and sines are `cosCache` / `sinCache`:
/// [max_position, >= rotaryDim/2] rows picked by `positions` [B, S], or
/// when `positions` is null already [B, S, >= rotaryDim/2]. Pairs are
/// halves of the rotated dims, or neighbours when `interleaved`. Returns the
/// rotated tensor (x's shape), or failure after an error at `node`.
mlir::FailureOr<mlir::Value> buildRotary(NodeContext &node, mlir::Value x,
                                         mlir::Value cosCache,
                                         mlir::Value sinCache,
                                         mlir::Value positions, int64_t heads,
                                         bool interleaved, int64_t rotaryDim);

} // namespace stpar::onnximport

#endif // STPAR_LIB_IMPORT_ONNX_IMPORTERIMPL_H
