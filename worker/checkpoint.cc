#include "worker/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "embedding/checkpoint_io.h"
#include "embedding/sparse_optimizer_options.h"
#include "worker/checkpoint_internal.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using embedding::CheckpointFileEntry;
using embedding::CheckpointManifest;

// dense.bin: "DLRMDENS" | u32 version = 1 | u32 reserved | u64 params | u64 state floats |
// i64 optimizer step | params x f32 | state x f32.
constexpr char kDenseMagic[8] = {'D', 'L', 'R', 'M', 'D', 'E', 'N', 'S'};
constexpr uint32_t kDenseVersion = 1;
constexpr char kDenseFile[] = "dense.bin";

// The dense architecture of a spec in words, for comparing a checkpoint's with the job's.
std::string DenseArchitecture(const common::JobSpec& spec) {
  std::string cross;
  if (spec.interaction == "dcnv2") {
    cross = absl::StrCat(" (", spec.cross_layers, " cross layers of rank ", spec.low_rank, ")");
  }
  return absl::StrCat(spec.dense_features, " dense features, bottom MLP [",
                      absl::StrJoin(spec.bottom_mlp, ", "), "], interaction ", spec.interaction,
                      cross, ", top MLP [", absl::StrJoin(spec.top_mlp, ", "), "]");
}

// This rank's PowerSGD state from checkpoint `dir` (verified already): true when taken, false
// (and a log line saying why) when the state starts afresh: a checkpoint of another number of
// workers or of another rank or model, or one written without PowerSGD.
absl::StatusOr<bool> RestorePowerSgd(const std::string& dir, const CheckpointManifest& manifest,
                                     const RestoreOptions& options, PowerSgdAllReducer* powersgd) {
  const std::string who = absl::StrCat("rank ", options.rank, ": PowerSGD state starts afresh: ");
  if (manifest.world_size != options.world_size) {
    DLRM_LOG(INFO) << who << dir << " was written by " << manifest.world_size
                   << " worker(s), this job has " << options.world_size;
    return false;
  }
  const CheckpointFileEntry* entry = nullptr;
  for (const CheckpointFileEntry& f : manifest.files) {
    if (f.kind == "powersgd" && f.part == options.rank) entry = &f;
  }
  if (entry == nullptr) {
    DLRM_LOG(INFO) << who << dir << " holds none for it";
    return false;
  }
  const std::string path = (fs::path(dir) / entry->name).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot open"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::Status loaded = powersgd->LoadState(bytes, path);
  if (absl::IsFailedPrecondition(loaded)) {
    DLRM_LOG(INFO) << who << loaded.message();
    return false;
  }
  DLRM_RETURN_IF_ERROR(loaded);
  DLRM_LOG(INFO) << "rank " << options.rank << ": PowerSGD state restored from " << path;
  return true;
}
}  // namespace

