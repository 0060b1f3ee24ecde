// Hot embedding rows replicated on every worker.
//
// Criteo-like data is Zipf-skewed: a few ids take most accesses. Those rows are chosen before
// training by counting ids in a sample of the input (HotSetSelector, like FAE and Hotline), held
// on every worker in a HotRowCache, and never cross the network: their gradients are summed over
// the workers (worker/hot_sync.h) and every replica applies the same sparse optimizer step, so
// the replicas stay identical. Cold rows go through the parameter servers.
//
// A HotRowCache is owned by one trainer and used by its compute thread only (not thread-safe),
// except Find(), which the prepare stage may call concurrently with compute (the id -> slot maps
// change only in Rebuild, which the caller runs at a step boundary with the pipeline drained).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/sparse_optimizer_options.h"
#include "embedding/table_config.h"
#include "worker/batch.h"
#include "worker/input/batch_reader.h"

namespace dlrm::worker {

class HotRowCache;

// Counts id occurrences per table over sample batches and picks the most frequent (table, id)
// pairs, across all tables, until `budget_bytes` of stored rows (weights and optimizer state)
// is used. Ties break by (table, id), so every worker given the same sample picks the same set.
// It also counts, per id, the worker batches ("slices") it appears in: what the planner
// (worker/hot_plan.h) needs, since a row costs traffic once per step it is used in, however many
// times the step uses it.
class HotSetSelector {
 public:
  // `min_count`: ids seen fewer times in the sample are never hot (1 = any id seen).
  HotSetSelector(std::vector<embedding::TableConfig> tables, int state_floats, int min_count = 1);
  // `slices`: the batch is that many workers' batches side by side (samples split evenly, in
  // order), e.g. the global batch of `slices` workers.
  void Add(const Batch& batch, int slices = 1);
  // Ids per table, each list sorted ascending.
  std::vector<std::vector<int64_t>> Select(int64_t budget_bytes) const;
  struct Ranked {
    int table;
    int64_t id;
    int64_t count;     // occurrences in the sample
    int64_t presence;  // slices it appears in
    // The same in the even and in the odd slices: the planner ranks by one half and measures on
    // the other, so that it judges a set on batches it was not chosen from.
    int64_t count_even;
    int64_t presence_odd;
  };
  // Every id seen at least min_count times, most frequent first (the order Select takes them).
  // With `favoured` (the hot set in use), its rows rank as if seen kKeepFactor times as often:
  // a row leaves the set only for one clearly more frequent, not for sampling noise.
  // At most `limit` rows: the first of that order, found without sorting the rest (the planner
  // needs no more than fit in its ceiling).
  static constexpr int64_t kKeepFactor = 2;
  std::vector<Ranked> Rank(const HotRowCache* favoured = nullptr,
                           size_t limit = std::numeric_limits<size_t>::max()) const;
  // What the planner reads, from one pass over the counts: Rank(favoured, limit); with
  // `by_even_count`, the first `limit` of the same rows by count_even (most first, ties in Rank's
  // order); and presence and presence_odd summed over every row Rank lists.
  struct Ranking {
    std::vector<Ranked> by_count;
    std::vector<Ranked> by_even_count;
    int64_t presence = 0;
    int64_t presence_odd = 0;
  };
  Ranking RankForPlan(const HotRowCache* favoured, size_t limit, bool by_even_count) const;
  // presence and presence_odd summed over the rows `set` holds, or over `ids` (per table);
  // rows never seen add nothing.
  std::pair<int64_t, int64_t> PresenceOf(const HotRowCache& set) const;
  std::pair<int64_t, int64_t> PresenceOf(const std::vector<std::vector<int64_t>>& ids) const;
  // Halves every count (dropping ids that reach zero): a window that decays at each refresh
  // remembers the ids of earlier windows at half weight, so that rows too rare to show in every
  // window are not swapped in and out by chance.
  void Decay();
  int64_t samples() const { return samples_; }
  int64_t slices() const { return slices_; }
  int state_floats() const { return state_floats_; }
  int64_t row_bytes(int table) const {
    return static_cast<int64_t>(tables_[table].dim + state_floats_) * 4;
  }
  const std::vector<embedding::TableConfig>& tables() const { return tables_; }

