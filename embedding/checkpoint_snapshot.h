// A parameter server's part of a checkpoint, written from a snapshot while training goes on:
// TieredStore::TakeSnapshot takes the snapshot (the cut: every table locked while the rows of
// its memory tier are copied in memory and RocksDB makes a checkpoint of hard links), and
// WriteRowFilesFromSnapshot streams every row of that snapshot into the checkpoint's row files,
// without holding any lock of the live store.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/row_dtype.h"

namespace dlrm::embedding {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using SnapshotBuffer = std::unique_ptr<float[], FreeDeleter>;

// `floats` uninitialised floats for a snapshot (null when the memory is not there). Large
// buffers are 2 MiB aligned and asked for transparent huge pages: copying a few hundred MB into
// fresh 4 KiB pages spends most of its time in page faults, which training would wait for.
SnapshotBuffer AllocateSnapshotBuffer(size_t floats);

// One table's memory-tier rows at the snapshot, as stored (codec.words() words a row), in the
// order of the tier's slots.
struct ResidentRowsCopy {
  std::vector<int64_t> ids;  // per slot; MemoryRowMap::kFreeSlot (-1) for a free slot
  SnapshotBuffer words;      // ids.size() rows
  size_t capacity = 0;       // floats allocated in `words` (a later snapshot reuses them)

  // Makes `words` hold at least `floats` floats: kept when it does (its pages are mapped), else
  // freed and allocated anew (AllocateSnapshotBuffer). False when the memory is not there.
  bool Reserve(size_t floats) {
    if (words != nullptr && capacity >= floats) return true;
    words.reset();  // freed before the larger one is asked for
    words = AllocateSnapshotBuffer(floats);
    capacity = words == nullptr ? 0 : floats;
    return words != nullptr;
  }
};

// A TieredStore at one instant. A row is the copy in `resident` when it is there (the memory
// tier's copy is authoritative), else the RocksDB checkpoint's.
struct StoreSnapshot {
  // A RocksDB checkpoint (RocksDbTier::CreateCheckpoint); empty: the RocksDB tier held no row, and
  // `resident` is every row.
  std::string rocksdb_dir;
  std::vector<ResidentRowsCopy> resident;  // per table; empty: every row is in the RocksDB copy
  // TieredStore::TakeSnapshot's own record of which store and which of its snapshots this copy
  // is (so that the next one may copy only what changed since); -1: none.
  const void* taken_from = nullptr;
  int64_t generation = -1;
};

// Writes RowFileName(t, part) into `out_dir` for every table t of `snapshot` (rows stored as
// `codecs` say, one per table: TieredStore::codec), each row [weights | optimizer state] in id
// order, half-precision weights kept as they are (row file version 2). Returns the files'
// manifest entries.
//
// With `only_ids` (one sorted list per table): an incremental checkpoint's files, holding just
// those rows (point reads of the copy, no scan). An id the snapshot lacks was never written: it
// is still its initial value, and is left out as a full checkpoint leaves it out.
//
// `keep_going`, when given, is asked before each table and each chunk of rows: an error from it
// stops the write, removes the files this call wrote, and is returned.
absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFilesFromSnapshot(
    const StoreSnapshot& snapshot, const std::vector<RowCodec>& codecs, const std::string& out_dir,
    int part, const std::vector<std::vector<int64_t>>* only_ids = nullptr,
    const std::function<absl::Status()>& keep_going = nullptr);

}  // namespace dlrm::embedding
