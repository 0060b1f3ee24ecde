// Files of a checkpoint (docs/CHECKPOINTS.md): written once, fsynced, described by their size and
// CRC32C (the Castagnoli CRC, computed with ISA-L's crc32_iscsi), and verified on every read.
//
//   ChecksummedWriter: append bytes, Close() -> {bytes, crc32c}; the file is fsynced.
//   RowFileWriter / ReadRowFile: one table's rows, [weights | optimizer state] per id.
//   VerifyFile: size and CRC32C of a file against the manifest's record.
//
// Row file layout (little-endian):
//   header  "DLRMROWS" (8 bytes) | u32 version | u32 table | u32 row_floats | u32 format
//   records rows x (i64 id, row)
// Version 1: format 0, each row row_floats x f32. Version 2 (tables of fp16/bf16 rows): format =
// dtype | dim << 8 (row_dtype.h), each row as RowCodec::Encode lays it out (dim half weights
// padded to 4 bytes, then the fp32 state): half the bytes of a dim-16 row-wise Adagrad row.
//   trailer u64 rows | "ROWSEND!" (8 bytes)
// The count sits in a trailer so the file is written in one pass and checksummed as it goes. A
// reader checks the magic, the version, the table and row width it expects, and that the trailer
// counts exactly the records the file holds; ids are checked by whoever applies them.
//
// Not thread-safe: one writer per file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/row_dtype.h"

namespace dlrm::embedding {

struct FileDigest {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

// CRC32C of `data`.
uint32_t Crc32c(const void* data, size_t n);
// Reads the whole file: its size and CRC32C. NOT_FOUND / DATA_LOSS naming the path.
absl::StatusOr<FileDigest> DigestFile(const std::string& path);
// DATA_LOSS naming the file when its size or CRC32C differs from `expected`.
absl::Status VerifyFile(const std::string& path, const FileDigest& expected);
// fsync of a directory, so that a rename or a new file in it is durable.
absl::Status SyncDirectory(const std::string& dir);

class ChecksummedWriter {
 public:
  // Creates `path` (truncating it). UNAVAILABLE naming the path on failure.
  static absl::StatusOr<std::unique_ptr<ChecksummedWriter>> Create(const std::string& path);
  ~ChecksummedWriter();  // closes without fsync if Close was not called (the file is garbage)

  absl::Status Append(const void* data, size_t n);
  // Flushes, fsyncs and closes. The digest covers every byte appended.
  absl::StatusOr<FileDigest> Close();
  // Close in two halves, for a writer of many files: Finish flushes the bytes to the kernel and
  // starts their write-back without waiting for it; Sync, called once every file is finished,
  // waits for the disk (fsync) and closes. The files' fsyncs then find most of their work done
  // and share the file system's journal commits.
  absl::StatusOr<FileDigest> Finish();
  absl::Status Sync();

 private:
  class Crc;
  ChecksummedWriter(std::string path, int fd);
  absl::Status FlushBuffer();

  std::string path_;
  int fd_ = -1;
  std::vector<char> buffer_;
  std::unique_ptr<Crc> crc_;
  int64_t bytes_ = 0;
  bool finished_ = false;
};

class RowFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<RowFileWriter>> Create(const std::string& path, int table,
                                                               int row_floats);
  // Rows stored as `codec` says (version 2 when its dtype is not fp32); Append still takes
  // widened rows of codec.row_floats() floats.
  static absl::StatusOr<std::unique_ptr<RowFileWriter>> Create(const std::string& path, int table,
                                                               const RowCodec& codec);
  // Appends one row (row_floats floats), straight into the file's write buffer.
  absl::Status AppendRow(int64_t id, const float* row);
  // Appends ids.size() rows (rows: ids.size() * row_floats floats).
  absl::Status Append(absl::Span<const int64_t> ids, const float* rows);
  // Writes the trailer, fsyncs and closes.
  absl::StatusOr<FileDigest> Close();
  // Close in two halves (ChecksummedWriter::Finish and Sync): the trailer written, the digest
  // final, the fsync still to come.
  absl::StatusOr<FileDigest> Finish();
  absl::Status Sync() { return out_->Sync(); }
  int64_t rows() const { return rows_; }

 private:
  RowFileWriter() = default;
  std::string path_;
  std::unique_ptr<ChecksummedWriter> out_;
  int row_floats_ = 0;
  RowCodec codec_;
  std::vector<char> encoded_;  // one encoded row (version 2)
  int64_t rows_ = 0;
};

// Syncs every finished writer (RowFileWriter::Sync) on a few threads at once, so that the
// file system commits them together instead of one journal commit per file; the first error, in
// the writers' order.
absl::Status SyncAll(absl::Span<const std::unique_ptr<RowFileWriter>> writers);

inline constexpr int64_t kRowFileHeaderBytes = 24;
inline constexpr int64_t kRowFileTrailerBytes = 16;

// Reads a row file written by RowFileWriter, calling `apply` with chunks of at most `chunk_rows`
// rows (ids, rows x row_floats floats; half rows widened). DATA_LOSS naming the file for a bad
// header, a table or width other than expected, or a short or long file. Verify the CRC first
// (VerifyFile).
absl::Status ReadRowFile(
    const std::string& path, int table, int row_floats,
    const std::function<absl::Status(absl::Span<const int64_t> ids, const float* rows)>& apply,
    int64_t chunk_rows = 65536);

}  // namespace dlrm::embedding
