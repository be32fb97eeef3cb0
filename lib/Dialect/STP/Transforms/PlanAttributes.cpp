//===- PlanAttributes.cpp - partition plans as IR attributes ---------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/Transforms/PlanAttributes.h"

#include "stpar/Dialect/STP/IR/OperatorNames.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>

using namespace mlir;
using namespace stpar;
using namespace stpar::stp;
namespace json = llvm::json;

static constexpr llvm::StringLiteral kIndexKey = "index";

FailureOr<ClusterAttr> stp::getClusterAttr(MLIRContext &ctx,
                                           const cost::Cluster &c,
                                           int64_t devices) {
  if (devices < 1)
    return failure();
  int64_t perNode = std::min(devices, c.devicesPerNode);
  if (devices % perNode)
    return failure();
  auto opt = [](double v) -> std::optional<F64Value> {
    if (v <= 0)
      return std::nullopt;
    return F64Value(v);
  };
  DeviceAttr dev = DeviceAttr::get(&ctx, F64Value(c.device.fp32),
                                   opt(c.device.tf32), opt(c.device.fp16),
                                   opt(c.device.bf16), c.device.hbmCapacity,
                                   F64Value(c.device.hbmBandwidth));
  LinkAttr intra = LinkAttr::get(&ctx, F64Value(c.intraNode.bandwidth),
                                 F64Value(c.intraNode.latency));
  LinkAttr inter = LinkAttr::get(&ctx, F64Value(c.interNode.bandwidth),
                                 F64Value(c.interNode.latency));
  return ClusterAttr::get(&ctx, c.name, devices / perNode, perNode, dev, intra,
                          inter);
}

func::FuncOp stp::getPlannedFunction(ModuleOp module) {
  func::FuncOp only;
  unsigned withBody = 0;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.getSymName() == "main" && !f.isExternal())
      return f;
    if (!f.isExternal()) {
      only = f;
      ++withBody;
    }
  }
  return withBody == 1 ? only : func::FuncOp();
}

SmallVector<AxisAttr> stp::getGridAxes(MeshAttr mesh) {
  SmallVector<AxisAttr> axes;
  for (AxisAttr axis : mesh.getAxes())
    if (axis.getName().getValue() != "pp" || axis.getSize() > 1)
      axes.push_back(axis);
  return axes;
}

int64_t stp::getPipelineStages(MeshAttr mesh) {
  return mesh.findAxis("pp") ? mesh.getAxisSize("pp") : 1;
}

DictionaryAttr stp::getPlanMesh(ModuleOp module) {
  if (auto plan =
          module->getAttrOfType<DictionaryAttr>(STPDialect::kPlanAttrName))
    return plan.getAs<DictionaryAttr>("mesh");
  return {};
}

//===----------------------------------------------------------------------===//
// JSON <-> attributes
//===----------------------------------------------------------------------===//

Attribute stp::convertJSONToAttr(MLIRContext *ctx, const json::Value &v) {
  Builder b(ctx);
  switch (v.kind()) {
  case json::Value::Null:
    return b.getUnitAttr();
  case json::Value::Boolean:
    return b.getBoolAttr(*v.getAsBoolean());
  case json::Value::Number:
    if (std::optional<int64_t> i = v.getAsInteger())
      return b.getI64IntegerAttr(*i);
    return b.getF64FloatAttr(*v.getAsNumber());
  case json::Value::String:
    return b.getStringAttr(*v.getAsString());
  case json::Value::Array: {
    SmallVector<Attribute> elements;
    for (const json::Value &e : *v.getAsArray())
      elements.push_back(convertJSONToAttr(ctx, e));
    return b.getArrayAttr(elements);
  }
  case json::Value::Object: {
    SmallVector<NamedAttribute> fields;
    for (const auto &[key, value] : *v.getAsObject())
      fields.push_back(b.getNamedAttr(key, convertJSONToAttr(ctx, value)));
    return b.getDictionaryAttr(fields);
  }
  }
  return b.getUnitAttr();
}

