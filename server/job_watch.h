// Server-streaming WatchJob: each stream sends a snapshot of the job after every change and
// ends (OK) after the snapshot carrying a terminal state. Snapshots are coalesced: a slow reader
// gets the latest state, never a stale one after a newer one (Job.version orders them).
//
// No thread blocks: a change is pushed by whoever made it (CoordinatorState's listener), and
// the next write starts from OnWriteDone. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/jobs.pb.h"
#include "server/coordinator_state.h"

namespace dlrm::server {

class JobWatchReactor;

class JobWatchers {
 public:
  // At most `max_streams` streams at once (common/limits.h kMaxWatchStreams in a coordinator).
  explicit JobWatchers(int64_t max_streams) : max_streams_(max_streams) {}
  ~JobWatchers();

  // Starts a stream for `job_id`; an unknown job finishes it NOT_FOUND naming the id.
  // `state` must outlive the stream.
  // The stream is raw (serialized JobEvents), as JobsServiceImpl registers WatchJob.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(const std::string& job_id,
                                                    const CoordinatorState& state);
  // A stream that ends at once with `status` (e.g. PERMISSION_DENIED), watching nothing.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Refuse(const grpc::Status& status);
  // Sends `job` to the streams watching it. Call with no lock held.
  void Publish(const dlrm::v1::Job& job);
  // Finishes every stream UNAVAILABLE and refuses new ones (coordinator shutdown).
  void Close();

 private:
  friend class JobWatchReactor;
  void Remove(int64_t token);

  absl::Mutex mu_;
  std::multimap<std::string, std::pair<int64_t, std::weak_ptr<JobWatchReactor>>> streams_
      ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::string> job_of_token_ ABSL_GUARDED_BY(mu_);
  int64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  const int64_t max_streams_;
};

}  // namespace dlrm::server
