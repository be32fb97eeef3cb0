//===- stpar_io.h - files of emitted stpar programs --------------*- C++ -*-===//
//
// Part of stpar. Copied next to every program `stpar emit` writes.
// Command line, weights read in place, block reads of global tensors,
// outputs.
// The formats are documented in docs/emitted-code.md.
//
//===----------------------------------------------------------------------===//
#ifndef STPAR_RUNTIME_IO_H
#define STPAR_RUNTIME_IO_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace stpar_rt {

using Shape = std::vector<int64_t>;

[[noreturn]] inline void fatal(const std::string &message) {
  std::fprintf(stderr, "stpar_program: error: %s\n", message.c_str());
  std::fflush(stderr);
  // exit, not abort: a clear message and status 1, no core dump or
  // backtrace; mpirun then stops the other ranks.
  std::exit(1);
}

inline int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

struct Options {
  std::string weights, inputs, outputs;
};

inline Options parseOptions(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        fatal("missing value after " + a);
      return argv[++i];
    };
    if (a == "--weights")
      o.weights = value();
    else if (a == "--inputs")
      o.inputs = value();
    else if (a == "--outputs")
      o.outputs = value();
    else
      fatal("unknown argument '" + a +
            "' (usage: stpar_program --weights MODELDIR --inputs INDIR "
            "--outputs OUTDIR)");
  }
  return o;
}

/// Reads the block of a row-major global tensor that starts at `offsets`
/// and has shape `local` from `file` (data starting at byte `base`) into
/// `dst`, one contiguous innermost run at a time.
inline void readBlock(std::FILE *file, const std::string &what, uint64_t base,
                      size_t elementSize, const Shape &global,
                      const Shape &local, const Shape &offsets, void *dst) {
  size_t rank = global.size();
  // Merge trailing dims that are read whole into one run.
  size_t inner = rank;
  int64_t run = 1;
  while (inner > 0 && local[inner - 1] == global[inner - 1] &&
         offsets[inner - 1] == 0) {
    run *= global[inner - 1];
    --inner;
  }
  if (inner > 0) {
    run *= local[inner - 1];
  }
  size_t outer = inner > 0 ? inner - 1 : 0;
  Shape strides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    strides[d - 1] = strides[d] * global[d];
  int64_t runs = 1;
  for (size_t d = 0; d < outer; ++d)
    runs *= local[d];
  Shape idx(outer, 0);
  char *out = static_cast<char *>(dst);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t start = 0;
    for (size_t d = 0; d < outer; ++d)
      start += (offsets[d] + idx[d]) * strides[d];
    if (inner > 0)
      start += offsets[inner - 1] * strides[inner - 1];
    if (std::fseek(file, static_cast<long>(base + start * elementSize),
                   SEEK_SET) != 0 ||
        std::fread(out, elementSize, run, file) != static_cast<size_t>(run))
      fatal("cannot read " + what + " (file too short?)");
    out += run * elementSize;
    for (size_t d = outer; d-- > 0;) {
      if (++idx[d] < local[d])
        break;
      idx[d] = 0;
    }
  }
}

/// The model's weights where the model keeps them: `--weights DIR` is the
/// model's folder (or a checkpoint folder with the same files). Each
/// parameter lives in DIR/FILE at byte OFFSET, row-major and little-endian,
/// as its `#stp.param` records: the ONNX external-data file, or the .onnx
/// file itself for embedded raw data. Files are opened once and each rank
/// reads only its own block.
class Weights {
public:
  void open(const std::string &dir) { this->dir = dir; }
  ~Weights() {
    for (auto &entry : files)
      std::fclose(entry.second);
  }

  /// Reads this rank's block of parameter `name` into `dst`. `file` is
  /// empty when the model stores the values in a form that cannot be read
  /// in place (varint-coded typed fields, another element type).
  void read(const char *name, const char *file, uint64_t offset,
            size_t elementSize, const Shape &global, const Shape &local,
            const Shape &offsets, void *dst) {
    std::string what = std::string("parameter '") + name + "'";
    if (dir.empty())
      fatal(what + ": no --weights DIR (the model's folder) given");
    if (!*file)
      fatal(what + " is stored in the model in a form the program cannot "
                   "read in place; save the model with its weights as "
                   "external data (onnx.save(..., save_as_external_data="
                   "True))");
    std::string rel = file;
    if (rel.empty() || rel[0] == '/' || rel.find("..") != std::string::npos)
      fatal(what + ": its file '" + rel + "' is not inside the weights folder");
    std::FILE *&f = files[rel];
    std::string path = dir + "/" + rel;
    if (!f) {
      f = std::fopen(path.c_str(), "rb");
      if (!f)
        fatal("cannot open '" + path + "' (" + what + ")");
    }
    if (std::fseek(f, 0, SEEK_END) != 0)
      fatal("cannot read '" + path + "'");
    long size = std::ftell(f);
    uint64_t bytes = static_cast<uint64_t>(numElements(global)) * elementSize;
    if (size < 0 || offset + bytes > static_cast<uint64_t>(size))
      fatal(what + ": '" + path + "' has " + std::to_string(size) +
            " bytes; the parameter needs " + std::to_string(bytes) +
            " from byte " + std::to_string(offset));
    readBlock(f, what, offset, elementSize, global, local, offsets, dst);
  }

private:
  std::string dir;
  std::map<std::string, std::FILE *> files;
};

