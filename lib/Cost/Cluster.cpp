//===- Cluster.cpp - GPU cluster descriptions -------------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Presets (with their datasheet figures), the JSON file format and its
// validation, and printers.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Cluster.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>
#include <string>

using namespace llvm;

namespace stpar::cost {

StringRef getDTypeName(DType type) {
  switch (type) {
  case DType::FP32:
    return "fp32";
  case DType::TF32:
    return "tf32";
  case DType::FP16:
    return "fp16";
  case DType::BF16:
    return "bf16";
  }
  return "?";
}

double DeviceSpec::getPeak(DType type) const {
  switch (type) {
  case DType::FP32:
    return fp32;
  case DType::TF32:
    return tf32;
  case DType::FP16:
    return fp16;
  case DType::BF16:
    return bf16;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

static constexpr int64_t kGiB = int64_t(1) << 30;

/// NVIDIA V100-SXM2-32GB datasheet: 15.7 TFLOP/s fp32, 125 TFLOP/s fp16
/// tensor core, 32 GB HBM2 at 900 GB/s.
static DeviceSpec v100() {
  DeviceSpec d;
  d.name = "NVIDIA V100-SXM2-32GB";
  d.fp32 = 15.7e12;
  d.fp16 = 125e12;
  d.hbmCapacity = 32 * kGiB;
  d.hbmBandwidth = 900e9;
  return d;
}

/// NVIDIA A100 datasheet (SXM4 80GB, dense): 19.5 TFLOP/s fp32, 156 tf32,
/// 312 fp16/bf16; 80 GB HBM2e at 2,039 GB/s.
static DeviceSpec a100() {
  DeviceSpec d;
  d.name = "NVIDIA A100-SXM4-80GB";
  d.fp32 = 19.5e12;
  d.tf32 = 156e12;
  d.fp16 = 312e12;
  d.bf16 = 312e12;
  d.hbmCapacity = 80 * kGiB;
  d.hbmBandwidth = 2.039e12;
  return d;
}

/// NVIDIA H100 SXM5 datasheet (dense): 67 TFLOP/s fp32, 494.5 tf32,
/// 989.5 fp16/bf16; 80 GB HBM3 at 3.35 TB/s.
static DeviceSpec h100() {
  DeviceSpec d;
  d.name = "NVIDIA H100-SXM5-80GB";
  d.fp32 = 67e12;
  d.tf32 = 494.5e12;
  d.fp16 = 989.5e12;
  d.bf16 = 989.5e12;
  d.hbmCapacity = 80 * kGiB;
  d.hbmBandwidth = 3.35e12;
  return d;
}

/// NVIDIA H200 SXM datasheet (dense): H100's math, 141 GB HBM3e at 4.8 TB/s.
static DeviceSpec h200() {
  DeviceSpec d = h100();
  d.name = "NVIDIA H200-SXM-141GB";
  d.hbmCapacity = int64_t(141e9);
  d.hbmBandwidth = 4.8e12;
  return d;
}

/// Parses the node count of "PREFIX-N"; 0 when `name` does not match.
static int64_t parseNodeSuffix(StringRef name, StringRef prefix) {
  if (!name.consume_front(prefix) || !name.consume_front("-"))
    return 0;
  int64_t nodes = 0;
  if (name.getAsInteger(10, nodes) || nodes < 1)
    return 0;
  return nodes;
}

std::vector<std::string> getPresetNames() {
  return {"v100-sxm2-32g-4x8", "dgx-a100-80g-N", "dgx-h100-N", "hgx-h200-N"};
}

/// A link level described as hardware: `units` links per device (intra-node)
/// or NICs per node (inter-node) of `unitBandwidth` bytes/s per direction.
static LinkSpec hardwareLink(int64_t units, double unitBandwidth,
                             double latency) {
  LinkSpec l;
  l.units = units;
  l.unitBandwidth = unitBandwidth;
  l.latency = latency;
  return l;
}

/// Sets each level's per-device `bandwidth` from its hardware description
/// (LinkSpec) where one is given.
static void deriveBandwidths(Cluster &c) {
  if (c.intraNode.units > 0)
    c.intraNode.bandwidth =
        double(c.intraNode.units) * c.intraNode.unitBandwidth;
  if (c.interNode.units > 0 && c.devicesPerNode > 0)
    c.interNode.bandwidth = double(c.interNode.units) *
                            c.interNode.unitBandwidth /
                            double(c.devicesPerNode);
}

// One NVLink 2/3/4 link moves 25 GB/s per direction (V100, A100 and H100
// datasheets: 300 GB/s over 6 links, 600 GB/s over 12, 900 GB/s over 18,
// each figure summed over both directions).
static constexpr double kNVLinkPerDirection = 25e9;
// InfiniBand EDR / HDR / NDR: 100 / 200 / 400 Gb/s per port and direction.
static constexpr double kEDR = 100e9 / 8, kHDR = 200e9 / 8, kNDR = 400e9 / 8;
// Start-up times: typical NCCL small-message figures, not datasheet numbers.
static constexpr double kNVLinkLatency = 5e-6, kIBLatency = 10e-6;

Expected<Cluster> getPreset(StringRef name) {
  Cluster c;
  c.name = name.str();
  if (name == "v100-sxm2-32g-4x8") {
    // PrimePar (ASPLOS'24) Sec. 6.1: 8 nodes x 4 V100-SXM2 32GB, "300 GB/s
    // NVLink" inside a node and "100 GB/s InfiniBand" between nodes. Read
    // as the hardware has it: V100's 300 GB/s is 6 NVLink 2 links summed
    // over both directions (150 GB/s one way), and the network is one EDR
    // InfiniBand port per node (100 Gb/s = 12.5 GB/s), shared by its 4 GPUs.
    c.nodes = 8;
    c.devicesPerNode = 4;
    c.device = v100();
    c.intraNode = hardwareLink(6, kNVLinkPerDirection, kNVLinkLatency);
    c.interNode = hardwareLink(1, kEDR, kIBLatency);
    c.source = "PrimePar ASPLOS'24 Sec. 6.1 testbed (300 GB/s NVLink read as "
               "6 NVLink 2 links both directions; 100 GB/s InfiniBand read as "
               "one EDR 100 Gb/s port per node); V100-SXM2 datasheet";
  } else if (int64_t n = parseNodeSuffix(name, "dgx-a100-80g")) {
    // DGX A100: 8 A100-SXM4-80GB, 12 NVLink 3 links per GPU through
    // NVSwitch (600 GB/s both directions), 8 ConnectX-6 HDR 200 Gb/s compute
    // ports per node (DGX A100 user guide; the 2 storage ports not counted).
    c.nodes = n;
    c.devicesPerNode = 8;
    c.device = a100();
    c.intraNode = hardwareLink(12, kNVLinkPerDirection, kNVLinkLatency);
    c.interNode = hardwareLink(8, kHDR, kIBLatency);
    c.source = "DGX A100 user guide and A100 datasheet: 12 NVLink 3 links/GPU "
               "(600 GB/s bidirectional), 8x HDR 200 Gb/s per node";
  } else if (int64_t n = parseNodeSuffix(name, "dgx-h100")) {
    // DGX H100: 8 H100-SXM5, 18 NVLink 4 links per GPU (900 GB/s both
    // directions), 8 ConnectX-7 NDR 400 Gb/s compute ports per node.
    c.nodes = n;
    c.devicesPerNode = 8;
    c.device = h100();
    c.intraNode = hardwareLink(18, kNVLinkPerDirection, kNVLinkLatency);
    c.interNode = hardwareLink(8, kNDR, kIBLatency);
    c.source = "DGX H100 user guide and H100 datasheet: 18 NVLink 4 links/GPU "
               "(900 GB/s bidirectional), 8x NDR 400 Gb/s per node";
  } else if (int64_t n = parseNodeSuffix(name, "hgx-h200")) {
    // HGX H200 8-GPU: 18 NVLink 4 links per GPU (900 GB/s both
    // directions); the board has no NICs, so the DGX-style 8 NDR 400 Gb/s
    // ports per node are assumed.
    c.nodes = n;
    c.devicesPerNode = 8;
    c.device = h200();
    c.intraNode = hardwareLink(18, kNVLinkPerDirection, kNVLinkLatency);
    c.interNode = hardwareLink(8, kNDR, kIBLatency);
    c.source = "HGX H200 and H200 datasheets: 18 NVLink 4 links/GPU "
               "(900 GB/s bidirectional); 8x NDR 400 Gb/s per node assumed";
  } else {
    return createStringError(inconvertibleErrorCode(),
                             "unknown cluster preset '" + name +
                                 "' (known: " + join(getPresetNames(), ", ") +
                                 ", with N the number of nodes)");
  }
  deriveBandwidths(c);
  return c;
}

//===----------------------------------------------------------------------===//
// Validation and JSON
//===----------------------------------------------------------------------===//

static Error fieldError(StringRef context, StringRef field,
                        const Twine &message) {
  return createStringError(inconvertibleErrorCode(),
                           context + ": field '" + field + "': " + message);
}

/// The file's names of a level's hardware fields: the unit count and the
/// bandwidth of one unit (links per device for "intra_node", NICs per node
/// for "inter_node").
static std::pair<StringRef, StringRef> getLinkHardwareFields(StringRef level) {
  if (level == "intra_node")
    return {"links_per_device", "link_bandwidth"};
  return {"nics_per_node", "nic_bandwidth"};
}

Error verifyCluster(const Cluster &c, StringRef context) {
  if (c.nodes < 1)
    return fieldError(context, "nodes", "must be a positive integer");
  if (c.devicesPerNode < 1)
    return fieldError(context, "devices_per_node",
                      "must be a positive integer");
  auto positive = [&](double v, StringRef field) -> Error {
    if (!(v > 0) || !std::isfinite(v))
      return fieldError(context, field, "must be positive");
    return Error::success();
  };
  auto nonNegative = [&](double v, StringRef field) -> Error {
    if (!(v >= 0) || !std::isfinite(v))
      return fieldError(context, field, "must be non-negative");
    return Error::success();
  };
  if (Error e = positive(c.device.fp32, "device.fp32"))
    return e;
  for (auto [v, f] :
       {std::pair<double, StringRef>{c.device.tf32, "device.tf32"},
        {c.device.fp16, "device.fp16"},
        {c.device.bf16, "device.bf16"}})
    if (Error e = nonNegative(v, f))
      return e;
  if (c.device.hbmCapacity <= 0)
    return fieldError(context, "device.hbm_capacity",
                      "must be a positive integer (bytes)");
  if (Error e = positive(c.device.hbmBandwidth, "device.hbm_bandwidth"))
    return e;
  for (auto [link, level] :
       {std::pair<const LinkSpec *, StringRef>{&c.intraNode, "intra_node"},
        {&c.interNode, "inter_node"}}) {
    auto [unitsKey, unitKey] = getLinkHardwareFields(level);
    if (link->units < 0)
      return fieldError(context, (level + "." + unitsKey).str(),
                        "must be a positive integer");
    if (link->units > 0) {
      if (Error e =
              positive(link->unitBandwidth, (level + "." + unitKey).str()))
        return e;
    }
    if (Error e = positive(link->bandwidth, (level + ".bandwidth").str()))
      return e;
    if (Error e = nonNegative(link->latency, (level + ".latency").str()))
      return e;
  }
  return Error::success();
}

namespace {
/// Reads required/optional fields of one JSON object, naming the field path
/// in diagnostics.
class FieldReader {
public:
  FieldReader(const json::Object &object, StringRef context, StringRef prefix)
      : object(object), context(context), prefix(prefix) {}

  std::string path(StringRef key) const {
    return prefix.empty() ? key.str() : (prefix + "." + key).str();
  }

  Error getNumber(StringRef key, double &out, bool required) const {
    const json::Value *v = object.get(key);
    if (!v) {
      if (required)
        return fieldError(context, path(key), "missing");
      return Error::success();
    }
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return fieldError(context, path(key), "must be a number");
    out = *d;
    return Error::success();
  }

  Error getInteger(StringRef key, int64_t &out) const {
    const json::Value *v = object.get(key);
    if (!v)
      return fieldError(context, path(key), "missing");
    std::optional<int64_t> i = v->getAsInteger();
    if (!i) {
      // Accept integral doubles such as 3.4359738368e10.
      std::optional<double> d = v->getAsNumber();
      if (!d || *d != std::floor(*d) || std::fabs(*d) > 9.0e18)
        return fieldError(context, path(key), "must be an integer");
      i = int64_t(*d);
    }
    out = *i;
    return Error::success();
  }

  Error getString(StringRef key, std::string &out) const {
    const json::Value *v = object.get(key);
    if (!v)
      return Error::success();
    std::optional<StringRef> s = v->getAsString();
    if (!s)
      return fieldError(context, path(key), "must be a string");
    out = s->str();
    return Error::success();
  }

  Expected<const json::Object *> getObject(StringRef key) const {
    const json::Value *v = object.get(key);
    if (!v)
      return fieldError(context, path(key), "missing");
    const json::Object *o = v->getAsObject();
    if (!o)
      return fieldError(context, path(key), "must be an object");
    return o;
  }

  /// Rejects keys not in `known` (catches misspelt fields).
  Error checkKnown(ArrayRef<StringRef> known) const {
    for (const auto &kv : object) {
      StringRef key = kv.first;
      if (!is_contained(known, key))
        return fieldError(context, path(key), "unknown field");
    }
    return Error::success();
  }

private:
  const json::Object &object;
  StringRef context;
  StringRef prefix;
};
} // namespace

/// Reads one link level: `latency` and either `bandwidth` (per device, one
/// direction) or the hardware pair of getLinkHardwareFields.
static Error readLink(const FieldReader &parent, StringRef key,
                      StringRef context, LinkSpec &link) {
  Expected<const json::Object *> object = parent.getObject(key);
  if (!object)
    return object.takeError();
  FieldReader r(**object, context, key);
  auto [unitsKey, unitKey] = getLinkHardwareFields(key);
  if (Error e = r.checkKnown({"bandwidth", unitsKey, unitKey, "latency"}))
    return e;
  bool hasBandwidth = (*object)->get("bandwidth");
  bool hasUnits = (*object)->get(unitsKey), hasUnit = (*object)->get(unitKey);
  if (hasBandwidth && (hasUnits || hasUnit))
    return fieldError(context, r.path("bandwidth"),
                      "give either 'bandwidth' or '" + unitsKey + "' and '" +
                          unitKey + "', not both");
  if (hasUnits || hasUnit) {
    if (Error e = r.getInteger(unitsKey, link.units))
      return e;
    if (link.units < 1)
      return fieldError(context, r.path(unitsKey),
                        "must be a positive integer");
    if (Error e = r.getNumber(unitKey, link.unitBandwidth, true))
      return e;
  } else if (Error e = r.getNumber("bandwidth", link.bandwidth, true)) {
    return e;
  }
  return r.getNumber("latency", link.latency, true);
}

Expected<Cluster> parseClusterJSON(StringRef text, StringRef fileName) {
  Expected<json::Value> value = json::parse(text);
  if (!value)
    return createStringError(
        inconvertibleErrorCode(),
        fileName + ": invalid JSON: " + toString(value.takeError()));
  const json::Object *root = value->getAsObject();
  if (!root)
    return createStringError(inconvertibleErrorCode(),
                             fileName + ": the top level must be an object");
  Cluster c;
  FieldReader r(*root, fileName, "");
  if (Error e = r.checkKnown({"name", "source", "nodes", "devices_per_node",
                              "device", "intra_node", "inter_node"}))
    return std::move(e);
  c.name = fileName.str();
  if (Error e = r.getString("name", c.name))
    return std::move(e);
  if (Error e = r.getString("source", c.source))
    return std::move(e);
  if (Error e = r.getInteger("nodes", c.nodes))
    return std::move(e);
  if (Error e = r.getInteger("devices_per_node", c.devicesPerNode))
    return std::move(e);

  Expected<const json::Object *> device = r.getObject("device");
  if (!device)
    return device.takeError();
  FieldReader d(**device, fileName, "device");
  if (Error e = d.checkKnown({"name", "fp32", "tf32", "fp16", "bf16",
                              "hbm_capacity", "hbm_bandwidth"}))
    return std::move(e);
  if (Error e = d.getString("name", c.device.name))
    return std::move(e);
  if (Error e = d.getNumber("fp32", c.device.fp32, true))
    return std::move(e);
  for (auto [key, field] :
       {std::pair<StringRef, double *>{"tf32", &c.device.tf32},
        {"fp16", &c.device.fp16},
        {"bf16", &c.device.bf16}})
    if (Error e = d.getNumber(key, *field, false))
      return std::move(e);
  if (Error e = d.getInteger("hbm_capacity", c.device.hbmCapacity))
    return std::move(e);
  if (Error e = d.getNumber("hbm_bandwidth", c.device.hbmBandwidth, true))
    return std::move(e);

  if (Error e = readLink(r, "intra_node", fileName, c.intraNode))
    return std::move(e);
  if (Error e = readLink(r, "inter_node", fileName, c.interNode))
    return std::move(e);
  deriveBandwidths(c);
  if (Error e = verifyCluster(c, fileName))
    return std::move(e);
  return c;
}

Expected<Cluster> loadCluster(StringRef nameOrFile) {
  if (!nameOrFile.ends_with(".json") && !nameOrFile.contains('/'))
    return getPreset(nameOrFile);
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      MemoryBuffer::getFile(nameOrFile);
  if (!buffer)
    return createStringError(buffer.getError(),
                             nameOrFile + ": " + buffer.getError().message());
  return parseClusterJSON((*buffer)->getBuffer(), nameOrFile);
}

json::Value toJSON(const Cluster &c) {
  json::Object device{{"name", c.device.name},
                      {"fp32", c.device.fp32},
                      {"hbm_capacity", c.device.hbmCapacity},
                      {"hbm_bandwidth", c.device.hbmBandwidth}};
  if (c.device.tf32 > 0)
    device["tf32"] = c.device.tf32;
  if (c.device.fp16 > 0)
    device["fp16"] = c.device.fp16;
  if (c.device.bf16 > 0)
    device["bf16"] = c.device.bf16;
  auto link = [](const LinkSpec &l, StringRef level) {
    json::Object o{{"latency", l.latency}};
    if (l.units > 0) {
      auto [unitsKey, unitKey] = getLinkHardwareFields(level);
      o[unitsKey] = l.units;
      o[unitKey] = l.unitBandwidth;
    } else {
      o["bandwidth"] = l.bandwidth;
    }
    return o;
  };
  json::Object root{{"name", c.name},
                    {"nodes", c.nodes},
                    {"devices_per_node", c.devicesPerNode},
                    {"device", std::move(device)},
                    {"intra_node", link(c.intraNode, "intra_node")},
                    {"inter_node", link(c.interNode, "inter_node")}};
  if (!c.source.empty())
    root["source"] = c.source;
  return json::Value(std::move(root));
}

/// "150.0 GB/s", "3.125 GB/s": one decimal, or as many as needed up to 3.
static std::string formatGBps(double bytesPerSecond) {
  double gb = bytesPerSecond / 1e9;
  std::string text;
  for (int digits = 1; digits <= 3; ++digits) {
    text.clear();
    raw_string_ostream(text) << format("%.*f", digits, gb);
    if (std::fabs(std::stod(text) - gb) < 1e-9 * std::max(1.0, gb))
      break;
  }
  return text + " GB/s";
}

void printCluster(raw_ostream &os, const Cluster &c) {
  os << "cluster " << c.name << "\n";
  if (!c.source.empty())
    os << "  source:            " << c.source << "\n";
  os << "  nodes:             " << c.nodes << "\n";
  os << "  devices per node:  " << c.devicesPerNode << "\n";
  os << "  devices:           " << c.getNumDevices() << "\n";
  os << "  device:            " << c.device.name << "\n";
  for (DType t : {DType::FP32, DType::TF32, DType::FP16, DType::BF16}) {
    double peak = c.device.getPeak(t);
    os << "    " << getDTypeName(t) << " peak:       ";
    if (peak > 0)
      os << format("%.1f TFLOP/s", peak / 1e12) << "\n";
    else
      os << "none\n";
  }
  os << format("    HBM capacity:    %.1f GiB (%lld bytes)\n",
               double(c.device.hbmCapacity) / double(kGiB),
               (long long)c.device.hbmCapacity);
  os << format("    HBM bandwidth:   %.1f GB/s\n", c.device.hbmBandwidth / 1e9);
  os << "  intra-node link:   " << formatGBps(c.intraNode.bandwidth)
     << " per device one way";
  if (c.intraNode.units > 0)
    os << " (" << c.intraNode.units << " links x "
       << formatGBps(c.intraNode.unitBandwidth) << ")";
  os << format(", latency %.2f us\n", c.intraNode.latency * 1e6);
  os << "  inter-node link:   " << formatGBps(c.interNode.bandwidth)
     << " per device one way";
  if (c.interNode.units > 0)
    os << " (" << c.interNode.units
       << (c.interNode.units == 1 ? " NIC" : " NICs") << " x "
       << formatGBps(c.interNode.unitBandwidth) << " per node, shared by "
       << c.devicesPerNode << " devices)";
  os << format(", latency %.2f us\n", c.interNode.latency * 1e6);
}

} // namespace stpar::cost
