// The rows of TrainCheckpointer's snapshots (worker/train_snapshot.h).
#include "worker/train_snapshot.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/status.h"
#include "worker/checkpoint_internal.h"

namespace dlrm::worker::checkpoint_internal {

using embedding::AllocateSnapshotBuffer;
using embedding::SnapshotBuffer;

void CopySnapshotRows(const embedding::LocalEmbeddingStore& store,
                      const std::vector<SnapshotTable*>& tables) {
  constexpr size_t kChunkRows = 8192;
  struct Chunk {
    SnapshotTable* rows;
    size_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (SnapshotTable* rows : tables) {
    for (size_t i = 0; i < rows->ids.size(); i += kChunkRows) {
      chunks.push_back({rows, i, std::min(rows->ids.size(), i + kChunkRows)});
    }
  }
  common::ParallelForOnce(static_cast<int64_t>(chunks.size()), 2, [&](int64_t c) {
    const Chunk& chunk = chunks[c];
    SnapshotTable& rows = *chunk.rows;
    const embedding::EmbeddingTable& table = store.table(rows.table);
    const size_t row_bytes = rows.row_floats * sizeof(float);
    for (size_t i = chunk.begin; i < chunk.end;) {
      size_t end = i + 1;
      while (end < chunk.end && rows.ids[end] == rows.ids[end - 1] + 1) ++end;
      std::memcpy(rows.rows.get() + i * rows.row_floats, table.Row(rows.ids[i]),
                  (end - i) * row_bytes);
      i = end;
    }
  });
}

void GatherChangedRows(const embedding::LocalEmbeddingStore& store, std::vector<int64_t> changed,
                       SnapshotTable& rows) {
  const embedding::EmbeddingTable& table = store.table(rows.table);
  const size_t row_floats = rows.row_floats, row_bytes = row_floats * sizeof(float);
  rows.changed_ids = std::move(changed);
  rows.changed_rows.resize(rows.changed_ids.size() * row_floats);
  constexpr size_t kChunk = 65536, kBlock = 256;
  const std::vector<int64_t>& ids = rows.changed_ids;
  const size_t chunks = (ids.size() + kChunk - 1) / kChunk;
  common::ParallelForOnce(static_cast<int64_t>(chunks), chunks > 1 ? 2 : 1, [&](int64_t c) {
    const size_t chunk_end = std::min(ids.size(), (c + 1) * kChunk);
    for (size_t begin = c * kChunk; begin < chunk_end; begin += kBlock) {
      const size_t end = std::min(begin + kBlock, chunk_end);
      for (size_t k = begin; k < end; ++k) {
        const char* row = reinterpret_cast<const char*>(table.Row(ids[k]));
        __builtin_prefetch(row);
        __builtin_prefetch(row + row_bytes - 1);
      }
      for (size_t k = begin; k < end; ++k) {
        std::memcpy(rows.changed_rows.data() + k * row_floats, table.Row(ids[k]), row_bytes);
      }
    }
  });
}

namespace {

// Merges `new_ids` (sorted, none of them in the base) with their rows `new_rows` into the base:
// in place, from the end, when the base's buffer has room, else into a larger one (an eighth to
// spare, so that later merges are in place).
absl::Status MergeNewRows(SnapshotTable& rows, const std::vector<int64_t>& new_ids,
                          const std::vector<float>& new_rows) {
  if (new_ids.empty()) return absl::OkStatus();
  const size_t row_floats = rows.row_floats;
  const size_t old_n = rows.ids.size(), added = new_ids.size(), n = old_n + added;
  if (rows.capacity < n * row_floats) {
    const size_t capacity = (n + n / 8) * row_floats;
    SnapshotBuffer bigger = AllocateSnapshotBuffer(capacity);
    if (bigger == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("checkpoint snapshot of table ", rows.table,
                                                       ": cannot allocate ", capacity * 4,
                                                       " bytes"));
    }
    if (old_n > 0) std::memcpy(bigger.get(), rows.rows.get(), old_n * row_floats * sizeof(float));
    rows.rows = std::move(bigger);
    rows.capacity = capacity;
  }
  rows.ids.resize(n);
  float* data = rows.rows.get();
  // From the end: each base row moves up by the number of new ids above it.
  size_t i = old_n, j = added, k = n;
  while (j > 0) {
    if (i > 0 && rows.ids[i - 1] > new_ids[j - 1]) {
      size_t run = 1;  // base rows above the next new id move together
      while (i - run > 0 && rows.ids[i - run - 1] > new_ids[j - 1]) ++run;
      std::memmove(data + (k - run) * row_floats, data + (i - run) * row_floats,
                   run * row_floats * sizeof(float));
      for (size_t r = 1; r <= run; ++r) rows.ids[k - r] = rows.ids[i - r];
      i -= run;
      k -= run;
    } else {
      --j;
      --k;
      rows.ids[k] = new_ids[j];
      std::memcpy(data + k * row_floats, new_rows.data() + j * row_floats,
                  row_floats * sizeof(float));
    }
  }
  return absl::OkStatus();
}

// Copies the rows of ids[begin, end) (sorted; ids[k]'s row at row_of(k)) over their old values
// in the base, in blocks whose cache misses overlap (each id's first search probe among the
// base's ids requested first, and its source row with `prefetch_source`; then its place found and
// its row there requested; then the copies). Calls missing(k) for each id the base lacks.
template <typename RowOf, typename Missing>
void CopyOverBase(SnapshotTable& rows, const std::vector<int64_t>& ids, size_t begin, size_t end,
                  const RowOf& row_of, bool prefetch_source, const Missing& missing) {
  const std::vector<int64_t>& base = rows.ids;
  const size_t row_floats = rows.row_floats, row_bytes = row_floats * sizeof(float);
  constexpr size_t kBlock = 256;
  int64_t at[kBlock];
  for (size_t first = begin; first < end; first += kBlock) {
    const size_t n = std::min(kBlock, end - first);
    for (size_t k = 0; k < n; ++k) {
      const int64_t id = ids[first + k];
      // The id after the last one's is most likely in the place after it: no probe.
      const bool consecutive = first + k > begin && ids[first + k - 1] + 1 == id;
      if (!base.empty() && !consecutive) {
        __builtin_prefetch(base.data() + checkpoint_internal::SeekSortedProbe(base, 0, id));
      }
      if (prefetch_source && !consecutive) {
        const char* row = reinterpret_cast<const char*>(row_of(first + k));
        __builtin_prefetch(row);
        __builtin_prefetch(row + row_bytes - 1);
      }
    }
    for (size_t k = 0; k < n; ++k) {
      // Consecutive changed ids (most rows changed) are consecutive in the base: the place after
      // the last one is checked before a search.
      const int64_t id = ids[first + k];
      const size_t next = k > 0 && at[k - 1] >= 0 ? static_cast<size_t>(at[k - 1]) + 1 : 0;
      const size_t found =
          next > 0 && next < base.size() && base[next] == id ? next : SeekSorted(base, 0, id);
      at[k] = found < base.size() && base[found] == id ? static_cast<int64_t>(found) : -1;
      if (at[k] < 0) continue;
      const char* row = reinterpret_cast<const char*>(rows.rows.get() + at[k] * row_floats);
      __builtin_prefetch(row, 1);
      __builtin_prefetch(row + row_bytes - 1, 1);
    }
    for (size_t k = 0; k < n;) {
      if (at[k] < 0) {
        missing(first + k++);
        continue;
      }
      // A run of rows next to each other in the base and in the source is one copy.
      const float* from = row_of(first + k);
      size_t run = 1;
      while (k + run < n && at[k + run] == at[k] + static_cast<int64_t>(run) &&
             row_of(first + k + run) == from + run * row_floats) {
        ++run;
      }
      std::memcpy(rows.rows.get() + at[k] * row_floats, from, run * row_bytes);
      k += run;
    }
  }
}

// Applies a written snapshot's changed rows to its base, after the write (off the training
// path): each copied over its old value, and the ids the base lacks merged in (MergeNewRows).
absl::Status ApplyChangedRows(SnapshotTable& rows) {
  const size_t row_floats = rows.row_floats;
  const float* changed_rows = rows.changed_rows.data();
  std::vector<int64_t> new_ids;
  std::vector<float> new_rows;
  CopyOverBase(
      rows, rows.changed_ids, 0, rows.changed_ids.size(),
      [&](size_t k) { return changed_rows + k * row_floats; }, /*prefetch_source=*/false,
      [&](size_t k) {
        new_ids.push_back(rows.changed_ids[k]);
        new_rows.insert(new_rows.end(), changed_rows + k * row_floats,
                        changed_rows + (k + 1) * row_floats);
      });
  return MergeNewRows(rows, new_ids, new_rows);
}

}  // namespace

void CopyChangedOverBase(const embedding::LocalEmbeddingStore& store,
                         const std::vector<int64_t>& changed, SnapshotTable& rows) {
  const embedding::EmbeddingTable& table = store.table(rows.table);
  constexpr size_t kChunk = 65536;
  const size_t chunks = (changed.size() + kChunk - 1) / kChunk;
  std::vector<std::vector<int64_t>> missing(chunks);
  common::ParallelForOnce(static_cast<int64_t>(chunks), chunks > 1 ? 2 : 1, [&](int64_t c) {
    CopyOverBase(
        rows, changed, c * kChunk, std::min(changed.size(), (c + 1) * kChunk),
        [&](size_t k) { return table.Row(changed[k]); }, /*prefetch_source=*/true,
        [&](size_t k) { missing[c].push_back(changed[k]); });
  });
  std::vector<int64_t> lacking;
  for (const std::vector<int64_t>& m : missing) lacking.insert(lacking.end(), m.begin(), m.end());
  GatherChangedRows(store, std::move(lacking), rows);
}

absl::Status ApplyAndClearChangedRows(SnapshotTable& rows) {
  // A last one's (live) has no base: it is not kept.
  if (!rows.changed_in_base && rows.live == nullptr) DLRM_RETURN_IF_ERROR(ApplyChangedRows(rows));
  rows.changed_ids.clear();
  rows.changed_rows.clear();
  rows.changed_in_base = false;
  return absl::OkStatus();
}

}  // namespace dlrm::worker::checkpoint_internal
