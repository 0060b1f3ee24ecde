#include "server/ps_job_reaper.h"

#include "common/thread_name.h"

namespace dlrm::server {

JobReaper::JobReaper() : thread_([this] { Run(); }) {}

JobReaper::~JobReaper() { Stop(); }

void JobReaper::Destroy(PsJob* job, std::shared_ptr<std::atomic<bool>> closed) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.emplace_back(job, std::move(closed));
      return;
    }
  }
  delete job;
  SetClosed(*closed);
}

void JobReaper::SetClosed(std::atomic<bool>& closed) {
  // Set under the lock: releasing it wakes AwaitClosed's condition.
  absl::MutexLock lock(&mu_);
  closed.store(true);
}

bool JobReaper::AwaitClosed(const std::atomic<bool>& closed, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(
                                   +[](const std::atomic<bool>* c) { return c->load(); }, &closed),
                               deadline);
}

void JobReaper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    // Its own last reference can go on its thread only if a job's destructor dropped it.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
}

void JobReaper::Run() {
  common::NameThisThread("dlrm-reaper");
  while (true) {
    std::pair<PsJob*, std::shared_ptr<std::atomic<bool>>> next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &JobReaper::HasWork));
      if (queue_.empty()) return;  // stopping, nothing left
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    delete next.first;
    SetClosed(*next.second);
  }
}

std::shared_ptr<PsJob> JobReaper::Own(std::shared_ptr<JobReaper> reaper, std::unique_ptr<PsJob> job,
                                      std::shared_ptr<std::atomic<bool>> closed) {
  return std::shared_ptr<PsJob>(job.release(),
                                [reaper = std::move(reaper), closed = std::move(closed)](PsJob* j) {
                                  reaper->Destroy(j, closed);
                                });
}

}  // namespace dlrm::server
