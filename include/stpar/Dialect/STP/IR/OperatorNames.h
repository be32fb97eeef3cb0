//===- OperatorNames.h - stable names of a function's operators -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Plans name operators by a stable name, never by their position in the
// function body (docs/plan-format.md, "Operator names"). The name of an op is
// the ONNX node name the importer records as its `NameLoc` (also inside a
// `FusedLoc`); when one node became several top-level ops, the last of them
// (the op computing the node's output) carries the plain name and the ones
// before it (tensor.empty, linalg.fill, ...) get `#1`, `#2`, ... appended in
// program order. An op without
// a node name is named `<op name>@<position>` (such names are not stable
// under insertion; the importer names every op it creates).
//
// Inserting or removing an op of another node never changes a name.
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_DIALECT_STP_IR_OPERATORNAMES_H
#define STPAR_DIALECT_STP_IR_OPERATORNAMES_H

#include "mlir/IR/Location.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace stpar::stp {

/// The ONNX node name in `loc` (a NameLoc, possibly inside a FusedLoc or a
/// CallSiteLoc), or "" when there is none.
std::string getNodeName(mlir::Location loc);

/// The file of `loc` (its first FileLineColLoc: for imported IR, the ONNX
/// model), or "" when there is none.
std::string getFileName(mlir::Location loc);

/// How the partitioned program names the operator `op` (at `position` in
/// its block) in `stp.plan_step`: its ONNX node name (getNodeName), else
/// `<op name>#<position>`. Unlike OperatorNames, the ops of one node share
/// the label.
std::string getPlanStepLabel(mlir::Operation *op, unsigned position);

/// The stable names of the ops of one block (the top-level ops of a
/// function body), both ways.
class OperatorNames {
public:
  explicit OperatorNames(mlir::Block &block);

  /// The name of `op` ("" when `op` is not an op of the block).
  llvm::StringRef getName(mlir::Operation *op) const;
  /// The op called `name`, or nullptr.
  mlir::Operation *lookup(llvm::StringRef name) const;
  /// The ops in program order.
  llvm::ArrayRef<mlir::Operation *> getOps() const { return ops; }

private:
  std::vector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, std::string> names;
  llvm::StringMap<mlir::Operation *> byName;
};

} // namespace stpar::stp

#endif // STPAR_DIALECT_STP_IR_OPERATORNAMES_H
