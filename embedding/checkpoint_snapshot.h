// A parameter server's part of a checkpoint, written from a snapshot while training goes on:
// TieredStore::CreateCheckpoint takes the snapshot (every table locked for the flush and a
// RocksDB checkpoint of hard links: the cut), and WriteRowFilesFromSnapshot streams every row of
// that copy into the checkpoint's row files, without holding any lock of the live store.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/checkpoint_manifest.h"
#include "embedding/row_dtype.h"

namespace dlrm::embedding {

// Writes RowFileName(t, part) into `out_dir` for every table t of the RocksDB copy at
// `snapshot_dir` (rows stored as `codecs` say, one per table: TieredStore::codec), each row
// [weights | optimizer state] in id order, half-precision weights kept as they are (row file
// version 2). Returns the files' manifest entries.
//
// With `only_ids` (one sorted list per table): an incremental checkpoint's files, holding just
// those rows (point reads of the copy, no scan). An id the copy lacks was never written: it is
// still its initial value, and is left out as a full checkpoint leaves it out.
//
// `keep_going`, when given, is asked before each table and each chunk of rows: an error from it
// stops the write, removes the files this call wrote, and is returned.
absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFilesFromSnapshot(
    const std::string& snapshot_dir, const std::vector<RowCodec>& codecs,
    const std::string& out_dir, int part,
    const std::vector<std::vector<int64_t>>* only_ids = nullptr,
    const std::function<absl::Status()>& keep_going = nullptr);

}  // namespace dlrm::embedding
