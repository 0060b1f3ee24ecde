#include "embedding/local_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/memory_info.h"
#include "common/parallel.h"
#include "common/status.h"
#include "embedding/row_init.h"

namespace dlrm::embedding {

LocalEmbeddingStore::LocalEmbeddingStore(const LocalStoreOptions& options) : options_(options) {}

LocalEmbeddingStore::~LocalEmbeddingStore() = default;

namespace {

// RESOURCE_EXHAUSTED when the tables (rows x (dim + optimizer state) floats each) need more than
// the memory available; OK when they fit or the machine cannot say.
absl::Status CheckTablesFitInMemory(const LocalStoreOptions& options) {
  int64_t needed = 0;
  int64_t largest = -1;
  int64_t largest_bytes = 0;
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const TableConfig& c = options.tables[t];
    if (c.rows <= 0 || c.dim <= 0 || c.dim > EmbeddingTable::kMaxDim) continue;  // Create says
    const int64_t stride = StoredRowFloats(options.optimizer.type, c.dim);
    if (c.rows > std::numeric_limits<int64_t>::max() / 8 / stride) continue;  // overflow: same
    const int64_t bytes = c.rows * stride * 4;
    if (bytes > std::numeric_limits<int64_t>::max() / 2 - needed) continue;
    needed += bytes;
    if (bytes > largest_bytes) {
      largest = static_cast<int64_t>(t);
      largest_bytes = bytes;
    }
  }
  common::MemoryInfo info;
  int64_t available = options.available_memory_bytes;
  if (available < 0) {
    info = common::ReadMemoryInfo();
    available = info.AvailableBytes();
  }
  if (available < 0 || needed <= available) return absl::OkStatus();
  const TableConfig& big = options.tables[largest];
  return absl::ResourceExhaustedError(absl::StrCat(
      "the ", options.tables.size(), " embedding tables need ", needed, " bytes (",
      common::FormatBytes(needed), ": rows x (dim + optimizer state) x 4 B; the largest, ",
      TableLabel(static_cast<int>(largest), big), " with ", big.rows, " rows of dim ", big.dim,
      ", ", common::FormatBytes(largest_bytes), ") and this process has ", available, " bytes (",
      common::FormatBytes(available), ") of memory available",
      options.available_memory_bytes < 0 ? absl::StrCat(" (", info.Describe(), ")") : "",
      ": cap the tables (tables.max_rows), lower model.embedding_dim, or train on a cluster "
      "(dlrm local, or a cluster job), whose parameter servers keep the rows beyond their memory "
      "budget in RocksDB"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalEmbeddingStore>> LocalEmbeddingStore::Create(
    const LocalStoreOptions& options) {
  if (options.tables.empty()) {
    return absl::InvalidArgumentError("local embedding store: no tables");
  }
  DLRM_RETURN_IF_ERROR(CheckTablesFitInMemory(options));
  auto store = std::unique_ptr<LocalEmbeddingStore>(new LocalEmbeddingStore(options));
  for (size_t t = 0; t < options.tables.size(); ++t) {
    EmbeddingTableOptions table_options;
    table_options.table_index = static_cast<int>(t);
    table_options.config = options.tables[t];
    table_options.optimizer = options.optimizer;
    table_options.seed = options.seed;
    auto table = EmbeddingTable::Create(table_options);
    if (!table.ok()) return table.status();
    auto entry = std::make_unique<Table>();
    entry->table = std::move(table).value();
    store->tables_.push_back(std::move(entry));
  }
  int threads = options.num_threads;
  if (threads == 0) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::clamp(hw, 1, 8) - 1;
  }
  store->pool_ = std::make_unique<common::ParallelPool>(std::max(0, threads));
  return store;
}

absl::Status LocalEmbeddingStore::CheckTable(int table) const {
  if (table < 0 || table >= static_cast<int>(tables_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " out of range [0, ", tables_.size(), ")"));
  }
  return absl::OkStatus();
}

void LocalEmbeddingStore::RunPerRequest(int64_t n, int64_t total_ids,
                                        const std::function<void(int64_t)>& fn) {
  if (total_ids < options_.parallel_min_ids || pool_->num_threads() == 0) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    pool_->ParallelFor(n, fn);
  }
}

absl::Status LocalEmbeddingStore::Lookup(int64_t /*step*/, absl::Span<TableRows> requests) {
  int64_t total = 0;
  for (const TableRows& r : requests) {
    absl::Status status = CheckTable(r.table);
    if (!status.ok()) return status;
    status = tables_[r.table]->table->CheckIds(r.ids);
    if (!status.ok()) return status;
    total += static_cast<int64_t>(r.ids.size());
  }
  for (TableRows& r : requests) r.values.resize(r.ids.size() * tables_[r.table]->table->dim());
  RunPerRequest(static_cast<int64_t>(requests.size()), total, [&](int64_t i) {
    TableRows& r = requests[i];
    Table& t = *tables_[r.table];
    absl::ReaderMutexLock lock(&t.mu);
    t.table->LookupUnchecked(r.ids, r.values.data());
  });
  return absl::OkStatus();
}

absl::Status LocalEmbeddingStore::Push(int64_t /*step*/, absl::Span<const TableRows> grads,
                                       float learning_rate) {
  int64_t total = 0;
  for (const TableRows& r : grads) {
    absl::Status status = CheckTable(r.table);
    if (!status.ok()) return status;
    const EmbeddingTable& table = *tables_[r.table]->table;
    if (r.values.size() != r.ids.size() * table.dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", r.table, " (", table.config().name, "): ", r.values.size(),
                       " gradient floats for ", r.ids.size(), " ids of dim ", table.dim(),
                       " (expected ", r.ids.size() * table.dim(), ")"));
    }
    status = table.CheckIds(r.ids);
    if (!status.ok()) return status;
    total += static_cast<int64_t>(r.ids.size());
  }
  RunPerRequest(static_cast<int64_t>(grads.size()), total, [&](int64_t i) {
    const TableRows& r = grads[i];
    Table& t = *tables_[r.table];
    absl::MutexLock lock(&t.mu);
    t.table->ApplyGradientsUnchecked(r.ids, r.values.data(), learning_rate);
    t.MarkUpdated(r.ids);
  });
  return absl::OkStatus();
}

