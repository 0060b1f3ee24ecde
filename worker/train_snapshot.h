// The rows of `dlrm train`'s checkpoint snapshots (TrainCheckpointer, worker/checkpoint.h and
// worker/train_checkpointer.cc): one table's part of a snapshot, the copies that fill it from the
// store at a checkpoint, and the update that brings its base up to that checkpoint after the
// write. Not part of the checkpoint API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "embedding/checkpoint_snapshot.h"
#include "embedding/embedding_table.h"
#include "embedding/local_store.h"

namespace dlrm::worker::checkpoint_internal {

// One table's rows in a snapshot (TrainCheckpointer::Snapshot). `ids` / `rows` (the base): every
// row the store had changed since it was created, as of the checkpoint before; `changed_ids` /
// `changed_rows`: the rows changed since, gathered at the cut.
struct SnapshotTable {
  int table = 0;
  int row_floats = 0;
  std::vector<int64_t> ids;          // sorted
  embedding::SnapshotBuffer rows;    // ids.size() x row_floats, in id order
  size_t capacity = 0;               // floats allocated in `rows`
  std::vector<int64_t> changed_ids;  // sorted
  std::vector<float> changed_rows;   // changed_ids.size() x row_floats
  bool changed_in_base = false;      // the base was copied at this cut: nothing to apply
  // A last checkpoint's rows: read from the table itself by id (no rows, changed_rows).
  const embedding::EmbeddingTable* live = nullptr;
};

// Copies the rows of every table's ids into its snapshot buffer, in chunks spread over two
// threads: one thread copies at about 2.6 GB/s on this project's machines, short of what the
// memory gives two (docs/BENCHMARKS.md, "Checkpoints"). Runs of consecutive ids are one memcpy.
void CopySnapshotRows(const embedding::LocalEmbeddingStore& store,
                      const std::vector<SnapshotTable*>& tables);

// Copies the rows of `changed` (sorted) from the table into changed_rows, in order, on two
// threads, each row requested a block ahead so that the reads wait on memory together.
void GatherChangedRows(const embedding::LocalEmbeddingStore& store, std::vector<int64_t> changed,
                       SnapshotTable& rows);

// A full checkpoint's snapshot of a table in which many rows changed since its base: the changed
// rows are copied from the table straight over their old values in the base, in chunks on two
// threads (a gathered copy of them would be as large as the base, in fresh memory); the few the
// base lacks are gathered (GatherChangedRows) and merged in after the write.
void CopyChangedOverBase(const embedding::LocalEmbeddingStore& store,
                         const std::vector<int64_t>& changed, SnapshotTable& rows);

// The base of a written snapshot brought up to its checkpoint: its changed rows applied and
// cleared (their memory kept for the next one's).
absl::Status ApplyAndClearChangedRows(SnapshotTable& rows);

}  // namespace dlrm::worker::checkpoint_internal
