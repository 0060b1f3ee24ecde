// JobReaper: where an unloaded job's store closes. The last reference to a PsJob may be dropped
// by any thread: the heartbeat's unload, a gRPC reactor's inline lookup, a pool task. Closing
// its store (RocksDB flushes its memtables and deletes obsolete files, the snapshot preparer is
// joined, the memory tier freed) can take seconds, which a heartbeat (its lease) or a reactor
// cannot spend. PsService gives each PsJob a deleter that hands it to the reaper's thread, and
// a flag the reaper sets once the job is gone, so its folder is removed, and its path reused,
// only then.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/ps_job.h"

namespace dlrm::server {

class JobReaper {
 public:
  JobReaper();
  ~JobReaper();  // Stop()
  JobReaper(const JobReaper&) = delete;
  JobReaper& operator=(const JobReaper&) = delete;

  // Deletes `job` on the reaper's thread (on the caller's once stopped), then sets *closed.
  void Destroy(PsJob* job, std::shared_ptr<std::atomic<bool>> closed);
  // Deletes what is queued and joins the thread; later Destroy calls delete inline.
  void Stop();
  // Waits until `closed` (a flag given to Destroy) is set, or until `deadline`; whether it is.
  bool AwaitClosed(const std::atomic<bool>& closed, absl::Time deadline);

  // A PsJob owned by a shared_ptr whose deleter is `reaper`'s Destroy, and its closed flag.
  static std::shared_ptr<PsJob> Own(std::shared_ptr<JobReaper> reaper, std::unique_ptr<PsJob> job,
                                    std::shared_ptr<std::atomic<bool>> closed);

 private:
  void Run();
  void SetClosed(std::atomic<bool>& closed) ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); }

  absl::Mutex mu_;
  std::deque<std::pair<PsJob*, std::shared_ptr<std::atomic<bool>>>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dlrm::server
