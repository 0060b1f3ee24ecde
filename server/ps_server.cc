#include "server/ps_server.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  PsServiceOptions service_options;
  service_options.data_dir = options.data_dir;
  service_options.memory_budget_bytes = options.memory_budget_bytes;
  service_options.rocksdb_wal = options.rocksdb_wal;
  service_options.checkpoint_root = options.checkpoint_root;
  service_options.injected_delay = options.injected_delay;
  service_options.metrics = ps->metrics_;
  service_options.pool = ps->pool_.get();
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
}

void ParameterServer::Shutdown(absl::Duration grace) {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  // Parked lookups would otherwise hold the server's shutdown until their deadlines.
  service_->FailParkedLookups(absl::UnavailableError("parameter server is shutting down"));
  server_->Shutdown(grace);
  pool_->Stop();
}

void ParameterServer::Wait() { server_->Wait(); }

}  // namespace dlrm::server
