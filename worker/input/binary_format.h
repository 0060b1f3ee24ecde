// Compact binary Criteo format ("DLRMBIN1"): fixed-size records, so a reader can seek to any
// record index (sharding, eval splits, resuming from a checkpoint offset).
//
// Layout, all integers little-endian:
//   header (40 bytes)
//     0  char[8]  magic "DLRMBIN1"
//     8  uint32   version (1)
//    12  uint32   num_dense (13)
//    16  uint32   num_categorical (26)
//    20  uint32   record_bytes (161)
//    24  uint64   record_count
//    32  uint64   FNV-1a 64 of header bytes [0, 32)
//   records (record_bytes each)
//     0  uint8    label (0 or 1)
//     1  float32  dense[13], already log(1 + max(x, 0))
//    53  uint32   cats[26], raw tokens (0 when missing)
//   157  uint32   missing_mask (bit t: categorical t was empty)
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/input/criteo_tsv.h"

namespace dlrm::worker {

inline constexpr char kBinaryMagic[8] = {'D', 'L', 'R', 'M', 'B', 'I', 'N', '1'};
inline constexpr uint32_t kBinaryVersion = 1;
inline constexpr int64_t kBinaryHeaderBytes = 40;
inline constexpr int64_t kBinaryRecordBytes =
    1 + 4 * kCriteoNumDense + 4 * kCriteoNumCategorical + 4;

// True when the file starts with the binary magic. NOT_FOUND when it cannot be opened.
absl::StatusOr<bool> IsBinaryCriteoFile(const std::string& path);

// Writes a binary file. The data goes to "<path>.tmp" and is renamed to `path` by Finish(), so a
// crashed conversion never leaves a file that looks complete. Not thread-safe.
class BinaryWriter {
 public:
  static absl::StatusOr<std::unique_ptr<BinaryWriter>> Create(const std::string& path);
  ~BinaryWriter();  // without Finish(): removes the temporary file
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;

  absl::Status Append(const CriteoRecord& record);
  // Writes the header with the final count, flushes, closes and renames. Call once.
  absl::Status Finish();
  int64_t records() const { return records_; }

 private:
  BinaryWriter(std::string path, std::FILE* file);
  absl::Status Flush();

  std::string path_;
  std::string tmp_path_;
  std::FILE* file_;
  std::vector<char> buffer_;
  int64_t records_ = 0;
};

// Reads a binary file with large buffered reads. Open() validates the header (magic, version,
// shape, checksum) and that the file size matches the record count; each record is validated as
// it is read. Errors name the path and byte offset (DATA_LOSS for truncated or corrupt data).
// Not thread-safe.
class BinaryReader {
 public:
  struct Options {
    std::string path;
    int64_t buffer_records = 8192;  // records per read(2)
  };
  static absl::StatusOr<std::unique_ptr<BinaryReader>> Open(const Options& options);
  ~BinaryReader();
  BinaryReader(const BinaryReader&) = delete;
  BinaryReader& operator=(const BinaryReader&) = delete;

  int64_t num_records() const { return num_records_; }
  int64_t position() const { return position_; }  // index of the next record Next() returns
  const std::string& path() const { return options_.path; }
  // Moves to record `index`, 0 <= index <= num_records().
  absl::Status Seek(int64_t index);
  // Reads the next record; false after the last one.
  absl::StatusOr<bool> Next(CriteoRecord* record);

 private:
  BinaryReader(const Options& options, std::FILE* file, int64_t num_records);

  Options options_;
  std::FILE* file_;
  int64_t num_records_;
  int64_t position_ = 0;
  std::vector<char> buffer_;
  int64_t buffered_first_ = 0;  // record index of buffer_[0]
  int64_t buffered_count_ = 0;  // records in buffer_
};

struct ConvertOptions {
  std::vector<std::string> inputs;    // Criteo TSV files, concatenated in order
  std::string output;                 // binary file to write
  bool strict = false;                // fail on the first malformed line instead of skipping it
  ParseIssueSink on_issue = nullptr;  // optional, gets every skipped line
};

struct ConvertResult {
  int64_t records = 0;
  int64_t skipped = 0;
};

// TSV -> binary (what `dlrm convert` runs). The output appears only when the conversion succeeds.
absl::StatusOr<ConvertResult> ConvertTsvToBinary(const ConvertOptions& options);

}  // namespace dlrm::worker
