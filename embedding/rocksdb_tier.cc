#include "embedding/rocksdb_tier.h"

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/free_space.h"
#include "common/status.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace dlrm::embedding {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, const std::string& path, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat("rocksdb ", path, ": ", what, ": ", s.ToString());
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(message);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(message);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(message);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(message);
    case rocksdb::Status::kIOError:
      // A full or read-only disk, or a folder that is not the server's to write, is no passing
      // fault: workers take UNAVAILABLE for a lost peer and recover, which would not cure it.
      if (s.IsNoSpace()) return absl::ResourceExhaustedError(message);
      if (absl::StrContains(message, "Read-only file system")) {
        return absl::FailedPreconditionError(message);
      }
      if (absl::StrContains(message, "Permission denied")) {
        return absl::PermissionDeniedError(message);
      }
      return absl::UnavailableError(message);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kTimedOut:
      return absl::UnavailableError(message);
    case rocksdb::Status::kIncomplete:
    case rocksdb::Status::kShutdownInProgress:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// Big-endian with the sign bit flipped: lexicographic byte order == numeric order.
inline void EncodeKey(int64_t id, char out[8]) {
  uint64_t u = static_cast<uint64_t>(id) ^ (1ull << 63);
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
}

std::string TableCfName(int table) { return absl::StrCat("table_", table); }
std::string WidthKey(int table) { return absl::StrCat("row_floats/", table); }

}  // namespace

struct RocksDbTier::Impl {
  RocksDbTierOptions options;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // [0] default, [1 + t] table t
  rocksdb::WriteOptions write_options;
  std::vector<RowCodec> codecs;           // per table (fp32 ones when options gave none)
  std::vector<std::string> width_labels;  // per table, as recorded under WidthKey

  ~Impl() {
    if (db) {
      for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
      db->Close();
    }
  }
  rocksdb::ColumnFamilyHandle* Cf(int table) const { return handles[1 + table]; }
  absl::Status CheckTable(int table) const {
    if (table < 0 || table >= static_cast<int>(options.row_floats.size())) {
      return absl::InvalidArgumentError(absl::StrCat("rocksdb ", options.path, ": table ", table,
                                                     " out of range [0, ",
                                                     options.row_floats.size(), ")"));
    }
    return absl::OkStatus();
  }
  // RESOURCE_EXHAUSTED when writing `bytes` (in the log, then in a flush) and flushing the
  // memtables would leave less than the reserve free (RocksDbTierOptions::free_reserve_bytes).
  absl::Status CheckRoomFor(int64_t bytes, absl::string_view what) const {
    uint64_t memtables = 0;
    db->GetAggregatedIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables);
    return common::CheckFreeBytes(
        options.path, options.free_reserve_bytes + static_cast<int64_t>(memtables) + 2 * bytes,
        absl::StrCat("rocksdb ", options.path, ": ", what));
  }
};

RocksDbTier::RocksDbTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RocksDbTier::~RocksDbTier() = default;

absl::StatusOr<std::unique_ptr<RocksDbTier>> RocksDbTier::Open(const RocksDbTierOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("rocksdb tier: empty path");
  for (size_t t = 0; t < options.row_floats.size(); ++t) {
    if (options.row_floats[t] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("rocksdb ", options.path, ": table ", t,
                                                     ": row_floats ", options.row_floats[t],
                                                     " must be > 0"));
    }
  }
  if (!options.codecs.empty() && options.codecs.size() != options.row_floats.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rocksdb ", options.path, ": ",
                                                   options.codecs.size(), " row codecs for ",
                                                   options.row_floats.size(), " tables"));
  }
  DLRM_RETURN_IF_ERROR(common::CheckFreeBytes(options.path, options.free_reserve_bytes,
                                              absl::StrCat("rocksdb ", options.path, ": open")));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (size_t t = 0; t < options.row_floats.size(); ++t) {
    RowCodec codec{RowDtype::kFp32, options.row_floats[t], 0};
    if (!options.codecs.empty()) codec = options.codecs[t];
    if (codec.dim < 1 || codec.state_floats < 0 || codec.row_floats() != options.row_floats[t]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rocksdb ", options.path, ": table ", t, ": codec of dim ", codec.dim, " and ",
          codec.state_floats, " state floats for rows of ", options.row_floats[t], " floats"));
    }
    impl->codecs.push_back(codec);
    impl->width_labels.push_back(
        codec.dtype == RowDtype::kFp32
            ? std::to_string(options.row_floats[t])
            : absl::StrCat(options.row_floats[t], " ", RowDtypeName(codec.dtype), " ", codec.dim));
  }
  impl->write_options.disableWAL = options.disable_wal;

  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(options.block_cache_bytes));
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(options.bloom_bits_per_key));
  table_options.whole_key_filtering = true;
  rocksdb::ColumnFamilyOptions cf_options;
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  cf_options.write_buffer_size = static_cast<size_t>(options.write_buffer_bytes);
  cf_options.OptimizeForPointLookup(static_cast<uint64_t>(options.block_cache_bytes >> 20));
  // OptimizeForPointLookup installs its own table factory; keep ours (bloom + shared cache).
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.IncreaseParallelism(2);

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
  for (size_t t = 0; t < options.row_floats.size(); ++t) {
    descriptors.emplace_back(TableCfName(static_cast<int>(t)), cf_options);
  }
  // An existing database may have more tables than asked for: open them too (RocksDB requires
  // every column family to be opened), but only the first row_floats.size() are used.
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(db_options, options.path, &existing).ok()) {
    for (const std::string& name : existing) {
      bool known = false;
      for (const auto& d : descriptors) known |= d.name == name;
      if (!known) descriptors.emplace_back(name, cf_options);
    }
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path, descriptors, &impl->handles, &db);
  if (!s.ok()) return FromRocks(s, options.path, "open");
  impl->db.reset(db);

  // Check or record each table's row width.
  rocksdb::WriteBatch batch;
  for (size_t t = 0; t < options.row_floats.size(); ++t) {
    std::string value;
    s = db->Get(rocksdb::ReadOptions(), impl->handles[0], WidthKey(static_cast<int>(t)), &value);
    if (s.IsNotFound()) {
      batch.Put(impl->handles[0], WidthKey(static_cast<int>(t)), impl->width_labels[t]);
      continue;
    }
    if (!s.ok()) return FromRocks(s, options.path, "read table widths");
    if (value != impl->width_labels[t]) {
      return absl::FailedPreconditionError(
          absl::StrCat("rocksdb ", options.path, ": table ", t, " was stored with rows of '", value,
                       "', opened with '", impl->width_labels[t],
                       "' (row floats, then dtype and dim when not fp32)"));
    }
  }
  s = db->Write(impl->write_options, &batch);
  if (!s.ok()) return FromRocks(s, options.path, "write table widths");
  return std::unique_ptr<RocksDbTier>(new RocksDbTier(std::move(impl)));
}

