#include "worker/hot_rows.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/row_init.h"
#include "embedding/sparse_optimizer.h"

namespace dlrm::worker {

HotSetSelector::HotSetSelector(std::vector<embedding::TableConfig> tables, int state_floats,
                               int min_count)
    : tables_(std::move(tables)),
      state_floats_(state_floats),
      min_count_(min_count),
      counts_(tables_.size()) {}

void HotSetSelector::Add(const Batch& batch, int slices) {
  slices = std::max(1, std::min(slices, std::max(1, batch.size)));
  for (size_t t = 0; t < tables_.size() && t < batch.sparse.size(); ++t) {
    auto& counts = counts_[t];
    const SparseFeature& f = batch.sparse[t];
    for (int s = 0; s < slices; ++s) {
      const int64_t slice = slices_ + s;
      const int first = static_cast<int>(static_cast<int64_t>(batch.size) * s / slices);
      const int last = static_cast<int>(static_cast<int64_t>(batch.size) * (s + 1) / slices);
      for (int32_t k = f.offsets[first]; k < f.offsets[last]; ++k) {
        Stat& stat = counts[f.ids[k]];
        ++stat.count;
        if (slice % 2 == 0) ++stat.count_even;
        if (stat.last_slice != slice) {
          stat.last_slice = slice;
          ++stat.presence;
          if (slice % 2 == 1) ++stat.presence_odd;
        }
      }
    }
  }
  samples_ += batch.size;
  slices_ += slices;
}

void HotSetSelector::Decay() {
  for (auto& counts : counts_) {
    for (auto it = counts.begin(); it != counts.end();) {
      Stat& stat = it->second;
      stat.count /= 2;
      stat.presence /= 2;
      stat.count_even /= 2;
      stat.presence_odd /= 2;
      stat.last_slice = -1;
      if (stat.count == 0) {
        counts.erase(it++);
      } else {
        ++it;
      }
    }
  }
  samples_ /= 2;
  slices_ /= 2;
}

namespace {

// (rank key, row): the key is the count, kKeepFactor times it for a row of the favoured set.
using KeyedRow = std::pair<int64_t, HotSetSelector::Ranked>;

// Rank's order: most frequent first; (table, id) breaks ties so the choice is deterministic.
bool RankedBefore(const KeyedRow& a, const KeyedRow& b) {
  return std::tie(b.first, a.second.table, a.second.id) <
         std::tie(a.first, b.second.table, b.second.id);
}

// The first `limit` of `all` in the order `before`, sorted; the rest is only partitioned off.
template <typename Before>
std::vector<HotSetSelector::Ranked> FirstInOrder(std::vector<KeyedRow> all, size_t limit,
                                                 Before before) {
  if (limit < all.size()) {
    std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(limit), all.end(),
                     before);
    all.resize(limit);
  }
  std::sort(all.begin(), all.end(), before);
  std::vector<HotSetSelector::Ranked> out;
  out.reserve(all.size());
  for (const auto& [key, row] : all) out.push_back(row);
  return out;
}

// How many keys are at least k, for k up to kBuckets - 1 (larger keys count in the last bucket):
// the least a row's key must be to be among the first `limit` of an order that ranks larger keys
// first, found before any row is copied out.
class KeyHistogram {
 public:
  static constexpr int64_t kBuckets = int64_t{1} << 16;
  KeyHistogram() : counts_(kBuckets, 0) {}
  void Add(int64_t key) { ++counts_[std::clamp<int64_t>(key, 0, kBuckets - 1)]; }
  // The largest k with at least `limit` keys >= k (0 when there are fewer); rows whose key is
  // below it have `limit` rows ahead of them.
  int64_t Threshold(size_t limit) const {
    size_t seen = 0;
    for (int64_t k = kBuckets - 1; k > 0; --k) {
      seen += counts_[k];
      if (seen >= limit) return k;
    }
    return 0;
  }

 private:
  std::vector<uint32_t> counts_;
};

}  // namespace

std::vector<HotSetSelector::Ranked> HotSetSelector::Rank(const HotRowCache* favoured,
                                                         size_t limit) const {
  if (limit == std::numeric_limits<size_t>::max()) {
    return FirstInOrder(Keyed(favoured, 0, -1), limit, RankedBefore);
  }
  KeyHistogram keys;
  ForEachRow(favoured, [&](int64_t key, const Stat&) { keys.Add(key); });
  return FirstInOrder(Keyed(favoured, keys.Threshold(limit), -1), limit, RankedBefore);
}