namespace checkpoint_internal {

absl::Status CheckFiniteParams(absl::Span<const float> params, int64_t step) {
  int64_t bad = 0;
  for (float p : params) bad += std::isfinite(p) ? 0 : 1;
  if (bad == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(DivergedModel(bad, static_cast<int64_t>(params.size()), step),
                   "; no checkpoint of it is written"));
}

// The bytes of dense.bin for the trainer's dense parameters and optimizer state now.
absl::StatusOr<std::string> DenseBytes(Trainer& trainer) {
  dense::DlrmDenseModel& model = trainer.model();
  std::vector<float> params(model.num_params());
  trainer.backend()->CopyToHost(model.params(), params.data(), params.size());
  trainer.backend()->Synchronize();
  DLRM_RETURN_IF_ERROR(CheckFiniteParams(params, model.optimizer().step()));
  const std::vector<float> state = model.optimizer().StateToHost();
  char header[40] = {};
  std::memcpy(header, kDenseMagic, 8);
  const uint32_t version[2] = {kDenseVersion, 0};
  std::memcpy(header + 8, version, 8);
  const uint64_t counts[2] = {params.size(), state.size()};
  std::memcpy(header + 16, counts, 16);
  const int64_t step = model.optimizer().step();
  std::memcpy(header + 32, &step, 8);
  std::string bytes(header, sizeof(header));
  bytes.append(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
  bytes.append(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
  return bytes;
}

namespace {

// Where `id` would sit in (lo, hi] if the ids between sorted[lo] < id and sorted[hi] were evenly
// spread.
size_t InterpolatedPlace(const std::vector<int64_t>& sorted, size_t lo, size_t hi, int64_t id) {
  const double frac =
      static_cast<double>(id - sorted[lo]) / static_cast<double>(sorted[hi] - sorted[lo]);
  return std::min(hi, lo + 1 + static_cast<size_t>(frac * static_cast<double>(hi - lo - 1)));
}

}  // namespace

size_t SeekSortedProbe(const std::vector<int64_t>& sorted, size_t from, int64_t id) {
  const size_t n = sorted.size();
  if (sorted[from] >= id || sorted[n - 1] < id) return from;
  return InterpolatedPlace(sorted, from, n - 1, id);
}

size_t SeekSorted(const std::vector<int64_t>& sorted, size_t from, int64_t id) {
  const size_t n = sorted.size();
  if (from >= n || sorted[from] >= id) return from;
  if (sorted[n - 1] < id) return n;
  // sorted[lo] < id <= sorted[hi]: the answer is in (lo, hi].
  size_t lo = from, hi = n - 1;
  const size_t guess = InterpolatedPlace(sorted, lo, hi, id);
  size_t step = 1;
  if (sorted[guess] >= id) {
    hi = guess;  // gallop down: sorted[hi] >= id
    while (hi - lo > step && sorted[hi - step] >= id) {
      hi -= step;
      step *= 2;
    }
    if (hi - lo > step) lo = hi - step;  // sorted[lo] < id
  } else {
    lo = guess;  // gallop up: sorted[lo] < id
    while (hi - lo > step && sorted[lo + step] < id) {
      lo += step;
      step *= 2;
    }
    if (hi - lo > step) hi = lo + step;  // sorted[hi] >= id
  }
  return std::lower_bound(sorted.begin() + lo + 1, sorted.begin() + hi, id) - sorted.begin();
}

absl::StatusOr<CheckpointFileEntry> WriteDenseBytes(const std::string& dir,
                                                    const std::string& bytes) {
  DLRM_ASSIGN_OR_RETURN(auto out,
                        embedding::ChecksummedWriter::Create(absl::StrCat(dir, "/", kDenseFile)));
  DLRM_RETURN_IF_ERROR(out->Append(bytes.data(), bytes.size()));
  DLRM_ASSIGN_OR_RETURN(embedding::FileDigest d, out->Close());
  return CheckpointFileEntry{
      .name = kDenseFile, .kind = "dense", .bytes = d.bytes, .crc32c = d.crc32c};
}

absl::Status ReadDense(const std::string& path, Trainer& trainer) {
  dense::DlrmDenseModel& model = trainer.model();
  // Listed in the manifest, it was verified (a regular file of its size); this is for one that is
  // not: opening a FIFO would wait for a writer.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) return FileError(ec, path);
  if (!fs::is_regular_file(status)) {
    return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  char header[40];
  in.read(header, sizeof(header));
  if (!in || std::memcmp(header, kDenseMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a dense parameter file"));
  }
  uint32_t version[2];
  uint64_t counts[2];
  int64_t step = 0;
  std::memcpy(version, header + 8, 8);
  std::memcpy(counts, header + 16, 16);
  std::memcpy(&step, header + 32, 8);
  if (version[0] != kDenseVersion) {
    return absl::DataLossError(absl::StrCat(path, ": version ", version[0]));
  }
  const size_t want_state = model.optimizer().state().size();
  if (counts[0] != model.num_params() || counts[1] != want_state) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds ", counts[0], " dense parameters and ", counts[1],
        " optimizer state floats; the model has ", model.num_params(), " and ", want_state));
  }
  std::vector<float> params(counts[0]);
  std::vector<float> state(counts[1]);
  in.read(reinterpret_cast<char*>(params.data()), params.size() * sizeof(float));
  in.read(reinterpret_cast<char*>(state.data()), state.size() * sizeof(float));
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    return absl::DataLossError(absl::StrCat(path, ": size does not match its header"));
  }
  // No checkpoint of a diverged model is written (Trainer::CheckDenseParamsFinite), so one is
  // damage or an older build's: said so here, not as "no valid records" or scores of NaN later.
  const int64_t bad =
      std::count_if(params.begin(), params.end(), [](float v) { return !std::isfinite(v); });
  if (bad > 0) {
    return absl::DataLossError(absl::StrCat(path, ": ", bad, " of its ", params.size(),
                                            " dense parameters are inf or NaN (a diverged model)"));
  }
  trainer.backend()->CopyFromHost(params.data(), model.params(), params.size());
  if (!state.empty()) model.optimizer().StateFromHost(state);
  model.optimizer().set_step(step);
  return absl::OkStatus();
}

// The manifest of a checkpoint of `trainer` at `position` without its files; every one of
// `world_size` ranks is at the same position (ranks of a cluster job step in lockstep over
// equal shards of the input).
absl::StatusOr<CheckpointManifest> BaseManifest(const common::JobSpec& spec,
                                                const std::string& spec_yaml, Trainer& trainer,
                                                const TrainPosition& position, int world_size) {
  CheckpointManifest m;
  m.name = embedding::CheckpointDirName(position.step);
  m.job_name = spec.name;
  m.spec_yaml = spec_yaml;
  m.step = position.step;
  m.samples = position.samples;
  m.created_unix = absl::ToUnixMicros(absl::Now()) / 1e6;
  m.seed = spec.seed;
  m.world_size = world_size;
  for (int r = 0; r < world_size; ++r) {
    m.ranks.push_back({.rank = r,
                       .epoch = position.epoch,
                       .batches = position.batches,
                       .samples = position.samples / world_size});
  }
  DLRM_ASSIGN_OR_RETURN(embedding::SparseOptimizerOptions sparse, SparseOptimizerFromSpec(spec));
  m.sparse_optimizer = embedding::SparseOptimizerTypeName(sparse.type);
  m.dense_optimizer = spec.dense_optimizer.type;
  m.dense_params = static_cast<int64_t>(trainer.model().num_params());
  // The optimizer first: it also sets the floats a stored row has, which the shapes compare.
  if (m.sparse_optimizer != embedding::SparseOptimizerTypeName(sparse.type)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, ": sparse optimizer ",
                                                   m.sparse_optimizer, ", the job spec's ",
                                                   spec.sparse_optimizer.type));
  }
  const int row_floats =
      spec.embedding_dim + embedding::SparseOptimizerStateFloats(sparse.type, spec.embedding_dim);
  for (const common::TableSpec& t : spec.tables) {
    m.tables.push_back(
        {.name = t.name, .rows = t.rows, .dim = spec.embedding_dim, .row_floats = row_floats});
  }
  return m;
}

