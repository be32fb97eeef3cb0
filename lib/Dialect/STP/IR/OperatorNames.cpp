//===- OperatorNames.cpp - stable names of a function's operators ---------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/OperatorNames.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

using namespace mlir;
using namespace stpar::stp;

std::string stpar::stp::getNodeName(Location loc) {
  std::string name;
  loc->walk([&](Location inner) {
    if (auto nameLoc = dyn_cast<NameLoc>(inner))
      if (!nameLoc.getName().getValue().empty()) {
        name = nameLoc.getName().str();
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  return name;
}

std::string stpar::stp::getFileName(Location loc) {
  std::string file;
  loc->walk([&](Location inner) {
    if (auto fileLoc = dyn_cast<FileLineColLoc>(inner)) {
      file = fileLoc.getFilename().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return file;
}

std::string stpar::stp::getPlanStepLabel(Operation *op, unsigned position) {
  std::string node = getNodeName(op->getLoc());
  if (!node.empty())
    return node;
  return (op->getName().getStringRef() + "#" + llvm::Twine(position)).str();
}

OperatorNames::OperatorNames(Block &block) {
  // How many top-level ops each node became.
  std::vector<std::string> nodes;
  llvm::StringMap<unsigned> total, seen;
  for (Operation &op : block) {
    ops.push_back(&op);
    nodes.push_back(getNodeName(op.getLoc()));
    if (!nodes.back().empty())
      ++total[nodes.back()];
  }
  for (auto [position, op] : llvm::enumerate(ops)) {
    const std::string &node = nodes[position];
    std::string name;
    if (node.empty()) {
      name = (op->getName().getStringRef() + "@" + llvm::Twine(position)).str();
    } else {
      // The node's last op (the one computing its output) carries the
      // plain name; the ops before it (tensor.empty, linalg.fill, ...) get
      // #1, #2, ... in program order.
      unsigned k = seen[node]++;
      name = k + 1 == total[node] ? node : node + "#" + std::to_string(k + 1);
    }
    // A node name that itself ends in "#k" could collide with a suffixed
    // one: keep the first and suffix the later one again.
    while (byName.count(name))
      name += "#" + std::to_string(seen[name]++);
    byName[name] = op;
    names[op] = std::move(name);
  }
}

llvm::StringRef OperatorNames::getName(Operation *op) const {
  auto it = names.find(op);
  return it == names.end() ? llvm::StringRef() : llvm::StringRef(it->second);
}

Operation *OperatorNames::lookup(llvm::StringRef name) const {
  return byName.lookup(name);
}