HotSetSelector::Ranking HotSetSelector::RankForPlan(const HotRowCache* favoured, size_t limit,
                                                    bool by_even_count) const {
  // Two passes: the first sums the presences and finds the least key (and even count) a row
  // needs to be among the first `limit`, the second copies out only those rows (a window holds
  // several times the rows a plan can choose; copying and ordering all of them was most of a
  // plan's time and memory).
  Ranking ranking;
  KeyHistogram keys, evens;
  ForEachRow(favoured, [&](int64_t key, const Stat& stat) {
    ranking.presence += stat.presence;
    ranking.presence_odd += stat.presence_odd;
    keys.Add(key);
    if (by_even_count) evens.Add(stat.count_even);
  });
  const int64_t min_key = keys.Threshold(limit);
  const int64_t min_even = by_even_count ? evens.Threshold(limit) : -1;
  std::vector<KeyedRow> by_key = Keyed(favoured, min_key, min_even);
  if (by_even_count) {
    std::vector<KeyedRow> by_even;
    by_even.reserve(by_key.size());
    for (const KeyedRow& row : by_key) {
      if (row.second.count_even >= min_even) by_even.push_back(row);
    }
    ranking.by_even_count =
        FirstInOrder(std::move(by_even), limit, [](const KeyedRow& a, const KeyedRow& b) {
          if (a.second.count_even != b.second.count_even) {
            return a.second.count_even > b.second.count_even;
          }
          return RankedBefore(a, b);
        });
    std::erase_if(by_key, [min_key](const KeyedRow& row) { return row.first < min_key; });
  }
  ranking.by_count = FirstInOrder(std::move(by_key), limit, RankedBefore);
  return ranking;
}

template <typename Fn>
void HotSetSelector::ForEachRow(const HotRowCache* favoured, Fn fn) const {
  for (size_t t = 0; t < counts_.size(); ++t) {
    const bool any_favoured = favoured != nullptr && static_cast<int>(t) < favoured->num_tables() &&
                              favoured->num_rows(static_cast<int>(t)) > 0;
    for (const auto& [id, stat] : counts_[t]) {
      if (stat.count < min_count_) continue;
      const bool kept = any_favoured && favoured->Find(static_cast<int>(t), id) >= 0;
      fn(kept ? int64_t{stat.count} * kKeepFactor : int64_t{stat.count}, stat);
    }
  }
}

std::vector<std::pair<int64_t, HotSetSelector::Ranked>> HotSetSelector::Keyed(
    const HotRowCache* favoured, int64_t min_key, int64_t min_even) const {
  std::vector<KeyedRow> all;
  for (size_t t = 0; t < counts_.size(); ++t) {
    const bool any_favoured = favoured != nullptr && static_cast<int>(t) < favoured->num_tables() &&
                              favoured->num_rows(static_cast<int>(t)) > 0;
    for (const auto& [id, stat] : counts_[t]) {
      if (stat.count < min_count_) continue;
      // A row below both bars whatever its key (at most kKeepFactor x its count) needs no Find.
      if (int64_t{stat.count} * kKeepFactor < min_key &&
          (min_even < 0 || stat.count_even < min_even)) {
        continue;
      }
      const bool kept = any_favoured && favoured->Find(static_cast<int>(t), id) >= 0;
      const int64_t key = kept ? int64_t{stat.count} * kKeepFactor : int64_t{stat.count};
      if (key < min_key && (min_even < 0 || stat.count_even < min_even)) continue;
      all.push_back({key,
                     {static_cast<int>(t), id, stat.count, stat.presence, stat.count_even,
                      stat.presence_odd}});
    }
  }
  return all;
}

void HotSetSelector::AddPresence(int table, const std::vector<int64_t>& ids, int64_t* presence,
                                 int64_t* presence_odd) const {
  if (table >= static_cast<int>(counts_.size())) return;
  for (int64_t id : ids) {
    auto it = counts_[table].find(id);
    if (it == counts_[table].end() || it->second.count < min_count_) continue;  // as RankForPlan
    *presence += it->second.presence;
    *presence_odd += it->second.presence_odd;
  }
}

std::pair<int64_t, int64_t> HotSetSelector::PresenceOf(const HotRowCache& set) const {
  int64_t presence = 0, presence_odd = 0;
  for (int t = 0; t < set.num_tables(); ++t) AddPresence(t, set.ids(t), &presence, &presence_odd);
  return {presence, presence_odd};
}