absl::StatusOr<int> LockCheckpointFolder(const std::string& root, const std::string& holder,
                                         const std::string& job_id) {
  const std::string path = (fs::path(root) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return FileError(errno, absl::StrCat(path, ": open"));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char held_by[128] = {};
    const ssize_t n = ::pread(fd, held_by, sizeof(held_by) - 1, 0);
    ::close(fd);
    if (error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL) {
      // A file system without flock (some network and CSI volumes): the run goes on unguarded
      // rather than fail every job that checkpoints there.
      DLRM_LOG(WARNING) << path << ": this file system does not lock (" << std::strerror(error)
                        << "); two runs given this folder at once would not be told apart";
      return -1;
    }
    if (error != EWOULDBLOCK) return FileError(error, absl::StrCat(path, ": flock"));
    std::string other = n > 0 ? std::string(held_by, static_cast<size_t>(n)) : std::string("?");
    while (!other.empty() && (other.back() == '\n' || other.back() == ' ')) other.pop_back();
    if (!job_id.empty() && absl::StartsWith(other, absl::StrCat("job ", job_id, " "))) {
      // This job's own earlier run (a recovery whose old rank 0 has not let go yet).
      DLRM_LOG(INFO) << "checkpoint.dir " << root << " is still locked by this job's earlier run ("
                     << other << "); going on";
      return -1;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.dir ", root, " is in use by another run (", other, " holds ", path,
        "): two runs in one folder would mix their checkpoints; give this one a folder of its "
        "own"));
  }
  const std::string content = absl::StrCat(holder, "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, content.data(), content.size(), 0) < 0) {
    DLRM_LOG(WARNING) << path << ": cannot record who holds it: " << std::strerror(errno);
  }
  return fd;
}

