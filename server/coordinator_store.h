// Durable state of the coordinator in an embedded RocksDB: jobs, members and counters, stored as
// serialized protos under "job/<id>", "member/<id>" and "meta/<name>", and the grant secret. A
// restarted coordinator loads them back (CoordinatorState::Restore).
//
// Thread-safe (RocksDB is); writes are atomic batches.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"

namespace rocksdb {
class DB;
}

namespace dlrm::server {

struct CoordinatorSnapshot {
  std::vector<dlrm::v1::Job> jobs;
  std::vector<dlrm::v1::Member> members;
  std::map<std::string, int64_t> counters;  // "epoch", "next_member_seq", "next_job_seq"
};

// One atomic set of changes.
struct CoordinatorWrite {
  std::vector<dlrm::v1::Job> jobs;
  std::vector<dlrm::v1::Member> members;
  std::vector<std::string> deleted_member_ids;
  std::map<std::string, int64_t> counters;
  bool empty() const {
    return jobs.empty() && members.empty() && deleted_member_ids.empty() && counters.empty();
  }
};

class CoordinatorStore {
 public:
  // Opens (creating if needed) the database in `directory`. FAILED_PRECONDITION naming the
  // directory when another process holds it, INTERNAL for other RocksDB errors.
  static absl::StatusOr<std::unique_ptr<CoordinatorStore>> Open(const std::string& directory);
  ~CoordinatorStore();

  absl::StatusOr<CoordinatorSnapshot> Load() const;
  absl::Status Write(const CoordinatorWrite& write);
  // The secret the coordinator derives member keys and job grants from (common/grants.h):
  // made on first use and kept under "secret/grants", so that keys outlive a restart.
  absl::StatusOr<std::string> GrantSecret();

 private:
  CoordinatorStore(std::unique_ptr<rocksdb::DB> db, std::string directory);
  // RESOURCE_EXHAUSTED when writing `bytes` would leave the store's file system less than its
  // reserve (coordinator_store.cc kFreeReserveBytes) besides the memtables' flush.
  absl::Status CheckRoomFor(int64_t bytes) const;

  std::unique_ptr<rocksdb::DB> db_;
  std::string directory_;
};

}  // namespace dlrm::server
