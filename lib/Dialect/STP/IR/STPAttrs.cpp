//===- STPAttrs.cpp - stp attributes ----------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Verifiers, custom syntax and derived queries of the stp attributes.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace stpar::stp;

#include "stpar/Dialect/STP/IR/STPEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "stpar/Dialect/STP/IR/STPAttrs.cpp.inc"

void STPDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "stpar/Dialect/STP/IR/STPAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Largest device count any mesh may have; keeps products of axis sizes far
/// from int64 overflow.
static constexpr int64_t kMaxDevices = int64_t(1) << 32;

ParseResult stpar::stp::parseNumber(AsmParser &parser, double &value) {
  bool negative = succeeded(parser.parseOptionalMinus());
  uint64_t integer = 0;
  OptionalParseResult isInteger = parser.parseOptionalInteger(integer);
  if (isInteger.has_value()) {
    if (failed(*isInteger))
      return failure();
    value = static_cast<double>(integer);
  } else if (parser.parseFloat(value)) {
    return failure();
  }
  if (negative)
    value = -value;
  return success();
}

static bool isPositiveFinite(double v) { return std::isfinite(v) && v > 0; }

/// Emits `message` for `value` of field `field` unless it is positive and
/// finite.
static LogicalResult
checkPositive(function_ref<InFlightDiagnostic()> emitError, StringRef what,
              StringRef field, double value, StringRef unit) {
  if (isPositiveFinite(value))
    return success();
  return emitError() << what << " '" << field << "' must be a positive "
                     << unit << ", got " << value;
}

//===----------------------------------------------------------------------===//
// DeviceAttr, LinkAttr, ClusterAttr
//===----------------------------------------------------------------------===//

LogicalResult DeviceAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 F64Value fp32, std::optional<F64Value> tf32,
                                 std::optional<F64Value> fp16,
                                 std::optional<F64Value> bf16,
                                 int64_t hbmCapacity, F64Value hbmBandwidth) {
  if (failed(checkPositive(emitError, "device peak", "fp32", fp32, "FLOP/s")))
    return failure();
  std::pair<StringRef, std::optional<F64Value>> peaks[] = {
      {"tf32", tf32}, {"fp16", fp16}, {"bf16", bf16}};
  for (auto [name, peak] : peaks)
    if (peak && failed(checkPositive(emitError, "device peak", name, *peak,
                                     "FLOP/s (omit it if the device has none)")))
      return failure();
  if (hbmCapacity <= 0)
    return emitError() << "device 'hbm_capacity' must be a positive number "
                          "of bytes, got "
                       << hbmCapacity;
  return checkPositive(emitError, "device", "hbm_bandwidth", hbmBandwidth,
                       "bytes/s");
}

LogicalResult LinkAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               F64Value bandwidth, F64Value latency) {
  if (failed(checkPositive(emitError, "link", "bandwidth", bandwidth,
                           "bytes/s")))
    return failure();
  if (!std::isfinite(latency) || latency < 0.0)
    return emitError() << "link 'latency' must be a non-negative number of "
                          "seconds, got "
                       << latency;
  return success();
}

LogicalResult ClusterAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  StringRef name, int64_t nodes,
                                  int64_t devicesPerNode, DeviceAttr device,
                                  LinkAttr intraNode, LinkAttr interNode) {
  if (nodes < 1)
    return emitError() << "cluster 'nodes' must be at least 1, got " << nodes;
  if (devicesPerNode < 1)
    return emitError() << "cluster 'devices_per_node' must be at least 1, got "
                       << devicesPerNode;
  if (nodes > kMaxDevices / devicesPerNode)
    return emitError() << "cluster has more than " << kMaxDevices
                       << " devices";
  if (!device || !intraNode || !interNode)
    return emitError() << "cluster needs 'device', 'intra_node' and "
                          "'inter_node'";
  return success();
}

//===----------------------------------------------------------------------===//
// AxisAttr, MeshAttr
//===----------------------------------------------------------------------===//

