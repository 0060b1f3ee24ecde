// KvRendezvousStore: a gloo::rendezvous::Store over the coordinator's rendezvous key-value store
// (Coordinator.KvSet / KvGet with a wait), so Gloo contexts bootstrap through the coordinator
// instead of a shared file system or Redis. Keys are prefixed with `prefix` (job scoped, e.g.
// "job/<id>/gloo/"), so jobs and retries never see each other's keys.
//
// Gloo's Store interface reports errors by throwing: every failure here throws gloo::IoException
// naming the key and the coordinator's status. The caller (GlooAllReducer) catches it at its
// boundary. Thread-compatible (Gloo calls it from one thread during connectFullMesh).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "gloo/rendezvous/store.h"

namespace dlrm::worker {

struct KvRendezvousStoreOptions {
  client::CoordinatorClient* client = nullptr;  // not owned; must outlive the store
  std::string prefix;                           // prepended to every key
  absl::Duration timeout = absl::Seconds(60);   // how long get() waits for a missing key
  // Polled about once a second while waiting; returning true abandons the rendezvous (the
  // job was cancelled or failed elsewhere). May be empty.
  std::function<bool()> cancelled;
};

class KvRendezvousStore : public gloo::rendezvous::Store {
 public:
  explicit KvRendezvousStore(const KvRendezvousStoreOptions& options);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to the options' timeout for the key.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Waits for `full_key` until `deadline`, in slices so that `cancelled` is honoured; throws.
  std::string WaitFor(const std::string& full_key, absl::Time deadline);

  KvRendezvousStoreOptions options_;
};

}  // namespace dlrm::worker