// Creates the checkpoint folder `root` if needed and removes what an interrupted write left there.
absl::Status PrepareCheckpointRoot(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return FileError(ec, absl::StrCat("checkpoint.dir ", root));
  DLRM_ASSIGN_OR_RETURN(int removed, embedding::RemoveUncommitted(root));
  if (removed > 0) {
    DLRM_LOG(WARNING) << "removed " << removed << " unfinished checkpoint(s) under " << root;
  }
  return absl::OkStatus();
}

// Creates (or empties) the directory of checkpoint `name` under `root`.
absl::StatusOr<std::string> MakeCheckpointDir(const std::string& root, const std::string& name) {
  const std::string dir = (fs::path(root) / name).string();
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return FileError(ec, dir);
  return dir;
}

}  // namespace checkpoint_internal

using checkpoint_internal::ReadDense;

absl::Status CheckCheckpointFitsSpec(const CheckpointManifest& m, const common::JobSpec& spec) {
  if (m.tables.size() != spec.tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, " has ", m.tables.size(),
                                                   " tables, the job spec ", spec.tables.size()));
  }
  DLRM_ASSIGN_OR_RETURN(embedding::SparseOptimizerOptions sparse, SparseOptimizerFromSpec(spec));
  // The optimizer first: it also sets the floats a stored row has, which the shapes compare.
  if (m.sparse_optimizer != embedding::SparseOptimizerTypeName(sparse.type)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, ": sparse optimizer ",
                                                   m.sparse_optimizer, ", the job spec's ",
                                                   spec.sparse_optimizer.type));
  }
  const int row_floats =
      spec.embedding_dim + embedding::SparseOptimizerStateFloats(sparse.type, spec.embedding_dim);
  for (size_t t = 0; t < m.tables.size(); ++t) {
    const auto& a = m.tables[t];
    if (a.rows != spec.tables[t].rows || a.dim != spec.embedding_dim ||
        a.row_floats != row_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", m.name, ": table ", t, " (", a.name, ") is ", a.rows, " x ",
                       a.dim, " with ", a.row_floats, " floats per stored row; the job spec's is ",
                       spec.tables[t].rows, " x ", spec.embedding_dim, " with ", row_floats));
    }
  }
  if (m.dense_optimizer != spec.dense_optimizer.type) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, ": dense optimizer ",
                                                   m.dense_optimizer, ", the job spec's ",
                                                   spec.dense_optimizer.type));
  }
  // Two architectures may have the same parameter count; the spec they were trained with tells
  // them apart.
  if (auto trained = common::ParseJobSpec(m.spec_yaml, m.name); trained.ok()) {
    const std::string have = DenseArchitecture(*trained), want = DenseArchitecture(spec);
    if (have != want) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", m.name, " holds a model with ",
                                                     have, "; the job spec's has ", want));
    }
    // A bag pooled another way feeds the dense model inputs it was not trained on (sum against
    // mean: the input scaled by the bag's size).
    for (size_t t = 0; t < m.tables.size() && t < trained->tables.size(); ++t) {
      const int i = static_cast<int>(t);
      if (trained->TablePooling(i) != spec.TablePooling(i)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", m.name, ": table ", t, " (", m.tables[t].name, ") was trained with ",
            trained->TablePooling(i), " pooling; the job spec's is ", spec.TablePooling(i)));
      }
    }
    // Allowed, but not silently: the rows are rounded to (or widened from) the new dtype once,
    // and another split of the data moves records between training and evaluation.
    for (size_t t = 0; t < m.tables.size() && t < trained->tables.size(); ++t) {
      if (trained->tables[t].dtype != spec.tables[t].dtype) {
        DLRM_LOG(WARNING) << "checkpoint " << m.name << ": table " << t << " (" << m.tables[t].name
                          << ") was trained with dtype " << trained->tables[t].dtype
                          << ", the job spec's is " << spec.tables[t].dtype
                          << ": its rows are converted as they are loaded";
        break;
      }
    }
    if (spec.eval_paths.empty() && trained->eval_paths.empty() &&
        trained->eval_fraction != spec.eval_fraction) {
      DLRM_LOG(WARNING) << "checkpoint " << m.name << " was trained with data.eval_fraction "
                        << trained->eval_fraction << ", the job spec's is " << spec.eval_fraction
                        << ": records it trained on may now be evaluated, or the reverse";
    }
  }
  return absl::OkStatus();
}