 private:
  // 32-bit counts (a sample is a few thousand batches at most, and a refresher's window halves
  // its counts at every refresh): a smaller entry makes counting (Add) and copying a window for
  // a plan cheaper.
  struct Stat {
    int32_t count = 0;
    int32_t presence = 0;
    int32_t count_even = 0;
    int32_t presence_odd = 0;
    int64_t last_slice = -1;
  };
  // Adds the presences of `ids` of table `table` to *presence and *presence_odd.
  void AddPresence(int table, const std::vector<int64_t>& ids, int64_t* presence,
                   int64_t* presence_odd) const;
  // Calls fn(rank key, stat) for every row Rank lists; the key is the count, times kKeepFactor
  // when `favoured` holds the row.
  template <typename Fn>
  void ForEachRow(const HotRowCache* favoured, Fn fn) const;
  // The rows Rank lists whose key is at least `min_key` or whose count_even is at least
  // `min_even` (-1: no second bar), with their keys, unsorted.
  std::vector<std::pair<int64_t, Ranked>> Keyed(const HotRowCache* favoured, int64_t min_key,
                                                int64_t min_even) const;
  std::vector<embedding::TableConfig> tables_;
  int state_floats_;
  int min_count_;
  std::vector<absl::flat_hash_map<int64_t, Stat>> counts_;
  int64_t samples_ = 0;
  int64_t slices_ = 0;
};

// Reads up to `max_batches` batches from `reader` (then rewinds it) into `selector`, each batch
// split into `slices` worker batches. Every worker must sample the same records (e.g. the first
// batches of the whole training set) so that all pick the same set.
absl::Status SampleBatches(BatchReader* reader, int max_batches, int slices,
                           HotSetSelector* selector);
// SampleBatches into a new selector, then Select(budget_bytes).
absl::StatusOr<std::vector<std::vector<int64_t>>> SampleHotSet(
    const std::vector<embedding::TableConfig>& tables, int state_floats, BatchReader* reader,
    int max_batches, int64_t budget_bytes);

struct HotRowCacheOptions {
  std::vector<embedding::TableConfig> tables;
  embedding::SparseOptimizerOptions optimizer;
  uint64_t seed = 0;  // rows start from the deterministic initialisation (embedding/row_init.h)
};

class HotRowCache {
 public:
  static absl::StatusOr<std::unique_ptr<HotRowCache>> Create(
      const HotRowCacheOptions& options, const std::vector<std::vector<int64_t>>& hot_ids);

  // Slot of `id` in table `table`, or -1 when the row is cold.
  int32_t Find(int table, int64_t id) const {
    auto it = slots_[table].find(id);
    return it == slots_[table].end() ? -1 : it->second;
  }
  // The weights (dim floats) of a hot row.
  const float* Weights(int table, int32_t slot) const {
    return rows_[table].data() + static_cast<int64_t>(slot) * row_floats_[table];
  }
  // Full stored row [weights | optimizer state].
  const float* StoredRow(int table, int32_t slot) const { return Weights(table, slot); }
  float* MutableStoredRow(int table, int32_t slot) {
    return rows_[table].data() + static_cast<int64_t>(slot) * row_floats_[table];
  }

  int num_tables() const { return static_cast<int>(tables_.size()); }
  int64_t num_rows(int table) const { return static_cast<int64_t>(ids_[table].size()); }
  int64_t total_rows() const { return total_rows_; }
  int row_floats(int table) const { return row_floats_[table]; }
  int dim(int table) const { return tables_[table].dim; }
  const std::vector<int64_t>& ids(int table) const { return ids_[table]; }
  // Offset of table `table`'s first row in the flat gradient layout (rows of all tables in
  // order, dim floats each) used by the allreduce.
  int64_t grad_offset(int table) const { return grad_offsets_[table]; }
  int64_t grad_floats() const { return grad_floats_; }
  int64_t bytes() const;

  // Applies summed gradients to the rows `rows` (indices in the flat layout, all tables' rows in
  // order, ascending): grads holds each row's dim floats in that order. Rows not listed are left
  // as they are, as the parameter servers leave rows nobody pushed.
  // `learning_rate`: the step's rate (a job's schedule); kTableLearningRate = options' own.
  void ApplyRowGradients(absl::Span<const int32_t> rows, const float* grads,
                         float learning_rate = embedding::kTableLearningRate);

  // Replaces the hot set. Rows that stay keep their values; new rows take their stored values
  // (weights and state) from `incoming` ([rows x row_floats] per table, in `hot_ids` order for
  // the ids not already hot, see MissingIds). REQUIRES: no concurrent Find.
  void Rebuild(const std::vector<std::vector<int64_t>>& hot_ids,
               const std::vector<std::vector<float>>& incoming);
  // Ids of `hot_ids` not in the cache now, per table (the rows to fetch before Rebuild).
  std::vector<std::vector<int64_t>> MissingIds(
      const std::vector<std::vector<int64_t>>& hot_ids) const;
  // Ids in the cache that `hot_ids` no longer holds, per table (the rows to write back).
  std::vector<std::vector<int64_t>> LeavingIds(
      const std::vector<std::vector<int64_t>>& hot_ids) const;

 private:
  HotRowCache(const HotRowCacheOptions& options);
  void Index();

  std::vector<embedding::TableConfig> tables_;
  embedding::SparseOptimizerOptions optimizer_;
  std::vector<int> row_floats_;
  std::vector<std::vector<int64_t>> ids_;
  std::vector<std::vector<float>> rows_;  // per table: [rows x row_floats]
  std::vector<absl::flat_hash_map<int64_t, int32_t>> slots_;
  std::vector<int64_t> grad_offsets_;
  std::vector<int64_t> row_offsets_;  // first flat row of each table
  int64_t grad_floats_ = 0;
  int64_t total_rows_ = 0;
  std::vector<float*> row_ptrs_;  // ApplyRowGradients' scratch
};

}  // namespace dlrm::worker
