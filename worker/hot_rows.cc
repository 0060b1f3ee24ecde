#include "worker/hot_rows.h"

#include <algorithm>
#include <cstring>
#include <tuple>

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

}  // namespace

std::vector<HotSetSelector::Ranked> HotSetSelector::Rank(const HotRowCache* favoured,
                                                         size_t limit) const {
  return FirstInOrder(Keyed(favoured), limit, RankedBefore);
}

HotSetSelector::Ranking HotSetSelector::RankForPlan(const HotRowCache* favoured, size_t limit,
                                                    bool by_even_count) const {
  Ranking ranking;
  std::vector<KeyedRow> all = Keyed(favoured);
  for (const auto& [key, row] : all) {
    ranking.presence += row.presence;
    ranking.presence_odd += row.presence_odd;
  }
  if (by_even_count) {
    ranking.by_even_count = FirstInOrder(all, limit, [](const KeyedRow& a, const KeyedRow& b) {
      if (a.second.count_even != b.second.count_even) {
        return a.second.count_even > b.second.count_even;
      }
      return RankedBefore(a, b);
    });
  }
  ranking.by_count = FirstInOrder(std::move(all), limit, RankedBefore);
  return ranking;
}

std::vector<std::pair<int64_t, HotSetSelector::Ranked>> HotSetSelector::Keyed(
    const HotRowCache* favoured) const {
  std::vector<KeyedRow> all;
  for (size_t t = 0; t < counts_.size(); ++t) {
    for (const auto& [id, stat] : counts_[t]) {
      if (stat.count < min_count_) continue;
      const bool kept = favoured != nullptr && static_cast<int>(t) < favoured->num_tables() &&
                        favoured->Find(static_cast<int>(t), id) >= 0;
      all.push_back({kept ? stat.count * kKeepFactor : stat.count,
                     {static_cast<int>(t), id, stat.count, stat.presence, stat.count_even,
                      stat.presence_odd}});
    }
  }
  return all;
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

void HotRowCache::ApplyRowGradients(absl::Span<const int32_t> rows, const float* grads) {
  size_t t = 0;
  for (int32_t row : rows) {
    // rows ascend, so the table only moves forward
    while (t + 1 < tables_.size() && row >= row_offsets_[t + 1]) ++t;
    const int dim = tables_[t].dim;
    const int64_t slot = row - row_offsets_[t];
    embedding::ApplySparseOptimizerToRow(optimizer_, dim, grads,
                                         rows_[t].data() + slot * row_floats_[t]);
    grads += dim;
  }
}

std::vector<std::vector<int64_t>> HotRowCache::MissingIds(
    const std::vector<std::vector<int64_t>>& hot_ids) const {
  std::vector<std::vector<int64_t>> missing(tables_.size());
  for (size_t t = 0; t < tables_.size() && t < hot_ids.size(); ++t) {
    for (int64_t id : hot_ids[t]) {
      if (Find(static_cast<int>(t), id) < 0) missing[t].push_back(id);
    }
  }
  return missing;
}

std::vector<std::vector<int64_t>> HotRowCache::LeavingIds(
    const std::vector<std::vector<int64_t>>& hot_ids) const {
  std::vector<std::vector<int64_t>> leaving(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    absl::flat_hash_map<int64_t, bool> keep;
    if (t < hot_ids.size()) {
      for (int64_t id : hot_ids[t]) keep[id] = true;
    }
    for (int64_t id : ids_[t]) {
      if (!keep.contains(id)) leaving[t].push_back(id);
    }
  }
  return leaving;
}

void HotRowCache::Rebuild(const std::vector<std::vector<int64_t>>& hot_ids,
                          const std::vector<std::vector<float>>& incoming) {
  std::vector<std::vector<float>> rows(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int rf = row_floats_[t];
    rows[t].resize(hot_ids[t].size() * rf);
    size_t next_incoming = 0;
    for (size_t i = 0; i < hot_ids[t].size(); ++i) {
      const int32_t slot = Find(static_cast<int>(t), hot_ids[t][i]);
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