std::pair<int64_t, int64_t> HotSetSelector::PresenceOf(
    const std::vector<std::vector<int64_t>>& ids) const {
  int64_t presence = 0, presence_odd = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    AddPresence(static_cast<int>(t), ids[t], &presence, &presence_odd);
  }
  return {presence, presence_odd};
}

std::vector<std::vector<int64_t>> HotSetSelector::Select(int64_t budget_bytes) const {
  std::vector<std::vector<int64_t>> hot(tables_.size());
  int64_t used = 0;
  for (const Ranked& c : Rank()) {
    const int64_t bytes = row_bytes(c.table);
    if (used + bytes > budget_bytes) break;
    used += bytes;
    hot[c.table].push_back(c.id);
  }
  for (auto& ids : hot) std::sort(ids.begin(), ids.end());
  return hot;
}

absl::Status SampleBatches(BatchReader* reader, int max_batches, int slices,
                           HotSetSelector* selector) {
  Batch batch;
  for (int i = 0; i < max_batches; ++i) {
    absl::StatusOr<bool> more = reader->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    selector->Add(batch, slices);
  }
  return reader->Rewind();
}

absl::StatusOr<std::vector<std::vector<int64_t>>> SampleHotSet(
    const std::vector<embedding::TableConfig>& tables, int state_floats, BatchReader* reader,
    int max_batches, int64_t budget_bytes) {
  HotSetSelector selector(tables, state_floats);
  DLRM_RETURN_IF_ERROR(SampleBatches(reader, max_batches, 1, &selector));
  return selector.Select(budget_bytes);
}

HotRowCache::HotRowCache(const HotRowCacheOptions& options)
    : tables_(options.tables), optimizer_(options.optimizer) {
  for (const auto& t : tables_) {
    row_floats_.push_back(t.dim + embedding::SparseOptimizerStateFloats(optimizer_.type, t.dim));
  }
}

absl::StatusOr<std::unique_ptr<HotRowCache>> HotRowCache::Create(
    const HotRowCacheOptions& options, const std::vector<std::vector<int64_t>>& hot_ids) {
  if (hot_ids.size() != options.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot set has ", hot_ids.size(), " tables, the model ", options.tables.size()));
  }
  std::unique_ptr<HotRowCache> cache(new HotRowCache(options));
  const size_t num_tables = options.tables.size();
  cache->ids_.resize(num_tables);
  cache->rows_.resize(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const auto& table = options.tables[t];
    for (int64_t id : hot_ids[t]) {
      if (id < 0 || id >= table.rows) {
        return absl::InvalidArgumentError(
            absl::StrCat("hot set: table ", t, ": id ", id, " >= rows ", table.rows));
      }
    }
    cache->ids_[t] = hot_ids[t];
    const int rf = cache->row_floats_[t];
    cache->rows_[t].resize(hot_ids[t].size() * rf);
    for (size_t i = 0; i < hot_ids[t].size(); ++i) {
      embedding::InitRowWithState(static_cast<int>(t), hot_ids[t][i], options.seed, table.rows,
                                  options.optimizer, cache->rows_[t].data() + i * rf, table.dim);
    }
  }
  cache->Index();
  return cache;
}

void HotRowCache::Index() {
  const size_t num_tables = tables_.size();
  slots_.assign(num_tables, {});
  grad_offsets_.assign(num_tables, 0);
  row_offsets_.assign(num_tables, 0);
  grad_floats_ = 0;
  total_rows_ = 0;
  for (size_t t = 0; t < num_tables; ++t) {
    slots_[t].reserve(ids_[t].size());
    for (size_t i = 0; i < ids_[t].size(); ++i) slots_[t][ids_[t][i]] = static_cast<int32_t>(i);
    grad_offsets_[t] = grad_floats_;
    row_offsets_[t] = total_rows_;
    grad_floats_ += static_cast<int64_t>(ids_[t].size()) * tables_[t].dim;
    total_rows_ += static_cast<int64_t>(ids_[t].size());
  }
}

int64_t HotRowCache::bytes() const {
  int64_t b = 0;
  for (const auto& r : rows_) b += static_cast<int64_t>(r.size()) * 4;
  return b;
}