LogicalResult AxisAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               StringAttr name, int64_t size) {
  if (!name || name.getValue().empty())
    return emitError() << "mesh axis name must not be empty";
  if (size < 1)
    return emitError() << "mesh axis \"" << name.getValue()
                       << "\" must have a size of at least 1, got " << size;
  return success();
}

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  // #stp.mesh<CLUSTER, ["name" = size, ...]>
  SMLoc loc = parser.getCurrentLocation();
  FailureOr<ClusterAttr> cluster;
  SmallVector<AxisAttr> axes;
  if (parser.parseLess())
    return {};
  cluster = FieldParser<ClusterAttr>::parse(parser);
  if (failed(cluster) || parser.parseComma())
    return {};
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size = 0;
    if (parser.parseString(&name) || parser.parseEqual() ||
        parser.parseInteger(size))
      return failure();
    axes.push_back(AxisAttr::getChecked(
        [&] { return parser.emitError(loc); }, parser.getContext(),
        StringAttr::get(parser.getContext(), name), size));
    return success(static_cast<bool>(axes.back()));
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseAxis) ||
      parser.parseGreater())
    return {};
  return MeshAttr::getChecked([&] { return parser.emitError(loc); },
                              parser.getContext(), *cluster, axes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printStrippedAttrOrType(getCluster());
  printer << ", [";
  llvm::interleaveComma(getAxes(), printer, [&](AxisAttr axis) {
    printer << "\"" << axis.getName().getValue() << "\" = " << axis.getSize();
  });
  printer << "]>";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ClusterAttr cluster, ArrayRef<AxisAttr> axes) {
  if (!cluster)
    return emitError() << "mesh needs a cluster";
  llvm::StringSet<> seen;
  int64_t product = 1;
  for (AxisAttr axis : axes) {
    if (!axis)
      return emitError() << "mesh axis must not be null";
    if (!seen.insert(axis.getName().getValue()).second)
      return emitError() << "duplicate mesh axis name \""
                         << axis.getName().getValue() << "\"";
    if (axis.getSize() > kMaxDevices / product)
      return emitError() << "mesh has more than " << kMaxDevices
                         << " devices";
    product *= axis.getSize();
  }
  if (product != cluster.getNumDevices()) {
    InFlightDiagnostic diag = emitError();
    diag << "mesh axis sizes multiply to " << product << " but the cluster has "
         << cluster.getNumDevices() << " devices (" << cluster.getNodes()
         << " nodes x " << cluster.getDevicesPerNode() << ")";
    return diag;
  }
  return success();
}

std::optional<unsigned> MeshAttr::findAxis(StringRef name) const {
  for (auto [index, axis] : llvm::enumerate(getAxes()))
    if (axis.getName().getValue() == name)
      return index;
  return std::nullopt;
}

int64_t MeshAttr::getAxisSize(StringRef name) const {
  std::optional<unsigned> index = findAxis(name);
  assert(index && "no such mesh axis");
  return getAxes()[*index].getSize();
}

int64_t MeshAttr::getNumDevices() const {
  int64_t product = 1;
  for (AxisAttr axis : getAxes())
    product *= axis.getSize();
  return product;
}

int64_t MeshAttr::getAxisStride(unsigned index) const {
  ArrayRef<AxisAttr> axes = getAxes();
  assert(index < axes.size() && "axis index out of range");
  int64_t stride = 1;
  for (AxisAttr axis : axes.drop_front(index + 1))
    stride *= axis.getSize();
  return stride;
}

AxisPlacement MeshAttr::getAxisPlacement(unsigned index) const {
  return stpar::cost::getAxisPlacement(getAxes()[index].getSize(),
                                       getAxisStride(index),
                                       getCluster().getDevicesPerNode());
}

//===----------------------------------------------------------------------===//
// LoopDimAttr
//===----------------------------------------------------------------------===//

