// hot_traffic_bench: parameter-server traffic per sample with the hot set on against off.
//
// Generates Zipf-skewed Criteo-like data with the same generator as `dlrm gen-data`, then trains
// the same steps twice through the Trainer (in-process store): once with every row cold, once
// with the hot set chosen by sampling the first batches. The bytes are computed by formula, not
// counted on a wire: 2 x cold rows x (8-byte id + 4 x dim floats), the payload a GrpcPsClient
// would send and receive for the cold rows (ids plus rows on lookup, ids plus gradients on push),
// and they leave out the hot rows' own exchange. A cluster job counts what it sends
// (network_*_bytes_per_sample in its metrics; bench/netem_cluster.sh). Prints one JSON object.
#include <cstdio>
#include <filesystem>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/allocator.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "embedding/local_store.h"
#include "nlohmann/json.hpp"
#include "worker/hot_rows.h"
#include "worker/input/batch_reader.h"
#include "worker/input/synthetic.h"
#include "worker/trainer.h"

namespace dlrm::bench {
namespace {

struct Options {
  int64_t samples = 600000;
  int64_t max_rows = 1000000;  // cap on the Kaggle cardinalities (0 = full)
  double zipf = 1.1;
  int64_t hot_budget = 64 << 20;
  int sample_batches = 200;
  int steps = 40;
  int batch_size = 2048;
  std::string dir = "/tmp/dlrm_hot_traffic";
};

struct Traffic {
  worker::TrainerCounters counters;
  int64_t hot_rows = 0;
};

absl::StatusOr<Traffic> Measure(const Options& o, const common::JobSpec& spec, bool hot) {
  DLRM_ASSIGN_OR_RETURN(auto backend,
                        dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCpu}));
  embedding::LocalStoreOptions so;
  so.tables = worker::TableConfigsFromSpec(spec);
  so.seed = spec.seed;
  DLRM_ASSIGN_OR_RETURN(so.optimizer, worker::SparseOptimizerFromSpec(spec));
  DLRM_ASSIGN_OR_RETURN(auto store, embedding::LocalEmbeddingStore::Create(so));
  worker::TrainerOptions to;
  to.spec = spec;
  to.backend = backend.get();
  to.store = store.get();
  DLRM_ASSIGN_OR_RETURN(auto trainer, worker::Trainer::Create(to));
  worker::BatchReaderOptions ro;
  ro.paths = spec.train_paths;
  ro.batch_size = spec.batch_size;
  for (const auto& t : spec.tables) ro.table_rows.push_back(t.rows);
  DLRM_ASSIGN_OR_RETURN(auto reader, worker::BatchReader::Create(ro));
  Traffic traffic;
  if (hot) {
    const int state = embedding::SparseOptimizerStateFloats(so.optimizer.type, spec.embedding_dim);
    DLRM_ASSIGN_OR_RETURN(auto ids, worker::SampleHotSet(so.tables, state, reader.get(),
                                                         o.sample_batches, o.hot_budget));
    DLRM_RETURN_IF_ERROR(trainer->MigrateHotSet(ids, /*write_back=*/true));
    traffic.hot_rows = trainer->hot_rows()->total_rows();
  }
  // Train through the sampled batches first and measure only the batches after them, so the hot
  // set is judged on data it was not chosen from.
  worker::Batch batch;
  worker::TrainerCounters before;
  for (int i = 0; i < o.sample_batches + o.steps; ++i) {
    if (i == o.sample_batches) before = trainer->counters();
    DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&batch));
    if (!more) {
      return absl::InvalidArgumentError(absl::StrCat("--samples ", o.samples, " is too few for ",
                                                     o.sample_batches, " + ", o.steps,
                                                     " batches of ", o.batch_size));
    }
    DLRM_RETURN_IF_ERROR(trainer->Step(batch).status());
  }
  const worker::TrainerCounters after = trainer->counters();
  traffic.counters.samples = after.samples - before.samples;
  traffic.counters.ids = after.ids - before.ids;
  traffic.counters.hot_ids = after.hot_ids - before.hot_ids;
  traffic.counters.store_rows = after.store_rows - before.store_rows;
  traffic.counters.store_payload_bytes_formula =
      after.store_payload_bytes_formula - before.store_payload_bytes_formula;
  return traffic;
}

absl::Status Run(const Options& o) {
  std::filesystem::create_directories(o.dir);
  worker::GenDataOptions gen;
  gen.output = o.dir + "/train.bin";
  gen.format = worker::InputFormat::kBinary;
  gen.num_rows = o.samples;
  gen.seed = 5;
  gen.zipf_exponent = o.zipf;
  gen.cardinalities = o.max_rows > 0 ? worker::CappedKaggleCardinalities(o.max_rows)
                                     : worker::KaggleCardinalities();
  DLRM_RETURN_IF_ERROR(worker::GenerateCriteoTsv(gen));

  common::JobSpec spec;
  spec.bottom_mlp = {64, 16};
  spec.top_mlp = {64, 1};
  spec.embedding_dim = 16;
  for (size_t t = 0; t < gen.cardinalities.size(); ++t) {
    spec.tables.push_back({"C" + std::to_string(t + 1), gen.cardinalities[t]});
  }
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.001};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  spec.batch_size = o.batch_size;
  spec.train_paths = {gen.output};

  DLRM_ASSIGN_OR_RETURN(Traffic off, Measure(o, spec, false));
  DLRM_ASSIGN_OR_RETURN(Traffic on, Measure(o, spec, true));
  auto per_sample = [](const Traffic& t) {
    return static_cast<double>(t.counters.store_payload_bytes_formula) /
           static_cast<double>(t.counters.samples);
  };
  nlohmann::json j;
  j["samples_trained"] = on.counters.samples;
  j["zipf_exponent"] = o.zipf;
  j["max_rows"] = o.max_rows;
  j["hot_budget_bytes"] = o.hot_budget;
  j["hot_rows"] = on.hot_rows;
  j["hot_hit_rate"] = static_cast<double>(on.counters.hot_ids) / on.counters.ids;
  j["ps_payload_bytes_per_sample_formula_hot_off"] = per_sample(off);
  j["ps_payload_bytes_per_sample_formula_hot_on"] = per_sample(on);
  j["traffic_reduction_formula"] = per_sample(off) / per_sample(on);
  std::printf("%s\n", j.dump().c_str());
  std::filesystem::remove_all(o.dir);
  return absl::OkStatus();
}

}  // namespace
}  // namespace dlrm::bench

int main(int argc, char** argv) {
  dlrm::common::ConfigureAllocatorForLargeBuffers();  // as the dlrm processes
  dlrm::bench::Options o;
  CLI::App app{"PS traffic per sample with the hot set on and off"};
  app.add_option("--samples", o.samples, "Generated samples");
  app.add_option("--max-rows", o.max_rows, "Cap on the Kaggle cardinalities (0 = full)");
  app.add_option("--zipf", o.zipf, "Zipf exponent of the generated ids");
  app.add_option("--hot-budget", o.hot_budget, "Bytes of hot rows");
  app.add_option("--sample-batches", o.sample_batches, "Batches sampled to choose the hot set");
  app.add_option("--steps", o.steps, "Training steps measured");
  app.add_option("--dir", o.dir, "Scratch directory");
  CLI11_PARSE(app, argc, argv);
  absl::Status st = dlrm::bench::Run(o);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