void LocalEmbeddingStore::ReadTable(int table,
                                    const std::function<void(const EmbeddingTable&)>& fn) const {
  const Table& t = *tables_[table];
  absl::ReaderMutexLock lock(&t.mu);
  fn(*t.table);
}

void LocalEmbeddingStore::UpdateTable(int table, absl::Span<const int64_t> updated_ids,
                                      const std::function<void(EmbeddingTable&)>& fn) {
  Table& t = *tables_[table];
  absl::MutexLock lock(&t.mu);
  fn(*t.table);
  t.MarkUpdated(updated_ids);
}

absl::Status LocalEmbeddingStore::ReadStoredRows(absl::Span<TableRows> requests) {
  for (const TableRows& r : requests) {
    DLRM_RETURN_IF_ERROR(CheckTable(r.table));
    DLRM_RETURN_IF_ERROR(tables_[r.table]->table->CheckIds(r.ids));
  }
  for (TableRows& r : requests) {
    Table& t = *tables_[r.table];
    absl::ReaderMutexLock lock(&t.mu);
    const int stride = t.table->row_stride();
    r.values.resize(r.ids.size() * stride);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      std::memcpy(r.values.data() + i * stride, t.table->Row(r.ids[i]), stride * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalEmbeddingStore::WriteStoredRows(absl::Span<const TableRows> rows) {
  for (const TableRows& r : rows) {
    DLRM_RETURN_IF_ERROR(CheckTable(r.table));
    const EmbeddingTable& table = *tables_[r.table]->table;
    DLRM_RETURN_IF_ERROR(table.CheckIds(r.ids));
    if (r.values.size() != r.ids.size() * table.row_stride()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", r.table, " (", table.config().name, "): ", r.values.size(),
                       " floats for ", r.ids.size(), " stored rows of ", table.row_stride()));
    }
  }
  for (const TableRows& r : rows) {
    Table& t = *tables_[r.table];
    absl::MutexLock lock(&t.mu);
    const int stride = t.table->row_stride();
    for (size_t i = 0; i < r.ids.size(); ++i) {
      std::memcpy(t.table->MutableRow(r.ids[i]), r.values.data() + i * stride,
                  stride * sizeof(float));
    }
    t.MarkUpdated(r.ids);
  }
  return absl::OkStatus();
}

void LocalEmbeddingStore::Table::MarkUpdated(absl::Span<const int64_t> ids) {
  if (flags.empty()) flags.assign(table->rows(), 0);
  // One byte per row of a table of millions: nearly every id's flag is a cache miss, so the
  // flags are fetched this many ids ahead.
  constexpr size_t kAhead = 16;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k + kAhead < ids.size()) __builtin_prefetch(&flags[ids[k + kAhead]], 1);
    const int64_t id = ids[k];
    uint8_t& f = flags[id];
    if (f == 3) continue;
    if ((f & 1) == 0) touched.push_back(id);
    if ((f & 2) == 0) changed.push_back(id);
    f = 3;
  }
}

