//===- GPTModel.cpp - GPT-style transformers as operator lists --*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The operators of a Megatron-partitioned GPT (Shoeybi et al., "Megatron-LM",
// 2019, Sec. 3: column-parallel QKV/fc1, row-parallel proj/fc2,
// vocab-parallel embedding and cross-entropy).
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/GPTModel.h"

#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace stpar::cost {

/// Splits "prefix:k=v,k=v" and calls `set(key, value)` for each pair.
static Error parseKeyValues(StringRef spec, StringRef prefix,
                            function_ref<Error(StringRef, int64_t)> set) {
  if (!spec.consume_front(prefix) || !spec.consume_front(":"))
    return createStringError(inconvertibleErrorCode(),
                             "expected '" + prefix + ":key=value,...'");
  SmallVector<StringRef> parts;
  spec.split(parts, ',', -1, false);
  SmallVector<StringRef> seen;
  for (StringRef part : parts) {
    auto [key, value] = part.split('=');
    key = key.trim();
    // `interleave` and `vp` name the same field.
    StringRef field = key == "vp" ? StringRef("interleave") : key;
    if (is_contained(seen, field))
      return createStringError(inconvertibleErrorCode(),
                               prefix + " key '" + key + "' given twice");
    seen.push_back(field);
    int64_t n = 0;
    StringRef text = value.trim();
    // Keys whose value may be a name: activation recomputation
    // (Recompute's values) and the pipeline schedule (1F1B, interleaved
    // with vp > 1, or GPipe).
    using Names = ArrayRef<std::pair<StringRef, int64_t>>;
    static const std::pair<StringRef, int64_t> recomputeNames[] = {
        {"none", 0}, {"selective", 2}, {"full", 1}};
    static const std::pair<StringRef, int64_t> scheduleNames[] = {{"1f1b", 0},
                                                                  {"gpipe", 1}};
    Names names = key == "recompute"  ? Names(recomputeNames)
                  : key == "schedule" ? Names(scheduleNames)
                                      : Names();
    bool byName = !names.empty() && !text.empty() && !isDigit(text.front());
    if (byName || key == "schedule") {
      const auto *it = llvm::find_if(
          names, [&](const auto &entry) { return entry.first == text; });
      if (it == names.end()) {
        std::string expected;
        for (auto [i, entry] : llvm::enumerate(names))
          expected += (i == 0                  ? ""
                       : i + 1 == names.size() ? " or "
                                               : ", ") +
                      entry.first.str();
        return createStringError(inconvertibleErrorCode(),
                                 prefix + " key '" + key + "': expected " +
                                     expected + ", got '" + value + "'");
      }
      n = it->second;
    } else if (text.getAsInteger(10, n) || n < 0) {
      return createStringError(inconvertibleErrorCode(),
                               prefix + " key '" + key +
                                   "': expected a non-negative integer, got '" +
                                   value + "'");
    }
    if (Error e = set(key, n))
      return e;
  }
  return Error::success();
}

static Error unknownKey(StringRef prefix, StringRef key) {
  return createStringError(inconvertibleErrorCode(),
                           "unknown " + prefix + " key '" + key + "'");
}

Expected<GPTConfig> parseGPTSpec(StringRef spec) {
  GPTConfig c;
  Error e = parseKeyValues(spec, "gpt", [&](StringRef k, int64_t v) -> Error {
    int64_t *field = StringSwitch<int64_t *>(k)
                         .Case("layers", &c.layers)
                         .Case("hidden", &c.hidden)
                         .Case("heads", &c.heads)
                         .Case("ffn", &c.ffn)
                         .Case("vocab", &c.vocab)
                         .Case("seq", &c.seq)
                         .Case("batch", &c.batch)
                         .Default(nullptr);
    if (!field)
      return unknownKey("gpt", k);
    *field = v;
    return Error::success();
  });
  if (e)
    return std::move(e);
  if (c.ffn == 0)
    c.ffn = 4 * c.hidden;
  for (auto [v, name] : {std::pair<int64_t, StringRef>{c.layers, "layers"},
                         {c.hidden, "hidden"},
                         {c.heads, "heads"},
                         {c.vocab, "vocab"},
                         {c.seq, "seq"},
                         {c.batch, "batch"}})
    if (v < 1)
      return createStringError(inconvertibleErrorCode(),
                               "gpt key '" + name +
                                   "': missing or not positive");
  if (c.hidden % c.heads)
    return createStringError(inconvertibleErrorCode(),
                             "gpt: heads must divide hidden");
  return c;
}

Expected<MegatronStrategy> parseMegatronSpec(StringRef spec) {
  MegatronStrategy s;
  bool distopt = false, zeroGiven = false;
  Error e =
      parseKeyValues(spec, "megatron", [&](StringRef k, int64_t v) -> Error {
        if (k == "zero") {
          if (v > 3)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key 'zero': must be 0-3");
          s.zeroStage = int(v);
          zeroGiven = true;
          return Error::success();
        }
        if (k == "recompute") {
          if (v > 2)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key 'recompute': must be "
                                     "none, selective or full (or 0, 1)");
          s.recompute = Recompute(v);
          return Error::success();
        }
        if (k == "schedule") {
          s.gpipe = v == 1;
          return Error::success();
        }
        if (k == "sp" || k == "distopt" || k == "overlap") {
          if (v > 1)
            return createStringError(inconvertibleErrorCode(),
                                     "megatron key '" + k +
                                         "': must be 0 or 1");
          (k == "sp"        ? s.sequenceParallel
           : k == "distopt" ? distopt
                            : s.overlapGradSync) = v != 0;
          return Error::success();
        }
        int64_t *field = StringSwitch<int64_t *>(k)
                             .Case("tp", &s.tp)
                             .Case("pp", &s.pp)
                             .Case("dp", &s.dp)
                             .Case("mb", &s.mb)
                             .Case("interleave", &s.interleave)
                             .Case("vp", &s.interleave)
                             .Default(nullptr);
        if (!field)
          return unknownKey("megatron", k);
        if (v < 1)
          return createStringError(inconvertibleErrorCode(),
                                   "megatron key '" + k + "': must be >= 1");
        *field = v;
        return Error::success();
      });
  if (e)
    return std::move(e);
  // Megatron-LM's distributed optimizer shards the optimizer states over the
  // data-parallel ranks: ZeRO stage 1.
  if (distopt) {
    if (zeroGiven && s.zeroStage != 1)
      return createStringError(inconvertibleErrorCode(),
                               "megatron: distopt=1 is ZeRO stage 1; it "
                               "contradicts zero=" +
                                   Twine(s.zeroStage));
    s.zeroStage = 1;
  }
  return s;
}

double getGPTParameterCount(const GPTConfig &m) {
  double h = double(m.hidden), f = double(m.ffn);
  double perLayer = 4 * h * h + 2 * h * f + 9 * h + f; // weights, biases, LNs
  return double(m.layers) * perLayer + double(m.vocab) * h + double(m.seq) * h +
         2 * h;
}

} // namespace stpar::cost
