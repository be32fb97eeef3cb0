//===- stpar.cpp - the stpar driver -----------------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar SUBCOMMAND [options]`: dispatches to the subcommands registered in
// the other files of this directory (see Commands.h).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "stpar/Version.inc"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace llvm;

namespace {
struct Registered {
  cl::SubCommand *subCommand;
  std::function<int()> run;
};

std::vector<Registered> &registry() {
  static std::vector<Registered> commands;
  return commands;
}
} // namespace

stpar::tools::CommandRegistration::CommandRegistration(
    cl::SubCommand &subCommand, std::function<int()> run) {
  registry().push_back({&subCommand, std::move(run)});
}

/// Hides the options that the linked LLVM and MLIR libraries register
/// (back-end, debug-counter, MLIR context options, ...): `stpar --help` lists
/// stpar's subcommands and their options only. The options stay usable.
static void hideLibraryOptions() {
  // Library options live in the top-level subcommand; stpar's own options
  // are all registered with one of its subcommands. Only the generic ones
  // (--help, --version) stay listed. (Done inside libLLVM: the options'
  // dynamic types live there.)
  static cl::OptionCategory topLevel("stpar");
  cl::HideUnrelatedOptions(topLevel, cl::SubCommand::getTopLevel());
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "stpar " << STPAR_VERSION << " (commit " << STPAR_COMMIT
       << "), spatial-temporal partitioning of transformer training graphs\n";
  });
  hideLibraryOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "stpar: spatial-temporal partitioning of transformer training graphs\n\n"
      "  stpar SUBCOMMAND --help   shows the options of one subcommand\n");
  for (const Registered &command : registry())
    if (*command.subCommand)
      return command.run();
  errs() << "stpar: error: no subcommand given; run 'stpar --help' for the "
            "list\n";
  return 1;
}
