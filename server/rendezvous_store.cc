#include "server/rendezvous_store.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/status.h"

namespace dlrm::server {
namespace {

absl::Status ShutDownError() {
  return absl::UnavailableError("coordinator is shutting down: rendezvous store closed");
}

int64_t EntryBytes(const std::string& key, const std::string& value) {
  return static_cast<int64_t>(key.size() + value.size());
}

}  // namespace

absl::Status RendezvousStore::CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key is empty");
  if (static_cast<int64_t>(key.size()) > common::kMaxKvKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous key '", Shown(key), "' of ", key.size(), " bytes is over the limit of ",
        common::kMaxKvKeyBytes, " (kMaxKvKeyBytes in common/limits.h)"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckValue(const std::string& key, const std::string& value) {
  if (static_cast<int64_t>(value.size()) > common::kMaxKvValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key '", Shown(key), "': value of ",
                                                   value.size(), " bytes is over the limit of ",
                                                   common::kMaxKvValueBytes,
                                                   " (kMaxKvValueBytes in common/limits.h)"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::PutLocked(const std::string& key, std::string value) {
  auto it = values_.find(key);
  const int64_t old_bytes = it == values_.end() ? 0 : EntryBytes(key, it->second);
  const int64_t new_bytes = EntryBytes(key, value);
  if (new_bytes > old_bytes && bytes_ - old_bytes + new_bytes > common::kMaxKvStoreBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous store: setting key '", Shown(key), "' (", new_bytes, " bytes) would hold ",
        bytes_ - old_bytes + new_bytes, " bytes, over the limit of ", common::kMaxKvStoreBytes,
        " (kMaxKvStoreBytes in common/limits.h); delete keys first"));
  }
  bytes_ += new_bytes - old_bytes;
  if (it == values_.end()) {
    values_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return absl::OkStatus();
}

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
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (absl::Status s = CheckValue(key, value); !s.ok()) return s;
  std::list<Waiter> woken;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return ShutDownError();
    if (absl::Status s = PutLocked(key, value); !s.ok()) return s;
    woken = TakeWaiters(key);
  }
  for (Waiter& w : woken) w.done(value);
  return absl::OkStatus();
}

void RendezvousStore::Get(const std::string& key, absl::Duration wait, GetCallback done) {
  if (absl::Status s = CheckKey(key); !s.ok()) {
    done(std::move(s));
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
  if (!prefix) {
    auto it = values_.find(key);
    if (it == values_.end()) return 0;
    bytes_ -= EntryBytes(it->first, it->second);
    values_.erase(it);
    return 1;
  }
  int64_t deleted = 0;
  for (auto it = values_.lower_bound(key);
       it != values_.end() && it->first.compare(0, key.size(), key) == 0;) {
    bytes_ -= EntryBytes(it->first, it->second);
    it = values_.erase(it);
    ++deleted;
  }
  return deleted;
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  int64_t sum = 0;
  std::string text;
  std::list<Waiter> woken;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return ShutDownError();
    int64_t current = 0;
    if (auto it = values_.find(key); it != values_.end()) {
      if (!absl::SimpleAtoi(it->second, &current)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rendezvous key '", key, "' holds '", Shown(it->second), "', not a decimal integer"));
      }
    }
    if (__builtin_add_overflow(current, delta, &sum)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rendezvous key '", key, "': adding ", delta, " to ", current,
          " leaves the counter's int64 range [", std::numeric_limits<int64_t>::min(), ", ",
          std::numeric_limits<int64_t>::max(), "]; the counter keeps ", current));
    }
    text = absl::StrCat(sum);
    if (absl::Status s = PutLocked(key, text); !s.ok()) return s;
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
