#include "server/job_watch.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/limits.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace dlrm::server {

// One WatchJob stream. Owns itself through `self_` until OnDone; the registry holds weak
// references so a Publish racing with OnDone never touches a deleted reactor.
class JobWatchReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  JobWatchReactor(JobWatchers* owner, int64_t token) : owner_(owner), token_(token) {}

  void Push(const dlrm::v1::Job& job) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || job.version() <= last_version_) return;
      last_version_ = job.version();
      pending_ = job;
      if (writing_) return;
      writing_ = true;
      TakePendingLocked();
    }
    StartWrite(&current_);
  }

  // Ends the stream with `status` (after the write in flight, if any).
  void Close(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (writing_) {
        close_status_ = status;
        return;
      }
      finished_ = true;
    }
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "watch stream closed by the client");
      } else if (current_terminal_) {
        finish = grpc::Status::OK;
      } else if (close_status_.has_value()) {
        finish = *close_status_;
      } else if (pending_.has_value()) {
        TakePendingLocked();
        write = true;
      } else {
        writing_ = false;
      }
      if (finish.has_value()) {
        if (finished_) return;
        finished_ = true;
      }
    }
    if (finish.has_value()) {
      Finish(*finish);
    } else if (write) {
      StartWrite(&current_);
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (writing_) {
        // A write is in flight, or a Push is between taking writing_ and its StartWrite: that
        // write completes (ok = false, the call is cancelled) and OnWriteDone finishes the
        // stream. Finishing here could let OnDone run, and gRPC destroy the stream, before that
        // StartWrite reaches it.
        close_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
        return;
      }
      finished_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    owner_->Remove(token_);
    // Dropped at the end of this scope: `this` may be deleted then, and is not touched after.
    std::shared_ptr<JobWatchReactor> keep = std::move(self_);
  }

  std::shared_ptr<JobWatchReactor> self_;

 private:
  void TakePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    dlrm::v1::JobEvent event;
    event.set_sequence(++sequence_);
    *event.mutable_job() = std::move(*pending_);
    pending_.reset();
    current_terminal_ = IsTerminal(event.job().state());
    current_.Clear();  // the previous event's bytes, written by now
    bool own_buffer = false;
    // A JobEvent always serializes (its fields are set from a Job the state holds).
    (void)grpc::SerializationTraits<dlrm::v1::JobEvent>::Serialize(event, &current_, &own_buffer);
  }

  JobWatchers* const owner_;
  const int64_t token_;
  absl::Mutex mu_;
  std::optional<dlrm::v1::Job> pending_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> close_status_ ABSL_GUARDED_BY(mu_);
  int64_t last_version_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // The event being written, serialized (the method is raw: common/raw_unary.h); only touched
  // by the thread that owns the write (writing_).
  grpc::ByteBuffer current_;
  bool current_terminal_ = false;
};

JobWatchers::~JobWatchers() { Close(); }

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobWatchers::Start(const std::string& job_id,
                                                               const CoordinatorState& state) {
  std::shared_ptr<JobWatchReactor> reactor;
  bool closed = false;
  bool full = false;
  {
    absl::MutexLock lock(&mu_);
    const int64_t token = next_token_++;
    reactor = std::make_shared<JobWatchReactor>(this, token);
    reactor->self_ = reactor;
    closed = closed_;
    full = static_cast<int64_t>(job_of_token_.size()) >= max_streams_;
    if (!closed && !full) {
      streams_.emplace(job_id, std::make_pair(token, std::weak_ptr<JobWatchReactor>(reactor)));
      job_of_token_[token] = job_id;
    }
  }
  if (closed) {
    reactor->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
    return reactor.get();
  }
  if (full) {
    reactor->Close(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("WatchJob: ", max_streams_,
                     " streams are open, the most this coordinator serves (kMaxWatchStreams in "
                     "common/limits.h); close one, or poll with GetJob")));
    return reactor.get();
  }
  // Registered before the snapshot is read, so no change in between is missed; the version
  // check drops whichever of the two is older.
  absl::StatusOr<dlrm::v1::Job> job = state.GetJob(job_id);
  if (!job.ok()) {
    reactor->Close(common::ToGrpcStatus(job.status()));
  } else {
    reactor->Push(*job);
  }
  return reactor.get();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobWatchers::Refuse(const grpc::Status& status) {
  std::shared_ptr<JobWatchReactor> reactor;
  {
    absl::MutexLock lock(&mu_);
    reactor = std::make_shared<JobWatchReactor>(this, next_token_++);  // never registered
    reactor->self_ = reactor;
  }
  reactor->Close(status);
  return reactor.get();
}

void JobWatchers::Publish(const dlrm::v1::Job& job) {
  std::vector<std::shared_ptr<JobWatchReactor>> targets;
  {
    absl::MutexLock lock(&mu_);
    auto [begin, end] = streams_.equal_range(job.job_id());
    for (auto it = begin; it != end; ++it) {
      if (auto r = it->second.second.lock()) targets.push_back(std::move(r));
    }
  }
  for (auto& r : targets) r->Push(job);
}

void JobWatchers::Close() {
  std::vector<std::shared_ptr<JobWatchReactor>> targets;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (auto& [job, entry] : streams_) {
      if (auto r = entry.second.lock()) targets.push_back(std::move(r));
    }
  }
  for (auto& r : targets) {
    r->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
  }
}

void JobWatchers::Remove(int64_t token) {
  absl::MutexLock lock(&mu_);
  auto it = job_of_token_.find(token);
  if (it == job_of_token_.end()) return;
  auto [begin, end] = streams_.equal_range(it->second);
  for (auto s = begin; s != end; ++s) {
    if (s->second.first == token) {
      streams_.erase(s);
      break;
    }
  }
  job_of_token_.erase(it);
}

}  // namespace dlrm::server
