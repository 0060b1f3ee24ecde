// Fuzz target: the binary record format reader (worker/input/binary_format.h BinaryReader) and
// the record reader over it (worker/input/record_reader.h: shards, interleaving, seeks across
// files). Any file is read to its end or refused with a status (DATA_LOSS naming the offset), never
// a crash, an overflow or an allocation the file's size does not justify.
//
// Input: byte 0 chooses how to read (see the k* bits below), byte 1 the shard of a RecordReader,
// the rest is the file, written to a per-process file in /dev/shm (the readers take paths). With
// kFixChecksum the header checksum is recomputed first (version 1's at byte 32, version 2's at
// byte 88, chosen by the version field), so mutations of the header's fields, the multi-hot bag
// sizes among them, get past it to the checks behind it.
//
// Seeds: DLRM_FUZZ_WRITE_SEEDS=DIR fuzz_binary_reader writes the seed corpus (corpus/binary_reader:
// one-hot and multi-hot files made by BinaryWriter, some truncated) to DIR and exits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/input/binary_format.h"
#include "worker/input/record_reader.h"

namespace {

using dlrm::worker::BinaryReader;
using dlrm::worker::CriteoRecord;
using dlrm::worker::InputFormat;
using dlrm::worker::RecordReader;
using dlrm::worker::RecordReaderOptions;

// Byte 0.
constexpr uint8_t kFixChecksum = 1 << 0;   // recompute the header checksum of the file
constexpr uint8_t kRecordReader = 1 << 1;  // read through RecordReader instead of BinaryReader
constexpr uint8_t kTwoFiles = 1 << 2;      // RecordReader: the file twice, one after the other
// RecordReader: format binary instead of auto. A file without the magic is always read as binary
// (and refused): auto would read it as TSV (fuzz_criteo_line covers that parser), and the TSV
// reader zeroes a 1 MiB buffer per open, which made this target 50 times slower.
constexpr uint8_t kFormatBinary = 1 << 3;
constexpr uint8_t kSeek = 1 << 4;  // BinaryReader: seek to the middle first, then back
// Bits 5-6: records per read (BinaryReader::Options::buffer_records).
constexpr int64_t kBufferRecords[4] = {8192, 1, 2, 3};
// Bit 7: RecordReader: even_shards.
constexpr uint8_t kEvenShards = 1 << 7;

uint64_t Fnv1a64(const char* data, size_t n) {  // as binary_format.cc
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

const std::string& FilePath() {
  static const std::string* path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    auto* p = new std::string(absl::StrCat(dir, "/dlrm-fuzz-binary-reader-", getpid(), ".bin"));
    std::atexit([] { std::remove(FilePath().c_str()); });
    return p;
  }();
  return *path;
}

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

void ReadBinary(uint8_t flags) {
  BinaryReader::Options options;
  options.path = FilePath();
  options.buffer_records = kBufferRecords[(flags >> 5) & 3];
  auto reader = BinaryReader::Open(options);
  if (!reader.ok()) return;
  const int64_t n = (*reader)->num_records();
  if (flags & kSeek) {
    if (!(*reader)->Seek(n / 2).ok()) std::abort();
    CriteoRecord record;
    (void)(*reader)->Next(&record);
    if (!(*reader)->Seek(0).ok()) std::abort();
  }
  (void)(*reader)->Seek(n + 1);  // OUT_OF_RANGE, and nothing moves
  CriteoRecord record;
  int64_t read = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok() || !*more) break;
    if (++read > n) std::abort();  // more records than the header announced
  }
}

void ReadRecords(uint8_t flags, uint8_t shard, bool magic) {
  RecordReaderOptions options;
  options.paths = {FilePath()};
  if (flags & kTwoFiles) options.paths.push_back(FilePath());
  options.format = (flags & kFormatBinary) || !magic ? InputFormat::kBinary : InputFormat::kAuto;
  options.world_size = 1 + (shard & 3);
  options.rank = (shard >> 2) & 3;
  options.begin = (shard >> 4) & 3;
  options.end = (shard & 0x40) ? options.begin + 5 : -1;
  options.interleave_block = (shard & 0x80) ? 2 : 0;
  options.even_shards = (flags & kEvenShards) != 0;
  (void)dlrm::worker::CountRecords(options.paths, options.format, false);
  auto reader = RecordReader::Create(options);
  if (!reader.ok()) return;
  CriteoRecord record;
  for (int pass = 0; pass < 2; ++pass) {
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&record);
      if (!more.ok() || !*more) break;
    }
    if (!(*reader)->Rewind().ok()) break;
  }
}

