#include "server/rendezvous_store.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dlrm::server {
namespace {

absl::Status ShutDownError() {
  return absl::UnavailableError("coordinator is shutting down: rendezvous store closed");
}

}  // namespace

RendezvousStore::RendezvousStore(TimerQueue* timers) : timers_(timers) {}

RendezvousStore::~RendezvousStore() { Shutdown(); }

std::list<RendezvousStore::Waiter> RendezvousStore::TakeWaiters(const std::string& key) {
  std::list<Waiter> taken;
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return taken;
  taken = std::move(it->second);
  waiters_.erase(it);
  for (const Waiter& w : taken) timers_->Cancel(w.timer_id);
  return taken;
}

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key is empty");
  std::list<Waiter> woken;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return ShutDownError();
    values_[key] = value;
    woken = TakeWaiters(key);
  }
  for (Waiter& w : woken) w.done(value);
  return absl::OkStatus();
}

void RendezvousStore::Get(const std::string& key, absl::Duration wait, GetCallback done) {
  if (key.empty()) {
    done(absl::InvalidArgumentError("rendezvous key is empty"));
    return;
  }
  if (wait < absl::ZeroDuration() || wait > kMaxWait) {
    done(absl::InvalidArgumentError(absl::StrCat("rendezvous get '", key, "': wait ",
                                                 absl::FormatDuration(wait), " is outside [0, ",
                                                 absl::FormatDuration(kMaxWait), "]")));
    return;
  }
  absl::StatusOr<std::string> answer;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      answer = ShutDownError();
    } else if (auto it = values_.find(key); it != values_.end()) {
      answer = it->second;
    } else if (wait == absl::ZeroDuration()) {
      answer = absl::NotFoundError(absl::StrCat("rendezvous key '", key, "' is not set"));
    } else {
      const int64_t id = next_waiter_id_++;
      // The timer may fire before we return; Expire takes mu_, so it waits for us.
      const int64_t timer_id =
          timers_->Schedule(absl::Now() + wait, [this, key, id, wait] { Expire(key, id, wait); });
      waiters_[key].push_back(Waiter{id, timer_id, std::move(done)});
      return;
    }
  }
  done(std::move(answer));
}

void RendezvousStore::Expire(const std::string& key, int64_t waiter_id, absl::Duration wait) {
  GetCallback done;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    for (auto w = it->second.begin(); w != it->second.end(); ++w) {
      if (w->id == waiter_id) {
        done = std::move(w->done);
        it->second.erase(w);
        break;
      }
    }
    if (it->second.empty()) waiters_.erase(it);
  }
  if (done) {
    done(absl::NotFoundError(absl::StrCat("rendezvous key '", key, "' was not set within ",
                                          absl::FormatDuration(wait))));
  }
}

int64_t RendezvousStore::Delete(const std::string& key, bool prefix) {
  absl::MutexLock lock(&mu_);
  if (!prefix) return static_cast<int64_t>(values_.erase(key));
  int64_t deleted = 0;
  for (auto it = values_.lower_bound(key);
       it != values_.end() && it->first.compare(0, key.size(), key) == 0;) {
    it = values_.erase(it);
    ++deleted;
  }
  return deleted;
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& key, int64_t delta) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key is empty");
  int64_t sum = 0;
  std::string text;
  std::list<Waiter> woken;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return ShutDownError();
    int64_t current = 0;
    if (auto it = values_.find(key); it != values_.end()) {
      if (!absl::SimpleAtoi(it->second, &current)) {
        return absl::InvalidArgumentError(absl::StrCat("rendezvous key '", key, "' holds '",
                                                       it->second, "', not a decimal integer"));
      }
    }
    sum = current + delta;
    text = absl::StrCat(sum);
    values_[key] = text;
    woken = TakeWaiters(key);
  }
  for (Waiter& w : woken) w.done(text);
  return sum;
}

void RendezvousStore::Shutdown() {
  std::vector<GetCallback> pending;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [key, list] : waiters_) {
      for (Waiter& w : list) {
        timers_->Cancel(w.timer_id);
        pending.push_back(std::move(w.done));
      }
    }
    waiters_.clear();
  }
  for (GetCallback& done : pending) done(ShutDownError());
}

}  // namespace dlrm::server