/// Parses `"name" = extent [reduction|parallel] [{"axis", ...}] [padded]`.
static LoopDimAttr parseLoopBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  int64_t extent = 0;
  if (parser.parseString(&name) || parser.parseEqual() ||
      parser.parseInteger(extent))
    return {};
  LoopKind kind = LoopKind::Parallel;
  if (succeeded(parser.parseOptionalKeyword("reduction")))
    kind = LoopKind::Reduction;
  else if (succeeded(parser.parseOptionalKeyword("experts")))
    kind = LoopKind::Experts;
  else
    (void)parser.parseOptionalKeyword("parallel");
  SmallVector<StringAttr> split;
  if (succeeded(parser.parseOptionalLBrace())) {
    if (failed(parser.parseOptionalRBrace())) {
      auto parseAxis = [&]() -> ParseResult {
        std::string axis;
        if (parser.parseString(&axis))
          return failure();
        split.push_back(StringAttr::get(parser.getContext(), axis));
        return success();
      };
      if (parser.parseCommaSeparatedList(parseAxis) || parser.parseRBrace())
        return {};
    }
  }
  bool padded = succeeded(parser.parseOptionalKeyword("padded"));
  return LoopDimAttr::getChecked([&] { return parser.emitError(loc); },
                                 parser.getContext(),
                                 StringAttr::get(parser.getContext(), name),
                                 extent, kind, split, padded);
}

static void printLoopBody(AsmPrinter &printer, LoopDimAttr loop) {
  printer << "\"" << loop.getName().getValue() << "\" = " << loop.getExtent();
  if (loop.isReduction())
    printer << " reduction";
  if (loop.isExperts())
    printer << " experts";
  if (!loop.getSplit().empty()) {
    printer << " {";
    llvm::interleaveComma(loop.getSplit(), printer, [&](StringAttr axis) {
      printer << "\"" << axis.getValue() << "\"";
    });
    printer << "}";
  }
  if (loop.getPadded())
    printer << " padded";
}

Attribute LoopDimAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  LoopDimAttr loop = parseLoopBody(parser);
  if (!loop || parser.parseGreater())
    return {};
  return loop;
}

void LoopDimAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printLoopBody(printer, *this);
  printer << ">";
}

LogicalResult LoopDimAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  StringAttr name, int64_t extent,
                                  LoopKind kind, ArrayRef<StringAttr> split,
                                  bool padded) {
  if (!name || name.getValue().empty())
    return emitError() << "loop dimension name must not be empty";
  if (extent < 1)
    return emitError() << "loop dimension \"" << name.getValue()
                       << "\" must have an extent of at least 1, got "
                       << extent;
  for (StringAttr axis : split)
    if (!axis || axis.getValue().empty())
      return emitError() << "loop dimension \"" << name.getValue()
                         << "\" is split by an empty mesh axis name";
  return success();
}

//===----------------------------------------------------------------------===//
// TemporalAttr
//===----------------------------------------------------------------------===//

StringRef stpar::stp::stringifyPhase(Phase phase) {
  switch (phase) {
  case Phase::Forward:
    return "forward";
  case Phase::InputGrad:
    return "input_grad";
  case Phase::WeightGrad:
    return "weight_grad";
  }
  llvm_unreachable("unknown phase");
}

/// PrimePar's slice-index rules (ASPLOS'24, Section 4.2; ../shared/DESIGN.md):
/// F (r, r+c+t, c); B (r, r+c-1, c+t); G (r+t, r+c-1+d, c-1+d).
static AffineMap getPrimeParRule(MLIRContext *ctx, Phase phase) {
  AffineExpr r = getAffineDimExpr(0, ctx), c = getAffineDimExpr(1, ctx),
             t = getAffineDimExpr(2, ctx), d = getAffineSymbolExpr(0, ctx);
  switch (phase) {
  case Phase::Forward:
    return AffineMap::get(3, 0, {r, r + c + t, c}, ctx);
  case Phase::InputGrad:
    return AffineMap::get(3, 0, {r, r + c - 1, c + t}, ctx);
  case Phase::WeightGrad:
    return AffineMap::get(3, 1, {r + t, r + c - 1 + d, c - 1 + d}, ctx);
  }
  llvm_unreachable("unknown phase");
}

