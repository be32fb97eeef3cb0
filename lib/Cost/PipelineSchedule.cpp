//===- PipelineSchedule.cpp - Pipeline schedules and their costs ----------===//

#include "stpar/Cost/PipelineSchedule.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <limits>

using namespace stpar::cost;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

static llvm::Error err(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

StringRef stpar::cost::getScheduleName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  }
  return "?";
}

std::optional<ScheduleKind> stpar::cost::parseScheduleKind(StringRef name) {
  for (ScheduleKind k :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    if (name == getScheduleName(k))
      return k;
  return std::nullopt;
}

std::string ScheduleSlot::str(bool chunks) const {
  std::string s = (forward ? "F" : "B") + std::to_string(microBatch);
  if (chunks)
    s += "." + std::to_string(chunk);
  return s;
}

/// Forwards a rank runs before its first backward (its warm-up), as
/// Megatron-LM's schedules count them; the whole step when every forward
/// comes first.
static int64_t getWarmup(const ScheduleShape &s, int64_t rank) {
  int64_t p = s.stages, m = s.microBatches, v = s.virtualStages;
  switch (s.kind) {
  case ScheduleKind::GPipe:
    return m;
  case ScheduleKind::OneFOneB:
    return std::min(p - rank - 1, m);
  case ScheduleKind::Interleaved:
    // With one group of micro-batches (m == p) Megatron-LM runs every
    // forward first.
    if (m == p)
      return m * v;
    return std::min((p - rank - 1) * 2 + (v - 1) * p, m * v);
  }
  return m;
}

Expected<std::vector<std::vector<ScheduleSlot>>>
stpar::cost::buildSchedule(const ScheduleShape &s) {
  int64_t p = s.stages, m = s.microBatches, v = s.virtualStages;
  if (p < 1 || m < 1 || v < 1)
    return err("pipeline schedule: stages, micro-batches and virtual stages "
               "must be >= 1 (got p=" +
               Twine(p) + ", m=" + Twine(m) + ", v=" + Twine(v) + ")");
  if (s.kind != ScheduleKind::Interleaved && v != 1)
    return err(Twine(getScheduleName(s.kind)) +
               " has one model chunk per rank (v=1), got v=" + Twine(v));
  if (s.kind == ScheduleKind::Interleaved) {
    if (v < 2 || p < 2)
      return err("interleaved 1F1B needs v >= 2 virtual stages and p >= 2 "
                 "pipeline stages (got p=" +
                 Twine(p) + ", v=" + Twine(v) + ")");
    if (m % p)
      return err("interleaved 1F1B: the " + Twine(m) +
                 " micro-batches are not a multiple of the " + Twine(p) +
                 " pipeline stages (they go in groups of p)");
  }
  // The k-th forward (backward) of a rank: micro-batches in groups of p,
  // each group through chunk 0, 1, ... (backward: v - 1, ..., 0).
  auto slotOf = [&](bool forward, int64_t k) {
    ScheduleSlot slot;
    slot.forward = forward;
    if (s.kind != ScheduleKind::Interleaved) {
      slot.microBatch = k;
      return slot;
    }
    int64_t inGroup = k % (p * v);
    slot.chunk = inGroup / p;
    if (!forward)
      slot.chunk = v - 1 - slot.chunk;
    slot.microBatch = (k / (p * v)) * p + k % p;
    return slot;
  };
  int64_t total = m * v;
  std::vector<std::vector<ScheduleSlot>> ranks(p);
  for (int64_t r = 0; r < p; ++r) {
    int64_t warmup = getWarmup(s, r);
    std::vector<ScheduleSlot> &list = ranks[r];
    for (int64_t k = 0; k < warmup; ++k)
      list.push_back(slotOf(true, k));
    for (int64_t i = 0; i < total - warmup; ++i) {
      list.push_back(slotOf(true, warmup + i));
      list.push_back(slotOf(false, i));
    }
    for (int64_t i = std::max<int64_t>(0, total - warmup); i < total; ++i)
      list.push_back(slotOf(false, i));
  }
  return ranks;
}

Expected<ScheduleRun> stpar::cost::simulateSchedule(
    const ScheduleShape &s, const std::vector<std::vector<ScheduleSlot>> &ranks,
    double forward, double backward) {
  int64_t p = s.stages, m = s.microBatches, v = s.virtualStages;
  if (int64_t(ranks.size()) != p)
    return err("pipeline schedule: " + Twine(ranks.size()) +
               " rank lists for " + Twine(p) + " stages");
  int64_t stages = p * v;
  const double unset = -1;
  // finish[phase][micro-batch * stages + virtual stage]
  std::vector<double> finish[2] = {
      std::vector<double>(size_t(m * stages), unset),
      std::vector<double>(size_t(m * stages), unset)};
  for (int64_t r = 0; r < p; ++r) {
    std::vector<int> seen(size_t(2 * m * v), 0);
    for (const ScheduleSlot &slot : ranks[r]) {
      if (slot.microBatch < 0 || slot.microBatch >= m || slot.chunk < 0 ||
          slot.chunk >= v)
        return err("pipeline schedule: rank " + Twine(r) + " has slot " +
                   slot.str(v > 1) + " outside m=" + Twine(m) +
                   ", v=" + Twine(v));
      if (seen[size_t((slot.forward ? 0 : m * v) + slot.microBatch * v +
                      slot.chunk)]++)
        return err("pipeline schedule: rank " + Twine(r) + " runs " +
                   slot.str(v > 1) + " twice");
    }
    if (int64_t(ranks[r].size()) != 2 * m * v)
      return err("pipeline schedule: rank " + Twine(r) + " has " +
                 Twine(ranks[r].size()) + " slots, not " + Twine(2 * m * v));
  }
  double tf = forward / double(v), tb = backward / double(v);
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> free(size_t(p), 0.0);
  size_t done = 0, all = size_t(2 * m * v * p);
  while (done < all) {
    bool progress = false;
    for (int64_t r = 0; r < p; ++r) {
      while (next[r] < ranks[r].size()) {
        const ScheduleSlot &slot = ranks[r][next[r]];
        int64_t vs = slot.chunk * p + r;
        int64_t at = slot.microBatch * stages + vs;
        double ready = free[r];
        auto need = [&](int phase, int64_t stage) {
          double f = finish[phase][size_t(slot.microBatch * stages + stage)];
          if (f == unset)
            return false;
          ready = std::max(ready, f);
          return true;
        };
        bool ok = slot.forward
                      ? (vs == 0 || need(0, vs - 1))
                      : (need(0, vs) && (vs == stages - 1 || need(1, vs + 1)));
        if (!ok)
          break;
        double end = ready + (slot.forward ? tf : tb);
        finish[slot.forward ? 0 : 1][size_t(at)] = end;
        free[r] = end;
        ++next[r];
        ++done;
        progress = true;
      }
    }
    if (!progress) {
      std::string waiting;
      for (int64_t r = 0; r < p; ++r)
        if (next[r] < ranks[r].size())
          waiting += (waiting.empty() ? "" : ", ") +
                     ("rank " + Twine(r)).str() + " at " +
                     ranks[r][next[r]].str(v > 1);
      return err("pipeline schedule deadlocks: " + waiting +
                 " wait on slots no rank can run first");
    }
  }
  ScheduleRun run;
  for (double f : free)
    run.makespan = std::max(run.makespan, f);
  for (int64_t r = 0; r < p; ++r) {
    run.idle.push_back(run.makespan - double(m) * (forward + backward));
    int64_t held = 0, peak = 0;
    for (const ScheduleSlot &slot : ranks[r]) {
      held += slot.forward ? 1 : -1;
      peak = std::max(peak, held);
    }
    run.peakInFlight.push_back(double(peak) / double(v));
  }
  return run;
}

double stpar::cost::getBubbleSlots(const ScheduleShape &s) {
  double idle = double(s.stages - 1);
  if (s.kind == ScheduleKind::Interleaved)
    idle /= double(std::max<int64_t>(1, s.virtualStages));
  return idle;
}

double stpar::cost::getInFlight(const ScheduleShape &s, int64_t stage) {
  int64_t warmup = getWarmup(s, stage);
  int64_t total = s.microBatches * s.virtualStages;
  // In steady state a rank holds its warm-up's forwards and the one just
  // run; with no steady state, all of them.
  int64_t held = warmup < total ? warmup + 1 : total;
  return double(held) / double(s.virtualStages);
}
