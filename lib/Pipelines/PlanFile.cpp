//===- PlanFile.cpp - reading plan files back: tables and diffs -*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// What `stpar compile --plan` prints of a plan file it reads back, and
// `stpar plan diff A.json B.json` (docs/plan-format.md). Only the file's
// JSON is read (no model, no search), so a plan can be inspected and
// compared on any machine. The Python package (python/stpar) computes the
// same diff; test/Python/plan-package.test compares the two texts.
//
//===----------------------------------------------------------------------===//

#include "stpar/Pipelines/Plan.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static const double kMiB = double(1 << 20);
static const double kGiB = double(int64_t(1) << 30);

std::string stpar::pipelines::describeSpec(const json::Object *spec) {
  std::string words;
  if (const json::Array *loops = spec ? spec->getArray("loops") : nullptr)
    for (const json::Value &lv : *loops) {
      const json::Object *l = lv.getAsObject();
      const json::Array *axes = l ? l->getArray("axes") : nullptr;
      if (!axes || axes->empty())
        continue;
      words += (words.empty() ? "" : " ") +
               l->getString("name").value_or("?").str() + "{";
      for (auto [i, a] : llvm::enumerate(*axes))
        words += (i ? "," : "") + a.getAsString().value_or("?").str();
      words += "}";
    }
  if (const json::Object *t = spec ? spec->getObject("temporal") : nullptr)
    words += (words.empty() ? "" : " ") +
             ("temporal(" + t->getString("row_axis").value_or("?") + "," +
              t->getString("col_axis").value_or("?") +
              ": m=" + t->getString("m").value_or("?") +
              " n=" + t->getString("n").value_or("?") +
              " k=" + t->getString("k").value_or("?") + ")")
                 .str();
  return words.empty() ? "replicated" : words;
}

void stpar::pipelines::printPlanFile(raw_ostream &os, const json::Value &plan,
                                     StringRef path) {
  const json::Object *root = plan.getAsObject();
  if (!root)
    return;
  os << "plan " << path << " (read back; times and memory as the file "
     << "states them)\n";
  if (const json::Object *mesh = root->getObject("mesh")) {
    os << "mesh";
    if (const json::Array *axes = mesh->getArray("axes"))
      for (const json::Value &a : *axes)
        if (const json::Object *ao = a.getAsObject())
          os << " " << ao->getString("name").value_or("?") << "="
             << ao->getInteger("size").value_or(0);
    os << ", micro-batches " << mesh->getInteger("micro_batches").value_or(1)
       << ", ZeRO stage " << mesh->getInteger("zero_stage").value_or(0) << "\n";
  }
  if (const json::Object *times = root->getObject("times"))
    os << format("step time %.3f ms",
                 times->getNumber("step").value_or(0) * 1e3);
  if (const json::Object *memory = root->getObject("memory"))
    os << format(", memory per device %.3f GiB",
                 memory->getNumber("total").value_or(0) / kGiB);
  os << "\n";
  os << format("  %-40s %-10s %-44s %12s %10s\n", "operator", "kind",
               "partition", "ms/micro-b", "MiB");
  const json::Array *ops = root->getArray("operators");
  if (!ops)
    return;
  for (const json::Value &v : *ops) {
    const json::Object *op = v.getAsObject();
    if (!op)
      continue;
    std::string words = describeSpec(op->getObject("spec"));
    std::string name = op->getString("name").value_or("?").str();
    os << format("  %-40s %-10s %-44s %12.4f %10.3f\n", name.c_str(),
                 op->getString("layer_kind").value_or("").str().c_str(),
                 words.c_str(),
                 op->getNumber("seconds_per_micro_batch").value_or(0) * 1e3,
                 op->getNumber("memory_bytes").value_or(0) / kMiB);
  }
}

//===----------------------------------------------------------------------===//
// plan diff
//===----------------------------------------------------------------------===//

static Error diffError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// The plan's root object, or an error naming what is missing.
static Expected<const json::Object *> getPlanRoot(const json::Value &plan,
                                                  StringRef path) {
  const json::Object *root = plan.getAsObject();
  if (!root || root->getString("format") != "stpar-plan")
    return diffError(path + ": not an stpar plan (format is not "
                            "'stpar-plan')");
  if (root->getInteger("version") != 1)
    return diffError(path + ": plan schema version " +
                     Twine(root->getInteger("version").value_or(-1)) +
                     ", stpar reads 1");
  for (const char *key : {"mesh", "times", "memory"})
    if (!root->getObject(key))
      return diffError(path + ": missing '" + key + "'");
  if (!root->getArray("operators"))
    return diffError(path + ": missing 'operators'");
  return root;
}

namespace {
/// What the diff reads of one plan.
struct PlanView {
  std::string path, model, cluster, devices, mesh, summary;
  double step = 0, memory = 0;
  /// (name, partition in words, seconds per micro-batch), file order.
  std::vector<std::tuple<std::string, std::string, double>> ops;
  /// Sent bytes per (operator, phase, kind, axes), first-seen order.
  std::vector<std::pair<std::string, double>> comm;
  StringMap<unsigned> commIndex;
  double sent = 0;
};
} // namespace