std::vector<int64_t> LocalEmbeddingStore::TouchedIds(int table) const {
  std::vector<int64_t> ids;
  TouchedIds(table, &ids);
  return ids;
}

void LocalEmbeddingStore::TouchedIds(int table, std::vector<int64_t>* ids) const {
  const Table& t = *tables_[table];
  absl::ReaderMutexLock lock(&t.mu);
  // Ids come in the order rows were first updated. When they are a large part of the table, one
  // pass over the flags lists them in order (a few ms for 1M rows) where sorting would take tens.
  if (t.touched.size() * 16 < t.flags.size()) {
    ids->assign(t.touched.begin(), t.touched.end());
    std::sort(ids->begin(), ids->end());
    return;
  }
  ids->resize(t.touched.size());
  size_t n = 0;
  for (size_t id = 0; id < t.flags.size(); ++id) {
    if (t.flags[id] & 1) (*ids)[n++] = static_cast<int64_t>(id);
  }
  ids->resize(n);
}

std::vector<int64_t> LocalEmbeddingStore::TakeChangedIds(int table) {
  Table& t = *tables_[table];
  absl::MutexLock lock(&t.mu);
  std::vector<int64_t> ids;
  ids.swap(t.changed);
  // Sorting n ids costs about n log n steps; a pass over the flags, eight at a time, one step
  // per 8 rows. The pass is the cheaper from about a 256th of the table on (0.06 ms for 1M rows
  // against 0.3-0.5 ms to sort 10k ids, 1 % of them).
  if (ids.size() * 256 < t.flags.size()) {
    // The list may hold ids a pre-copy marked unchanged since, and ids listed twice (changed
    // again after that): each changed row once, the bit cleared by its first entry.
    size_t n = 0;
    for (int64_t id : ids) {
      if ((t.flags[id] & 2) == 0) continue;
      t.flags[id] &= 1;
      ids[n++] = id;
    }
    ids.resize(n);
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  constexpr uint64_t kChangedBits = 0x0202020202020202ull;
  const size_t rows = t.flags.size();
  uint8_t* flags = t.flags.data();
  size_t n = 0, id = 0;
  for (; id + 8 <= rows; id += 8) {
    uint64_t word;
    std::memcpy(&word, flags + id, 8);
    if ((word & kChangedBits) == 0) continue;
    for (size_t k = 0; k < 8; ++k) {
      if (flags[id + k] & 2) ids[n++] = static_cast<int64_t>(id + k);
    }
    word &= ~kChangedBits;
    std::memcpy(flags + id, &word, 8);
  }
  for (; id < rows; ++id) {
    if (flags[id] & 2) {
      ids[n++] = static_cast<int64_t>(id);
      flags[id] &= 1;
    }
  }
  ids.resize(n);
  return ids;
}

void LocalEmbeddingStore::CopyRowsAndClearChanged(int table, absl::Span<const int64_t> ids,
                                                  float* out) {
  Table& t = *tables_[table];
  absl::MutexLock lock(&t.mu);
  const size_t stride = static_cast<size_t>(t.table->row_stride());
  for (size_t i = 0; i < ids.size();) {
    size_t end = i + 1;  // a run of consecutive ids is one copy
    while (end < ids.size() && ids[end] == ids[end - 1] + 1) ++end;
    std::memcpy(out + i * stride, t.table->Row(ids[i]), (end - i) * stride * sizeof(float));
    i = end;
  }
  if (t.flags.empty()) return;
  for (int64_t id : ids) t.flags[id] &= 1;
}

void LocalEmbeddingStore::ClearChanged() {
  for (int i = 0; i < static_cast<int>(tables_.size()); ++i) TakeChangedIds(i);
}

}  // namespace dlrm::embedding