static constexpr Phase kPhases[] = {Phase::Forward, Phase::InputGrad,
                                    Phase::WeightGrad};

TemporalAttr TemporalAttr::get(MLIRContext *context, StringRef rowAxis,
                               StringRef colAxis, StringRef m, StringRef n,
                               StringRef k, int64_t steps) {
  auto str = [&](StringRef s) { return StringAttr::get(context, s); };
  return Base::get(context, str(rowAxis), str(colAxis), str(m), str(n), str(k),
                   steps, getPrimeParRule(context, Phase::Forward),
                   getPrimeParRule(context, Phase::InputGrad),
                   getPrimeParRule(context, Phase::WeightGrad));
}

AffineMap TemporalAttr::getRule(Phase phase) const {
  switch (phase) {
  case Phase::Forward:
    return getForward();
  case Phase::InputGrad:
    return getInputGrad();
  case Phase::WeightGrad:
    return getWeightGrad();
  }
  llvm_unreachable("unknown phase");
}

Attribute TemporalAttr::parse(AsmParser &parser, Type) {
  // <grid = ["row", "col"], matmul = ["m", "n", "k"], steps = q
  //  [, forward = MAP] [, input_grad = MAP] [, weight_grad = MAP]>
  SMLoc loc = parser.getCurrentLocation();
  MLIRContext *ctx = parser.getContext();
  SmallVector<StringAttr> grid, matmul;
  auto parseNames = [&](StringRef keyword, SmallVectorImpl<StringAttr> &out,
                        size_t count) -> ParseResult {
    SMLoc namesLoc = parser.getCurrentLocation();
    if (parser.parseKeyword(keyword) || parser.parseEqual() ||
        parser.parseCommaSeparatedList(
            AsmParser::Delimiter::Square, [&]() -> ParseResult {
              std::string name;
              if (parser.parseString(&name))
                return failure();
              out.push_back(StringAttr::get(ctx, name));
              return success();
            }))
      return failure();
    if (out.size() != count)
      return parser.emitError(namesLoc)
             << "'" << keyword << "' needs " << count << " names, got "
             << out.size();
    return success();
  };
  int64_t steps = 0;
  if (parser.parseLess() || parseNames("grid", grid, 2) ||
      parser.parseComma() || parseNames("matmul", matmul, 3) ||
      parser.parseComma() || parser.parseKeyword("steps") ||
      parser.parseEqual() || parser.parseInteger(steps))
    return {};
  AffineMap rules[3];
  for (auto [index, phase] : llvm::enumerate(kPhases)) {
    rules[index] = getPrimeParRule(ctx, phase);
  }
  size_t next = 0;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc keyLoc = parser.getCurrentLocation();
    std::string key;
    if (parser.parseKeywordOrString(&key))
      return {};
    size_t index = next;
    while (index < 3 && stringifyPhase(kPhases[index]) != key)
      ++index;
    if (index == 3) {
      parser.emitError(keyLoc)
          << "expected 'forward', 'input_grad' or 'weight_grad' (in this "
             "order), got '"
          << key << "'";
      return {};
    }
    if (parser.parseEqual() || parser.parseAffineMap(rules[index]))
      return {};
    next = index + 1;
  }
  if (parser.parseGreater())
    return {};
  return TemporalAttr::getChecked(
      [&] { return parser.emitError(loc); }, ctx, grid[0], grid[1], matmul[0],
      matmul[1], matmul[2], steps, rules[0], rules[1], rules[2]);
}