static PlanView viewPlan(const json::Object &root, StringRef path) {
  PlanView v;
  v.path = path.str();
  v.model = root.getString("model").value_or("").str();
  v.cluster = root.getString("cluster").value_or("").str();
  const json::Object *mesh = root.getObject("mesh");
  int64_t axesProduct = 1;
  if (const json::Array *axes = mesh->getArray("axes"))
    for (const json::Value &a : *axes)
      if (const json::Object *ao = a.getAsObject()) {
        int64_t size = ao->getInteger("size").value_or(0);
        axesProduct *= size;
        v.mesh += (v.mesh.empty() ? "" : " ") +
                  ao->getString("name").value_or("?").str() + "=" +
                  std::to_string(size);
      }
  v.devices = std::to_string(root.getInteger("devices").value_or(axesProduct));
  v.summary = root.getString("summary").value_or("").str();
  if (v.summary.empty())
    v.summary =
        "pp=" +
        std::to_string(mesh->getInteger("pipeline_stages").value_or(1)) +
        " zero-" + std::to_string(mesh->getInteger("zero_stage").value_or(0)) +
        " m=" + std::to_string(mesh->getInteger("micro_batches").value_or(1));
  v.step = root.getObject("times")->getNumber("step").value_or(0);
  v.memory = root.getObject("memory")->getNumber("total").value_or(0);
  for (const json::Value &o : *root.getArray("operators"))
    if (const json::Object *op = o.getAsObject())
      v.ops.emplace_back(op->getString("name").value_or("").str(),
                         stpar::pipelines::describeSpec(op->getObject("spec")),
                         op->getNumber("seconds_per_micro_batch").value_or(0));
  if (const json::Array *comm = root.getArray("communication"))
    for (const json::Value &c : *comm) {
      const json::Object *co = c.getAsObject();
      if (!co)
        continue;
      std::string axes;
      if (const json::Array *a = co->getArray("axes"))
        for (auto [i, x] : llvm::enumerate(*a))
          axes += (i ? "," : "") + x.getAsString().value_or("").str();
      std::string key = co->getString("op").value_or("").str() + "\n" +
                        co->getString("phase").value_or("").str() + "\n" +
                        co->getString("kind").value_or("").str() + "\n" + axes;
      auto [it, inserted] = v.commIndex.try_emplace(key, v.comm.size());
      if (inserted)
        v.comm.push_back({key, 0.0});
      v.comm[it->second].second += co->getNumber("sent_bytes").value_or(0);
    }
  for (const auto &[key, bytes] : v.comm)
    v.sent += bytes;
  return v;
}

static json::Object deltaJSON(double a, double b) {
  return json::Object{{"a", a}, {"b", b}, {"delta", b - a}};
}

Expected<json::Value> stpar::pipelines::diffPlans(const json::Value &a,
                                                  StringRef pathA,
                                                  const json::Value &b,
                                                  StringRef pathB) {
  Expected<const json::Object *> rootA = getPlanRoot(a, pathA);
  if (!rootA)
    return rootA.takeError();
  Expected<const json::Object *> rootB = getPlanRoot(b, pathB);
  if (!rootB)
    return rootB.takeError();
  PlanView va = viewPlan(**rootA, pathA), vb = viewPlan(**rootB, pathB);
  json::Array settings;
  for (auto [key, x, y] :
       {std::tuple<const char *, const std::string &, const std::string &>{
            "model", va.model, vb.model},
        {"cluster", va.cluster, vb.cluster},
        {"devices", va.devices, vb.devices},
        {"mesh", va.mesh, vb.mesh},
        {"summary", va.summary, vb.summary}})
    if (x != y)
      settings.push_back(json::Object{{"key", key}, {"a", x}, {"b", y}});
  // Operators by name.
  StringMap<unsigned> indexA, indexB;
  for (auto [i, op] : llvm::enumerate(va.ops))
    indexA.try_emplace(std::get<0>(op), i);
  for (auto [i, op] : llvm::enumerate(vb.ops))
    indexB.try_emplace(std::get<0>(op), i);
  json::Array changed, onlyA, onlyB;
  int64_t unchanged = 0;
  for (const auto &[name, words, seconds] : va.ops) {
    auto it = indexB.find(name);
    if (it == indexB.end()) {
      onlyA.push_back(name);
      continue;
    }
    const auto &[nameB, wordsB, secondsB] = vb.ops[it->second];
    if (words == wordsB) {
      ++unchanged;
      continue;
    }
    changed.push_back(json::Object{{"name", name},
                                   {"a", words},
                                   {"b", wordsB},
                                   {"seconds_delta", secondsB - seconds}});
  }
  for (const auto &op : vb.ops)
    if (!indexA.count(std::get<0>(op)))
      onlyB.push_back(std::get<0>(op));
  // Collectives by (operator, phase, kind, axes).
  json::Array comm;
  auto addComm = [&](StringRef key, double x, double y) {
    if (x == y)
      return;
    SmallVector<StringRef, 4> f;
    key.split(f, '\n');
    comm.push_back(json::Object{{"op", f[0].str()},
                                {"phase", f[1].str()},
                                {"kind", f[2].str()},
                                {"axes", f[3].str()},
                                {"a_sent_bytes", x},
                                {"b_sent_bytes", y}});
  };
  for (const auto &[key, x] : va.comm) {
    auto it = vb.commIndex.find(key);
    addComm(key, x,
            it == vb.commIndex.end() ? 0.0 : vb.comm[it->second].second);
  }
  for (const auto &[key, y] : vb.comm)
    if (!va.commIndex.count(key))
      addComm(key, 0.0, y);
  return json::Object{
      {"format", "stpar-plan-diff"},
      {"version", 1},
      {"a", pathA.str()},
      {"b", pathB.str()},
      {"settings", std::move(settings)},
      {"step_seconds", deltaJSON(va.step, vb.step)},
      {"memory_bytes", deltaJSON(va.memory, vb.memory)},
      {"operators", json::Object{{"changed", std::move(changed)},
                                 {"only_a", std::move(onlyA)},
                                 {"only_b", std::move(onlyB)},
                                 {"unchanged", unchanged}}},
      {"communication",
       json::Object{{"changed", std::move(comm)},
                    {"sent_bytes", deltaJSON(va.sent, vb.sent)}}}};
}

