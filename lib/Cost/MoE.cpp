//===- MoE.cpp - FasterMoE's performance model of expert parallelism ------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Formulas and sources: MoE.h and docs/cost-model.md, "Mixture of Experts".
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/MoE.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace llvm;

namespace stpar::cost {

static Error err(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

double MoELayer::getExpertParams() const {
  return double(ffnMatrices) * double(hidden) * double(ffnHidden);
}

double MoELayer::getFlopsPerToken() const { return 2 * getExpertParams(); }

ExpertLoad ExpertLoad::uniform(int64_t experts) {
  ExpertLoad load;
  load.share.assign(std::max<int64_t>(experts, 0),
                    experts > 0 ? 1.0 / double(experts) : 0.0);
  return load;
}

Expected<ExpertLoad> parseExpertLoad(StringRef text, int64_t experts,
                                     StringRef fileName) {
  Expected<json::Value> value = json::parse(text);
  if (!value)
    return err(fileName + ": not JSON: " + toString(value.takeError()));
  const json::Array *array = value->getAsArray();
  if (!array)
    return err(fileName +
               ": expected a JSON array of token counts, one per expert");
  if (int64_t(array->size()) != experts)
    return err(fileName + ": " + Twine(array->size()) +
               " entries, but the MoE layer has " + Twine(experts) +
               " experts");
  ExpertLoad load;
  double sum = 0;
  for (auto [e, v] : enumerate(*array)) {
    std::optional<double> x = v.getAsNumber();
    if (!x || !std::isfinite(*x) || *x < 0)
      return err(fileName + ": entry " + Twine(e) +
                 " must be a non-negative number");
    load.share.push_back(*x);
    sum += *x;
  }
  if (!(sum > 0))
    return err(fileName + ": every entry is 0; no token is routed");
  for (double &s : load.share)
    s /= sum;
  return load;
}

namespace {
/// Where worker w of an expert group sits: node w / a, local rank w % a.
/// An irregular placement is costed as one worker per node.
struct GroupShape {
  int64_t size = 1, perNode = 1, nodes = 1;
  explicit GroupShape(const AxisPlacement &p) {
    size = p.getSize();
    perNode = p.regular ? p.intraNodeSize : 1;
    nodes = size / perNode;
  }
  int64_t node(int64_t w) const { return w / perNode; }
  int64_t local(int64_t w) const { return w % perNode; }
};

using Matrix = std::vector<std::vector<double>>;

/// One flat exchange: the busiest directed link per level (bytes) and the
/// seconds (link maxima over their bandwidths plus one start-up per peer
/// with bytes, the slowest worker's).
double flatExchange(const Matrix &bytes, const GroupShape &g, const Cluster &c,
                    double &intraMax, double &interMax) {
  int64_t p = g.size;
  std::vector<double> nodeOut(g.nodes, 0), nodeIn(g.nodes, 0);
  double latency = 0;
  intraMax = interMax = 0;
  for (int64_t w = 0; w < p; ++w) {
    double out = 0, in = 0;
    int64_t intraPeers = 0, interPeers = 0;
    for (int64_t v = 0; v < p; ++v) {
      if (v == w)
        continue;
      bool sameNode = g.node(v) == g.node(w);
      if (sameNode) {
        out += bytes[w][v];
        in += bytes[v][w];
      } else {
        nodeOut[g.node(w)] += bytes[w][v];
        nodeIn[g.node(w)] += bytes[v][w];
      }
      if (bytes[w][v] > 0 || bytes[v][w] > 0)
        ++(sameNode ? intraPeers : interPeers);
    }
    intraMax = std::max({intraMax, out, in});
    latency = std::max(latency, double(intraPeers) * c.intraNode.latency +
                                    double(interPeers) * c.interNode.latency);
  }
  for (int64_t j = 0; j < g.nodes; ++j)
    interMax = std::max({interMax, nodeOut[j], nodeIn[j]});
  double seconds = 0;
  if (intraMax > 0)
    seconds = std::max(seconds, intraMax / c.intraNode.bandwidth);
  if (interMax > 0)
    seconds = std::max(seconds,
                       interMax / (double(g.perNode) * c.interNode.bandwidth));
  return seconds + latency;
}
} // namespace

double getAllToAllTime(const Matrix &bytes, const AxisPlacement &placement,
                       const Cluster &cluster, bool hierarchical,
                       double *intraMax, double *interMax) {
  GroupShape g(placement);
  double intra = 0, inter = 0, seconds = 0;
  if (!hierarchical || g.nodes == 1 || g.perNode == 1) {
    seconds = flatExchange(bytes, g, cluster, intra, inter);
  } else {
    // Phase 1 (inside each node): (j, l) hands (j, l') everything bound
    // for local rank l' of any node. Phase 2 (across nodes): (j, l') sends
    // (j', l') what the node has for node j'.
    int64_t p = g.size;
    Matrix first(p, std::vector<double>(p, 0)),
        second(p, std::vector<double>(p, 0));
    for (int64_t w = 0; w < p; ++w)
      for (int64_t v = 0; v < p; ++v) {
        int64_t via = g.node(w) * g.perNode + g.local(v);
        first[w][via] += bytes[w][v];
        second[via][v] += bytes[w][v];
      }
    double unused = 0;
    seconds = flatExchange(first, g, cluster, intra, unused) +
              flatExchange(second, g, cluster, unused, inter);
  }
  if (intraMax)
    *intraMax = intra;
  if (interMax)
    *interMax = inter;
  return seconds;
}

namespace {
/// The per-step pieces the layer's time is built from.
struct Exchange {
  /// Dispatch bytes per step (smart scheduling's steps; one step without
  /// it): step[s][w][v].
  std::vector<Matrix> steps;
  /// Forward compute seconds per step, the most loaded worker's.
  std::vector<double> compute;
};

Error check(const MoELayer &layer, const ExpertLoad &load,
            const ExpertParallelism &ep) {
  if (layer.experts <= 0 || layer.topK <= 0 || layer.hidden <= 0 ||
      layer.ffnHidden <= 0 || layer.ffnMatrices <= 0 || layer.tokens <= 0)
    return err("MoE layer: experts, top-k, hidden, FFN hidden, matrices "
               "and tokens must be positive");
  if (layer.topK > layer.experts)
    return err("MoE layer: top-" + Twine(layer.topK) + " of " +
               Twine(layer.experts) + " experts");
  if (int64_t(load.share.size()) != layer.experts)
    return err("expert load: " + Twine(load.share.size()) + " shares for " +
               Twine(layer.experts) + " experts");
  if (ep.size <= 0 || layer.experts % ep.size != 0)
    return err("expert parallelism: " + Twine(ep.size) +
               " workers do not divide " + Twine(layer.experts) + " experts");
  if (ep.placement.getSize() != ep.size)
    return err("expert parallelism: the placement spans " +
               Twine(ep.placement.getSize()) + " devices, not " +
               Twine(ep.size));
  if (ep.groupSize < 0 || (ep.groupSize && ep.size % ep.groupSize != 0))
    return err("smart scheduling: group size " + Twine(ep.groupSize) +
               " does not divide " + Twine(ep.size) + " workers");
  if (!ep.shadowed.empty() && int64_t(ep.shadowed.size()) != layer.experts)
    return err("shadowing: " + Twine(ep.shadowed.size()) + " flags for " +
               Twine(layer.experts) + " experts");
  if (ep.capacityFactor < 0)
    return err("capacity factor must not be negative");
  return Error::success();
}

/// Seconds of one expert's forward FFN on `tokens` tokens: ffnMatrices
/// GEMMs of 2 * tokens * H * F FLOPs each at the efficiency model's
/// eta(FLOPs) of the device's peak, plus a launch each.
double expertSeconds(const MoELayer &layer, double tokens, double peak,
                     const EfficiencyModel &eff) {
  if (tokens <= 0)
    return 0;
  double flops = 2 * tokens * double(layer.hidden) * double(layer.ffnHidden);
  return double(layer.ffnMatrices) *
         (flops / (peak * eff.getMatMulEfficiency(flops)) + eff.kernelLaunch);
}

/// Three-stage pipeline over the steps (FasterMoE Sec. 4.2): in slot j the
/// network carries step j's send and step j-2's receive, the compute units
/// step j-1's experts; a slot lasts as long as the longer of the two.
double pipelineSeconds(ArrayRef<double> send, ArrayRef<double> compute,
                       ArrayRef<double> receive) {
  int64_t n = send.size();
  double total = 0;
  for (int64_t j = 0; j < n + 2; ++j) {
    double net = (j < n ? send[j] : 0) + (j >= 2 ? receive[j - 2] : 0);
    double comp = j >= 1 && j - 1 < n ? compute[j - 1] : 0;
    total += std::max(net, comp);
  }
  return total;
}
} // namespace

Expected<MoECost> getMoECost(const MoELayer &layer, const ExpertLoad &load,
                             const ExpertParallelism &ep,
                             const Cluster &cluster,
                             const EfficiencyModel &eff) {
  if (Error e = check(layer, load, ep))
    return std::move(e);
  const int64_t p = ep.size, experts = layer.experts;
  const int64_t perWorker = experts / p;
  const int64_t g = ep.groupSize ? ep.groupSize : p, steps = p / g;
  double peak = cluster.device.getPeak(eff.dtype);
  if (peak <= 0)
    peak = cluster.device.fp32; // as getRooflineTime
  const double tokenBytes = double(layer.hidden) * layer.activationBytes;
  const double localSlots =
      double(layer.tokens) / double(p) * double(layer.topK);
  const double capacity =
      ep.capacityFactor > 0
          ? std::ceil(ep.capacityFactor * localSlots / double(experts))
          : 0;
  auto isShadowed = [&](int64_t e) {
    return !ep.shadowed.empty() && ep.shadowed[e];
  };
  auto owner = [&](int64_t e) { return e / perWorker; };
  auto stepOf = [&](int64_t from, int64_t to) {
    return ((to / g) - (from / g) + steps) % steps;
  };

  MoECost cost;
  cost.workerTokens.assign(p, 0);
  cost.expertTokens.assign(experts, 0);
  Exchange ex;
  ex.steps.assign(steps, Matrix(p, std::vector<double>(p, 0)));
  ex.compute.assign(steps, 0);
  // Per step and worker: tokens received per local expert.
  std::vector<std::vector<std::vector<double>>> received(
      steps,
      std::vector<std::vector<double>>(p, std::vector<double>(perWorker, 0)));
  std::vector<double> shadowSeconds(p, 0);
  for (int64_t e = 0; e < experts; ++e) {
    double routed = localSlots * load.share[e];
    if (isShadowed(e)) {
      // Computed where the tokens are (FasterMoE Sec. 4.1): no exchange.
      cost.expertTokens[e] = routed * double(p);
      for (int64_t w = 0; w < p; ++w) {
        cost.workerTokens[w] += routed;
        shadowSeconds[w] += expertSeconds(layer, routed, peak, eff);
      }
      continue;
    }
    double kept = capacity > 0 ? std::min(routed, capacity) : routed;
    double sent = capacity > 0 ? capacity : routed;
    cost.expertTokens[e] = kept * double(p);
    cost.droppedTokens += (routed - kept) * double(p);
    int64_t to = owner(e);
    for (int64_t w = 0; w < p; ++w) {
      int64_t s = stepOf(w, to);
      ex.steps[s][w][to] += sent * tokenBytes;
      received[s][to][e % perWorker] += sent;
      cost.workerTokens[to] += sent;
    }
  }
  cost.maxWorkerTokens =
      *std::max_element(cost.workerTokens.begin(), cost.workerTokens.end());
  cost.receiveBufferTokens =
      capacity > 0
          ? capacity * double(perWorker * p)
          : double(layer.tokens) * double(std::min(layer.topK, perWorker));

  // Compute: per step the most loaded worker; a worker's shadowed experts
  // run with step 0 (its own tokens). Unscheduled, the steps' experts run
  // back to back, so the layer's compute is the max over workers of their
  // sum.
  std::vector<double> workerSeconds(p, 0);
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t w = 0; w < p; ++w) {
      double sec = s == 0 ? shadowSeconds[w] : 0;
      for (double t : received[s][w])
        sec += expertSeconds(layer, t, peak, eff);
      ex.compute[s] = std::max(ex.compute[s], sec);
      workerSeconds[w] += sec;
    }
  cost.computeForward =
      *std::max_element(workerSeconds.begin(), workerSeconds.end());

  // The whole exchange (for the breakdown), then per step.
  Matrix whole(p, std::vector<double>(p, 0));
  for (const Matrix &m : ex.steps)
    for (int64_t w = 0; w < p; ++w)
      for (int64_t v = 0; v < p; ++v)
        whole[w][v] += m[w][v];
  Matrix back(p, std::vector<double>(p, 0));
  for (int64_t w = 0; w < p; ++w)
    for (int64_t v = 0; v < p; ++v)
      back[v][w] = whole[w][v];
  cost.dispatch =
      getAllToAllTime(whole, ep.placement, cluster, ep.hierarchical,
                      &cost.intraNodeLinkBytes, &cost.interNodeLinkBytes);
  cost.combine = getAllToAllTime(back, ep.placement, cluster, ep.hierarchical);

  if (ep.groupSize == 0) {
    cost.forward = cost.dispatch + cost.computeForward + cost.combine;
    cost.backward = cost.dispatch + 2 * cost.computeForward + cost.combine;
  } else {
    std::vector<double> send(steps), receive(steps), twice(steps);
    for (int64_t s = 0; s < steps; ++s) {
      Matrix t(p, std::vector<double>(p, 0));
      for (int64_t w = 0; w < p; ++w)
        for (int64_t v = 0; v < p; ++v)
          t[v][w] = ex.steps[s][w][v];
      send[s] =
          getAllToAllTime(ex.steps[s], ep.placement, cluster, ep.hierarchical);
      receive[s] = getAllToAllTime(t, ep.placement, cluster, ep.hierarchical);
      twice[s] = 2 * ex.compute[s];
    }
    cost.forward = pipelineSeconds(send, ex.compute, receive);
    // B: the combine's gradient goes the dispatch's way, the experts'
    // input and weight gradients cost twice F, the dispatch's gradient
    // goes back the combine's way.
    cost.backward = pipelineSeconds(send, twice, receive);
  }

  // Shadowing (FasterMoE Sec. 4.1): the owner broadcasts the weights before
  // F and the gradients are reduced to it after B, each a pipelined chain
  // over the group: (P - 1) start-ups and the bytes once over the slowest
  // level the group spans.
  double shadowParams = 0;
  for (int64_t e = 0; e < experts; ++e)
    if (isShadowed(e))
      shadowParams += layer.getExpertParams();
  if (shadowParams > 0 && p > 1) {
    GroupShape shape(ep.placement);
    const LinkSpec &slow =
        shape.nodes > 1 ? cluster.interNode : cluster.intraNode;
    double start = double(p - 1) * slow.latency;
    cost.shadow = 2 * start + shadowParams *
                                  (layer.weightBytes + layer.gradientBytes) /
                                  slow.bandwidth;
  }
  cost.total = cost.forward + cost.backward + cost.shadow;
  return cost;
}

Expected<std::vector<bool>> chooseShadowedExperts(const MoELayer &layer,
                                                  const ExpertLoad &load,
                                                  const ExpertParallelism &ep,
                                                  const Cluster &cluster,
                                                  const EfficiencyModel &eff) {
  ExpertParallelism trial = ep;
  trial.shadowed.assign(std::max<int64_t>(layer.experts, 0), false);
  Expected<MoECost> base = getMoECost(layer, load, trial, cluster, eff);
  if (!base)
    return base.takeError();
  std::vector<int64_t> order(layer.experts);
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](int64_t a, int64_t b) {
    return load.share[a] > load.share[b];
  });
  double best = base->total;
  std::vector<bool> chosen = trial.shadowed;
  for (int64_t e : order) {
    trial.shadowed[e] = true;
    Expected<MoECost> c = getMoECost(layer, load, trial, cluster, eff);
    if (!c)
      return c.takeError();
    if (!(c->total < best))
      break;
    best = c->total;
    chosen = trial.shadowed;
  }
  return chosen;
}

Expected<int64_t> chooseGroupSize(const MoELayer &layer, const ExpertLoad &load,
                                  const ExpertParallelism &ep,
                                  const Cluster &cluster,
                                  const EfficiencyModel &eff) {
  ExpertParallelism trial = ep;
  std::vector<int64_t> sizes = {0};
  for (int64_t g = ep.size; g >= 1; --g)
    if (ep.size % g == 0)
      sizes.push_back(g);
  int64_t best = 0;
  double bestTime = std::numeric_limits<double>::infinity();
  for (int64_t g : sizes) {
    trial.groupSize = g;
    Expected<MoECost> c = getMoECost(layer, load, trial, cluster, eff);
    if (!c)
      return c.takeError();
    if (c->total < bestTime) {
      bestTime = c->total;
      best = g;
    }
  }
  return best;
}

} // namespace stpar::cost