int RocksDbTier::num_tables() const { return static_cast<int>(impl_->options.row_floats.size()); }
int RocksDbTier::row_floats(int table) const { return impl_->options.row_floats[table]; }
const std::string& RocksDbTier::path() const { return impl_->options.path; }

absl::Status RocksDbTier::MultiGet(int table, absl::Span<const int64_t> keys, float* values,
                                   std::vector<bool>* found) {
  absl::Status status = impl_->CheckTable(table);
  if (!status.ok()) return status;
  found->assign(keys.size(), false);
  if (keys.empty()) return absl::OkStatus();
  const size_t n = keys.size();
  const RowCodec& codec = impl_->codecs[table];
  const size_t width_bytes = static_cast<size_t>(codec.bytes());
  std::vector<char> key_bytes(n * 8);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t j = 0; j < n; ++j) {
    EncodeKey(keys[j], &key_bytes[j * 8]);
    slices[j] = rocksdb::Slice(&key_bytes[j * 8], 8);
  }
  std::vector<rocksdb::PinnableSlice> results(n);
  std::vector<rocksdb::Status> statuses(n);
  impl_->db->MultiGet(rocksdb::ReadOptions(), impl_->Cf(table), n, slices.data(), results.data(),
                      statuses.data());
  for (size_t j = 0; j < n; ++j) {
    if (statuses[j].IsNotFound()) continue;
    if (!statuses[j].ok()) {
      return FromRocks(statuses[j], impl_->options.path,
                       absl::StrCat("MultiGet table ", table, " id ", keys[j]));
    }
    if (results[j].size() != width_bytes) {
      return absl::DataLossError(absl::StrCat("rocksdb ", impl_->options.path, ": table ", table,
                                              " id ", keys[j], ": value of ", results[j].size(),
                                              " bytes, expected ", width_bytes));
    }
    codec.Decode(results[j].data(), values + j * row_floats(table));
    (*found)[j] = true;
  }
  return absl::OkStatus();
}

absl::Status RocksDbTier::MultiPut(int table, absl::Span<const int64_t> keys, const float* values) {
  absl::Status status = impl_->CheckTable(table);
  if (!status.ok()) return status;
  if (keys.empty()) return absl::OkStatus();
  const size_t width = static_cast<size_t>(row_floats(table));
  const RowCodec& codec = impl_->codecs[table];
  const size_t value_bytes = static_cast<size_t>(codec.bytes());
  rocksdb::WriteBatch batch(keys.size() * (value_bytes + 24));
  char key[8];
  std::vector<char> encoded(codec.dtype == RowDtype::kFp32 ? 0 : value_bytes);
  for (size_t j = 0; j < keys.size(); ++j) {
    EncodeKey(keys[j], key);
    const char* value = reinterpret_cast<const char*>(values + j * width);
    if (!encoded.empty()) {
      codec.Encode(values + j * width, encoded.data());
      value = encoded.data();
    }
    batch.Put(impl_->Cf(table), rocksdb::Slice(key, 8), rocksdb::Slice(value, value_bytes));
  }
  DLRM_RETURN_IF_ERROR(impl_->CheckRoomFor(static_cast<int64_t>(batch.GetDataSize()),
                                           absl::StrCat("MultiPut table ", table)));
  return FromRocks(impl_->db->Write(impl_->write_options, &batch), impl_->options.path,
                   absl::StrCat("MultiPut table ", table));
}

