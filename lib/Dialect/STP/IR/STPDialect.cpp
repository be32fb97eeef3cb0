//===- STPDialect.cpp - stp dialect -----------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Dialect registration, attribute aliases and the verifier of the dialect's
// discardable attributes (`stp.mesh`, `stp.spec`).
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace stpar::stp;

#include "stpar/Dialect/STP/IR/STPDialect.cpp.inc"

namespace {
/// Gives clusters, devices and meshes short aliases (`#cluster`, `#mesh`) so
/// partition specs that embed them stay readable.
struct STPOpAsmDialectInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;

  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    if (isa<ClusterAttr>(attr)) {
      os << "cluster";
      return AliasResult::OverridableAlias;
    }
    if (isa<MeshAttr>(attr)) {
      os << "mesh";
      return AliasResult::OverridableAlias;
    }
    if (isa<DeviceAttr>(attr)) {
      os << "device";
      return AliasResult::OverridableAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void STPDialect::initialize() {
  registerAttributes();
  registerOps();
  addInterfaces<STPOpAsmDialectInterface>();
}

/// The closest ancestor of `op` (or `op` itself) carrying `stp.mesh`.
static MeshAttr findEnclosingMesh(Operation *op) {
  for (Operation *cur = op; cur; cur = cur->getParentOp())
    if (auto mesh = cur->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName))
      return mesh;
  return {};
}

LogicalResult STPDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kMeshAttrName) {
    if (!isa<MeshAttr>(attr.getValue()))
      return op->emitOpError() << "attribute '" << kMeshAttrName
                               << "' must be a #stp.mesh, got "
                               << attr.getValue();
    return success();
  }
  if (name == kSpecAttrName) {
    auto spec = dyn_cast<PartitionSpecAttr>(attr.getValue());
    if (!spec)
      return op->emitOpError() << "attribute '" << kSpecAttrName
                               << "' must be a #stp.spec, got "
                               << attr.getValue();
    MeshAttr enclosing = findEnclosingMesh(op);
    if (enclosing && enclosing != spec.getMesh())
      return op->emitOpError()
             << "partition spec's mesh differs from the enclosing '"
             << kMeshAttrName << "' attribute";
    return success();
  }
  if (name == kCompositeAttrName) {
    auto kind = dyn_cast<StringAttr>(attr.getValue());
    if (!kind || (kind.getValue() != "gelu" && kind.getValue() != "moe"))
      return op->emitOpError()
             << "attribute '" << kCompositeAttrName
             << "' must be \"gelu\" or \"moe\", got " << attr.getValue();
    return success();
  }
  if (name == kGroupAttrName) {
    auto group = dyn_cast<IntegerAttr>(attr.getValue());
    if (!group || group.getValue().isNegative())
      return op->emitOpError()
             << "attribute '" << kGroupAttrName
             << "' must be a non-negative integer, got " << attr.getValue();
    return success();
  }
  if (name == kPrecisionAttrName) {
    auto value = dyn_cast<StringAttr>(attr.getValue());
    if (!value || value.getValue() != "mixed")
      return op->emitOpError()
             << "attribute '" << name << "' must be \"mixed\", got "
             << attr.getValue();
    return success();
  }
  if (name == kStageAttrName || name == kTransferAttrName ||
      name == kTransferGroupAttrName) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!value || value.getValue().isNegative())
      return op->emitOpError()
             << "attribute '" << name << "' must be a non-negative integer";
    return success();
  }
  if (name == kPartitionedAttrName || name == kDoubleBufferAttrName ||
      name == kMicroBatchLoopAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "attribute '" << name
                               << "' must be a unit attribute";
    return success();
  }
  if (name == kPlanStepAttrName || name == kFallbackAttrName ||
      name == kCollectiveAttrName) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitOpError() << "attribute '" << name
                               << "' must be a string";
    return success();
  }
  if (name == kPhaseAttrName) {
    auto phase = dyn_cast<StringAttr>(attr.getValue());
    static constexpr StringRef kPhases[] = {
        "forward",  "loss",      "input_grad", "weight_grad",
        "grad_sum", "optimizer", "recompute"};
    if (!phase || !llvm::is_contained(kPhases, phase.getValue()))
      return op->emitOpError()
             << "attribute '" << kPhaseAttrName
             << "' must be \"forward\", \"loss\", \"input_grad\", "
                "\"weight_grad\", \"grad_sum\", \"optimizer\" or "
                "\"recompute\", got "
             << attr.getValue();
    return success();
  }
  if (name == kPlanAttrName || name == kArenaAttrName ||
      name == kStreamsAttrName || name == kTrainingAttrName ||
      name == kPipelineScheduleAttrName || name == kPipelineAttrName) {
    if (!isa<DictionaryAttr>(attr.getValue()))
      return op->emitOpError() << "attribute '" << name
                               << "' must be a dictionary";
    return success();
  }
  if (name == kPlanOpsAttrName) {
    auto records = dyn_cast<ArrayAttr>(attr.getValue());
    if (!records || !llvm::all_of(records, [](Attribute r) {
          return isa<DictionaryAttr>(r);
        }))
      return op->emitOpError() << "attribute '" << name
                               << "' must be an array of dictionaries";
    return success();
  }
  if (name == kBuffersAttrName || name == kOddBuffersAttrName ||
      name == kArgBuffersAttrName) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || llvm::any_of(offsets.asArrayRef(),
                                 [](int64_t o) { return o < -1; }))
      return op->emitOpError() << "attribute '" << name
                               << "' must be an array<i64> of offsets >= -1";
    unsigned expected = name == kArgBuffersAttrName
                            ? (isa<FunctionOpInterface>(op)
                                   ? cast<FunctionOpInterface>(op)
                                         .getNumArguments()
                                   : 0)
                            : op->getNumResults();
    if (offsets.size() != expected)
      return op->emitOpError()
             << "attribute '" << name << "' has " << offsets.size()
             << " offsets for " << expected
             << (name == kArgBuffersAttrName ? " arguments" : " results");
    return success();
  }
  if (name == kEventsAttrName || name == kWaitsAttrName) {
    auto ids = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!ids || llvm::any_of(ids.asArrayRef(), [](int64_t i) { return i < 0; }) ||
        (name == kEventsAttrName && ids.size() != 2))
      return op->emitOpError()
             << "attribute '" << name << "' must be an array<i64> of "
             << (name == kEventsAttrName ? "two " : "")
             << "non-negative event ids";
    return success();
  }
  if (name == kAccumulateAttrName) {
    auto index = dyn_cast<IntegerAttr>(attr.getValue());
    if (!index || index.getValue().isNegative() ||
        index.getValue().getZExtValue() >= op->getNumOperands())
      return op->emitOpError() << "attribute '" << name
                               << "' must be the number of an operand";
    return success();
  }
  if (name == kGridAxesAttrName) {
    auto axes = dyn_cast<DenseI16ArrayAttr>(attr.getValue());
    if (!axes || llvm::any_of(axes.asArrayRef(), [](int16_t a) { return a < 0; }))
      return op->emitOpError() << "attribute '" << name
                               << "' must be an array<i16> of grid axes";
    return success();
  }
  if (name == kDimsAttrName) {
    auto dims = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dims || !llvm::all_of(dims, [](NamedAttribute d) {
          auto value = dyn_cast<IntegerAttr>(d.getValue());
          return value && !value.getValue().isNegative();
        }))
      return op->emitOpError() << "attribute '" << name
                               << "' must be a dictionary of non-negative "
                                  "integers";
    return success();
  }
  return op->emitOpError() << "unknown stp attribute '" << name
                           << "' (expected '" << kMeshAttrName << "', '"
                           << kSpecAttrName << "', '" << kCompositeAttrName
                           << "', '" << kGroupAttrName << "', '" << kPlanAttrName
                           << "', '" << kPlanOpsAttrName << "', '" << kDimsAttrName
                           << "', a memory-plan attribute or a marker of "
                           << "the partitioned program)";
}

