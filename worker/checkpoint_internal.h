// What worker/checkpoint.cc, worker/train_checkpointer.cc and worker/cluster_checkpointer.cc
// share: dense.bin's bytes, a checkpoint's manifest without its files, and its folders. Not part
// of the checkpoint API (worker/checkpoint.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/job_spec.h"
#include "embedding/checkpoint_manifest.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace dlrm::worker::checkpoint_internal {

// The bytes of dense.bin for the trainer's dense parameters and optimizer state now.
// FAILED_PRECONDITION (naming how many) when a parameter is inf or NaN: a diverged model, which
// no checkpoint takes. `step`: the dense optimizer's updates so far, for the message.
absl::Status CheckFiniteParams(absl::Span<const float> params, int64_t step);
absl::StatusOr<std::string> DenseBytes(Trainer& trainer);
// Writes `bytes` (DenseBytes) as dense.bin in `dir`; its manifest entry.
absl::StatusOr<embedding::CheckpointFileEntry> WriteDenseBytes(const std::string& dir,
                                                               const std::string& bytes);
// The manifest of a checkpoint of `trainer` at `position` without its files; every one of
// `world_size` ranks is at the same position.
// `spec_yaml` is common::JobSpecToYaml(spec), which a caller makes once per job.
absl::StatusOr<embedding::CheckpointManifest> BaseManifest(const common::JobSpec& spec,
                                                           const std::string& spec_yaml,
                                                           Trainer& trainer,
                                                           const TrainPosition& position,
                                                           int world_size);
// The first position p >= `from` with sorted[p] >= id (sorted.size() if none), for ids sought in
// increasing order. It probes where `id` would sit if the ids after `from` were evenly spread,
// then gallops from there: one or two probes into a table's changed ids, which training spreads
// over the id range, and a binary search's worth at worst.
size_t SeekSorted(const std::vector<int64_t>& sorted, size_t from, int64_t id);
// SeekSorted's first probe for `id` from `from`: a caller that prefetches &sorted[probe] for a
// batch of ids before seeking them waits on their misses together, not one after another.
// REQUIRES: from < sorted.size().
size_t SeekSortedProbe(const std::vector<int64_t>& sorted, size_t from, int64_t id);
// Takes an exclusive flock on root/.lock (held until the returned descriptor is closed, also when
// the process dies) and writes `holder` into it, so that one folder serves one run at a time (a
// symlink or another spelling of a folder is the same folder). Held by another run:
// FAILED_PRECONDITION naming what it wrote; when that is "job <job_id> ..." of this `job_id` (a
// recovery of the job whose earlier rank 0 has not let go yet), -1 and no lock; on a file system
// that cannot lock (ENOLCK, EOPNOTSUPP), -1 with a warning.
absl::StatusOr<int> LockCheckpointFolder(const std::string& root, const std::string& holder,
                                         const std::string& job_id);
// Creates the checkpoint folder `root` if needed and removes what an interrupted write left there.
absl::Status PrepareCheckpointRoot(const std::string& root);
// Creates (or empties) the directory of checkpoint `name` under `root`.
absl::StatusOr<std::string> MakeCheckpointDir(const std::string& root, const std::string& name);

}  // namespace dlrm::worker::checkpoint_internal
