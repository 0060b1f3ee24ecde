// The manifest of a checkpoint (docs/CHECKPOINTS.md): what a checkpoint holds and where it stands
// in its chain. A checkpoint is a directory `ckpt-<step, 12 digits>` under the job's checkpoint
// root; it exists once its MANIFEST.json is committed (written to a temporary file, fsynced,
// renamed, directory fsynced). Everything else in a checkpoint directory is listed in the
// manifest with its size and CRC32C.
//
//   DLRM_RETURN_IF_ERROR(CommitManifest(dir, manifest));        // last step of writing
//   DLRM_ASSIGN_OR_RETURN(VerifiedCheckpoint c, FindVerifiedCheckpoint(path));  // c.chain: full ..
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlrm::embedding {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr char kManifestName[] = "MANIFEST.json";

struct CheckpointFileEntry {
  std::string name;  // relative to the checkpoint directory
  std::string kind;  // "dense" | "rows" | "hot_rows" (a worker's hot rows: newer than "rows")
  int table = -1;    // rows: the table
  int part = 0;      // rows: which writer (a parameter server's shard, 0 for dlrm train)
  int64_t rows = 0;  // rows: records in the file
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Where one rank's input stood after the checkpoint's step.
struct RankPosition {
  int rank = 0;
  int64_t epoch = 0;    // 0-based epoch in progress
  int64_t batches = 0;  // batches of that epoch consumed
  int64_t samples = 0;  // samples trained by this rank so far
};

struct TableShape {
  std::string name;
  int64_t rows = 0;
  int dim = 0;
  int row_floats = 0;  // dim + optimizer state
};

struct CheckpointManifest {
  int version = kCheckpointFormatVersion;
  std::string name;  // directory name, e.g. ckpt-000000001200
  std::string job_name;
  std::string job_id;     // "" for dlrm train
  std::string spec_yaml;  // the job spec it was trained with
  int64_t step = 0;       // every update of steps < step is in, none later
  int64_t samples = 0;    // all ranks together
  double created_unix = 0;
  bool incremental = false;
  std::string parent;  // incremental: the checkpoint it builds on (a sibling directory)
  // Incremental: the parent's created_unix, which tells it from another run's checkpoint of the
  // same name (its step) written later; 0 in manifests written before it was recorded.
  double parent_created_unix = 0;
  uint64_t seed = 0;  // the job's seed; training draws no other random numbers
  int world_size = 1;
  std::vector<RankPosition> ranks;
  // What the state fits: loading checks these against the model it is loaded into.
  std::vector<TableShape> tables;
  int64_t dense_params = 0;
  std::string dense_optimizer;
  std::string sparse_optimizer;
  std::vector<CheckpointFileEntry> files;

  int64_t total_bytes() const;
};

std::string CheckpointDirName(int64_t step);
// Whether `name` has CheckpointDirName's form ("ckpt-" and at least 12 digits): the only folders
// a checkpoint root's scans load, keep or remove, and the only names a manifest may give itself
// or its parent.
bool IsCheckpointDirName(absl::string_view name);
// "rows-t<table>-p<part>.bin".
std::string RowFileName(int table, int part);

// Writes `manifest` as dir/MANIFEST.json atomically and durably (see the file comment), then
// fsyncs dir's parent so the checkpoint directory itself survives a crash.
absl::Status CommitManifest(const std::string& dir, const CheckpointManifest& manifest);
// Reads and validates dir/MANIFEST.json. NOT_FOUND when there is none (not a checkpoint);
// DATA_LOSS naming the file when it does not parse or has another format version.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir);
// Every file listed by the manifest of `dir` has its size and CRC32C: DATA_LOSS naming the first
// that does not.
absl::Status VerifyCheckpointFiles(const std::string& dir, const CheckpointManifest& manifest);

// `path` as a checkpoint directory or folder path: lexically normalised, without a trailing
// separator, and absolute when it has no parent in it ("." or "ckpt-000000000005"), so that its
// parent is the folder holding it and its siblings.
std::string NormalizeCheckpointPath(const std::string& path);

// The committed checkpoints under `root`, oldest first. A missing root is an empty list. A
// checkpoint whose manifest does not parse is left out; `damaged`, when given, gets its error
// (DATA_LOSS naming the manifest).
absl::StatusOr<std::vector<CheckpointManifest>> ListCheckpoints(
    const std::string& root, std::vector<absl::Status>* damaged = nullptr);
// The manifests from the full checkpoint `dir` builds on to `dir` itself (its parents are its
// siblings). Verifies every file of every link (with `verify_files` false only the links: every
// manifest parses, every parent is there and was written when its child says); DATA_LOSS /
// NOT_FOUND name the broken one.
absl::StatusOr<std::vector<CheckpointManifest>> LoadChain(const std::string& dir,
                                                          bool verify_files = true);

struct VerifiedCheckpoint {
  std::string dir;                        // the checkpoint (normalised, see above)
  std::vector<CheckpointManifest> chain;  // its full base .. itself, every file verified
};
// The checkpoint at `path`: `path` itself when it holds a manifest (DATA_LOSS naming the file
// when it does not verify), else the newest checkpoint of the folder `path` whose whole chain
// verifies. The ones refused on the way (a damaged manifest or file, a missing parent) are
// logged by name. NOT_FOUND when the folder holds no committed checkpoint; the last refusal's
// error when none verifies. With `job_id`, a folder's checkpoints written by other jobs
// (manifest job.id) are passed over, NOT_FOUND when none is the job's.
absl::StatusOr<VerifiedCheckpoint> FindVerifiedCheckpoint(const std::string& path,
                                                          absl::string_view job_id = {});
// FindVerifiedCheckpoint(path)->dir.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);
// Removes checkpoint directories under `root` without a committed manifest (an interrupted
// write) and stray temporary files. Returns how many it removed.
absl::StatusOr<int> RemoveUncommitted(const std::string& root);
// Keeps the newest `keep_last` committed checkpoints and every checkpoint they build on; removes
// the other committed ones. Returns how many it removed.
absl::StatusOr<int> ApplyRetention(const std::string& root, int keep_last);

}  // namespace dlrm::embedding
