//===- PlanHTML.cpp - a plan file as one self-contained page ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// `stpar plan --html plan.html` and `stpar compile` (OUTDIR/plan.html):
// the plan file (docs/plan-format.md) drawn for people, as one HTML file
// with inline CSS and SVG (no script, no network): the mesh laid over the
// cluster's nodes, each operator's tensors cut over the mesh axes (grouped
// by layer, repeated layers folded), one training step as a timeline of
// compute and exposed and hidden communication (PrimePar Fig. 9's
// categories), memory per device against capacity, and the --compare
// baselines. Everything is read from the JSON, so a page can be made from
// any plan file (docs/plan-format.md, "HTML page").
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Mesh.h"
#include "stpar/Pipelines/Plan.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace llvm;

namespace {
const char *const kAxisColors[] = {"#4e79a7", "#f28e2b", "#59a14f",
                                   "#e15759", "#b07aa1", "#76b7b2"};
const double kMiB = double(1 << 20);
const double kGiB = double(int64_t(1) << 30);

/// Text for HTML content and attribute values.
std::string escape(StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

struct AxisInfo {
  std::string name, role;
  int64_t size = 1;
  std::string color;
};

double getNum(const json::Object *o, StringRef key) {
  return o ? o->getNumber(key).value_or(0) : 0.0;
}
std::string getStr(const json::Object *o, StringRef key) {
  return o ? o->getString(key).value_or("").str() : std::string();
}

/// A dim of a layout ("b/x0" or "n/t") as a coloured chip.
void printDimChip(raw_ostream &os, StringRef dim,
                  const std::vector<AxisInfo> &axes) {
  auto [loop, split] = dim.trim().split('/');
  if (split.empty()) {
    os << "<span class=\"dim\">" << escape(loop) << "</span>";
    return;
  }
  std::string color = "#999";
  SmallVector<StringRef, 4> names;
  split.split(names, ',');
  for (const AxisInfo &a : axes)
    if (a.name == names.front())
      color = a.color;
  if (split == "t")
    color = "#333";
  os << "<span class=\"dim split\" style=\"background:" << color << "\">"
     << escape(loop) << "/" << escape(split) << "</span>";
}

/// One horizontal stacked bar (SVG) of (label, value, color) segments,
/// scaled so that `full` spans the width; a marker at `limit` if > 0.
void printBar(raw_ostream &os, StringRef id,
              ArrayRef<std::tuple<std::string, double, std::string>> parts,
              double full, StringRef unit, double unitScale, double limit = 0) {
  const double width = 900, height = 34;
  os << "<svg id=\"" << id << "\" class=\"bar\" width=\"" << width + 20
     << "\" height=\"" << height + 30 << "\" viewBox=\"0 0 " << width + 20
     << " " << height + 30 << "\">\n";
  double x = 0;
  for (const auto &[label, value, color] : parts) {
    if (value <= 0 || full <= 0)
      continue;
    double w = value / full * width;
    os << format("<rect x=\"%.2f\" y=\"0\" width=\"%.2f\" height=\"%.0f\" "
                 "fill=\"%s\"><title>",
                 x, w, height, color.c_str())
       << escape(label)
       << format(": %.4g %s</title></rect>\n", value * unitScale,
                 unit.str().c_str());
    if (w > 60)
      os << format("<text x=\"%.2f\" y=\"21\" class=\"seg\">", x + 4)
         << escape(label) << "</text>\n";
    x += w;
  }
  if (limit > 0 && full > 0)
    os << format("<line x1=\"%.2f\" x2=\"%.2f\" y1=\"-2\" y2=\"%.0f\" "
                 "class=\"limit\"/>",
                 limit / full * width, limit / full * width, height + 4);
  os << format("<text x=\"0\" y=\"%.0f\" class=\"axis\">0</text>", height + 20)
     << format("<text x=\"%.0f\" y=\"%.0f\" class=\"axis\" "
               "text-anchor=\"end\">%.4g %s</text>\n",
               width, height + 20, full * unitScale, unit.str().c_str())
     << "</svg>\n";
  // The legend, for what is too narrow to label.
  os << "<div class=\"legend\">";
  for (const auto &[label, value, color] : parts)
    if (value > 0)
      os << "<span><i style=\"background:" << color << "\"></i>"
         << escape(label)
         << format(" %.4g %s", value * unitScale, unit.str().c_str())
         << "</span>";
  os << "</div>\n";
}

void printMesh(raw_ostream &os, const json::Object &root,
               const std::vector<AxisInfo> &axes) {
  const json::Object *topo = root.getObject("topology");
  int64_t devices = 1;
  for (const AxisInfo &a : axes)
    devices *= a.size;
  int64_t perNode = topo ? topo->getInteger("devices_per_node").value_or(0) : 0;
  if (perNode <= 0)
    perNode = devices;
  int64_t nodes = (devices + perNode - 1) / perNode;
  os << "<section id=\"mesh\"><h2>Mesh on the cluster</h2>\n<p>" << devices
     << " devices in " << nodes << " node(s) of " << perNode;
  if (topo)
    os << " " << escape(getStr(topo, "device"))
       << format(" (intra-node %.4g GB/s, inter-node %.4g GB/s per device, "
                 "one direction)",
                 getNum(topo, "intra_node_bandwidth") / 1e9,
                 getNum(topo, "inter_node_bandwidth") / 1e9);
  os << ". A device's label is its rank and its coordinate on each mesh "
        "axis; the colour of its frame, its coordinate on the first split "
        "axis.</p>\n<table class=\"axes\"><tr><th>axis</th><th>size</th>"
        "<th>role</th><th>links</th></tr>\n";
  for (auto [k, a] : llvm::enumerate(axes)) {
    int64_t stride = 1;
    for (size_t j = k + 1; j < axes.size(); ++j)
      stride *= axes[j].size;
    stpar::cost::AxisPlacement p =
        stpar::cost::getAxisPlacement(a.size, stride, perNode);
    const char *links = a.size == 1  ? "-"
                        : !p.regular ? "inter-node"
                        : p.crossesInterNode() && p.crossesIntraNode()
                            ? "intra- and inter-node"
                        : p.crossesInterNode() ? "inter-node"
                                               : "intra-node";
    os << "<tr><td><i class=\"swatch\" style=\"background:" << a.color
       << "\"></i>" << escape(a.name) << "</td><td>" << a.size << "</td><td>"
       << escape(a.role) << "</td><td>" << links << "</td></tr>\n";
  }
  os << "</table>\n";
  // Nodes side by side (wrapping), devices in a grid inside each.
  unsigned colorAxis = 0;
  for (auto [k, a] : llvm::enumerate(axes))
    if (a.size > 1 && a.role != "pp") {
      colorAxis = unsigned(k);
      break;
    }
  const double cell = 74, pad = 10;
  int64_t cols = std::min<int64_t>(perNode, 4);
  int64_t rows = (perNode + cols - 1) / cols;
  double nodeW = cols * cell + 2 * pad, nodeH = rows * cell + 2 * pad + 18;
  int64_t perRow = std::max<int64_t>(1, int64_t(1000 / (nodeW + 12)));
  int64_t shownNodes = std::min<int64_t>(nodes, 16);
  int64_t nodeRows = (shownNodes + perRow - 1) / perRow;
  double svgW = std::min<int64_t>(shownNodes, perRow) * (nodeW + 12);
  double svgH = nodeRows * (nodeH + 12);
  os << format("<svg id=\"mesh-svg\" width=\"%.0f\" height=\"%.0f\">\n", svgW,
               svgH);
  for (int64_t n = 0; n < shownNodes; ++n) {
    double nx = (n % perRow) * (nodeW + 12), ny = (n / perRow) * (nodeH + 12);
    os << format("<g class=\"node\"><rect x=\"%.0f\" y=\"%.0f\" "
                 "width=\"%.0f\" height=\"%.0f\" rx=\"8\"/>"
                 "<text x=\"%.0f\" y=\"%.0f\" class=\"nodename\">node %lld"
                 "</text>\n",
                 nx, ny, nodeW, nodeH, nx + pad, ny + 15, (long long)n);
    for (int64_t l = 0; l < perNode; ++l) {
      int64_t rank = n * perNode + l;
      if (rank >= devices)
        break;
      // Coordinates, last axis fastest.
      std::vector<int64_t> coord(axes.size());
      int64_t rest = rank;
      for (size_t k = axes.size(); k-- > 0;) {
        coord[k] = rest % axes[k].size;
        rest /= axes[k].size;
      }
      std::string label;
      for (auto [k, a] : llvm::enumerate(axes))
        if (a.size > 1)
          label += (label.empty() ? "" : ",") + std::to_string(coord[k]);
      double dx = nx + pad + (l % cols) * cell,
             dy = ny + pad + 18 + (l / cols) * cell;
      const char *color =
          kAxisColors[coord[colorAxis] % std::size(kAxisColors)];
      os << format("<g class=\"device\"><rect x=\"%.0f\" y=\"%.0f\" "
                   "width=\"%.0f\" height=\"%.0f\" rx=\"4\" "
                   "style=\"stroke:%s\"/>",
                   dx + 3, dy + 3, cell - 6, cell - 6, color)
         << format("<text x=\"%.0f\" y=\"%.0f\" class=\"rank\">%lld</text>",
                   dx + cell / 2, dy + cell / 2 - 2, (long long)rank)
         << format("<text x=\"%.0f\" y=\"%.0f\" class=\"coord\">(",
                   dx + cell / 2, dy + cell / 2 + 14)
         << escape(label) << ")</text></g>\n";
    }
    os << "</g>\n";
  }
  os << "</svg>\n";
  if (shownNodes < nodes)
    os << "<p>(the first " << shownNodes << " of " << nodes
       << " nodes are drawn)</p>\n";
  os << "</section>\n";
}

void printOperators(raw_ostream &os, const json::Object &root,
                    const std::vector<AxisInfo> &axes) {
  const json::Array *ops = root.getArray("operators");
  os << "<section id=\"operators\"><h2>Operators</h2>\n<p>Per operator, "
        "its partition and how each tensor is cut: a coloured dim is split "
        "over the mesh axis of that colour (<code>/t</code>: cut into q "
        "slices by the temporal primitive, the slice changing per step). "
        "Times per micro-batch; memory as the step charges it per "
        "device.</p>\n";
  if (!ops)
    return;
  // Group by layer; layers after the first are folded when every operator
  // has the partition of the first layer's at the same position.
  std::vector<std::vector<const json::Object *>> layers;
  std::vector<const json::Object *> outside;
  for (const json::Value &v : *ops) {
    const json::Object *op = v.getAsObject();
    if (!op)
      continue;
    int64_t layer = op->getInteger("layer").value_or(-1);
    if (layer < 0) {
      outside.push_back(op);
      continue;
    }
    if (size_t(layer) >= layers.size())
      layers.resize(layer + 1);
    layers[layer].push_back(op);
  }
  // Whether layer l > 0 is partitioned as layer 0, operator by operator.
  auto sameAsFirst = [&](size_t l) {
    if (l == 0 || layers[l].size() != layers[0].size())
      return false;
    for (size_t i = 0; i < layers[l].size(); ++i)
      if (stpar::pipelines::describeSpec(layers[l][i]->getObject("spec")) !=
          stpar::pipelines::describeSpec(layers[0][i]->getObject("spec")))
        return false;
    return true;
  };
  size_t folded = 0;
  for (size_t l = 1; l < layers.size(); ++l)
    folded += sameAsFirst(l);
  auto table = [&](ArrayRef<const json::Object *> group) {
    os << "<table class=\"ops\"><tr><th>operator</th><th>kind</th>"
          "<th>partition</th><th>tensors</th><th>ms</th><th>MiB</th></tr>\n";
    for (const json::Object *op : group) {
      os << "<tr class=\"op\"><td class=\"name\">" << escape(getStr(op, "name"))
         << "</td><td>" << escape(getStr(op, "layer_kind")) << "</td><td><code>"
         << escape(stpar::pipelines::describeSpec(op->getObject("spec")))
         << "</code></td><td>";
      if (const json::Array *tensors = op->getArray("tensors"))
        for (const json::Value &t : *tensors) {
          const json::Object *to = t.getAsObject();
          std::string role = getStr(to, "role");
          std::string layout = getStr(to, "layout");
          // The table's tag (I, I2, W, O); from the role in files written
          // before plan.json carried it.
          std::string tag = getStr(to, "tag");
          if (tag.empty())
            tag = role == "parameter" ? "W" : role == "output" ? "O" : "I";
          os << "<div class=\"tensor\" title=\"" << escape(getStr(to, "name"))
             << "\"><b>" << escape(tag) << "</b>";
          StringRef inner = StringRef(layout).trim("[]");
          SmallVector<StringRef, 6> dims;
          if (!inner.empty())
            inner.split(dims, ", ");
          for (StringRef d : dims)
            printDimChip(os, d, axes);
          os << "</div>";
        }
      os << "</td>"
         << format("<td class=\"num\">%.4f</td><td class=\"num\">%.3f</td>",
                   getNum(op, "seconds_per_micro_batch") * 1e3,
                   (getNum(op, "device_state_bytes") +
                    getNum(op, "device_activation_bytes")) /
                       kMiB)
         << "</tr>\n";
    }
    os << "</table>\n";
  };
  std::vector<const json::Object *> before, after;
  for (const json::Object *op : outside)
    (getStr(op, "section") == "post" ? after : before).push_back(op);
  if (!before.empty()) {
    os << "<details open><summary>before the layers (" << before.size()
       << " operators)</summary>\n";
    table(before);
    os << "</details>\n";
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    if (sameAsFirst(l))
      continue;
    os << "<details" << (l == 0 ? " open" : "") << "><summary>layer " << l;
    if (l == 0 && folded > 0)
      os << " (and " << folded << " more layer(s) partitioned the same, "
         << "folded)";
    os << " (" << layers[l].size() << " operators)</summary>\n";
    table(layers[l]);
    os << "</details>\n";
  }
  if (!after.empty()) {
    os << "<details open><summary>after the layers (" << after.size()
       << " operators)</summary>\n";
    table(after);
    os << "</details>\n";
  }
  os << "</section>\n";
}

void printTimeline(raw_ostream &os, const json::Object &root) {
  const json::Object *step = root.getObject("step");
  if (!step)
    return;
  const json::Object *mb = step->getObject("micro_batch");
  double perMB = getNum(mb, "forward_s") + getNum(mb, "recompute_s") +
                 getNum(mb, "backward_input_s") +
                 getNum(mb, "backward_weight_s") +
                 getNum(mb, "communication_s");
  double busy = getNum(step, "pipeline_s") - getNum(step, "bubble_s");
  double scale = perMB > 0 ? busy / perMB : 0;
  double stepS = getNum(step, "step_s");
  double hidden = std::max(0.0, getNum(step, "grad_sync_s") -
                                    getNum(step, "grad_sync_exposed_s"));
  os << "<section id=\"timeline\"><h2>One training step</h2>\n<p>"
     << format("Step %.3f ms on every device (the critical pipeline stage "
               "when there are several): %lld micro-batch(es) of F, B and G "
               "with their exposed communication, the pipeline bubble, the "
               "exposed gradient sync and the optimizer. Model FLOPs "
               "utilization %.1f%%.",
               stepS * 1e3,
               (long long)step->getInteger("micro_batches").value_or(1),
               getNum(step, "mfu") * 100)
     << "</p>\n";
  std::vector<std::tuple<std::string, double, std::string>> parts = {
      {"forward (F)", scale * getNum(mb, "forward_s"), "#4e79a7"},
      {"recompute", scale * getNum(mb, "recompute_s"), "#a0cbe8"},
      {"input gradients (B)", scale * getNum(mb, "backward_input_s"),
       "#59a14f"},
      {"weight gradients (G)", scale * getNum(mb, "backward_weight_s"),
       "#8cd17d"},
      {"exposed communication", scale * getNum(mb, "communication_s"),
       "#e15759"},
      {"pipeline bubble", getNum(step, "bubble_s"), "#cccccc"},
      {"exposed gradient sync", getNum(step, "grad_sync_exposed_s"), "#f28e2b"},
      {"optimizer", getNum(step, "optimizer_s"), "#b07aa1"}};
  printBar(os, "timeline-bar", parts, stepS, "ms", 1e3);
  if (hidden > 0) {
    os << "<p>Hidden under the backward pass: the gradient sync's other "
       << format("%.4g ms.", hidden * 1e3) << "</p>\n";
    printBar(os, "timeline-hidden",
             {{"hidden gradient sync", hidden, "#ffbe7d"}}, stepS, "ms", 1e3);
  }
  if (const json::Object *times = root.getObject("times"))
    if (const json::Object *b = times->getObject("breakdown")) {
      double ring = getNum(b, "ring_not_hidden") + getNum(b, "ring_startup") +
                    getNum(b, "ring_alignment");
      os << "<p>PrimePar Fig. 9's categories of the pipeline part: "
         << format("compute %.4g ms, collectives %.4g ms, re-layout %.4g ms, "
                   "temporal ring beyond compute %.4g ms.",
                   getNum(b, "compute") * 1e3, getNum(b, "collectives") * 1e3,
                   getNum(times, "relayout") * 1e3, ring * 1e3)
         << "</p>\n";
    }
  os << "</section>\n";
}

void printMemory(raw_ostream &os, const json::Object &root) {
  const json::Object *step = root.getObject("step");
  const json::Object *m = step ? step->getObject("peak_memory") : nullptr;
  if (!m)
    return;
  double capacity = getNum(m, "capacity_bytes");
  double total = getNum(m, "total_bytes");
  const json::Object *mem = root.getObject("memory");
  double limit = getNum(mem, "limit");
  os << "<section id=\"memory\"><h2>Memory per device</h2>\n<p>"
     << format("%.3f GiB of %.3f GiB", total / kGiB, capacity / kGiB);
  if (limit > 0 && limit != capacity)
    os << format(" (search limit %.3f GiB)", limit / kGiB);
  os << (m->getBoolean("fits").value_or(true) ? "; fits" : "; DOES NOT FIT")
     << ". The line marks the device's capacity.</p>\n";
  std::vector<std::tuple<std::string, double, std::string>> parts = {
      {"parameters", getNum(m, "parameters_bytes"), "#4e79a7"},
      {"gradients", getNum(m, "gradients_bytes"), "#59a14f"},
      {"optimizer states", getNum(m, "optimizer_bytes"), "#b07aa1"},
      {"activations", getNum(m, "activations_bytes"), "#f28e2b"},
      {"transient", getNum(m, "transient_bytes"), "#e15759"}};
  printBar(os, "memory-bar", parts, std::max(capacity, total), "GiB",
           1.0 / kGiB, capacity);
  os << "</section>\n";
}

void printCompare(raw_ostream &os, const json::Object &root) {
  const json::Array *rows = root.getArray("compare");
  if (!rows || rows->empty())
    return;
  double worst = 0;
  for (const json::Value &r : *rows)
    worst = std::max(worst, getNum(r.getAsObject(), "step_seconds"));
  os << "<section id=\"compare\"><h2>Baselines (same cost model)</h2>\n"
        "<table class=\"compare\"><tr><th>plan</th><th>step ms</th>"
        "<th>t / t<sub>plan</sub></th><th>GiB</th><th>configuration</th>"
        "<th></th></tr>\n";
  for (const json::Value &r : *rows) {
    const json::Object *ro = r.getAsObject();
    std::string status = getStr(ro, "status");
    os << "<tr class=\"baseline\"><td>" << escape(getStr(ro, "name"))
       << "</td>";
    if (status != "ok") {
      os << "<td colspan=\"5\">" << escape(status) << " "
         << escape(getStr(ro, "message")) << "</td></tr>\n";
      continue;
    }
    double t = getNum(ro, "step_seconds");
    os << format("<td class=\"num\">%.3f</td><td class=\"num\">%.3f</td>"
                 "<td class=\"num\">%.3f</td>",
                 t * 1e3, getNum(ro, "relative"),
                 getNum(ro, "memory_bytes") / kGiB)
       << "<td><code>" << escape(getStr(ro, "configuration")) << "</code></td>"
       << format("<td><svg width=\"200\" height=\"12\"><rect width=\"%.1f\" "
                 "height=\"12\" fill=\"#4e79a7\"/></svg></td></tr>\n",
                 worst > 0 ? 200 * t / worst : 0);
  }
  os << "</table>\n</section>\n";
}
/// Mixture-of-experts layers (FasterMoE's model, docs/moe.md): per layer a
/// column chart of the token slots each expert computes, coloured by the
/// device of the expert group that holds it, the shadowed experts hatched
/// (computed where their tokens are), and the layer's choices. Layers with
/// the same choices and loads are drawn once.
void printMoE(raw_ostream &os, const json::Object &root) {
  const json::Array *ops = root.getArray("operators");
  if (!ops)
    return;
  // (moe record, operator names) in plan order, equal records merged.
  std::vector<std::pair<const json::Object *, std::vector<std::string>>> layers;
  for (const json::Value &v : *ops) {
    const json::Object *op = v.getAsObject();
    const json::Object *moe = op ? op->getObject("moe") : nullptr;
    if (!moe)
      continue;
    auto same =
        llvm::find_if(layers, [&](const auto &l) { return *l.first == *moe; });
    if (same == layers.end())
      layers.push_back({moe, {getStr(op, "name")}});
    else
      same->second.push_back(getStr(op, "name"));
  }
  if (layers.empty())
    return;
  os << "<section id=\"moe\"><h2>Mixture of experts</h2>\n<p>Token slots "
        "each expert computes per micro-batch (the routing histogram, "
        "uniform unless given with --expert-load), coloured by the device "
        "of the expert group that holds the expert; hatched: shadowed "
        "(FasterMoE's dynamic shadowing: its weights are broadcast and every "
        "device computes it on its own tokens).</p>\n";
  os << "<svg width=\"0\" height=\"0\"><defs><pattern id=\"moe-hatch\" "
        "width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" "
        "fill=\"#fff\" fill-opacity=\"0.6\"/></pattern></defs></svg>\n";
  for (auto [index, layer] : llvm::enumerate(layers)) {
    const json::Object *moe = layer.first;
    std::vector<double> tokens;
    if (const json::Array *t = moe->getArray("tokens_per_expert"))
      for (const json::Value &x : *t)
        tokens.push_back(x.getAsNumber().value_or(0));
    std::vector<bool> shadowed(tokens.size(), false);
    if (const json::Array *sh = moe->getArray("shadowed_experts"))
      for (const json::Value &x : *sh)
        if (std::optional<int64_t> e = x.getAsInteger();
            e && *e >= 0 && size_t(*e) < tokens.size())
          shadowed[*e] = true;
    int64_t perDevice =
        std::max<int64_t>(1, moe->getInteger("experts_per_device").value_or(1));
    int64_t group = moe->getInteger("expert_parallel").value_or(1);
    int64_t schedule = moe->getInteger("schedule_group_size").value_or(0);
    os << "<h3>" << escape(layer.second.front());
    if (layer.second.size() > 1)
      os << " (and " << layer.second.size() - 1
         << " more layer(s) with the same choices)";
    os << "</h3>\n<p>"
       << format("expert parallelism %lld (%lld of %zu experts per device), "
                 "%s all-to-all, ",
                 (long long)group, (long long)perDevice, tokens.size(),
                 getStr(moe, "all_to_all").c_str())
       << (schedule > 0
               ? "smart schedule in groups of " + std::to_string(schedule)
               : std::string("not scheduled"))
       << format("; most loaded device %.0f tokens, busiest link per "
                 "dispatch %.3f MB NVLink / %.3f MB network",
                 getNum(moe, "max_device_tokens"),
                 getNum(moe, "busiest_nvlink_bytes_per_dispatch") / 1e6,
                 getNum(moe, "busiest_network_bytes_per_dispatch") / 1e6)
       << "</p>\n";
    double most = 0;
    for (double t : tokens)
      most = std::max(most, t);
    const double height = 120,
                 barWidth = std::max(
                     4.0, std::min(40.0, 900.0 / double(std::max<size_t>(
                                                     1, tokens.size()))));
    double width = barWidth * double(tokens.size());
    os << format("<svg id=\"moe-%zu\" class=\"moe\" width=\"%.0f\" "
                 "height=\"%.0f\">\n",
                 index, width + 60, height + 24);
    for (auto [e, t] : llvm::enumerate(tokens)) {
      double h = most > 0 ? t / most * height : 0;
      double x = double(e) * barWidth;
      const char *color =
          kAxisColors[(int64_t(e) / perDevice) % std::size(kAxisColors)];
      os << format("<rect class=\"expert\" x=\"%.1f\" y=\"%.1f\" "
                   "width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>"
                   "expert %zu on device %lld of the group: %.0f token slots%s"
                   "</title></rect>\n",
                   x, height - h, barWidth - 1, h, color, e,
                   (long long)(int64_t(e) / perDevice), t,
                   shadowed[e] ? ", shadowed" : "");
      if (shadowed[e])
        os << format("<rect class=\"shadowed\" x=\"%.1f\" y=\"%.1f\" "
                     "width=\"%.1f\" height=\"%.1f\" "
                     "fill=\"url(#moe-hatch)\"/>\n",
                     x, height - h, barWidth - 1, h);
    }
    os << format("<text x=\"%.0f\" y=\"12\" class=\"axis\">%.0f</text>"
                 "<text x=\"0\" y=\"%.0f\" class=\"axis\">expert 0</text>"
                 "<text x=\"%.0f\" y=\"%.0f\" class=\"axis\" "
                 "text-anchor=\"end\">%zu</text>\n",
                 width + 4, most, height + 16, width, height + 16,
                 tokens.empty() ? size_t(0) : tokens.size() - 1)
       << "</svg>\n";
  }
  os << "</section>\n";
}
} // namespace

void stpar::pipelines::writePlanHTML(raw_ostream &os, const json::Value &plan) {
  const json::Object *rootPtr = plan.getAsObject();
  json::Object empty;
  const json::Object &root = rootPtr ? *rootPtr : empty;
  std::vector<AxisInfo> axes;
  if (const json::Object *mesh = root.getObject("mesh"))
    if (const json::Array *arr = mesh->getArray("axes"))
      for (const json::Value &a : *arr)
        if (const json::Object *ao = a.getAsObject()) {
          AxisInfo info;
          info.name = getStr(ao, "name");
          info.role = getStr(ao, "role");
          // A file's sizes were checked when it was applied; a size below
          // 1 is drawn as 1 rather than divided by.
          info.size = std::max<int64_t>(1, ao->getInteger("size").value_or(1));
          info.color = kAxisColors[axes.size() % std::size(kAxisColors)];
          axes.push_back(std::move(info));
        }
  std::string model = getStr(&root, "model");
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<title>stpar plan: " << escape(model) << "</title>\n"
     << "<style>\n"
        "body{font:14px/1.4 sans-serif;margin:24px;color:#222;max-width:"
        "1200px}\n"
        "h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:"
        "1px solid #ddd}\n"
        "code{font:12px monospace}table{border-collapse:collapse}\n"
        "td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;"
        "vertical-align:top}\n"
        "td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
        "td.name{font:12px monospace;max-width:360px;word-break:break-all}\n"
        ".dim{display:inline-block;font:11px monospace;padding:0 4px;"
        "margin:1px;border:1px solid #bbb;border-radius:3px}\n"
        ".dim.split{color:#fff;border-color:transparent}\n"
        ".tensor{white-space:nowrap}.tensor b{display:inline-block;width:14px}"
        "\n"
        ".swatch,.legend i{display:inline-block;width:11px;height:11px;"
        "margin-right:4px;vertical-align:middle}\n"
        ".legend span{margin-right:14px;font-size:12px;white-space:nowrap}\n"
        ".node rect{fill:#f6f6f6;stroke:#888}.device rect{fill:#fff;"
        "stroke-width:4}\n"
        ".nodename{font-size:12px;fill:#555}.rank{font:bold 14px sans-serif;"
        "text-anchor:middle}\n"
        ".coord{font:11px monospace;text-anchor:middle;fill:#444}\n"
        ".seg{font-size:11px;fill:#fff}.axis{font-size:11px;fill:#555}\n"
        ".limit{stroke:#000;stroke-width:2;stroke-dasharray:4 2}\n"
        "summary{cursor:pointer;margin:8px 0;font-weight:bold}\n"
        "</style></head><body>\n";
  const json::Object *times = root.getObject("times");
  const json::Object *memory = root.getObject("memory");
  const json::Object *producer = root.getObject("producer");
  os << "<header id=\"summary\"><h1>stpar plan: " << escape(model)
     << "</h1>\n<p><b>" << escape(getStr(&root, "summary")) << "</b> on "
     << root.getInteger("devices").value_or(0) << " devices of "
     << escape(getStr(&root, "cluster")) << "</p>\n<p>"
     << format("step time <b>%.3f ms</b>, memory per device <b>%.3f GiB</b>",
               getNum(times, "step") * 1e3, getNum(memory, "total") / kGiB)
     << "</p>\n<p class=\"producer\">written by "
     << escape(getStr(producer, "name")) << " "
     << escape(getStr(producer, "version"))
     << "; plan format docs/plan-format.md</p></header>\n";
  printMesh(os, root, axes);
  printTimeline(os, root);
  printMemory(os, root);
  printCompare(os, root);
  printMoE(os, root);
  printOperators(os, root, axes);
  os << "</body></html>\n";
}