// Record i; multi-hot: bags 1, 2, 3, 1, 2, 3, ... with extra tokens derived from i.
CriteoRecord Sample(int i, bool multi_hot) {
  CriteoRecord r;
  if (multi_hot) {
    for (int t = 0; t < dlrm::worker::kCriteoNumCategorical; ++t) r.bags[t] = 1 + t % 3;
    r.extra_ids.resize(dlrm::worker::ExtraIdsPerRecord(r.bags));
    for (size_t k = 0; k < r.extra_ids.size(); ++k) r.extra_ids[k] = i * 31 + k;
  }
  r.label = static_cast<float>(i % 2);
  for (int j = 0; j < dlrm::worker::kCriteoNumDense; ++j) {
    r.dense[j] = dlrm::worker::TransformDense(i * 7 + j);
  }
  for (int t = 0; t < dlrm::worker::kCriteoNumCategorical; ++t) {
    r.cats[t] = static_cast<uint32_t>(i * 1000003 + t);
  }
  r.missing_mask = (i % 3 == 0) ? 0x5u : 0u;
  for (int t = 0; t < dlrm::worker::kCriteoNumCategorical; ++t) {
    if (r.missing(t)) r.cats[t] = 0;
  }
  return r;
}

// A file of `records` records made by BinaryWriter (format version 2 when multi_hot).
std::string MadeFile(const std::string& dir, int records, bool multi_hot) {
  const std::string path = absl::StrCat(dir, "/.made.bin");
  auto writer = dlrm::worker::BinaryWriter::Create(
      path, multi_hot ? std::optional(Sample(0, true).bags) : std::nullopt);
  if (!writer.ok()) std::abort();
  for (int i = 0; i < records; ++i) {
    if (!(*writer)->Append(Sample(i, multi_hot)).ok()) std::abort();
  }
  if (!(*writer)->Finish().ok()) std::abort();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return bytes;
}

void WriteSeeds(const std::string& dir) {
  struct Seed {
    const char* name;
    uint8_t flags;
    uint8_t shard;
    int records;
    int64_t keep;  // bytes of the file kept; -1: all
    bool multi_hot = false;
  };
  const Seed seeds[] = {
      {"empty_file", 0, 0, 0, -1},
      {"three_records", 0, 0, 3, -1},
      {"three_records_seek_buffer1", kSeek | (1 << 5), 0, 3, -1},
      {"fix_checksum", kFixChecksum, 0, 2, -1},
      {"record_reader_rank1_of2", kRecordReader, 0x01 | (1 << 2), 4, -1},
      {"record_reader_two_files_interleaved", kRecordReader | kTwoFiles | kFormatBinary,
       0x02 | (1 << 2) | 0x80, 5, -1},
      {"record_reader_range_even", kRecordReader | kTwoFiles | kEvenShards, 0x01 | 0x10 | 0x40, 3,
       -1},
      {"truncated_record", 0, 0, 3,
       dlrm::worker::kBinaryHeaderBytes + 2 * dlrm::worker::kBinaryRecordBytes + 50},
      {"truncated_header", kFixChecksum, 0, 1, 20},
      {"multi_hot_three_records_seek", kSeek | (2 << 5), 0, 3, -1, true},
      {"multi_hot_fix_checksum", kFixChecksum, 0, 2, -1, true},
      {"multi_hot_record_reader_two_files", kRecordReader | kTwoFiles, 0x01 | (1 << 2), 4, -1,
       true},
      {"multi_hot_truncated_header", kFixChecksum, 0, 1, 70, true},
      {"multi_hot_truncated_record", 0, 0, 3, dlrm::worker::kBinaryHeaderBytesMultiHot + 300, true},
  };
  for (const Seed& s : seeds) {
    std::string file = MadeFile(dir, s.records, s.multi_hot);
    if (s.keep >= 0) file.resize(static_cast<size_t>(s.keep));
    std::string input;
    input.push_back(static_cast<char>(s.flags));
    input.push_back(static_cast<char>(s.shard));
    input += file;
    if (!WriteFile(absl::StrCat(dir, "/", s.name), input)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* dir = std::getenv("DLRM_FUZZ_WRITE_SEEDS"); dir != nullptr) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const uint8_t shard = data[1];
  std::string file(reinterpret_cast<const char*>(data + 2), size - 2);
  if ((flags & kFixChecksum) &&
      file.size() >= static_cast<size_t>(dlrm::worker::kBinaryHeaderBytes)) {
    uint32_t version = 0;
    std::memcpy(&version, file.data() + 8, sizeof(version));
    const size_t at = version == dlrm::worker::kBinaryVersionMultiHot ? 88 : 32;
    if (file.size() >= at + 8) {
      const uint64_t sum = Fnv1a64(file.data(), at);
      std::memcpy(file.data() + at, &sum, sizeof(sum));
    }
  }
  if (!WriteFile(FilePath(), file)) std::abort();
  absl::StatusOr<bool> magic = dlrm::worker::IsBinaryCriteoFile(FilePath());
  if (!magic.ok()) {
    // A start a byte or two off the magic is reported as a damaged file; nothing else fails.
    if (magic.status().code() != absl::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  if (flags & kRecordReader) {
    ReadRecords(flags, shard, *magic);
  } else {
    ReadBinary(flags);
  }
  return 0;
}
