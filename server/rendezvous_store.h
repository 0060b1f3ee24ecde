// The coordinator's rendezvous key-value store: workers bootstrap their collectives (Gloo, NCCL)
// by publishing and reading small values. In memory only; a restarted coordinator starts empty.
//
// Limits (common/limits.h): keys of at most kMaxKvKeyBytes, values of at most kMaxKvValueBytes
// (INVALID_ARGUMENT naming the key, the size and the limit), and kMaxKvStoreBytes of keys and
// values together (RESOURCE_EXHAUSTED; the store keeps what it held).
//
// Get may wait for a key without blocking any thread: the waiter's callback runs when another
// caller sets the key, when its wait expires (on the timer thread), or at Shutdown.
// Thread-safe. Callbacks run with no lock of the store held.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/timer_queue.h"

namespace dlrm::server {

class RendezvousStore {
 public:
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;

  // The longest a Get may wait.
  static constexpr absl::Duration kMaxWait = absl::Minutes(10);

  // `timers` is not owned and must outlive the store.
  explicit RendezvousStore(TimerQueue* timers);
  ~RendezvousStore();

  // INVALID_ARGUMENT for an empty key or a key or value over its limit; RESOURCE_EXHAUSTED when
  // the store would pass kMaxKvStoreBytes; UNAVAILABLE after Shutdown.
  absl::Status Set(const std::string& key, std::string value);

  // Calls `done` exactly once: with the value when the key is present (now or within `wait`);
  // NOT_FOUND naming the key and the wait when it is not; INVALID_ARGUMENT for an empty or too
  // long key or a wait outside [0, kMaxWait]; UNAVAILABLE at Shutdown. `done` may run on the
  // calling thread.
  void Get(const std::string& key, absl::Duration wait, GetCallback done);

  // Deletes `key`, or every key starting with it when `prefix`; returns how many were deleted.
  int64_t Delete(const std::string& key, bool prefix);

  // Adds `delta` to the integer stored under `key` (absent = 0) and returns the sum.
  // INVALID_ARGUMENT when the stored value is not a decimal integer, when the sum would leave
  // the int64 range (naming both values; the counter is unchanged) or for a bad key.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);

  // Fails every pending Get with UNAVAILABLE and refuses new calls.
  void Shutdown();

 private:
  struct Waiter {
    int64_t id;
    int64_t timer_id;
    GetCallback done;
  };

  // INVALID_ARGUMENT for an empty key or one over kMaxKvKeyBytes.
  static absl::Status CheckKey(const std::string& key);
  // INVALID_ARGUMENT for a value over kMaxKvValueBytes.
  static absl::Status CheckValue(const std::string& key, const std::string& value);
  // Stores `value` under `key`, keeping bytes_ current; RESOURCE_EXHAUSTED (storing nothing)
  // when the store would pass kMaxKvStoreBytes. REQUIRES: mu_ held.
  absl::Status PutLocked(const std::string& key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes and returns the waiters on `key`. REQUIRES: mu_ held.
  std::list<Waiter> TakeWaiters(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire(const std::string& key, int64_t waiter_id, absl::Duration wait);

  TimerQueue* timers_;
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::list<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // keys and values in values_
  int64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dlrm::server
