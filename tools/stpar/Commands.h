//===- Commands.h - subcommands of the stpar driver -------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Every `stpar SUBCOMMAND` lives in its own file under tools/stpar/ and
// registers itself with a static `CommandRegistration`:
//
//   static llvm::cl::SubCommand importCmd("import", "Import an ONNX model");
//   static int runImport() { ... }
//   static stpar::tools::CommandRegistration reg(importCmd, runImport);
//
// Options belong to their subcommand (`llvm::cl::sub(importCmd)`) and are
// turned into the library's options struct before the library is called.
// A command returns the process exit code: 0 on success, 1 on bad input
// (after printing a diagnostic).
//
//===----------------------------------------------------------------------===//

#ifndef STPAR_TOOLS_STPAR_COMMANDS_H
#define STPAR_TOOLS_STPAR_COMMANDS_H

#include "llvm/Support/CommandLine.h"

#include <functional>

namespace stpar::tools {

/// Registers `run` as the action of `subCommand`.
class CommandRegistration {
public:
  CommandRegistration(llvm::cl::SubCommand &subCommand,
                      std::function<int()> run);
};

} // namespace stpar::tools

#endif // STPAR_TOOLS_STPAR_COMMANDS_H
