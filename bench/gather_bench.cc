// gather_bench: bandwidth of the GPU embedding gather (pooled lookup) and scatter (gradient
// aggregation) against the device-to-device copy bandwidth measured in the same run, as one JSON
// object (embedding/cuda/gather_bench_kernels.h). The target is gather_ratio >= 0.7.
// Built only with CUDA; exits 1 with the reason on stderr without a GPU.
//
//   gather_bench --rows 10131227 --dim 16 --batch 16384 --ids-per-bag 64
#include <cstdio>

#include "CLI/CLI.hpp"
#include "embedding/cuda/gather_bench_kernels.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  CLI::App app{"GPU embedding gather/scatter bandwidth vs device-to-device copy (prints JSON)"};
  dlrm::embedding::cuda::GatherBenchOptions o;
  app.add_option("--device", o.device, "CUDA device ordinal");
  app.add_option("--rows", o.rows, "Table rows");
  app.add_option("--dim", o.dim, "Embedding dim");
  app.add_option("--row-stride", o.row_stride, "Floats per stored row (dim + optimizer state)");
  app.add_option("--batch", o.batch, "Bags per lookup");
  app.add_option("--ids-per-bag", o.ids_per_bag, "Ids per bag");
  app.add_option("--iterations", o.iterations, "Timed repetitions");
  app.add_option("--seed", o.seed, "Seed of the uniform ids");
  CLI11_PARSE(app, argc, argv);
  if (o.row_stride < o.dim) o.row_stride = o.dim;
  auto result = dlrm::embedding::cuda::RunGatherBench(o);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().ToString().c_str());
    return 1;
  }
  nlohmann::json j;
  j["rows"] = o.rows;
  j["dim"] = o.dim;
  j["row_stride"] = o.row_stride;
  j["batch"] = o.batch;
  j["ids_per_bag"] = o.ids_per_bag;
  j["iterations"] = o.iterations;
  j["distinct_ids"] = result->distinct_ids;
  j["copy_gbps"] = result->copy_gbps;
  j["gather_gbps"] = result->gather_gbps;
  j["scatter_gbps"] = result->scatter_gbps;
  j["gather_ratio"] = result->gather_ratio;
  j["scatter_ratio"] = result->scatter_ratio;
  j["gather_us"] = result->gather_us;
  j["scatter_us"] = result->scatter_us;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
