//===- ClusterCommand.cpp - `stpar cluster show` ----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar cluster show NAME|FILE [--json]`: prints a built-in preset or a
// cluster file (docs/cluster-format.md); exit code 1 with a diagnostic
// naming the field for an invalid file or an unknown preset.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "stpar/Cost/Cluster.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static cl::SubCommand clusterCmd("cluster",
                                 "Show a cluster description: 'stpar cluster "
                                 "show NAME|FILE [--json]'");
static cl::list<std::string> clusterArgs(cl::Positional, cl::sub(clusterCmd),
                                         cl::desc("show NAME|FILE"));
static cl::opt<bool> clusterJSON("json", cl::sub(clusterCmd),
                                 cl::desc("Print the cluster as JSON"));

static int runCluster() {
  if (clusterArgs.size() != 2 || clusterArgs[0] != "show") {
    errs() << "stpar: error: usage: stpar cluster show NAME|FILE [--json] "
              "(presets: ";
    bool first = true;
    for (const std::string &name : stpar::cost::getPresetNames()) {
      errs() << (first ? "" : ", ") << name;
      first = false;
    }
    errs() << ")\n";
    return 1;
  }
  Expected<stpar::cost::Cluster> cluster =
      stpar::cost::loadCluster(clusterArgs[1]);
  if (!cluster) {
    errs() << "stpar: error: " << toString(cluster.takeError()) << "\n";
    return 1;
  }
  if (clusterJSON)
    outs() << formatv("{0:2}", stpar::cost::toJSON(*cluster)) << "\n";
  else
    stpar::cost::printCluster(outs(), *cluster);
  return 0;
}

static stpar::tools::CommandRegistration reg(clusterCmd, runCluster);