json::Value stp::convertAttrToJSON(Attribute attr) {
  if (!attr || isa<UnitAttr>(attr))
    return nullptr;
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getValue().getSExtValue();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.getValue();
  if (auto a = dyn_cast<ArrayAttr>(attr)) {
    json::Array out;
    for (Attribute e : a)
      out.push_back(convertAttrToJSON(e));
    return out;
  }
  if (auto d = dyn_cast<DictionaryAttr>(attr)) {
    json::Object out;
    for (NamedAttribute n : d)
      out[n.getName().getValue()] = convertAttrToJSON(n.getValue());
    return out;
  }
  // Any other attribute: its text (not produced by applyPlan).
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

json::Value stp::getSpecJSON(PartitionSpecAttr spec) {
  json::Array loops;
  for (LoopDimAttr l : spec.getLoops()) {
    json::Array axes;
    for (StringAttr a : l.getSplit())
      axes.push_back(a.getValue());
    json::Object loop{{"name", l.getName().getValue()},
                      {"extent", l.getExtent()},
                      {"reduction", l.isReduction()},
                      {"axes", std::move(axes)}};
    if (l.getPadded())
      loop["padded"] = true;
    if (l.isExperts())
      loop["experts"] = true;
    loops.push_back(std::move(loop));
  }
  json::Object out{{"loops", std::move(loops)}};
  if (TemporalAttr t = spec.getTemporal())
    out["temporal"] = json::Object{{"row_axis", t.getRowAxis().getValue()},
                                   {"col_axis", t.getColAxis().getValue()},
                                   {"m", t.getM().getValue()},
                                   {"n", t.getN().getValue()},
                                   {"k", t.getK().getValue()},
                                   {"steps", t.getSteps()}};
  else
    out["temporal"] = nullptr;
  return out;
}

//===----------------------------------------------------------------------===//
// applyPlan
//===----------------------------------------------------------------------===//

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<json::Value> stp::readPlanFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return makeError("cannot read: " + buffer.getError().message());
  llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return makeError("not JSON: " + llvm::toString(parsed.takeError()));
  return parsed;
}

llvm::Expected<int64_t> stp::getPlanDevices(const json::Value &plan,
                                            int64_t expected) {
  const json::Object *root = plan.getAsObject();
  if (!root || root->getString("format") != "stpar-plan" ||
      root->getInteger("version") != 1)
    return makeError("not an stpar plan (expected \"format\": "
                     "\"stpar-plan\", \"version\": 1)");
  std::optional<int64_t> devices = root->getInteger("devices");
  if (!devices || *devices < 1)
    return makeError("missing or bad \"devices\"");
  if (expected > 0 && *devices != expected)
    return makeError("the plan is for " + llvm::Twine(*devices) +
                     " devices but --devices is " + llvm::Twine(expected));
  return *devices;
}