absl::Status RocksDbTier::MultiDelete(int table, absl::Span<const int64_t> keys) {
  absl::Status status = impl_->CheckTable(table);
  if (!status.ok()) return status;
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  char key[8];
  for (int64_t id : keys) {
    EncodeKey(id, key);
    batch.Delete(impl_->Cf(table), rocksdb::Slice(key, 8));
  }
  DLRM_RETURN_IF_ERROR(impl_->CheckRoomFor(static_cast<int64_t>(batch.GetDataSize()),
                                           absl::StrCat("MultiDelete table ", table)));
  return FromRocks(impl_->db->Write(impl_->write_options, &batch), impl_->options.path,
                   absl::StrCat("MultiDelete table ", table));
}

absl::StatusOr<int64_t> RocksDbTier::CountRows(int table) {
  absl::Status status = impl_->CheckTable(table);
  if (!status.ok()) return status;
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->Cf(table)));
  int64_t count = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++count;
  status = FromRocks(it->status(), impl_->options.path, absl::StrCat("scan table ", table));
  if (!status.ok()) return status;
  return count;
}

absl::Status RocksDbTier::ForEachRow(
    int table, const std::function<absl::Status(absl::Span<const int64_t>, const float*)>& fn,
    int64_t chunk_rows) {
  absl::Status status = impl_->CheckTable(table);
  if (!status.ok()) return status;
  const int width = impl_->options.row_floats[table];
  const RowCodec& codec = impl_->codecs[table];
  const size_t value_bytes = static_cast<size_t>(codec.bytes());
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->Cf(table)));
  std::vector<int64_t> ids;
  std::vector<float> rows;
  auto flush = [&]() -> absl::Status {
    if (ids.empty()) return absl::OkStatus();
    absl::Status st = fn(ids, rows.data());
    ids.clear();
    rows.clear();
    return st;
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (key.size() != 8 || value.size() != value_bytes) {
      return absl::DataLossError(absl::StrCat(impl_->options.path, ": table ", table,
                                              ": a record of ", key.size(), "+", value.size(),
                                              " bytes, expected 8+", value_bytes));
    }
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(key.data()[i]);
    ids.push_back(static_cast<int64_t>(u ^ (1ull << 63)));
    const size_t at = rows.size();
    rows.resize(at + width);
    codec.Decode(value.data(), rows.data() + at);
    if (static_cast<int64_t>(ids.size()) >= chunk_rows) {
      status = flush();
      if (!status.ok()) return status;
    }
  }
  status = FromRocks(it->status(), impl_->options.path, absl::StrCat("scan table ", table));
  if (!status.ok()) return status;
  return flush();
}

int64_t RocksDbTier::BytesUsed() const {
  int64_t total = 0;
  for (size_t t = 0; t < impl_->options.row_floats.size(); ++t) {
    uint64_t value = 0;
    if (impl_->db->GetIntProperty(impl_->Cf(static_cast<int>(t)), "rocksdb.total-sst-files-size",
                                  &value)) {
      total += static_cast<int64_t>(value);
    }
    if (impl_->db->GetIntProperty(impl_->Cf(static_cast<int>(t)), "rocksdb.cur-size-all-mem-tables",
                                  &value)) {
      total += static_cast<int64_t>(value);
    }
  }
  return total;
}

absl::Status RocksDbTier::Flush() {
  DLRM_RETURN_IF_ERROR(impl_->CheckRoomFor(0, "flush"));
  rocksdb::FlushOptions flush_options;
  flush_options.wait = true;
  return FromRocks(impl_->db->Flush(flush_options, impl_->handles), impl_->options.path, "flush");
}

absl::StatusOr<bool> RocksDbTier::HoldsRows() {
  for (int t = 0; t < num_tables(); ++t) {
    std::unique_ptr<rocksdb::Iterator> it(
        impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->Cf(t)));
    it->SeekToFirst();
    if (it->Valid()) return true;
    if (!it->status().ok()) {
      return FromRocks(it->status(), impl_->options.path, absl::StrCat("seek in table ", t));
    }
  }
  return false;
}

absl::Status RocksDbTier::CreateCheckpoint(const std::string& dir) {
  // It flushes the memtables first.
  DLRM_RETURN_IF_ERROR(impl_->CheckRoomFor(0, absl::StrCat("checkpoint to ", dir)));
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(impl_->db.get(), &raw);
  if (!s.ok()) return FromRocks(s, impl_->options.path, "checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(dir), impl_->options.path,
                   absl::StrCat("checkpoint to ", dir));
}

}  // namespace dlrm::embedding