void stpar::pipelines::printPlanDiff(raw_ostream &os, const json::Value &diff) {
  const json::Object *d = diff.getAsObject();
  if (!d)
    return;
  auto str = [](const json::Object *o, StringRef key) {
    return o ? o->getString(key).value_or("").str() : std::string();
  };
  auto num = [](const json::Object *o, StringRef key) {
    return o ? o->getNumber(key).value_or(0) : 0.0;
  };
  auto size = [](const json::Object *o, StringRef key) {
    const json::Array *a = o ? o->getArray(key) : nullptr;
    return a ? a->size() : size_t(0);
  };
  os << "plan diff " << str(d, "a") << " -> " << str(d, "b") << "\n";
  if (const json::Array *settings = d->getArray("settings"))
    for (const json::Value &s : *settings)
      os << "  " << str(s.getAsObject(), "key") << ": "
         << str(s.getAsObject(), "a") << " -> " << str(s.getAsObject(), "b")
         << "\n";
  const json::Object *t = d->getObject("step_seconds");
  double ta = num(t, "a"), tb = num(t, "b");
  os << format("  step time: %.3f ms -> %.3f ms (%+.3f ms, %.3fx)\n", ta * 1e3,
               tb * 1e3, (tb - ta) * 1e3, ta != 0 ? tb / ta : 0.0);
  const json::Object *m = d->getObject("memory_bytes");
  double ma = num(m, "a"), mb = num(m, "b");
  os << format("  memory per device: %.3f GiB -> %.3f GiB (%+.3f GiB)\n",
               ma / kGiB, mb / kGiB, (mb - ma) / kGiB);
  const json::Object *ops = d->getObject("operators");
  os << format("  operators: %zu repartitioned, %zu only in A, %zu only in "
               "B, %lld unchanged\n",
               size(ops, "changed"), size(ops, "only_a"), size(ops, "only_b"),
               (long long)(ops ? ops->getInteger("unchanged").value_or(0) : 0));
  if (const json::Array *changed = ops ? ops->getArray("changed") : nullptr)
    for (const json::Value &c : *changed) {
      const json::Object *co = c.getAsObject();
      os << "    " << str(co, "name") << ": " << str(co, "a") << " -> "
         << str(co, "b")
         << format(" (%+.4f ms per micro-batch)\n",
                   num(co, "seconds_delta") * 1e3);
    }
  for (const char *side : {"only_a", "only_b"})
    if (const json::Array *names = ops ? ops->getArray(side) : nullptr)
      for (const json::Value &n : *names)
        os << "    only in " << (StringRef(side) == "only_a" ? "A" : "B")
           << ": " << n.getAsString().value_or("") << "\n";
  const json::Object *comm = d->getObject("communication");
  const json::Object *sent = comm ? comm->getObject("sent_bytes") : nullptr;
  os << format("  communication: %.3f MiB -> %.3f MiB sent per device; %zu "
               "collectives changed\n",
               num(sent, "a") / kMiB, num(sent, "b") / kMiB,
               size(comm, "changed"));
  if (const json::Array *changed = comm ? comm->getArray("changed") : nullptr)
    for (const json::Value &c : *changed) {
      const json::Object *co = c.getAsObject();
      std::string axes = str(co, "axes");
      os << "    " << str(co, "op") << " " << str(co, "phase") << " "
         << str(co, "kind") << " over " << (axes.empty() ? "-" : axes)
         << format(": %.3f MiB -> %.3f MiB\n", num(co, "a_sent_bytes") / kMiB,
                   num(co, "b_sent_bytes") / kMiB);
    }
}
