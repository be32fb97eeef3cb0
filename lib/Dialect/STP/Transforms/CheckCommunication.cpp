//===- CheckCommunication.cpp - the plan against its program ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Implements -stp-check-communication: totals the communication of a
// partitioned program per operator and phase (from the `stp.plan_step` of
// every collective) and compares it with what the plan predicted (the
// "communication" records of `stp.plan`, written by stpar plan from the
// search objective). docs/plan-format.md, "Plan check".
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/Passes.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"
#include "stpar/Dialect/STP/IR/STPOps.h"
#include "stpar/Dialect/STP/Transforms/Collectives.h"
#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>
#include <set>

namespace stpar::stp {
#define GEN_PASS_DEF_CHECKCOMMUNICATIONPASS
#include "stpar/Dialect/STP/Transforms/Passes.h.inc"
} // namespace stpar::stp

using namespace mlir;
using namespace stpar::stp;
namespace json = llvm::json;

std::optional<ProgramCommunication>
stpar::stp::getProgramCommunication(Operation *op,
                                    ArrayRef<int64_t> gridShape) {
  if (!isCommunicatingCollective(op) || op->getNumOperands() < 1)
    return std::nullopt;
  auto inType = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto outType = op->getNumResults()
                     ? dyn_cast<RankedTensorType>(op->getResult(0).getType())
                     : RankedTensorType();
  if (!inType || !outType || !inType.hasStaticShape() ||
      !outType.hasStaticShape())
    return std::nullopt;
  ProgramCommunication c;
  c.op = op;
  c.elementBytes = std::max<int64_t>(1, inType.getElementTypeBitWidth() / 8);
  double inElements = double(inType.getNumElements());
  double outElements = double(outType.getNumElements());
  using stpar::cost::Collective;
  ArrayRef<int16_t> axes;
  bool moves = true; // false for a permutation that keeps every block
  bool known = true;
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](shard::AllReduceOp o) {
        c.kind = Collective::AllReduce;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](shard::AllGatherOp o) {
        c.kind = Collective::AllGather;
        axes = o.getGridAxes();
        c.elements = outElements;
      })
      .Case([&](shard::ReduceScatterOp o) {
        c.kind = Collective::ReduceScatter;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](shard::AllToAllOp o) {
        c.kind = Collective::AllToAll;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](MoEAllToAllOp o) {
        // The rows each device sends in all (static: every token's top-k
        // rows, none dropped); how they split over the peers depends on
        // the routing. The counts' E int64 are not counted.
        c.kind = Collective::AllToAll;
        axes = o.getGridAxes();
        c.elements = double(o.getRoutedRows()) * double(inType.getDimSize(2));
        // A smart-schedule step moves the share of one group of g of the
        // P devices (uniform routing: the plan's assumption).
        if (int64_t g = o.getGroupSize()) {
          auto whole = cast<RankedTensorType>(
              o.getReverse() ? o.getResultRows().getType() : inType);
          auto local = cast<RankedTensorType>(
              o.getReverse() ? inType : o.getResultRows().getType());
          int64_t p = whole.getDimSize(0) / local.getDimSize(0);
          c.elements *= double(g) / double(p);
        }
      })
      .Case([&](MoEShadowBroadcastOp o) {
        // The shadowed experts' weights each device receives.
        c.kind = Collective::Broadcast;
        axes = o.getGridAxes();
        c.elements = outElements;
      })
      .Case([&](MoEShadowReduceOp o) {
        c.kind = Collective::Reduce;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](shard::ShiftOp o) {
        c.kind = Collective::RingShift;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](shard::SendOp o) {
        // A pipeline transfer (-stp-pipeline-stages); its receive is not
        // counted (elements each device sends).
        c.kind = Collective::PointToPoint;
        axes = o.getGridAxes();
        c.elements = inElements;
      })
      .Case([&](GridPermuteOp o) {
        // The busiest device's share: all of S when any block moves (the
        // cost model times the permutation by its slowest device).
        c.kind = Collective::PointToPoint;
        axes = o.getGridAxes();
        c.elements = inElements;
        moves = false;
        for (auto [j, s] : llvm::enumerate(o.getSources()))
          moves |= s != int64_t(j);
      })
      .Default([&](Operation *) { known = false; });
  if (!known)
    return std::nullopt;
  c.group = 1;
  for (int16_t a : axes) {
    c.axes.push_back(unsigned(a));
    if (a >= 0 && size_t(a) < gridShape.size())
      c.group *= gridShape[a];
  }
  // Elements each device sends once (Collectives.h's ring volumes).
  c.sentElements =
      moves ? stpar::cost::getRingVolume(c.kind, c.elements, c.group) : 0;
  // Executions per step: the trip counts of the enclosing loops.
  for (Operation *parent = op->getParentOp(); parent;
       parent = parent->getParentOp()) {
    auto loop = dyn_cast<scf::ForOp>(parent);
    if (!loop)
      continue;
    std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound());
    std::optional<int64_t> ub = getConstantIntValue(loop.getUpperBound());
    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    if (!lb || !ub || !step || *step <= 0) {
      c.knownCount = false;
      continue;
    }
    c.count *= double(std::max<int64_t>(0, (*ub - *lb + *step - 1) / *step));
  }
  // "<label> <phase>: <reason>" (Partition.cpp, markCollective).
  if (auto step =
          op->getAttrOfType<StringAttr>(STPDialect::kPlanStepAttrName)) {
    StringRef text = step.getValue();
    size_t colon = text.find(": ");
    StringRef head = colon == StringRef::npos ? text : text.take_front(colon);
    size_t space = head.rfind(' ');
    StringRef label = space == StringRef::npos ? head : head.take_front(space);
    if (space != StringRef::npos)
      c.phase = head.drop_front(space + 1).str();
    // The training step names an operator's gradient ops "<node>/grad",
    // "<node>/grad<k>" or "<node>/grad_<what>" (docs/training.md): they
    // are the operator's B and G.
    size_t slash = label.rfind('/');
    if (slash != StringRef::npos && slash > 0 &&
        label.drop_front(slash + 1).starts_with("grad"))
      label = label.take_front(slash);
    c.label = label.str();
  }
  return c;
}

