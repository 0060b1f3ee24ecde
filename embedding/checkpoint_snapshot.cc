#include "embedding/checkpoint_snapshot.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/checkpoint_io.h"
#include "embedding/rocksdb_tier.h"

namespace dlrm::embedding {

namespace {

absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFiles(
    const std::string& snapshot_dir, const std::vector<RowCodec>& codecs,
    const std::string& out_dir, int part, const std::vector<std::vector<int64_t>>* only_ids,
    const std::function<absl::Status()>& keep_going, std::vector<std::string>* created) {
  std::vector<int> row_floats;
  for (const RowCodec& c : codecs) row_floats.push_back(c.row_floats());
  if (only_ids != nullptr && only_ids->size() != row_floats.size()) {
    return absl::InvalidArgumentError(absl::StrCat("incremental checkpoint: ", only_ids->size(),
                                                   " id lists for ", row_floats.size(), " tables"));
  }
  RocksDbTierOptions options;
  options.path = snapshot_dir;
  options.row_floats = row_floats;
  options.codecs = codecs;
  options.block_cache_bytes = 8 << 20;  // one sequential scan: little is read twice
  options.disable_wal = true;
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<RocksDbTier> db, RocksDbTier::Open(options));
  std::vector<CheckpointFileEntry> files;
  for (int t = 0; t < static_cast<int>(row_floats.size()); ++t) {
    DLRM_RETURN_IF_ERROR(keep_going());
    const std::string name = RowFileName(t, part);
    created->push_back(absl::StrCat(out_dir, "/", name));
    DLRM_ASSIGN_OR_RETURN(auto writer, RowFileWriter::Create(created->back(), t, codecs[t]));
    if (only_ids == nullptr) {
      DLRM_RETURN_IF_ERROR(db->ForEachRow(t, [&](absl::Span<const int64_t> ids, const float* rows) {
        DLRM_RETURN_IF_ERROR(keep_going());
        return writer->Append(ids, rows);
      }));
    } else {
      constexpr size_t kChunk = 4096;
      const std::vector<int64_t>& ids = (*only_ids)[t];
      std::vector<float> rows(kChunk * row_floats[t]);
      std::vector<bool> found;
      for (size_t begin = 0; begin < ids.size(); begin += kChunk) {
        const size_t n = std::min(kChunk, ids.size() - begin);
        const absl::Span<const int64_t> chunk(ids.data() + begin, n);
        DLRM_RETURN_IF_ERROR(keep_going());
        DLRM_RETURN_IF_ERROR(db->MultiGet(t, chunk, rows.data(), &found));
        for (size_t j = 0; j < n; ++j) {
          if (found[j]) {
            DLRM_RETURN_IF_ERROR(
                writer->AppendRow(chunk[j], rows.data() + j * static_cast<size_t>(row_floats[t])));
          }
        }
      }
    }
    const int64_t rows = writer->rows();
    DLRM_ASSIGN_OR_RETURN(FileDigest d, writer->Close());
    files.push_back({.name = name,
                     .kind = "rows",
                     .table = t,
                     .part = part,
                     .rows = rows,
                     .bytes = d.bytes,
                     .crc32c = d.crc32c});
  }
  return files;
}

}  // namespace

absl::StatusOr<std::vector<CheckpointFileEntry>> WriteRowFilesFromSnapshot(
    const std::string& snapshot_dir, const std::vector<RowCodec>& codecs,
    const std::string& out_dir, int part, const std::vector<std::vector<int64_t>>* only_ids,
    const std::function<absl::Status()>& keep_going) {
  const std::function<absl::Status()> go_on =
      keep_going ? keep_going : [] { return absl::OkStatus(); };
  std::vector<std::string> created;
  absl::StatusOr<std::vector<CheckpointFileEntry>> files =
      WriteRowFiles(snapshot_dir, codecs, out_dir, part, only_ids, go_on, &created);
  if (!files.ok()) {
    std::error_code ec;
    for (const std::string& path : created) std::filesystem::remove(path, ec);
  }
  return files;
}

}  // namespace dlrm::embedding