/// Verifies the argument/result attributes `stp.param` and `stp.name`.
static LogicalResult verifyValueAttr(Operation *op, NamedAttribute attr,
                                     bool isArgument) {
  StringRef name = attr.getName().getValue();
  if (name == STPDialect::kNameAttrName) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be a string";
    return success();
  }
  if (name == STPDialect::kSplitAttrName) {
    auto dims = dyn_cast<ArrayAttr>(attr.getValue());
    bool valid = dims && llvm::all_of(dims, [](Attribute dim) {
      auto axes = dyn_cast<ArrayAttr>(dim);
      return axes && llvm::all_of(axes, [](Attribute axis) {
        auto index = dyn_cast<IntegerAttr>(axis);
        return index && !index.getValue().isNegative();
      });
    });
    if (!valid)
      return op->emitOpError()
             << "'" << name
             << "' must be an array of arrays of grid-axis indices";
    return success();
  }
  if (!isArgument && name == STPDialect::kPipelineRankAttrName) {
    auto rank = dyn_cast<IntegerAttr>(attr.getValue());
    if (!rank || rank.getValue().isNegative())
      return op->emitOpError()
             << "'" << name << "' must be a non-negative integer";
    return success();
  }
  if (isArgument && name == STPDialect::kParamAttrName) {
    if (!isa<ParamAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be a #stp.param";
    return success();
  }
  return op->emitOpError() << "unknown stp " << (isArgument ? "argument" : "result")
                           << " attribute '" << name << "'";
}

LogicalResult STPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                   unsigned,
                                                   NamedAttribute attr) {
  return verifyValueAttr(op, attr, /*isArgument=*/true);
}

LogicalResult STPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                      unsigned,
                                                      NamedAttribute attr) {
  return verifyValueAttr(op, attr, /*isArgument=*/false);
}
