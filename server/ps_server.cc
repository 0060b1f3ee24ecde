#include "server/ps_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status.h"

namespace dlrm::server {
namespace {

// Versions before 2026-12-05 cut each checkpoint's snapshot into <data>/snapshots/<shard>-<step>
// (shared by the jobs of a server); they now live beside each job's store and nothing reads the
// old folder. What a crash between a SNAPSHOT and its WRITE left there holds hard links to
// RocksDB files (as large as a shard's store): removed here, folders of that name only.
void RemoveOldLayoutSnapshots(const std::string& data_dir) {
  namespace fs = std::filesystem;
  const fs::path old = fs::path(data_dir) / "snapshots";
  std::error_code ec;
  if (!fs::is_directory(old, ec)) return;
  int removed = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(old, ec)) {
    const std::vector<std::string> parts =
        absl::StrSplit(entry.path().filename().string(), absl::MaxSplits('-', 1));
    int64_t shard = 0;
    int64_t step = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shard) ||
        !absl::SimpleAtoi(parts[1], &step) || !entry.is_directory(ec)) {
      continue;
    }
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (remove_ec) {
      DLRM_LOG(WARNING) << "cannot remove " << entry.path().string()
                        << ", a snapshot of an earlier version: " << remove_ec.message();
    } else {
      ++removed;
    }
  }
  if (removed > 0) {
    DLRM_LOG(INFO) << "removed " << removed << " checkpoint snapshot(s) an earlier version left in "
                   << old.string();
  }
  fs::remove(old, ec);  // only if now empty
}

// Whether another process has the RocksDB store in `dir` open: RocksDB holds an fcntl write lock
// on its LOCK file while the store is open.
bool StoreOpenElsewhere(const std::filesystem::path& dir) {
  const int fd = open((dir / "LOCK").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  const bool held = fcntl(fd, F_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
  close(fd);
  return held;
}

// A process that starts has no job loaded, and LoadJob makes a job's store anew; but a server
// that was killed (or lost its lease and was replaced) left its jobs' stores,
// <data>/<job>/shard-<i>, and their checkpoint snapshots, <data>/<job>/shard-<i>-snapshots,
// which hold hard links to the store's files: as large as a shard's RocksDB tier, and nothing
// removes them later unless the same job loads the same shard here again. Removed here: folders
// of those names only, and only while no other process has the store open (a second server on
// the same data folder).
void RemoveStoresOfEarlierProcesses(const std::string& data_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> jobs;
  for (const fs::directory_entry& job : fs::directory_iterator(data_dir, ec)) {
    std::error_code job_ec;
    if (job.is_directory(job_ec) && job.path().filename() != "snapshots") jobs.push_back(job);
  }
  int removed = 0;
  for (const fs::path& job : jobs) {
    std::vector<fs::path> leftovers;
    std::error_code job_ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(job, job_ec)) {
      const std::string filename = entry.path().filename().string();
      absl::string_view name = filename;
      absl::ConsumeSuffix(&name, "-snapshots");
      int64_t shard = 0;
      if (absl::ConsumePrefix(&name, "shard-") && absl::SimpleAtoi(name, &shard) && shard >= 0 &&
          entry.is_directory(job_ec) && !StoreOpenElsewhere(job / absl::StrCat("shard-", shard))) {
        leftovers.push_back(entry.path());
      }
    }
    for (const fs::path& leftover : leftovers) {
      std::error_code remove_ec;
      fs::remove_all(leftover, remove_ec);
      if (remove_ec) {
        DLRM_LOG(WARNING) << "cannot remove " << leftover.string()
                          << ", left by an earlier process: " << remove_ec.message();
      } else if (!absl::EndsWith(leftover.filename().string(), "-snapshots")) {
        ++removed;
      }
    }
    if (!leftovers.empty()) fs::remove(job, job_ec);  // only if now empty
  }
  if (removed > 0) {
    DLRM_LOG(INFO) << "removed " << removed << " job store(s) an earlier process left in "
                   << data_dir;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(const PsOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("parameter server: --data-dir is required");
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server: memory budget ", options.memory_budget_bytes, " < 0"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("parameter server: cannot create ", options.data_dir, ": ", ec.message()));
  }
  RemoveOldLayoutSnapshots(options.data_dir);
  RemoveStoresOfEarlierProcesses(options.data_dir);
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  if (options.metrics != nullptr) {
    ps->metrics_ = options.metrics;
  } else {
    DLRM_ASSIGN_OR_RETURN(ps->owned_metrics_, common::MetricsRegistry::Create({.port = -1}));
    ps->metrics_ = ps->owned_metrics_.get();
  }
  const int threads = options.num_threads > 0
                          ? options.num_threads
                          : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  ps->timers_ = std::make_unique<TimerQueue>();
  ps->pool_ = std::make_unique<PsWorkPool>(threads);
  ps->admin_pool_ = std::make_unique<PsWorkPool>(2);
  ps->checkpoint_pool_ = std::make_unique<PsWorkPool>(2);
  PsServiceOptions service_options;
  service_options.data_dir = options.data_dir;
  service_options.memory_budget_bytes = options.memory_budget_bytes;
  service_options.rocksdb_wal = options.rocksdb_wal;
  service_options.checkpoint_root = options.checkpoint_root;
  service_options.injected_delay = options.injected_delay;
  service_options.store_close_wait = options.store_close_wait;
  service_options.metrics = ps->metrics_;
  service_options.pool = ps->pool_.get();
  service_options.admin_pool = ps->admin_pool_.get();
  service_options.checkpoint_pool = ps->checkpoint_pool_.get();
  service_options.timers = ps->timers_.get();
  ps->service_ = std::make_unique<PsService>(service_options);
  common::ServerOptions server_options;
  server_options.listen_address = options.listen_address;
  server_options.security = options.security;
  DLRM_ASSIGN_OR_RETURN(ps->server_,
                        common::GrpcServer::Start(server_options, {ps->service_.get()}));
  return ps;
}

ParameterServer::~ParameterServer() {
  if (server_ != nullptr) Shutdown(absl::ZeroDuration());
  // A parked lookup's deadline the timer thread has already taken runs on service_, which is
  // destroyed before timers_ (declared first): it ends here, with service_ still alive.
  if (timers_ != nullptr) timers_->Stop();
}

void ParameterServer::Shutdown(absl::Duration grace) {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  // Parked lookups would otherwise hold the server's shutdown until their deadlines.
  service_->FailParkedLookups(absl::UnavailableError("parameter server is shutting down"));
  server_->Shutdown(grace);
  pool_->Stop();
  admin_pool_->Stop();
  checkpoint_pool_->Stop();
}

void ParameterServer::Wait() { server_->Wait(); }

}  // namespace dlrm::server
