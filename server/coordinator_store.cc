#include "server/coordinator_store.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/free_space.h"
#include "common/grants.h"
#include "common/logging.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace dlrm::server {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kMemberPrefix[] = "member/";
constexpr char kMetaPrefix[] = "meta/";
constexpr char kGrantSecretKey[] = "secret/grants";

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(absl::StrCat(what, ": ", s.ToString()));
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

// Kept free on the store's file system (common/free_space.h): RocksDB aborts the process when a
// write meets a full disk and the store is used again, so a write that would leave less is
// refused (the coordinator answers that call with RESOURCE_EXHAUSTED and lives on).
constexpr int64_t kFreeReserveBytes = int64_t{16} << 20;

}  // namespace

CoordinatorStore::CoordinatorStore(std::unique_ptr<rocksdb::DB> db, std::string directory)
    : db_(std::move(db)), directory_(std::move(directory)) {}

CoordinatorStore::~CoordinatorStore() = default;

absl::StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::Open(
    const std::string& directory) {
  if (directory.empty()) return absl::InvalidArgumentError("coordinator data dir is empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(directory, ec);
  fs::create_directories(directory, ec);
  if (!ec && !existed) {
    // The store holds the secret every member key and job grant is derived from
    // (common/grants.h): a folder it creates is its owner's alone, as etcd's data dir is.
    fs::permissions(directory, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create coordinator data dir '", directory, "': ", ec.message()));
  }
  if (const fs::perms perms = fs::status(directory, ec).permissions();
      !ec && (perms & fs::perms::others_all) != fs::perms::none) {
    DLRM_LOG(WARNING) << "coordinator data dir '" << directory << "' is open to other users (mode "
                      << absl::StrFormat("%04o", static_cast<unsigned>(perms) & 07777)
                      << "): it holds the secret every grant is derived from; chmod o-rwx it";
  }
  DLRM_RETURN_IF_ERROR(common::CheckFreeBytes(
      directory, kFreeReserveBytes, absl::StrCat("coordinator data dir '", directory, "'")));
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, directory, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && absl::StrContains(s.ToString(), "lock")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "coordinator data dir '", directory, "' is in use by another process: ", s.ToString()));
    }
    return absl::InternalError(
        absl::StrCat("cannot open coordinator data dir '", directory, "': ", s.ToString()));
  }
  return std::unique_ptr<CoordinatorStore>(
      new CoordinatorStore(std::unique_ptr<rocksdb::DB>(raw), directory));
}

absl::StatusOr<CoordinatorSnapshot> CoordinatorStore::Load() const {
  CoordinatorSnapshot snapshot;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    const rocksdb::Slice value = it->value();
    if (absl::StartsWith(key, kJobPrefix)) {
      dlrm::v1::Job job;
      if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return absl::DataLossError(
            absl::StrCat("coordinator store '", directory_, "': record '", key, "' is not a Job"));
      }
      snapshot.jobs.push_back(std::move(job));
    } else if (absl::StartsWith(key, kMemberPrefix)) {
      dlrm::v1::Member member;
      if (!member.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return absl::DataLossError(absl::StrCat("coordinator store '", directory_, "': record '",
                                                key, "' is not a Member"));
      }
      snapshot.members.push_back(std::move(member));
    } else if (absl::StartsWith(key, kMetaPrefix)) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value.ToString(), &v)) {
        return absl::DataLossError(absl::StrCat("coordinator store '", directory_, "': record '",
                                                key, "' is not an integer"));
      }
      snapshot.counters[key.substr(sizeof(kMetaPrefix) - 1)] = v;
    }
  }
  if (!it->status().ok()) {
    return FromRocks(it->status(), absl::StrCat("reading coordinator store '", directory_, "'"));
  }
  return snapshot;
}

absl::StatusOr<std::string> CoordinatorStore::GrantSecret() {
  std::string secret;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kGrantSecretKey, &secret);
  if (s.ok()) {
    if (secret.size() < 16) {
      return absl::DataLossError(absl::StrCat("coordinator store '", directory_, "': record '",
                                              kGrantSecretKey, "' holds ", secret.size(),
                                              " bytes; a secret has at least 16"));
    }
    return secret;
  }
  if (!s.IsNotFound()) {
    return FromRocks(s, absl::StrCat("reading coordinator store '", directory_, "'"));
  }
  auto fresh = common::NewGrantSecret();
  if (!fresh.ok()) return fresh.status();
  DLRM_RETURN_IF_ERROR(CheckRoomFor(static_cast<int64_t>(fresh->size()) + 64));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (absl::Status st = FromRocks(db_->Put(sync, kGrantSecretKey, *fresh),
                                  absl::StrCat("writing coordinator store '", directory_, "'"));
      !st.ok()) {
    return st;
  }
  return *fresh;
}

absl::Status CoordinatorStore::Write(const CoordinatorWrite& write) {
  if (write.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const dlrm::v1::Job& job : write.jobs) {
    batch.Put(absl::StrCat(kJobPrefix, job.job_id()), job.SerializeAsString());
  }
  for (const dlrm::v1::Member& member : write.members) {
    batch.Put(absl::StrCat(kMemberPrefix, member.member_id()), member.SerializeAsString());
  }
  for (const std::string& id : write.deleted_member_ids) {
    batch.Delete(absl::StrCat(kMemberPrefix, id));
  }
  for (const auto& [name, value] : write.counters) {
    batch.Put(absl::StrCat(kMetaPrefix, name), absl::StrCat(value));
  }
  DLRM_RETURN_IF_ERROR(CheckRoomFor(static_cast<int64_t>(batch.GetDataSize())));
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                   absl::StrCat("writing coordinator store '", directory_, "'"));
}

absl::Status CoordinatorStore::CheckRoomFor(int64_t bytes) const {
  uint64_t memtables = 0;
  db_->GetAggregatedIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables);
  return common::CheckFreeBytes(directory_,
                                kFreeReserveBytes + static_cast<int64_t>(memtables) + 2 * bytes,
                                absl::StrCat("writing coordinator store '", directory_, "'"));
}

}  // namespace dlrm::server