namespace {

// A checkpoint records where the input stood in batches of the epoch in progress. A run that
// resumes with another (global) batch size skips the same samples in its own batches: the
// number of batches it skips, or INVALID_ARGUMENT naming both sizes when those samples are not
// a whole number of its batches (it would train some twice or skip some).
absl::StatusOr<int64_t> BatchesToSkip(const CheckpointManifest& m, int64_t batches,
                                      int64_t global_batch) {
  if (batches == 0) return batches;
  absl::StatusOr<common::JobSpec> trained = common::ParseJobSpec(m.spec_yaml, m.name);
  if (!trained.ok() || trained->batch_size == global_batch || global_batch <= 0) return batches;
  const int64_t samples = batches * trained->batch_size;
  if (samples % global_batch == 0) return samples / global_batch;
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint ", m.name, " stopped ", batches, " batch(es) of training.batch_size ",
      trained->batch_size, " (", samples, " samples) into its epoch; this run's batch_size ",
      global_batch,
      " does not divide those samples, so it would train some of them twice or "
      "skip some. Resume with a batch_size that divides ",
      samples, " (e.g. ", trained->batch_size, "), or from a checkpoint at the start of an epoch"));
}

}  // namespace

absl::StatusOr<ValidCheckpoint> FindValidCheckpoint(const std::string& path,
                                                    absl::string_view job_id) {
  return embedding::FindVerifiedCheckpoint(path, job_id);
}

absl::StatusOr<int64_t> CommittedResumeStep(const std::string& path) {
  if (absl::StatusOr<CheckpointManifest> m = embedding::ReadManifest(path); m.ok()) return m->step;
  absl::StatusOr<std::vector<CheckpointManifest>> listed = embedding::ListCheckpoints(path);
  if (listed.ok() && !listed->empty()) return listed->back().step;
  std::error_code ec;
  return absl::NotFoundError(
      absl::StrCat(path, fs::exists(path, ec)
                             ? ": neither a checkpoint nor a folder holding committed checkpoints"
                             : ": no such file or folder"));
}

absl::Status CheckNoNewerCheckpoints(const std::string& root, int64_t resume_step) {
  DLRM_ASSIGN_OR_RETURN(std::vector<CheckpointManifest> all, embedding::ListCheckpoints(root));
  for (auto it = all.rbegin(); it != all.rend() && it->step > resume_step; ++it) {
    if (!embedding::LoadChain((fs::path(root) / it->name).string()).ok()) continue;
    const std::string what =
        absl::StrCat("checkpoint ", it->name, " (step ", it->step, ", job '", it->job_name, "'",
                     it->job_id.empty() ? "" : absl::StrCat(" ", it->job_id), ")");
    const std::string why =
        " Its checkpoints and this run's would mix: a resume, a recovery (which loads the "
        "folder's newest) or an incremental checkpoint would take the other run's model.";
    if (resume_step == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.dir ", root, " already holds ", what,
          " of another run, and this run starts from step 0.", why,
          " Give the job an empty folder, remove those checkpoints, or resume from them "
          "(dlrm train --resume, checkpoint.resume_from, dlrmctl submit --resume-from)."));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.dir ", root, " holds ", what, ", newer than step ", resume_step,
        " that this run resumes from.", why,
        " Resume from the newest, give the job another folder, or remove the newer ones."));
  }
  return absl::OkStatus();
}

absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const std::string& path,
                                                     const RestoreOptions& options,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store) {
  // Every file of every link is verified before anything is read.
  DLRM_ASSIGN_OR_RETURN(ValidCheckpoint valid, FindValidCheckpoint(path));
  return RestoreCheckpoint(valid, options, trainer, store);
}

