// Synthetic Criteo-like data with a planted logistic signal, for tests, benchmarks and laptops.
//
// Per row and table t, an id in [0, cardinality_t) is drawn Zipf(zipf_exponent)-skewed (id 0 the
// most frequent) and written as the token ScrambleToken(t, id), a bijection onto 8-hex-digit
// tokens, so the file looks like Criteo and its tokens hash evenly. Dense values are non-negative
// integers floor(expm1(sigma_j * |z|)) with z ~ N(0, 1) (heavy-tailed). Each field is empty with
// probability empty_fraction. The label is Bernoulli(sigmoid(PlantedModel::Logit(record))), so a
// model that learns per-id weights can beat chance and AUC is meaningful; the planted model itself
// is the oracle (tests/worker measures its AUC).
//
// Multi-hot (options.bags, binary output only): table t's bag has bags[t] ids; the first is the
// Zipf-drawn id above and the others are a fixed function of (table, that id, position), spread
// uniformly over the table, as MLPerf DLRMv2's synthetic multi-hot data (each one-hot id always
// brings the same bag), so popular ids stay popular and so do their bags. The planted logit
// then adds the mean weight of a bag's tokens. `dlrm convert --multi-hot` gives real one-hot data
// bags the same way, from its tokens (MultiHotBagToken in binary_format.h).
//
// Deterministic: the same options give byte-identical output (own PRNG, no std:: distributions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/input/criteo_tsv.h"
#include "worker/input/record_reader.h"

namespace dlrm::worker {

// The 26 Criteo Kaggle cardinalities (DESIGN.md, kaggle-shape).
std::vector<int64_t> KaggleCardinalities();
// KaggleCardinalities() with each entry capped at max_rows (>= 1), for small runs.
std::vector<int64_t> CappedKaggleCardinalities(int64_t max_rows);

struct GenDataOptions {
  std::string output;                      // file to write
  InputFormat format = InputFormat::kTsv;  // kTsv or kBinary (kAuto means kTsv)
  int64_t num_rows = 100000;               // in [0, kMaxGenDataRows] (common/limits.h)
  uint64_t seed = 1;
  std::vector<int64_t> cardinalities = KaggleCardinalities();  // 26 entries, each >= 1
  double zipf_exponent = 1.1;                                  // finite, > 0
  double signal_strength = 1.0;  // >= 0; 0 gives labels independent of the features
  double bias = -1.1;            // logit offset: about 25% positives at signal 0
  double empty_fraction = 0.02;  // in [0, 1)
  // Multi-hot bag sizes (binary format version 2); none: one-hot.
  std::optional<BagSizes> bags;
};

// MLPerf Training DLRMv2's bag sizes (its synthetic multi-hot Criteo 1TB), table by table.
BagSizes MlperfDlrmV2BagSizes();
// "mlperf" (MlperfDlrmV2BagSizes), one number for every table, or 26 comma-separated numbers,
// each in [1, kMaxBagSize] (gen-data's and convert's --multi-hot). INVALID_ARGUMENT naming the
// text and its bad part otherwise, after "<flag>: " when `flag` is given (e.g.
// "convert --multi-hot").
absl::StatusOr<BagSizes> ParseBagSizes(const std::string& text, const std::string& flag = "");

struct GenDataStats {
  int64_t rows = 0;
  int64_t positives = 0;
};

// Writes options.num_rows rows to options.output (via "<output>.tmp", renamed at the end).
// INVALID_ARGUMENT naming a bad option.
absl::Status GenerateCriteoTsv(const GenDataOptions& options, GenDataStats* stats = nullptr);

// 8-hex-digit token for id `id` of table `table`: a bijection on uint32 (murmur3 finalizer with a
// per-table key).
uint32_t ScrambleToken(int table, uint32_t id);

// The true model behind the labels of GenerateCriteoTsv with the same seed and signal strength.
class PlantedModel {
 public:
  explicit PlantedModel(const GenDataOptions& options);
  // bias + sum_t w_t(bag_t) + sum_j v_j * (dense_j - center_j), where w_t(bag) is the mean
  // weight of the bag's tokens (one-hot: the token's weight; missing tables add 0).
  double Logit(const CriteoRecord& record) const;
  // Weight of a (table, token): signal_strength * uniform(-1, 1), deterministic in the seed.
  double CategoricalWeight(int table, uint32_t token) const;

 private:
  uint64_t seed_;
  double strength_;
  double bias_;
  double dense_weight_[kCriteoNumDense];
  double dense_center_[kCriteoNumDense];
};

// sigma_j of dense feature j in the generator (shared by the generator and PlantedModel).
double SyntheticDenseSigma(int j);

}  // namespace dlrm::worker
