// Compact binary Criteo format ("DLRMBIN1"): fixed-size records, so a reader can seek to any
// record index (sharding, eval splits, resuming from a checkpoint offset).
//
// Layout, all integers little-endian. Version 1 (one-hot, one id per table):
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
//
// Version 2 (multi-hot: a bag of bags[t] tokens per table t, the same sizes for every record;
// written by gen-data --multi-hot and convert --multi-hot):
//   header (96 bytes)
//     0  as version 1 up to byte 32, with version 2 and record_bytes 161 + 4 E, where
//        E = sum over t of (bags[t] - 1)
//    32  uint16   bags[26], each in [1, kMaxBagSize]
//    84  uint32   0 (padding)
//    88  uint64   FNV-1a 64 of header bytes [0, 88)
//   records
//     0  uint8    label
//     1  float32  dense[13]
//    53  uint32   cats[26]: the first token of every bag
//   157  uint32   extra[E]: the other tokens, bag after bag in table order
//   157 + 4 E     uint32 missing_mask (bit t: table t's field was empty: one token 0)
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/input/criteo_tsv.h"
#include "worker/input/output_file.h"

namespace dlrm::worker {

inline constexpr char kBinaryMagic[8] = {'D', 'L', 'R', 'M', 'B', 'I', 'N', '1'};

// The tool that decompresses data starting with `head` ("gzip", "bzip2", "xz", "zstd"), or null
// when its first bytes are no such tool's magic.
const char* CompressionTool(absl::string_view head);
inline constexpr uint32_t kBinaryVersion = 1;
inline constexpr uint32_t kBinaryVersionMultiHot = 2;
inline constexpr int64_t kBinaryHeaderBytes = 40;
inline constexpr int64_t kBinaryHeaderBytesMultiHot = 96;
inline constexpr int64_t kBinaryRecordBytes =
    1 + 4 * kCriteoNumDense + 4 * kCriteoNumCategorical + 4;

// Where a file's parts lie: derived from its header.
struct BinaryLayout {
  uint32_t version = kBinaryVersion;
  BagSizes bags = OneHotBags();
  int64_t header_bytes = kBinaryHeaderBytes;
  int64_t record_bytes = kBinaryRecordBytes;
  int extra_ids = 0;  // per record

  static BinaryLayout OneHot() { return BinaryLayout{}; }
  // Version 2 with these bag sizes (each in [1, kMaxBagSize]: a precondition).
  static BinaryLayout MultiHot(const BagSizes& bags);
};

// True when the file starts with the binary magic. NOT_FOUND when it cannot be opened; DATA_LOSS
// naming the bytes when they are one or two bytes off the magic (a damaged file);
// INVALID_ARGUMENT naming the tool when it is compressed (gzip, bzip2, xz, zstd). Something
// other than a regular file (a pipe such as /dev/stdin, a device) is not read, since the bytes
// read would be lost to the reader that follows: it is not binary (the binary reader needs a
// regular file to seek in).
absl::StatusOr<bool> IsBinaryCriteoFile(const std::string& path);

// Writes a binary file through an OutputFile: the data goes to "<path>.tmp" and is renamed to
// `path` (a symlink's target) by Finish(), so a crashed conversion never leaves a file that looks
// complete. Not thread-safe.
class BinaryWriter {
 public:
  // One-hot (version 1) without `bags`; multi-hot (version 2) with them, even when all are 1.
  // INVALID_ARGUMENT naming the table for a bag size outside [1, kMaxBagSize]. `what` names the
  // output in messages (e.g. "convert --out").
  static absl::StatusOr<std::unique_ptr<BinaryWriter>> Create(
      const std::string& path, std::optional<BagSizes> bags = std::nullopt,
      const std::string& what = "binary file");
  ~BinaryWriter();  // without Finish(): removes the temporary file
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;

  // INVALID_ARGUMENT when the record's bags are not the file's (or its extra_ids do not match).
  absl::Status Append(const CriteoRecord& record);
  // Writes the header with the final count, flushes, closes and renames. Call once.
  absl::Status Finish();
  int64_t records() const { return records_; }

 private:
  BinaryWriter(std::unique_ptr<OutputFile> out, const BinaryLayout& layout);
  absl::Status Flush();

  BinaryLayout layout_;
  std::unique_ptr<OutputFile> out_;  // null after Finish()
  std::string path_;
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
  const BinaryLayout& layout() const { return layout_; }
  int64_t position() const { return position_; }  // index of the next record Next() returns
  const std::string& path() const { return options_.path; }
  // Moves to record `index`, 0 <= index <= num_records().
  absl::Status Seek(int64_t index);
  // Reads the next record; false after the last one.
  absl::StatusOr<bool> Next(CriteoRecord* record);

 private:
  BinaryReader(const Options& options, std::FILE* file, int64_t num_records,
               const BinaryLayout& layout);

  Options options_;
  BinaryLayout layout_;
  std::FILE* file_;
  int64_t num_records_;
  int64_t position_ = 0;
  std::vector<char> buffer_;
  int64_t buffered_first_ = 0;  // record index of buffer_[0]
  int64_t buffered_count_ = 0;  // records in buffer_
};

// Multi-hot conversion of one-hot data (`dlrm convert --multi-hot`), as MLPerf Training's
// DLRM-DCNv2 materialises its multi-hot Criteo 1TB from the one-hot files (TorchRec's
// materialize_synthetic_multihot_dataset.py). Kept: the label, the dense values and each table's
// one-hot token, which becomes the first token of the table's bag. Derived: the bag's other
// bags[t] - 1 tokens, extra token k (1 <= k < bags[t]) being MultiHotBagToken(bag_seed, t,
// token, k). They depend on nothing but the seed, the table, the first token and the position, so
// a token always brings the same bag: popular ids stay popular, and so do the rows their bags
// hash to. An empty field keeps its one token 0 and gets extra tokens 0 (as gen-data writes
// one): it still reads as one id, row 0 (feature_hash.h).
//
// The extra tokens are uniform over the 32-bit tokens (splitmix64 of the seed, table, position
// and token); the feature hashing at read time spreads them over the table's rows, whatever its
// size, as gen-data's BagId spreads its extra ids over a table of known cardinality.
uint32_t MultiHotBagToken(uint64_t bag_seed, int table, uint32_t token, int k);
inline constexpr uint64_t kDefaultBagSeed = 0;

struct ConvertOptions {
  std::vector<std::string> inputs;    // Criteo TSV files, concatenated in order
  std::string output;                 // binary file to write
  bool strict = false;                // fail on the first malformed line instead of skipping it
  ParseIssueSink on_issue = nullptr;  // optional, gets every skipped line
  // Multi-hot bag sizes (binary format version 2, bags made by MultiHotBagToken); none: one-hot
  // (version 1), as before.
  std::optional<BagSizes> bags = std::nullopt;
  uint64_t bag_seed = kDefaultBagSeed;  // only with `bags`
};

struct ConvertResult {
  int64_t records = 0;
  int64_t skipped = 0;
};

// TSV -> binary (what `dlrm convert` runs): one-hot, or multi-hot with options.bags (each record's
// bags from MultiHotBagToken). The output appears only when the conversion succeeds (OutputFile: a
// symlink is followed). Refused with INVALID_ARGUMENT before anything is written: an input that
// is already binary, an output that is one of the inputs, and a bag size outside
// [1, kMaxBagSize]. No valid record in the inputs is FAILED_PRECONDITION, and nothing is written.
absl::StatusOr<ConvertResult> ConvertTsvToBinary(const ConvertOptions& options);

}  // namespace dlrm::worker
