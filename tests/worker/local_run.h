// LocalRun: a trainer over an in-process store and a reader of one data file, the pieces the
// hot-row and pipeline tests put together again and again.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "dense/backend_factory.h"
#include "embedding/local_store.h"
#include "gtest/gtest.h"
#include "worker/input/batch_reader.h"
#include "worker/trainer.h"

namespace dlrm::worker::testing {

struct LocalRun {
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<BatchReader> reader;
};

// One CPU thread everywhere, so runs are deterministic and comparable bit for bit. `adjust`, when
// given, changes the trainer's options before it is made (e.g. its collectives).
inline std::unique_ptr<LocalRun> MakeLocalRun(
    const common::JobSpec& spec, const std::string& data_path,
    const std::function<void(TrainerOptions&)>& adjust = nullptr) {
  auto run = std::make_unique<LocalRun>();
  auto backend =
      dense::CreateBackend({.kind = dense::BackendOptions::Kind::kCpu, .cpu_threads = 1});
  EXPECT_TRUE(backend.ok()) << backend.status();
  run->backend = std::move(*backend);
  embedding::LocalStoreOptions so;
  so.tables = TableConfigsFromSpec(spec);
  so.seed = spec.seed;
  so.optimizer = *SparseOptimizerFromSpec(spec);
  so.num_threads = -1;
  run->store = *embedding::LocalEmbeddingStore::Create(so);
  TrainerOptions to;
  to.spec = spec;
  to.backend = run->backend.get();
  to.store = run->store.get();
  to.threads = 1;
  if (adjust) adjust(to);
  run->trainer = *Trainer::Create(to);
  BatchReaderOptions ro;
  ro.paths = {data_path};
  ro.batch_size = spec.batch_size;
  for (const auto& t : spec.tables) ro.table_rows.push_back(t.rows);
  run->reader = *BatchReader::Create(ro);
  return run;
}

}  // namespace dlrm::worker::testing
