// The toy model of toy-model.py, y = 2 x + 1 + T[ids] with T[r, c] =
// 10 r + c, as an MPI program with the emitted programs' command line: rank
// r computes rows r, r + size, ...; rank 0 sums the rows and writes y.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static bool readFile(const std::string &path, void *data, size_t bytes) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  size_t n = std::fread(data, 1, bytes, f);
  std::fclose(f);
  return n == bytes;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string inputs, outputs, weights;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--inputs")) inputs = argv[i + 1];
    else if (!std::strcmp(argv[i], "--outputs")) outputs = argv[i + 1];
    else if (!std::strcmp(argv[i], "--weights")) weights = argv[i + 1];
  }
  if (size > 4) {
    if (rank == 0)
      std::fprintf(stderr, "toy program: error: started with %d ranks, at most 4\n", size);
    MPI_Finalize();
    return 1;
  }
  float x[4 * 6];
  int64_t ids[4];
  if (!readFile(inputs + "/input_0.bin", x, sizeof x) ||
      !readFile(inputs + "/input_1.bin", ids, sizeof ids)) {
    std::fprintf(stderr, "toy program: error: cannot read the inputs\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::vector<float> y(4 * 6, 0.0f), sum(4 * 6);
  for (int r = rank; r < 4; r += size)
    for (int c = 0; c < 6; ++c)
      y[r * 6 + c] = 2 * x[r * 6 + c] + 1 + float(10 * ids[r] + c);
#ifdef TOY_WRONG
  if (rank == 0)
    y[0] += 1e-3f;
#endif
  MPI_Reduce(y.data(), sum.data(), 4 * 6, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    FILE *f = std::fopen((outputs + "/output_0.bin").c_str(), "wb");
    std::fwrite(sum.data(), sizeof(float), sum.size(), f);
    std::fclose(f);
  }
  MPI_Finalize();
  return 0;
}
