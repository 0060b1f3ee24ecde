#include "embedding/checkpoint_snapshot.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/checkpoint_io.h"
#include "embedding/rocksdb_tier.h"

namespace dlrm::embedding {

SnapshotBuffer AllocateSnapshotBuffer(size_t floats) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t bytes = std::max<size_t>(floats * sizeof(float), 1);
  if (bytes < kHugePage) return SnapshotBuffer(static_cast<float*>(std::malloc(bytes)));
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p != nullptr) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return SnapshotBuffer(static_cast<float*>(p));
}

namespace {

// How many resident rows are written between two questions to keep_going.
constexpr size_t kResidentRowsPerCheck = 1024;

// A table's resident rows in id order: (id, slot) pairs of the used slots; with `only`, just
// those of its ids (an incremental write: one pass over the slots, and the few found sorted).
std::vector<std::pair<int64_t, int64_t>> ResidentInIdOrder(const StoreSnapshot& snapshot, int table,
                                                           const std::vector<int64_t>* only) {
  std::vector<std::pair<int64_t, int64_t>> order;
  if (table >= static_cast<int>(snapshot.resident.size())) return order;
  const std::vector<int64_t>& ids = snapshot.resident[table].ids;
  if (only == nullptr) {
    order.reserve(ids.size());
    for (size_t slot = 0; slot < ids.size(); ++slot) {
      if (ids[slot] >= 0) order.emplace_back(ids[slot], static_cast<int64_t>(slot));
    }
  } else if (!only->empty()) {
    const absl::flat_hash_set<int64_t> wanted(only->begin(), only->end());
    for (size_t slot = 0; slot < ids.size(); ++slot) {
      if (ids[slot] >= 0 && wanted.contains(ids[slot])) {
        order.emplace_back(ids[slot], static_cast<int64_t>(slot));
      }
    }
  }
  std::sort(order.begin(), order.end());
  return order;
}

absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFiles(
    const StoreSnapshot& snapshot, const std::vector<RowCodec>& codecs, const std::string& out_dir,
    int part, const std::vector<std::vector<int64_t>>* only_ids,
    const std::function<absl::Status()>& keep_going, std::vector<std::string>* created) {
  std::vector<int> row_floats;
  for (const RowCodec& c : codecs) row_floats.push_back(c.row_floats());
  if (only_ids != nullptr && only_ids->size() != row_floats.size()) {
    return absl::InvalidArgumentError(absl::StrCat("incremental checkpoint: ", only_ids->size(),
                                                   " id lists for ", row_floats.size(), " tables"));
  }
  if (!snapshot.resident.empty() && snapshot.resident.size() != codecs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot: resident rows of ", snapshot.resident.size(), " tables for ", codecs.size()));
  }
  RocksDbTierOptions options;
  options.path = snapshot.rocksdb_dir;
  options.row_floats = row_floats;
  options.codecs = codecs;
  options.block_cache_bytes = 8 << 20;  // one sequential scan: little is read twice
  options.disable_wal = true;
  // Opened when a row is first needed from it (a few hundred ms for 26 tables here): an
  // incremental write whose changed rows are all resident never opens it, nor any write of a
  // snapshot without one (the tier held no row).
  const bool has_db = !snapshot.rocksdb_dir.empty();
  std::unique_ptr<RocksDbTier> db;
  auto open_db = [&]() -> absl::Status {
    if (db != nullptr) return absl::OkStatus();
    DLRM_ASSIGN_OR_RETURN(db, RocksDbTier::Open(options));
    return absl::OkStatus();
  };
  std::vector<CheckpointFileEntry> files;
  // Each file is finished (its write-back started) as it is written, and all are fsynced after.
  std::vector<std::unique_ptr<RowFileWriter>> finished;
  for (int t = 0; t < static_cast<int>(row_floats.size()); ++t) {
    DLRM_RETURN_IF_ERROR(keep_going());
    const std::string name = RowFileName(t, part);
    created->push_back(absl::StrCat(out_dir, "/", name));
    DLRM_ASSIGN_OR_RETURN(auto writer, RowFileWriter::Create(created->back(), t, codecs[t]));
    const RowCodec& codec = codecs[t];
    const size_t floats = static_cast<size_t>(row_floats[t]);
    // The resident copy, merged into the RocksDB rows by id: it wins where both have a row.
    const std::vector<std::pair<int64_t, int64_t>> resident =
        ResidentInIdOrder(snapshot, t, only_ids == nullptr ? nullptr : &(*only_ids)[t]);
    const float* resident_words = resident.empty() ? nullptr : snapshot.resident[t].words.get();
    std::vector<float> decoded(floats);
    size_t next = 0;  // the first resident row not written yet
    auto append_resident = [&](size_t k) -> absl::Status {
      // Asked as often as for RocksDB's chunks, also when every row is resident.
      if ((k + 1) % kResidentRowsPerCheck == 0) DLRM_RETURN_IF_ERROR(keep_going());
      codec.Decode(resident_words + resident[k].second * codec.words(), decoded.data());
      return writer->AppendRow(resident[k].first, decoded.data());
    };
    // Writes the resident rows with ids below `bound`.
    auto append_resident_below = [&](int64_t bound) -> absl::Status {
      for (; next < resident.size() && resident[next].first < bound; ++next) {
        DLRM_RETURN_IF_ERROR(append_resident(next));
      }
      return absl::OkStatus();
    };
    if (only_ids == nullptr && !has_db) {
      DLRM_RETURN_IF_ERROR(append_resident_below(std::numeric_limits<int64_t>::max()));
    } else if (only_ids == nullptr) {
      DLRM_RETURN_IF_ERROR(open_db());
      DLRM_RETURN_IF_ERROR(db->ForEachRow(t, [&](absl::Span<const int64_t> ids, const float* rows) {
        DLRM_RETURN_IF_ERROR(keep_going());
        for (size_t j = 0; j < ids.size(); ++j) {
          DLRM_RETURN_IF_ERROR(append_resident_below(ids[j]));
          if (next < resident.size() && resident[next].first == ids[j]) {
            DLRM_RETURN_IF_ERROR(append_resident(next++));  // RocksDB's copy is stale
          } else {
            DLRM_RETURN_IF_ERROR(writer->AppendRow(ids[j], rows + j * floats));
          }
        }
        return absl::OkStatus();
      }));
      DLRM_RETURN_IF_ERROR(append_resident_below(std::numeric_limits<int64_t>::max()));
    } else {
      constexpr size_t kChunk = 4096;
      const std::vector<int64_t>& ids = (*only_ids)[t];
      std::vector<int64_t> cold;  // ids of a chunk the resident copy lacks
      std::vector<float> rows(kChunk * floats);
      std::vector<bool> found;
      for (size_t begin = 0; begin < ids.size(); begin += kChunk) {
        const size_t n = std::min(kChunk, ids.size() - begin);
        const absl::Span<const int64_t> chunk(ids.data() + begin, n);
        DLRM_RETURN_IF_ERROR(keep_going());
        // Both lists are sorted: where each id is comes from one pass over them.
        std::vector<int64_t> at(n, -1);  // index into `resident`, or -1
        cold.clear();
        for (size_t j = 0; j < n; ++j) {
          while (next < resident.size() && resident[next].first < chunk[j]) ++next;
          if (next < resident.size() && resident[next].first == chunk[j]) {
            at[j] = static_cast<int64_t>(next);
          } else {
            cold.push_back(chunk[j]);
          }
        }
        found.assign(cold.size(), false);  // without a RocksDB copy: rows never written
        if (!cold.empty() && has_db) {
          DLRM_RETURN_IF_ERROR(open_db());
          DLRM_RETURN_IF_ERROR(db->MultiGet(t, cold, rows.data(), &found));
        }
        for (size_t j = 0, c = 0; j < n; ++j) {
          if (at[j] >= 0) {
            DLRM_RETURN_IF_ERROR(append_resident(static_cast<size_t>(at[j])));
          } else if (found[c++]) {
            DLRM_RETURN_IF_ERROR(writer->AppendRow(chunk[j], rows.data() + (c - 1) * floats));
          }
        }
      }
    }
    const int64_t rows = writer->rows();
    DLRM_ASSIGN_OR_RETURN(FileDigest d, writer->Finish());
    finished.push_back(std::move(writer));
    files.push_back({.name = name,
                     .kind = "rows",
                     .table = t,
                     .part = part,
                     .rows = rows,
                     .bytes = d.bytes,
                     .crc32c = d.crc32c});
  }
  DLRM_RETURN_IF_ERROR(SyncAll(finished));
  return files;
}

}  // namespace

absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFilesFromSnapshot(
    const StoreSnapshot& snapshot, const std::vector<RowCodec>& codecs, const std::string& out_dir,
    int part, const std::vector<std::vector<int64_t>>* only_ids,
    const std::function<absl::Status()>& keep_going) {
  const std::function<absl::Status()> go_on =
      keep_going ? keep_going : [] { return absl::OkStatus(); };
  std::vector<std::string> created;
  absl::StatusOr<std::vector<CheckpointFileEntry>> files =
      WriteRowFiles(snapshot, codecs, out_dir, part, only_ids, go_on, &created);
  if (!files.ok()) {
    std::error_code ec;
    for (const std::string& path : created) std::filesystem::remove(path, ec);
  }
  return files;
}

}  // namespace dlrm::embedding