void TemporalAttr::print(AsmPrinter &printer) const {
  printer << "<grid = [\"" << getRowAxis().getValue() << "\", \""
          << getColAxis().getValue() << "\"], matmul = [\""
          << getM().getValue() << "\", \"" << getN().getValue() << "\", \""
          << getK().getValue() << "\"], steps = " << getSteps();
  // Rules equal to PrimePar's are implied and not printed.
  for (Phase phase : kPhases) {
    AffineMap rule = getRule(phase);
    if (rule != getPrimeParRule(getContext(), phase))
      printer << ", " << stringifyPhase(phase) << " = " << rule;
  }
  printer << ">";
}

LogicalResult
TemporalAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     StringAttr rowAxis, StringAttr colAxis, StringAttr m,
                     StringAttr n, StringAttr k, int64_t steps,
                     AffineMap forward, AffineMap inputGrad,
                     AffineMap weightGrad) {
  for (StringAttr name : {rowAxis, colAxis, m, n, k})
    if (!name || name.getValue().empty())
      return emitError() << "temporal primitive names must not be empty";
  if (rowAxis == colAxis)
    return emitError() << "temporal grid uses mesh axis \""
                       << rowAxis.getValue() << "\" twice";
  if (m == n || n == k || m == k)
    return emitError() << "temporal 'matmul' dims must be three different "
                          "loop dims";
  if (steps < 1)
    return emitError() << "temporal 'steps' must be at least 1, got "
                       << steps;
  AffineMap rules[] = {forward, inputGrad, weightGrad};
  for (auto [phase, rule] : llvm::zip(kPhases, rules)) {
    if (!rule || rule.getNumDims() != 3 || rule.getNumSymbols() > 1 ||
        rule.getNumResults() != 3)
      return emitError() << "temporal rule '" << stringifyPhase(phase)
                         << "' must map (r, c, t)[d] to (M, N, K) slice "
                            "indices: 3 dims, at most 1 symbol, 3 results";
  }
  return success();
}

/// Evaluates an affine expression at integer dims/symbols (no overflow for
/// the small values slice rules see).
static int64_t evaluate(AffineExpr expr, ArrayRef<int64_t> dims,
                        ArrayRef<int64_t> symbols) {
  if (auto cst = dyn_cast<AffineConstantExpr>(expr))
    return cst.getValue();
  if (auto dim = dyn_cast<AffineDimExpr>(expr))
    return dims[dim.getPosition()];
  if (auto sym = dyn_cast<AffineSymbolExpr>(expr))
    return symbols[sym.getPosition()];
  auto bin = cast<AffineBinaryOpExpr>(expr);
  int64_t lhs = evaluate(bin.getLHS(), dims, symbols);
  int64_t rhs = evaluate(bin.getRHS(), dims, symbols);
  switch (expr.getKind()) {
  case AffineExprKind::Add:
    return lhs + rhs;
  case AffineExprKind::Mul:
    return lhs * rhs;
  case AffineExprKind::Mod:
    return rhs == 0 ? 0 : ((lhs % rhs) + rhs) % rhs;
  case AffineExprKind::FloorDiv:
    return rhs == 0 ? 0 : llvm::divideFloorSigned(lhs, rhs);
  case AffineExprKind::CeilDiv:
    return rhs == 0 ? 0 : llvm::divideCeilSigned(lhs, rhs);
  default:
    llvm_unreachable("unexpected affine expression kind");
  }
}

std::array<int64_t, 3> stpar::stp::evaluateTemporalRule(AffineMap rule,
                                                        int64_t r, int64_t c,
                                                        int64_t t, int64_t q) {
  int64_t dims[] = {r, c, t};
  int64_t symbols[] = {t == q - 1 ? 1 : 0};
  std::array<int64_t, 3> slices;
  for (unsigned i = 0; i < 3; ++i) {
    int64_t v = evaluate(rule.getResult(i), dims,
                         ArrayRef<int64_t>(symbols, rule.getNumSymbols()));
    slices[i] = ((v % q) + q) % q;
  }
  return slices;
}