/// The rank's one arena (docs/emitted-code.md, "Memory"): every tensor of
/// the program is a view at the byte offset -stp-plan-memory chose.
struct Arena {
  char *base = nullptr;
  /// The plan's totals (bytes): the arena, the arguments in it, the most
  /// intermediate bytes live at one step.
  uint64_t bytes = 0, arguments = 0, livePeak = 0;
  /// The highest byte used so far.
  uint64_t touched = 0;

  char *at(uint64_t offset, uint64_t size) {
    if (offset + size > bytes)
      fatal("arena overflow: " + std::to_string(size) + " bytes at " +
            std::to_string(offset) + " of " + std::to_string(bytes));
    if (offset + size > touched)
      touched = offset + size;
    return base + offset;
  }
  /// One line on stderr (rank 0): the plan and what the run used.
  void report(int rank) const {
    if (rank != 0 || !base)
      return;
    std::fprintf(stderr,
                 "stpar_program: arena %llu bytes per rank (arguments %llu, "
                 "intermediates' live peak %llu), %llu bytes used\n",
                 static_cast<unsigned long long>(bytes),
                 static_cast<unsigned long long>(arguments),
                 static_cast<unsigned long long>(livePeak),
                 static_cast<unsigned long long>(touched));
  }
};

/// Per-op times of one run (environment variable STPAR_PROFILE set): the
/// emitted function marks each op of its body (stpar_rt::profile); the time
/// from one mark to the next is the marked op's, summed per label ("<ONNX
/// node> [<phase>]"). Rank 0 prints them at exit, in first-seen order, in
/// milliseconds.
struct Profile {
  bool enabled = std::getenv("STPAR_PROFILE") != nullptr;
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, int>> spans;
  void add(const std::string &label, double seconds) {
    auto it = spans.find(label);
    if (it == spans.end()) {
      order.push_back(label);
      spans[label] = {seconds, 1};
      return;
    }
    it->second.first += seconds;
    ++it->second.second;
  }
  void report(int rank) const {
    if (!enabled || rank != 0)
      return;
    double total = 0;
    for (const auto &entry : spans)
      total += entry.second.first;
    std::fprintf(stderr,
                 "stpar_program: profile (rank 0): %.3f ms in %zu "
                 "labels\n",
                 total * 1e3, order.size());
    for (const std::string &label : order) {
      const auto &span = spans.at(label);
      std::fprintf(stderr, "stpar_program: profile %12.4f ms %4d  %s\n",
                   span.first * 1e3, span.second, label.c_str());
    }
  }
};

/// Reads this rank's block of `INDIR/input_<index>.bin`.
inline void readInput(const Options &o, int index, size_t elementSize,
                      const Shape &global, const Shape &local,
                      const Shape &offsets, void *dst) {
  std::string path = o.inputs + "/input_" + std::to_string(index) + ".bin";
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    fatal("cannot open input file '" + path + "'");
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  if (size != static_cast<long>(numElements(global) * elementSize))
    fatal("'" + path + "' has " + std::to_string(size) + " bytes, expected " +
          std::to_string(numElements(global) * elementSize));
  readBlock(f, path, 0, elementSize, global, local, offsets, dst);
  std::fclose(f);
}

/// Writes `OUTDIR/output_<index>.bin`.
inline void writeOutput(const Options &o, int index, const void *data,
                        size_t bytes) {
  std::string path = o.outputs + "/output_" + std::to_string(index) + ".bin";
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, bytes, f) != bytes)
    fatal("cannot write '" + path + "'");
  std::fclose(f);
}

} // namespace stpar_rt

#endif // STPAR_RUNTIME_IO_H