absl::StatusOr<RestoredCheckpoint> RestoreCheckpoint(const ValidCheckpoint& checkpoint,
                                                     const RestoreOptions& options,
                                                     Trainer* trainer,
                                                     embedding::EmbeddingStore* store) {
  const int rank = options.rank;
  const std::string& dir = checkpoint.dir;
  const std::vector<CheckpointManifest>& chain = checkpoint.chain;
  DLRM_CHECK(!chain.empty()) << dir << ": a checkpoint without its chain";
  const CheckpointManifest& newest = chain.back();
  DLRM_RETURN_IF_ERROR(CheckCheckpointFitsSpec(newest, trainer->spec()));
  if (newest.seed != trainer->spec().seed && rank == 0) {
    // Allowed (a fine-tuning run may choose its own), but it changes the model: rows the
    // checkpoint does not hold start from the seed.
    DLRM_LOG(WARNING) << "checkpoint " << newest.name << " was trained with training.seed "
                      << newest.seed << "; this run's is " << trainer->spec().seed
                      << ": rows it does not hold start from this run's seed";
  }
  // Every rank of the writer stood at the same epoch and batch (a step is one batch of each).
  // Checked before anything is loaded.
  DLRM_ASSIGN_OR_RETURN(
      const int64_t batches_to_skip,
      BatchesToSkip(newest, newest.ranks.empty() ? 0 : newest.ranks.front().batches,
                    static_cast<int64_t>(trainer->spec().batch_size) * options.world_size));
  const fs::path root = fs::path(dir).parent_path();
  RestoredCheckpoint out;
  for (const CheckpointManifest& link : chain) {
    DLRM_RETURN_IF_ERROR(CheckCheckpointFitsSpec(link, trainer->spec()));
    // The newest link is the directory given, whatever its name (a copy, a renamed one); the
    // links it builds on are its siblings by their names.
    const fs::path link_dir = &link == &chain.back() ? fs::path(dir) : root / link.name;
    for (const CheckpointFileEntry& f : link.files) {
      if (f.kind == "dense" || f.kind == "powersgd") continue;
      const bool hot = f.kind == "hot_rows";
      const bool newest_link = &link == &chain.back();
      if (hot && newest_link) out.hot_ids.resize(link.tables.size());
      if (!options.load_rows && !(hot && newest_link)) continue;
      if (f.table < 0 || f.table >= static_cast<int>(link.tables.size())) {
        return absl::DataLossError(absl::StrCat((link_dir / f.name).string(), ": table ", f.table));
      }
      const int row_floats = link.tables[f.table].row_floats;
      DLRM_RETURN_IF_ERROR(
          embedding::ReadRowFile((link_dir / f.name).string(), f.table, row_floats,
                                 [&](absl::Span<const int64_t> ids, const float* rows) {
                                   if (hot && newest_link) {
                                     std::vector<int64_t>& h = out.hot_ids[f.table];
                                     h.insert(h.end(), ids.begin(), ids.end());
                                   }
                                   if (!options.load_rows) return absl::OkStatus();
                                   embedding::TableRows r;
                                   r.table = f.table;
                                   r.ids.assign(ids.begin(), ids.end());
                                   r.values.assign(rows, rows + ids.size() * row_floats);
                                   return store->WriteStoredRows({&r, 1});
                                 }));
    }
  }
  DLRM_RETURN_IF_ERROR(ReadDense((fs::path(dir) / kDenseFile).string(), *trainer));
  if (PowerSgdAllReducer* powersgd = trainer->powersgd(); powersgd != nullptr) {
    DLRM_ASSIGN_OR_RETURN(out.powersgd_restored, RestorePowerSgd(dir, newest, options, powersgd));
  }
  if (options.set_steps) trainer->set_steps_done(newest.step);
  out.dir = dir;
  out.manifest = newest;
  out.position.step = newest.step;
  out.position.samples = newest.samples / std::max(1, options.world_size);
  // A rank the writer did not have (the job resumes on more workers) starts where the others
  // do, on its new shard.
  if (!newest.ranks.empty()) out.position.epoch = newest.ranks.front().epoch;
  for (const embedding::RankPosition& r : newest.ranks) {
    if (r.rank == rank && newest.world_size == options.world_size) {
      out.position.samples = r.samples;
    }
  }
  out.position.batches = batches_to_skip;
  return out;
}

}  // namespace dlrm::worker