llvm::Error stp::applyPlan(ModuleOp module, const json::Value &plan,
                           const cost::Cluster &cluster,
                           const ApplyPlanOptions &options) {
  MLIRContext *ctx = module.getContext();
  std::string prefix = options.source.empty() ? "" : options.source + ": ";
  auto bad = [&](const llvm::Twine &message) {
    return makeError(prefix + message);
  };
  llvm::Expected<int64_t> planDevices = getPlanDevices(plan, options.devices);
  if (!planDevices)
    return bad(llvm::toString(planDevices.takeError()));
  const json::Object *root = plan.getAsObject();
  const json::Object *meshObj = root->getObject("mesh");
  const json::Array *axesArr = meshObj ? meshObj->getArray("axes") : nullptr;
  if (!axesArr || axesArr->empty())
    return bad("missing \"mesh\".\"axes\"");
  std::vector<std::pair<std::string, int64_t>> axes;
  int64_t product = 1;
  for (const json::Value &a : *axesArr) {
    const json::Object *ao = a.getAsObject();
    std::optional<llvm::StringRef> name =
        ao ? ao->getString("name") : std::nullopt;
    std::optional<int64_t> size = ao ? ao->getInteger("size") : std::nullopt;
    if (!name || !size || *size < 1)
      return bad("a mesh axis lacks \"name\" or a positive \"size\"");
    axes.emplace_back(name->str(), *size);
    product *= *size;
  }
  if (product != *planDevices)
    return bad("the mesh has " + llvm::Twine(product) +
               " devices but the plan says " + llvm::Twine(*planDevices));
  const json::Array *opsArr = root->getArray("operators");
  if (!opsArr)
    return bad("missing \"operators\"");
  func::FuncOp func = getPlannedFunction(module);
  if (!func)
    return bad("the module has no function @main (or no single function "
               "with a body) to apply the plan to");
  FailureOr<ClusterAttr> clusterAttr =
      getClusterAttr(*ctx, cluster, *planDevices);
  if (failed(clusterAttr))
    return bad("cannot express " + llvm::Twine(*planDevices) +
               " devices of '" + cluster.name + "' as a mesh");
  SmallVector<AxisAttr> axisAttrs;
  for (auto &[name, size] : axes)
    axisAttrs.push_back(AxisAttr::get(ctx, StringAttr::get(ctx, name), size));
  MeshAttr meshAttr = MeshAttr::get(ctx, *clusterAttr, axisAttrs);
  auto axisSize = [&](llvm::StringRef name) -> int64_t {
    for (auto &[n, s] : axes)
      if (n == name)
        return s;
    return 0;
  };

  OperatorNames names(func.getBody().front());
  struct Planned {
    PartitionSpecAttr spec;
    SmallVector<Attribute> records;
  };
  llvm::MapVector<Operation *, Planned> planned;
  for (auto [index, v] : llvm::enumerate(*opsArr)) {
    const json::Object *op = v.getAsObject();
    std::string where = "operator " + std::to_string(index);
    if (!op)
      return bad(where + ": not an object");
    std::optional<llvm::StringRef> irName = op->getString("ir_op");
    if (!irName)
      return bad(where + ": missing \"ir_op\" (the operator's name in the "
                         "IR)");
    where += " ('" + irName->str() + "')";
    Operation *irOp = names.lookup(*irName);
    if (!irOp)
      return bad(where + ": the model has no operator of that name (the "
                         "plan was made for another model?)");
    const json::Object *spec = op->getObject("spec");
    const json::Array *loops = spec ? spec->getArray("loops") : nullptr;
    if (!loops)
      return bad(where + ": missing \"spec\".\"loops\"");
    // Loop extents against the op's iteration space (linalg ops).
    std::optional<SmallVector<int64_t>> ranges;
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(irOp))
      ranges = linalgOp.getStaticLoopRanges();
    SmallVector<LoopDimAttr> loopAttrs;
    for (auto [d, lv] : llvm::enumerate(*loops)) {
      const json::Object *l = lv.getAsObject();
      std::optional<llvm::StringRef> name =
          l ? l->getString("name") : std::nullopt;
      std::optional<int64_t> extent =
          l ? l->getInteger("extent") : std::nullopt;
      std::optional<bool> reduction =
          l ? l->getBoolean("reduction") : std::nullopt;
      const json::Array *la = l ? l->getArray("axes") : nullptr;
      if (!name || !extent || !reduction || !la)
        return bad(where + ": loop " + llvm::Twine(d) +
                   " needs \"name\", \"extent\", \"reduction\", \"axes\"");
      bool padded = l->getBoolean("padded").value_or(false);
      bool experts = l->getBoolean("experts").value_or(false);
      if (experts && *reduction)
        return bad(where + ": loop '" + *name +
                   "' cannot be both a reduction and an experts loop");
      if (ranges && d < ranges->size() && (*ranges)[d] != *extent)
        return bad(where + ": loop '" + *name + "' has extent " +
                   llvm::Twine(*extent) + " but the op's loop " +
                   llvm::Twine(d) + " has " + llvm::Twine((*ranges)[d]));
      SmallVector<StringAttr> split;
      int64_t splitSize = 1;
      for (const json::Value &av : *la) {
        std::optional<llvm::StringRef> an = av.getAsString();
        if (!an || axisSize(*an) == 0)
          return bad(where + ": loop '" + *name +
                     "' is split over an axis that is not in the mesh");
        split.push_back(StringAttr::get(ctx, *an));
        splitSize *= axisSize(*an);
      }
      if (!padded && *extent % splitSize)
        return bad(where + ": loop '" + *name + "' (extent " +
                   llvm::Twine(*extent) + ") does not divide over " +
                   llvm::Twine(splitSize) + " devices");
      loopAttrs.push_back(LoopDimAttr::get(ctx, StringAttr::get(ctx, *name),
                                           *extent,
                                           experts      ? LoopKind::Experts
                                           : *reduction ? LoopKind::Reduction
                                                        : LoopKind::Parallel,
                                           split, padded));
    }
    // An embedding has one extra loop (the table rows); others match.
    if (ranges && !(loopAttrs.size() == ranges->size() ||
                    loopAttrs.size() == ranges->size() + 1))
      return bad(where + ": the spec has " + llvm::Twine(loopAttrs.size()) +
                 " loops but the op has " + llvm::Twine(ranges->size()));
    TemporalAttr temporal;
    if (const json::Object *t = spec->getObject("temporal")) {
      auto s = [&](llvm::StringRef k) {
        return t->getString(k).value_or("").str();
      };
      std::optional<int64_t> steps = t->getInteger("steps");
      if (s("row_axis").empty() || s("col_axis").empty() || s("m").empty() ||
          s("n").empty() || s("k").empty() || !steps)
        return bad(where + ": \"temporal\" needs row_axis, col_axis, m, n, "
                           "k and steps");
      temporal = TemporalAttr::get(ctx, s("row_axis"), s("col_axis"), s("m"),
                                   s("n"), s("k"), *steps);
    }
    Planned &entry = planned[irOp];
    json::Object record = *op;
    record[kIndexKey] = int64_t(index);
    if (entry.records.empty()) {
      // The attribute's verifier: each axis used once, temporal axes of
      // equal size, steps = their size, ...
      PartitionSpecAttr specAttr = PartitionSpecAttr::getChecked(
          [&] { return irOp->emitError() << prefix << where << ": "; }, ctx,
          meshAttr, ArrayRef<LoopDimAttr>(loopAttrs), temporal);
      if (!specAttr)
        return bad(where + ": the spec does not fit the mesh (see the error "
                           "above)");
      entry.spec = specAttr;
      // The spec lives in stp.spec; exportPlan rebuilds it from there.
      record.erase("spec");
    }
    // stp.attention stands for three operators: the op's spec is the
    // first's, the others keep theirs in their record.
    entry.records.push_back(convertJSONToAttr(ctx, json::Value(std::move(record))));
  }

  // Everything checked: replace any earlier plan.
  func.walk([](Operation *op) {
    op->removeAttr(STPDialect::kSpecAttrName);
    op->removeAttr(STPDialect::kPlanOpsAttrName);
  });
  json::Object summary = *root;
  summary.erase("operators");
  module->setAttr(STPDialect::kMeshAttrName, meshAttr);
  module->setAttr(STPDialect::kPlanAttrName,
                  convertJSONToAttr(ctx, json::Value(std::move(summary))));
  for (auto &[irOp, entry] : planned) {
    irOp->setAttr(STPDialect::kSpecAttrName, entry.spec);
    irOp->setAttr(STPDialect::kPlanOpsAttrName,
                  ArrayAttr::get(ctx, entry.records));
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// exportPlan
//===----------------------------------------------------------------------===//

llvm::Expected<json::Value> stp::exportPlan(ModuleOp module) {
  auto mesh = module->getAttrOfType<MeshAttr>(STPDialect::kMeshAttrName);
  if (!mesh)
    return makeError("the module has no 'stp.mesh' attribute: there is no "
                     "plan to export");
  func::FuncOp func = getPlannedFunction(module);
  if (!func)
    return makeError("the module has no function @main (or no single "
                     "function with a body)");
  json::Object root;
  if (auto summary =
          module->getAttrOfType<DictionaryAttr>(STPDialect::kPlanAttrName))
    root = std::move(*convertAttrToJSON(summary).getAsObject());
  // The roles the search gave the axes (`stpar plan`'s summary) and the
  // search's names of axes named by role, by name.
  llvm::StringMap<std::string> roles, searchNames;
  if (const json::Object *m = root.getObject("mesh"))
    if (const json::Array *old = m->getArray("axes"))
      for (const json::Value &v : *old)
        if (const json::Object *a = v.getAsObject())
          if (auto name = a->getString("name")) {
            if (auto role = a->getString("role"))
              roles[*name] = role->str();
            if (auto searchName = a->getString("search_name"))
              searchNames[*name] = searchName->str();
          }
  int64_t devices = 1;
  json::Array axes;
  for (AxisAttr a : mesh.getAxes()) {
    json::Object axis{{"name", a.getName().getValue()}, {"size", a.getSize()}};
    auto role = roles.find(a.getName().getValue());
    if (role != roles.end())
      axis["role"] = role->second;
    auto searchName = searchNames.find(a.getName().getValue());
    if (searchName != searchNames.end())
      axis["search_name"] = searchName->second;
    axes.push_back(std::move(axis));
    devices *= a.getSize();
  }
  // The mesh of the IR is authoritative; the summary may add to it.
  if (!root.getString("format")) {
    root["format"] = "stpar-plan";
    root["version"] = 1;
    root["cluster"] = mesh.getCluster().getName();
  }
  root["devices"] = devices;
  json::Object *meshObj = root.getObject("mesh");
  if (!meshObj) {
    root["mesh"] = json::Object();
    meshObj = root.getObject("mesh");
  }
  (*meshObj)["axes"] = std::move(axes);

  // Records in their plan order; hand-annotated ops after them.
  std::map<int64_t, json::Value> ordered;
  int64_t next = int64_t(1) << 40;
  OperatorNames names(func.getBody().front());
  for (Operation *op : names.getOps()) {
    auto spec = op->getAttrOfType<PartitionSpecAttr>(STPDialect::kSpecAttrName);
    auto records = op->getAttrOfType<ArrayAttr>(STPDialect::kPlanOpsAttrName);
    if (!records) {
      if (spec)
        ordered.emplace(next++, json::Object{{"name", names.getName(op)},
                                             {"ir_op", names.getName(op)},
                                             {"spec", getSpecJSON(spec)}});
      continue;
    }
    for (auto [k, r] : llvm::enumerate(records)) {
      json::Value value = convertAttrToJSON(r);
      json::Object *record = value.getAsObject();
      if (!record)
        return makeError("'stp.plan_ops' of operator '" + names.getName(op) +
                         "' holds a non-dictionary");
      int64_t index = record->getInteger(kIndexKey).value_or(next++);
      record->erase(kIndexKey);
      if (k == 0 && spec)
        (*record)["spec"] = getSpecJSON(spec);
      ordered.emplace(index, std::move(value));
    }
  }
  json::Array ops;
  for (auto &[index, v] : ordered)
    ops.push_back(std::move(v));
  root["operators"] = std::move(ops);
  return json::Value(std::move(root));
}
