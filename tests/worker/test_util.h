// Helpers shared by the worker tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "dense/backend.h"
#include "embedding/local_store.h"
#include "tests/common/temp_dir.h"
#include "worker/batch.h"
#include "worker/trainer.h"

namespace dlrm::worker::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at destruction.
class TempDir : public ::dlrm::testing::ScopedTempDir {
 public:
  TempDir() : ScopedTempDir("dlrm_worker_test") {}
  std::string File(const std::string& name) const { return Sub(name); }
};

void WriteFile(const std::string& path, const std::string& content);
std::string ReadFile(const std::string& path);

// A small job on generated data (worker/input/synthetic.h with CappedKaggleCardinalities(1000)):
// 26 tables capped at 1000 rows, dim 8, bottom 32-8, top 32-1, Adam and row-wise Adagrad, batch
// 256, 2 epochs, 20% held out, on the CPU.
common::JobSpec SmallGeneratedJob(const std::string& train_path, uint64_t seed);

// Writes `rows` generated Criteo TSV lines (worker/input/synthetic.h, seed `seed`) to `path`, every
// table capped at `max_rows` (CappedKaggleCardinalities).
absl::Status GenerateCappedTsv(const std::string& path, int64_t rows, uint64_t seed,
                               int64_t max_rows);

// A batch of spec.batch_size samples for `spec`'s tables: random dense values and labels, and bags
// of 0 to 6 ids, skewed so that ids repeat within and across bags (seeded: the same batch for the
// same seed).
Batch RandomBagBatch(const common::JobSpec& spec, uint32_t seed);

// The worker tests' dense backend: the CPU with one BLAS thread, fp32.
std::unique_ptr<dense::Backend> CpuTestBackend();

// A LocalEmbeddingStore with the spec's tables, seed and sparse optimizer, and num_threads
// threads for its per-table work (LocalStoreOptions::num_threads).
std::unique_ptr<embedding::LocalEmbeddingStore> LocalStoreForSpec(const common::JobSpec& spec,
                                                                  int num_threads = 0);

// Steps trainers a and b (CPU backends) through the same `steps` RandomBagBatch batches (seeds
// first_seed, first_seed + 1, ...) and expects the same losses, dense parameters and rows of
// their stores' tables, bit for bit.
void ExpectSameTraining(Trainer& a, const embedding::LocalEmbeddingStore& a_rows, Trainer& b,
                        const embedding::LocalEmbeddingStore& b_rows, const common::JobSpec& spec,
                        int steps, uint32_t first_seed);

// tests/worker/data/criteo_sample.tsv: 200 real rows of the Criteo Kaggle data.
std::string CriteoSamplePath();

}  // namespace dlrm::worker::testing
