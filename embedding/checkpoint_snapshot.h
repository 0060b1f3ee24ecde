// A parameter server's part of a checkpoint, written from a snapshot while training goes on:
// TieredStore::CreateCheckpoint takes the snapshot (every table locked for the flush and a
// RocksDB checkpoint of hard links: the cut), and WriteRowFilesFromSnapshot streams every row of
// that copy into the checkpoint's row files, without holding any lock of the live store.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/checkpoint_manifest.h"

namespace dlrm::embedding {

// Writes RowFileName(t, part) into `out_dir` for every table t of the RocksDB copy at
// `snapshot_dir` (row widths `row_floats`, one per table), each row [weights | optimizer state]
// in id order. Returns the files' manifest entries.
absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFilesFromSnapshot(
    const std::string& snapshot_dir, const std::vector<int>& row_floats,
    const std::string& out_dir, int part);

}  // namespace dlrm::embedding