namespace {

/// Totals of one (operator, phase) on one side.
struct Side {
  double elements = 0;
  /// "all-gather over x0" -> elements.
  std::map<std::string, double> parts;
};

struct Pair {
  Side plan, program;
};

constexpr const char *kAllSyncs = "(all parameters)";

std::string axesText(ArrayRef<std::string> names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "-" : s;
}

std::string partsText(const Side &side) {
  std::string s;
  for (const auto &[what, n] : side.parts)
    s += (s.empty() ? "" : "; ") + what + " " +
         llvm::formatv("{0}", int64_t(std::llround(n))).str();
  return s;
}

struct CheckCommunicationPass
    : public stpar::stp::impl::CheckCommunicationPassBase<
          CheckCommunicationPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("plan check: ") << message;
      signalPassFailure();
    };
    if (!module->hasAttr(STPDialect::kPartitionedAttrName))
      return fail("the module is not partitioned (run -stp-partition first)");
    auto mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
    auto summary =
        module->getAttrOfType<DictionaryAttr>(STPDialect::kPlanAttrName);
    if (!mesh || !summary)
      return fail("the module has no plan ('stp.mesh' and 'stp.plan'): "
                  "nothing to compare the program with");
    json::Value plan = convertAttrToJSON(summary);
    const json::Object *root = plan.getAsObject();
    const json::Array *predicted =
        root ? root->getArray("communication") : nullptr;
    if (!predicted) {
      const char *why = "the plan has no \"communication\" records (a plan "
                        "file written before they existed, or a hand-made "
                        "one): make it again with stpar plan";
      if (failOnDifference)
        return fail(why);
      module.emitWarning("plan check skipped: ") << why;
      return;
    }
    // The plan's micro-batches scale its per-micro-batch records; the
    // program's (a training step's loop, else one pass over the batch)
    // scale those that do not depend on the batch (per_micro_batch false).
    int64_t microBatches = 1, programMicroBatches = 1;
    if (const json::Object *m = root->getObject("mesh"))
      microBatches = m->getInteger("micro_batches").value_or(1);
    if (auto t = module->getAttrOfType<DictionaryAttr>(
            STPDialect::kTrainingAttrName))
      if (auto m = t.getAs<IntegerAttr>("micro_batches"))
        programMicroBatches = std::max<int64_t>(1, m.getInt());

    std::vector<std::string> gridNames;
    SmallVector<int64_t> gridShape;
    for (AxisAttr a : getGridAxes(mesh)) {
      gridNames.push_back(a.getName().getValue().str());
      gridShape.push_back(a.getSize());
    }

    // The program.
    using Key = std::pair<std::string, std::string>;
    llvm::MapVector<Key, Pair, std::map<Key, unsigned>> pairs;
    int64_t programWidth = 0, planWidth = 0;
    bool unknownCount = false;
    // B and G are compared together ("backward"): the program computes a
    // norm's input and weight gradients in one op (phase weight_grad)
    // where the plan charges the gradient's re-layout to B.
    // The gradient syncs: the program reduces a gradient where it is summed
    // (grad_sum) or where the optimizer reads it (optimizer: ZeRO's
    // reduce-scatter, and the all-gather of the updated shards); the plan
    // lists them per parameter (grad_sum).
    auto phaseKey = [](StringRef phase) -> std::string {
      if (phase == "input_grad" || phase == "weight_grad")
        return "backward";
      if (phase == "grad_sum" || phase == "optimizer")
        return "gradient sync";
      return phase.str();
    };
    // Gradient syncs and ZeRO's parameter gathers ("zero3:gather:<param>")
    // are compared as one total: the program issues them per parameter
    // under the op that reduces or reads them, the plan per operator.
    auto programKey = [&](StringRef label, StringRef phase) -> Key {
      if (phaseKey(phase) == "gradient sync" || label.starts_with("zero3:"))
        return {kAllSyncs, "gradient sync"};
      return {label.str(), phaseKey(phase)};
    };
    // The nodes the program computes: a plan made for the whole forward
    // graph also costs outputs a training step leaves out (a head its loss
    // does not read); those operators are listed, not compared.
    llvm::StringSet<> programNodes;
    module.walk([&](Operation *op) {
      std::string node = getNodeName(op->getLoc());
      if (!node.empty())
        programNodes.insert(node);
      std::optional<ProgramCommunication> c =
          getProgramCommunication(op, gridShape);
      if (!c)
        return;
      if (c->label.empty()) {
        c->label = "(unlabelled)";
        c->phase = "unlabelled";
      }
      unknownCount |= !c->knownCount;
      programWidth = std::max(programWidth, c->elementBytes);
      Pair &pair = pairs[programKey(c->label, c->phase)];
      std::vector<std::string> names;
      for (unsigned a : c->axes)
        names.push_back(a < gridNames.size() ? gridNames[a] : "?");
      double n = c->count * c->sentElements;
      pair.program.elements += n;
      pair.program.parts[stpar::cost::getCollectiveName(c->kind).str() +
                         " over " + axesText(names)] += n;
    });

    bool training = module->hasAttr(STPDialect::kTrainingAttrName);
    // The plan: per micro-batch, gradient syncs per step. A re-layout for
    // an operator the program leaves out (its `reader`) is listed under
    // that operator, wherever the plan issues it.
    for (const json::Value &v : *predicted) {
      const json::Object *item = v.getAsObject();
      if (!item)
        continue;
      std::string label = item->getString("label").value_or("").str();
      std::string phase = item->getString("phase").value_or("").str();
      if (label.empty())
        label = "(unlabelled)";
      std::string reader = item->getString("reader").value_or("").str();
      if (training && !programNodes.empty() && !reader.empty() &&
          !programNodes.contains(reader))
        label = reader;
      double sent = item->getNumber("sent_bytes").value_or(0);
      int64_t width = item->getInteger("element_bytes").value_or(2);
      if (sent <= 0)
        continue;
      planWidth = std::max(planWidth, width);
      bool perMicroBatch = item->getBoolean("per_micro_batch").value_or(true);
      double n = sent / double(std::max<int64_t>(1, width)) *
                 (phase == "grad_sum" ? 1.0
                  : perMicroBatch     ? double(microBatches)
                                      : double(programMicroBatches));
      std::vector<std::string> names;
      if (const json::Array *axes = item->getArray("axes"))
        for (const json::Value &a : *axes)
          names.push_back(a.getAsString().value_or("?").str());
      Pair &pair = pairs[phase == "grad_sum" ? Key(kAllSyncs, "gradient sync")
                                             : Key(label, phaseKey(phase))];
      pair.plan.elements += n;
      pair.plan.parts[item->getString("kind").value_or("?").str() + " over " +
                      axesText(names)] += n;
    }

    // Compared: F, and B + G in a training step. The rest is listed.
    // The gathers of the results (labelled `return`) make the outputs
    // whole for the caller; they are no part of a training step.
    // The gradient syncs are listed, not compared yet: the program gathers
    // ZeRO's updated parameters partly where they are next read and partly
    // with the returned results, which the plan does not tell apart.
    // Only a training step leaves operators out, and only a program that
    // names its ops (NameLoc) tells which.
    auto absent = [&](const Key &key) {
      return training && !programNodes.empty() && key.first != kAllSyncs &&
             key.first != "(unlabelled)" && key.first != "return" &&
             !programNodes.contains(key.first);
    };
    auto compared = [&](const Key &key) {
      StringRef phase = key.second;
      return key.first != "return" && !absent(key) &&
             (phase == "forward" || (training && phase == "backward"));
    };
    auto differs = [&](const Pair &p) {
      double a = p.plan.elements, b = p.program.elements;
      return std::fabs(a - b) > 1.0 + tolerance * std::max(a, b);
    };
    unsigned mismatches = 0, comparedPairs = 0;
    const Pair *first = nullptr;
    std::string firstName;
    for (auto &[key, pair] : pairs) {
      if (!compared(key))
        continue;
      ++comparedPairs;
      if (differs(pair)) {
        if (!first) {
          first = &pair;
          firstName = "'" + key.first + "' " + key.second;
        }
        ++mismatches;
      }
    }

    std::error_code ec;
    std::unique_ptr<llvm::raw_fd_ostream> file;
    llvm::raw_ostream *os = nullptr;
    if (report == "-") {
      os = &llvm::outs();
    } else if (!report.empty()) {
      file = std::make_unique<llvm::raw_fd_ostream>(report, ec);
      if (ec)
        return fail("cannot write '" + report + "': " + ec.message());
      os = file.get();
    }
    if (os) {
      *os << "plan check: elements sent per device per step, by operator "
             "and phase (plan: per micro-batch x "
          << microBatches << ")\n";
      if (programMicroBatches != microBatches)
        *os << "plan check: the program runs " << programMicroBatches
            << " micro-batch(es), the plan " << microBatches << "\n";
      *os << llvm::format("  %-40s %-12s %14s %14s  %s\n", "operator", "phase",
                          "plan", "program", "");
      for (auto &[key, pair] : pairs) {
        bool isCompared = compared(key);
        bool bad = isCompared && differs(pair);
        *os << llvm::format("  %-40s %-12s %14.0f %14.0f  %s\n",
                            key.first.c_str(), key.second.c_str(),
                            pair.plan.elements, pair.program.elements,
                            absent(key)   ? "(not in the program)"
                            : !isCompared ? "(not compared)"
                            : bad         ? "DIFFERS"
                                          : "ok");
        if (bad) {
          if (!pair.plan.parts.empty())
            *os << "      plan:    " << partsText(pair.plan) << "\n";
          if (!pair.program.parts.empty())
            *os << "      program: " << partsText(pair.program) << "\n";
        }
      }
      *os << "plan check: " << comparedPairs - mismatches << " of "
          << comparedPairs << " (operator, phase) pairs agree"
          << (training ? " (forward and backward compared)"
                       : " (forward compared)");
      if (programWidth && planWidth && programWidth != planWidth)
        *os << "; element width: the program moves " << programWidth
            << "-byte elements, the plan costs " << planWidth << "-byte ones";
      if (unknownCount)
        *os << "; some loops have no constant trip count (counted once)";
      *os << "\n";
      os->flush();
    }
    numCompared = comparedPairs;
    numDiffering = mismatches;
    if (mismatches && failOnDifference) {
      // At the module: the collective's location is the value it moves,
      // not necessarily the operator the message names.
      InFlightDiagnostic d =
          module.emitError()
          << "plan check: " << mismatches << " of " << comparedPairs
          << " (operator, phase) pairs communicate other than the plan "
             "predicts; first "
          << firstName << ": plan "
          << int64_t(std::llround(first->plan.elements)) << " elements ("
          << (first->plan.parts.empty() ? "none" : partsText(first->plan))
          << "), program " << int64_t(std::llround(first->program.elements))
          << " ("
          << (first->program.parts.empty() ? "none" : partsText(first->program))
          << ")";
      signalPassFailure();
    }
  }
};
} // namespace