void HotRowCache::ApplyRowGradients(absl::Span<const int32_t> rows, const float* grads,
                                    float learning_rate) {
  const embedding::SparseOptimizerOptions optimizer =
      embedding::WithLearningRate(optimizer_, learning_rate);
  // Table by table (rows ascend, so a table's rows are one run), through the batched update,
  // which prefetches rows and overlaps several rows' arithmetic (the same bits as one at a time).
  size_t t = 0, i = 0;
  while (i < rows.size()) {
    while (t + 1 < tables_.size() && rows[i] >= row_offsets_[t + 1]) ++t;
    const int64_t end = t + 1 < tables_.size() ? row_offsets_[t + 1] : total_rows_;
    row_ptrs_.clear();
    for (; i < rows.size() && rows[i] < end; ++i) {
      row_ptrs_.push_back(rows_[t].data() + (rows[i] - row_offsets_[t]) * row_floats_[t]);
    }
    const int dim = tables_[t].dim;
    const int64_t n = static_cast<int64_t>(row_ptrs_.size());
    embedding::ApplySparseOptimizerToRows(optimizer, dim, row_ptrs_.data(), grads, n);
    grads += n * dim;
  }
}

namespace {

// The ids of `from` that `other` lacks, in `from`'s order: a merge when both ascend (the hot sets
// the selector and the planner make do), else through `contains` (whether `other` holds an id).
template <typename Contains>
std::vector<int64_t> IdsNotIn(const std::vector<int64_t>& from, const std::vector<int64_t>& other,
                              Contains contains) {
  std::vector<int64_t> out;
  if (std::is_sorted(from.begin(), from.end()) && std::is_sorted(other.begin(), other.end())) {
    std::set_difference(from.begin(), from.end(), other.begin(), other.end(),
                        std::back_inserter(out));
  } else {
    for (int64_t id : from) {
      if (!contains(id)) out.push_back(id);
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> HotRowCache::MissingIds(
    const std::vector<std::vector<int64_t>>& hot_ids) const {
  std::vector<std::vector<int64_t>> missing(tables_.size());
  for (size_t t = 0; t < tables_.size() && t < hot_ids.size(); ++t) {
    missing[t] = IdsNotIn(hot_ids[t], ids_[t],
                          [&](int64_t id) { return Find(static_cast<int>(t), id) >= 0; });
  }
  return missing;
}

std::vector<std::vector<int64_t>> HotRowCache::LeavingIds(
    const std::vector<std::vector<int64_t>>& hot_ids) const {
  std::vector<std::vector<int64_t>> leaving(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    static const std::vector<int64_t> kNone;
    const std::vector<int64_t>& keep = t < hot_ids.size() ? hot_ids[t] : kNone;
    absl::flat_hash_set<int64_t> keep_set;
    leaving[t] = IdsNotIn(ids_[t], keep, [&](int64_t id) {
      if (keep_set.empty() && !keep.empty()) keep_set.insert(keep.begin(), keep.end());
      return keep_set.contains(id);
    });
  }
  return leaving;
}

void HotRowCache::Rebuild(const std::vector<std::vector<int64_t>>& hot_ids,
                          const std::vector<std::vector<float>>& incoming) {
  std::vector<std::vector<float>> rows(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int rf = row_floats_[t];
    const std::vector<int64_t>& old_ids = ids_[t];
    // Both ascending: the rows that stay are found by walking the old ids alongside.
    const bool merge = std::is_sorted(hot_ids[t].begin(), hot_ids[t].end()) &&
                       std::is_sorted(old_ids.begin(), old_ids.end());
    rows[t].resize(hot_ids[t].size() * rf);
    size_t next_incoming = 0, next_old = 0;
    for (size_t i = 0; i < hot_ids[t].size(); ++i) {
      const int64_t id = hot_ids[t][i];
      int32_t slot = -1;
      if (merge) {
        while (next_old < old_ids.size() && old_ids[next_old] < id) ++next_old;
        if (next_old < old_ids.size() && old_ids[next_old] == id) {
          slot = static_cast<int32_t>(next_old);
        }
      } else {
        slot = Find(static_cast<int>(t), id);
      }
      const float* src = slot >= 0 ? StoredRow(static_cast<int>(t), slot)
                                   : incoming[t].data() + (next_incoming++) * rf;
      std::memcpy(rows[t].data() + i * rf, src, rf * sizeof(float));
    }
  }
  ids_ = hot_ids;
  rows_ = std::move(rows);
  Index();
}

}  // namespace dlrm::worker
