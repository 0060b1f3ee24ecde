#include "worker/kv_rendezvous_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"

namespace dlrm::worker {

KvRendezvousStore::KvRendezvousStore(const KvRendezvousStoreOptions& options) : options_(options) {}

void KvRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  const std::string full = options_.prefix + key;
  absl::Status status = options_.client->KvSet(full, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous set '", full, "': ", status.ToString()));
  }
}

std::string KvRendezvousStore::WaitFor(const std::string& full_key, absl::Time deadline) {
  constexpr absl::Duration kSlice = absl::Seconds(1);
  while (true) {
    if (options_.cancelled && options_.cancelled()) {
      throw gloo::IoException(absl::StrCat("rendezvous wait for '", full_key, "': cancelled"));
    }
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration wait = std::clamp(left, absl::Milliseconds(1), kSlice);
    absl::StatusOr<std::string> value = options_.client->KvGet(full_key, wait);
    if (value.ok()) return *std::move(value);
    // NOT_FOUND: not set within this slice. Anything else: the coordinator is in trouble.
    if (value.status().code() != absl::StatusCode::kNotFound || absl::Now() >= deadline) {
      throw gloo::IoException(
          absl::StrCat("rendezvous wait for '", full_key, "': ", value.status().ToString()));
    }
  }
}

std::vector<char> KvRendezvousStore::get(const std::string& key) {
  const std::string value = WaitFor(options_.prefix + key, absl::Now() + options_.timeout);
  return std::vector<char>(value.begin(), value.end());
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.timeout)));
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout.count());
  for (const std::string& key : keys) WaitFor(options_.prefix + key, deadline);
}

}  // namespace dlrm::worker