LogicalResult stpar::stp::verifyTemporalRule(
    function_ref<InFlightDiagnostic()> emitError, Phase phase, AffineMap rule,
    int64_t q) {
  // The two input operands of each phase, as pairs of (M, N, K) positions,
  // and their names: F reads I[M,N], W[N,K]; B reads dO[M,K], W[N,K];
  // G reads I[M,N], dO[M,K].
  struct Operand {
    StringRef name;
    unsigned dimA, dimB;
  };
  static constexpr StringLiteral dimNames[] = {"M", "N", "K"};
  Operand operands[2];
  switch (phase) {
  case Phase::Forward:
    operands[0] = {"I", 0, 1};
    operands[1] = {"W", 1, 2};
    break;
  case Phase::InputGrad:
    operands[0] = {"dO", 0, 2};
    operands[1] = {"W", 1, 2};
    break;
  case Phase::WeightGrad:
    operands[0] = {"I", 0, 1};
    operands[1] = {"dO", 0, 2};
    break;
  }
  StringRef phaseName = stringifyPhase(phase);
  // First (device, step) computing each block product, -1 if none yet.
  std::vector<int64_t> blockOwner(q * q * q, -1);
  for (int64_t t = 0; t < q; ++t) {
    for (const Operand &operand : operands) {
      std::vector<int64_t> sliceOwner(q * q, -1);
      for (int64_t r = 0; r < q; ++r) {
        for (int64_t c = 0; c < q; ++c) {
          std::array<int64_t, 3> s = evaluateTemporalRule(rule, r, c, t, q);
          int64_t slice = s[operand.dimA] * q + s[operand.dimB];
          int64_t device = r * q + c;
          if (sliceOwner[slice] >= 0) {
            int64_t other = sliceOwner[slice];
            return emitError()
                   << "temporal rule '" << phaseName << "' replicates slice ("
                   << dimNames[operand.dimA] << "=" << s[operand.dimA] << ", "
                   << dimNames[operand.dimB] << "=" << s[operand.dimB]
                   << ") of operand " << operand.name << " at step " << t
                   << ": devices (" << other / q << ", " << other % q
                   << ") and (" << r << ", " << c << ") both use it";
          }
          sliceOwner[slice] = device;
        }
      }
    }
    for (int64_t r = 0; r < q; ++r) {
      for (int64_t c = 0; c < q; ++c) {
        std::array<int64_t, 3> s = evaluateTemporalRule(rule, r, c, t, q);
        int64_t block = (s[0] * q + s[1]) * q + s[2];
        int64_t here = (r * q + c) * q + t;
        if (blockOwner[block] >= 0) {
          int64_t other = blockOwner[block];
          int64_t otherDevice = other / q;
          return emitError()
                 << "temporal rule '" << phaseName << "' computes block (M="
                 << s[0] << ", N=" << s[1] << ", K=" << s[2]
                 << ") twice: device (" << otherDevice / q << ", "
                 << otherDevice % q << ") at step " << other % q
                 << " and device (" << r << ", " << c << ") at step " << t;
        }
        blockOwner[block] = here;
      }
    }
  }
  // q^2 devices x q steps = q^3 distinct blocks: every block is covered.
  return success();
}

//===----------------------------------------------------------------------===//
// PartitionSpecAttr
//===----------------------------------------------------------------------===//

Attribute PartitionSpecAttr::parse(AsmParser &parser, Type) {
  // <MESH, loops = [LOOP, ...] [, temporal = TEMPORAL]>
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess())
    return {};
  FailureOr<MeshAttr> mesh = FieldParser<MeshAttr>::parse(parser);
  if (failed(mesh) || parser.parseComma() || parser.parseKeyword("loops") ||
      parser.parseEqual())
    return {};
  SmallVector<LoopDimAttr> loops;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            LoopDimAttr loop = parseLoopBody(parser);
            if (!loop)
              return failure();
            loops.push_back(loop);
            return success();
          }))
    return {};
  TemporalAttr temporal;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("temporal") || parser.parseEqual())
      return {};
    FailureOr<TemporalAttr> parsed = FieldParser<TemporalAttr>::parse(parser);
    if (failed(parsed))
      return {};
    temporal = *parsed;
  }
  if (parser.parseGreater())
    return {};
  return PartitionSpecAttr::getChecked([&] { return parser.emitError(loc); },
                                       parser.getContext(), *mesh, loops,
                                       temporal);
}

void PartitionSpecAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printStrippedAttrOrType(getMesh());
  printer << ", loops = [";
  llvm::interleaveComma(getLoops(), printer,
                        [&](LoopDimAttr loop) { printLoopBody(printer, loop); });
  printer << "]";
  if (TemporalAttr temporal = getTemporal()) {
    printer << ", temporal = ";
    printer.printStrippedAttrOrType(temporal);
  }
  printer << ">";
}

LoopDimAttr PartitionSpecAttr::findLoop(StringRef name) const {
  for (LoopDimAttr loop : getLoops())
    if (loop.getName().getValue() == name)
      return loop;
  return {};
}

int64_t PartitionSpecAttr::getNumPieces(LoopDimAttr loop) const {
  MeshAttr mesh = getMesh();
  int64_t pieces = 1;
  for (StringAttr axis : loop.getSplit())
    pieces *= mesh.getAxisSize(axis.getValue());
  if (TemporalAttr temporal = getTemporal()) {
    StringAttr name = loop.getName();
    if (name == temporal.getM() || name == temporal.getN() ||
        name == temporal.getK())
      pieces *= mesh.getAxisSize(temporal.getRowAxis().getValue());
  }
  return pieces;
}

LogicalResult
PartitionSpecAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          MeshAttr mesh, ArrayRef<LoopDimAttr> loops,
                          TemporalAttr temporal) {
  if (!mesh)
    return emitError() << "partition spec needs a mesh";
  llvm::StringSet<> loopNames;
  // Where each mesh axis is used, for "used twice" messages.
  llvm::StringMap<std::string> axisUse;
  auto useAxis = [&](StringAttr axis, const Twine &where) -> LogicalResult {
    if (!mesh.findAxis(axis.getValue()))
      return emitError() << "unknown mesh axis \"" << axis.getValue()
                         << "\" in " << where;
    auto [it, inserted] = axisUse.try_emplace(axis.getValue(), where.str());
    if (!inserted)
      return emitError() << "mesh axis \"" << axis.getValue()
                         << "\" is used twice in one partition spec: in "
                         << it->second << " and in " << where;
    return success();
  };
  for (LoopDimAttr loop : loops) {
    if (!loop)
      return emitError() << "loop dimension must not be null";
    StringRef name = loop.getName().getValue();
    if (!loopNames.insert(name).second)
      return emitError() << "duplicate loop dimension \"" << name << "\"";
    if (loop.isExperts())
      continue;
    for (StringAttr axis : loop.getSplit())
      if (failed(useAxis(axis, "the split of loop \"" + name + "\"")))
        return failure();
  }
  // Expert parallelism: an experts loop's axes split a token loop too.
  llvm::StringSet<> expertAxes;
  for (LoopDimAttr loop : loops) {
    if (!loop.isExperts())
      continue;
    for (StringAttr axis : loop.getSplit()) {
      if (!mesh.findAxis(axis.getValue()))
        return emitError() << "unknown mesh axis \"" << axis.getValue()
                           << "\" in the split of loop \""
                           << loop.getName().getValue() << "\"";
      if (!axisUse.count(axis.getValue()))
        return emitError()
               << "mesh axis \"" << axis.getValue()
               << "\" splits the experts loop \"" << loop.getName().getValue()
               << "\" but no other loop (expert parallelism exchanges the "
                  "tokens of the ranks that split the tokens)";
      if (!expertAxes.insert(axis.getValue()).second)
        return emitError() << "mesh axis \"" << axis.getValue()
                           << "\" is used twice by experts loops";
    }
  }
  if (temporal) {
    StringRef row = temporal.getRowAxis().getValue();
    StringRef col = temporal.getColAxis().getValue();
    if (failed(useAxis(temporal.getRowAxis(), "the temporal grid")) ||
        failed(useAxis(temporal.getColAxis(), "the temporal grid")))
      return failure();
    int64_t q = mesh.getAxisSize(row);
    if (mesh.getAxisSize(col) != q)
      return emitError() << "temporal grid is not square: axis \"" << row
                         << "\" has " << q << " devices, axis \"" << col
                         << "\" has " << mesh.getAxisSize(col);
    if (temporal.getSteps() != q)
      return emitError() << "temporal primitive on a " << q << "x" << q
                         << " grid needs " << q << " steps, got "
                         << temporal.getSteps();
    // The product of one phase: the forward O = I * W reduces N, the input
    // gradient dI = dO * W^T reduces K, the weight gradient dW = I^T * dO
    // reduces M. Exactly one of the three dims is a reduction loop.
    struct Role {
      StringAttr name;
      StringLiteral role;
    } roles[] = {
        {temporal.getM(), "M"}, {temporal.getN(), "N"}, {temporal.getK(), "K"}};
    int64_t reductions = 0;
    for (const Role &role : roles) {
      LoopDimAttr loop;
      for (LoopDimAttr candidate : loops)
        if (candidate.getName() == role.name)
          loop = candidate;
      if (!loop)
        return emitError() << "temporal dim " << role.role << " names loop \""
                           << role.name.getValue()
                           << "\", which the spec does not have";
      reductions += loop.isReduction();
    }
    if (reductions != 1)
      return emitError()
             << "temporal dims M, N, K must be one reduction loop and two "
                "parallel loops (N reduced in the forward product, K in the "
                "input gradient, M in the weight gradient), got "
             << reductions << " reduction loops";
    for (Phase phase : kPhases)
      if (failed(verifyTemporalRule(emitError, phase, temporal.getRule(phase),
                                    q)))
        return failure();
  }
  // Divisibility, now that every axis is known to exist.
  for (LoopDimAttr loop : loops) {
    int64_t pieces = 1;
    for (StringAttr axis : loop.getSplit())
      pieces *= mesh.getAxisSize(axis.getValue());
    if (temporal && (loop.getName() == temporal.getM() ||
                     loop.getName() == temporal.getN() ||
                     loop.getName() == temporal.getK()))
      pieces *= mesh.getAxisSize(temporal.getRowAxis().getValue());
    if (loop.getExtent() % pieces != 0 && !loop.getPadded())
      return emitError() << "loop \"" << loop.getName().getValue()
                         << "\" of extent " << loop.getExtent()
                         << " is not divisible into its " << pieces
                         << " pieces; mark it 'padded' to pad it to "
                         << llvm::divideCeil(loop.getExtent(), pieces) * pieces;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ParamAttr
//===----------------------------------------------------------------------===//

LogicalResult ParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringAttr name, DataLocation data,
                                StringAttr file, int64_t offset, int64_t length,
                                bool trainable) {
  if (!name || name.getValue().empty())
    return emitError() << "parameter name must not be empty";
  bool hasFile = file && !file.getValue().empty();
  // An embedded parameter names the model file when its bytes can be read
  // there in place; then its byte range is exact.
  if (data == DataLocation::Embedded && hasFile && length < 0)
    return emitError() << "embedded parameter \"" << name.getValue()
                       << "\" names a file but no length";
  if (data != DataLocation::Embedded && !hasFile)
    return emitError() << stringifyDataLocation(data) << " parameter \""
                       << name.getValue() << "\" needs a 'file'";
  if (offset < 0)
    return emitError() << "parameter \"" << name.getValue()
                       << "\" has a negative offset " << offset;
  if (length < -1)
    return emitError() << "parameter \"" << name.getValue()
                       << "\" has an invalid length " << length;
  return success();
}
