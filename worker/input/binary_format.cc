#include "worker/input/binary_format.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mix64.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

// Records are copied with memcpy; a big-endian host would need byte swaps here.
static_assert(std::endian::native == std::endian::little, "binary format assumes little-endian");

constexpr int64_t kWriterBufferRecords = 8192;
// Multi-hot records can be large (up to 26 bags of kMaxBagSize tokens): buffers hold at most
// this many bytes, and at least one record.
constexpr int64_t kMaxBufferBytes = int64_t{8} << 20;

int64_t BufferRecords(int64_t wanted, int64_t record_bytes) {
  return std::max<int64_t>(1, std::min(wanted, kMaxBufferBytes / record_bytes));
}
constexpr uint32_t kValidMaskBits = (1u << kCriteoNumCategorical) - 1;

uint64_t Fnv1a64(const char* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

template <typename T>
void Put(char* dst, size_t offset, T value) {
  std::memcpy(dst + offset, &value, sizeof(T));
}

template <typename T>
T Get(const char* src, size_t offset) {
  T value;
  std::memcpy(&value, src + offset, sizeof(T));
  return value;
}

constexpr int64_t kCatsOffset = 1 + 4 * kCriteoNumDense;
constexpr int64_t kExtraOffset = kCatsOffset + 4 * kCriteoNumCategorical;
// Version 2's header: the bag sizes, then the checksum of everything before it.
constexpr size_t kBagsOffset = 32;
constexpr size_t kMultiHotChecksumOffset = 88;

// Writes layout.header_bytes bytes.
void EncodeHeader(const BinaryLayout& layout, int64_t records, char* out) {
  std::memset(out, 0, layout.header_bytes);
  std::memcpy(out, kBinaryMagic, 8);
  Put<uint32_t>(out, 8, layout.version);
  Put<uint32_t>(out, 12, kCriteoNumDense);
  Put<uint32_t>(out, 16, kCriteoNumCategorical);
  Put<uint32_t>(out, 20, static_cast<uint32_t>(layout.record_bytes));
  Put<uint64_t>(out, 24, static_cast<uint64_t>(records));
  if (layout.version == kBinaryVersion) {
    Put<uint64_t>(out, 32, Fnv1a64(out, 32));
    return;
  }
  std::memcpy(out + kBagsOffset, layout.bags.data(), sizeof(BagSizes));
  Put<uint64_t>(out, kMultiHotChecksumOffset, Fnv1a64(out, kMultiHotChecksumOffset));
}

void EncodeRecord(const BinaryLayout& layout, const CriteoRecord& r, char* out) {
  out[0] = r.label != 0.0f ? 1 : 0;
  std::memcpy(out + 1, r.dense.data(), 4 * kCriteoNumDense);
  std::memcpy(out + kCatsOffset, r.cats.data(), 4 * kCriteoNumCategorical);
  if (layout.extra_ids > 0) {
    std::memcpy(out + kExtraOffset, r.extra_ids.data(), 4 * r.extra_ids.size());
  }
  Put<uint32_t>(out, layout.record_bytes - 4, r.missing_mask);
}

// Returns the reason a record is corrupt, or "" when it is fine.
std::string DecodeRecord(const BinaryLayout& layout, const char* in, CriteoRecord* r) {
  const uint8_t label = static_cast<uint8_t>(in[0]);
  if (label > 1) return absl::StrCat("label byte ", label, " is not 0 or 1");
  r->label = label;
  std::memcpy(r->dense.data(), in + 1, 4 * kCriteoNumDense);
  // log(1 + x) of a count that fits int64 is at most 43.67: a larger value is no converted count
  // (3e38 passed, and the model diverged on it with a message blaming the learning rate).
  constexpr float kMaxLogCount = 43.7f;
  for (int j = 0; j < kCriteoNumDense; ++j) {
    if (!std::isfinite(r->dense[j]) || r->dense[j] < 0) {
      return absl::StrCat("dense I", j + 1, " = ", r->dense[j], " is not a finite value >= 0");
    }
    if (r->dense[j] > kMaxLogCount) {
      return absl::StrCat("dense I", j + 1, " = ", r->dense[j], " is over ", kMaxLogCount,
                          ", the log(1 + x) of the largest 64-bit count");
    }
  }
  std::memcpy(r->cats.data(), in + kCatsOffset, 4 * kCriteoNumCategorical);
  r->bags = layout.bags;
  r->extra_ids.resize(layout.extra_ids);
  if (layout.extra_ids > 0) {
    std::memcpy(r->extra_ids.data(), in + kExtraOffset, 4 * r->extra_ids.size());
  }
  r->missing_mask = Get<uint32_t>(in, layout.record_bytes - 4);
  if ((r->missing_mask & ~kValidMaskBits) != 0) {
    return absl::StrCat("missing mask ", r->missing_mask, " has bits beyond ",
                        kCriteoNumCategorical, " tables");
  }
  return "";
}

absl::Status OpenError(const std::string& what, const std::string& path, int err) {
  const std::string message = absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

absl::Status CheckBags(const BagSizes& bags) {
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    if (bags[t] < 1 || bags[t] > kMaxBagSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("bag size ", bags[t], " of table ", t, " is not in [1, ", kMaxBagSize, "]"));
    }
  }
  return absl::OkStatus();
}

// Sets a one-hot record's bags (ConvertOptions::bags): the one-hot token first, then the
// derived tokens; an empty field's extra tokens are 0.
void AddBags(const BagSizes& bags, uint64_t bag_seed, CriteoRecord* record) {
  record->bags = bags;
  record->extra_ids.resize(ExtraIdsPerRecord(bags));
  size_t extra = 0;
  for (int t = 0; t < kCriteoNumCategorical; ++t) {
    const bool missing = record->missing(t);
    for (int k = 1; k < bags[t]; ++k) {
      record->extra_ids[extra++] = missing ? 0 : MultiHotBagToken(bag_seed, t, record->cats[t], k);
    }
  }
}

}  // namespace

const char* CompressionTool(absl::string_view head) {
  if (absl::StartsWith(head, "\x1f\x8b")) return "gzip";
  // "BZh", the block size '1'-'9', then a block's or the end's magic.
  if (head.size() >= 8 && absl::StartsWith(head, "BZh") && head[3] >= '1' && head[3] <= '9' &&
      (head.substr(4, 4) == "1AY&" || head.substr(4, 4) == "\x17rE8")) {
    return "bzip2";
  }
  if (absl::StartsWith(head, absl::string_view("\xfd"
                                               "7zXZ\0",
                                               6)))
    return "xz";
  if (absl::StartsWith(head, "\x28\xb5\x2f\xfd")) return "zstd";
  return nullptr;
}

uint32_t MultiHotBagToken(uint64_t bag_seed, int table, uint32_t token, int k) {
  // token in bits 0-31, table (< 26) in bits 32-39, k (< kMaxBagSize = 2^12) in bits 40-55: one
  // word per (table, token, k), and a bijection of it for each seed, so no two of them share a
  // 64-bit mix. The high 32 bits of the mix are the token.
  const uint64_t word = static_cast<uint64_t>(token) | (static_cast<uint64_t>(table) << 32) |
                        (static_cast<uint64_t>(k) << 40);
  const uint64_t key = common::SplitMix64(bag_seed ^ 0x6d756c7469686f74ULL);  // "multihot"
  return static_cast<uint32_t>(common::SplitMix64(key ^ word) >> 32);
}

BinaryLayout BinaryLayout::MultiHot(const BagSizes& bags) {
  BinaryLayout layout;
  layout.version = kBinaryVersionMultiHot;
  layout.bags = bags;
  layout.header_bytes = kBinaryHeaderBytesMultiHot;
  layout.extra_ids = ExtraIdsPerRecord(bags);
  layout.record_bytes = kBinaryRecordBytes + 4 * int64_t{layout.extra_ids};
  return layout;
}

absl::StatusOr<bool> IsBinaryCriteoFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError("open input file", path, errno);
  // A pipe or device is not read here: what this read took would be lost to the real reader.
  if (!S_ISREG(st.st_mode)) return false;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return OpenError("open input file", path, errno);
  char magic[8];
  const size_t got = std::fread(magic, 1, 8, file);
  std::fclose(file);
  // Criteo's own downloads are compressed (day_0.gz): read as text they were only "malformed
  // line"s and "no training batches", with nothing pointing at the compression.
  if (const char* tool = CompressionTool(absl::string_view(magic, got)); tool != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", tool, "-compressed: decompress it first (", tool, " -dk ", path,
                     "), then train on, or `dlrm convert`, the file it writes"));
  }
  if (got < 8) return false;
  int same = 0;
  for (int i = 0; i < 8; ++i) same += magic[i] == kBinaryMagic[i];
  // A byte or two off the magic is a damaged binary file, not text: read as TSV it was only
  // "no valid records" or a field count, with nothing pointing at the damage.
  if (same >= 6 && same < 8) {
    return absl::DataLossError(absl::StrCat(
        path, " starts with ", absl::CHexEscape(absl::string_view(magic, 8)), ", ", 8 - same,
        " byte(s) off the binary format's magic DLRMBIN1: a damaged binary file"));
  }
  return same == 8;
}

// ---------------------------------------------------------------------------------------------
// BinaryWriter

absl::StatusOr<std::unique_ptr<BinaryWriter>> BinaryWriter::Create(const std::string& path,
                                                                   std::optional<BagSizes> bags,
                                                                   const std::string& what) {
  if (bags.has_value()) DLRM_RETURN_IF_ERROR(Annotate(CheckBags(*bags), path));
  const BinaryLayout layout =
      bags.has_value() ? BinaryLayout::MultiHot(*bags) : BinaryLayout::OneHot();
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out,
                        OutputFile::Open(path, what, {.seekable = true}));
  std::vector<char> header(layout.header_bytes);
  EncodeHeader(layout, 0, header.data());  // placeholder; Finish() writes the real count
  DLRM_RETURN_IF_ERROR(out->Write(header.data(), header.size()));
  return std::unique_ptr<BinaryWriter>(new BinaryWriter(std::move(out), layout));
}

BinaryWriter::BinaryWriter(std::unique_ptr<OutputFile> out, const BinaryLayout& layout)
    : layout_(layout), out_(std::move(out)), path_(out_->path()) {
  buffer_.reserve(BufferRecords(kWriterBufferRecords, layout_.record_bytes) * layout_.record_bytes);
}

// The OutputFile removes the temporary file when Finish() did not run.
BinaryWriter::~BinaryWriter() = default;

absl::Status BinaryWriter::Append(const CriteoRecord& record) {
  if (out_ == nullptr) return absl::FailedPreconditionError("BinaryWriter: Append after Finish");
  if (record.bags != layout_.bags ||
      record.extra_ids.size() != static_cast<size_t>(layout_.extra_ids)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": record ", records_, " has bags [", BagSizesString(record.bags),
                     "] and ", record.extra_ids.size(), " extra ids; the file's bags are [",
                     BagSizesString(layout_.bags), "] (", layout_.extra_ids, " extra ids)"));
  }
  const size_t at = buffer_.size();
  buffer_.resize(at + layout_.record_bytes);
  EncodeRecord(layout_, record, buffer_.data() + at);
  ++records_;
  if (buffer_.size() >=
      static_cast<size_t>(BufferRecords(kWriterBufferRecords, layout_.record_bytes) *
                          layout_.record_bytes)) {
    return Flush();
  }
  return absl::OkStatus();
}

absl::Status BinaryWriter::Flush() {
  DLRM_RETURN_IF_ERROR(out_->Write(buffer_.data(), buffer_.size()));
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status BinaryWriter::Finish() {
  if (out_ == nullptr) return absl::FailedPreconditionError("BinaryWriter: Finish called twice");
  DLRM_RETURN_IF_ERROR(Flush());
  std::vector<char> header(layout_.header_bytes);
  EncodeHeader(layout_, records_, header.data());
  if (std::fseek(out_->file(), 0, SEEK_SET) != 0) return out_->Error(errno);
  DLRM_RETURN_IF_ERROR(out_->Write(header.data(), header.size()));
  const std::unique_ptr<OutputFile> out = std::move(out_);
  return out->Commit();
}

// ---------------------------------------------------------------------------------------------
// BinaryReader

absl::StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Open(const Options& options) {
  const std::string& path = options.path;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return OpenError("open binary file", path, errno);
  auto fail = [&](const std::string& reason) {
    std::fclose(file);
    return absl::DataLossError(absl::StrCat(path, ": ", reason));
  };
  char header[kBinaryHeaderBytesMultiHot];
  const size_t got = std::fread(header, 1, kBinaryHeaderBytes, file);
  if (got != kBinaryHeaderBytes) {
    return fail(absl::StrCat("truncated header: ", got, " of ", kBinaryHeaderBytes, " bytes"));
  }
  if (std::memcmp(header, kBinaryMagic, 8) != 0)
    return fail("bad magic at offset 0 (not DLRMBIN1)");
  const uint32_t version = Get<uint32_t>(header, 8);
  BinaryLayout layout;
  if (version == kBinaryVersion) {
    if (Get<uint64_t>(header, 32) != Fnv1a64(header, 32)) {
      return fail("header checksum mismatch at offset 32 (corrupt header)");
    }
  } else if (version == kBinaryVersionMultiHot) {
    const size_t rest = kBinaryHeaderBytesMultiHot - kBinaryHeaderBytes;
    const size_t more = std::fread(header + kBinaryHeaderBytes, 1, rest, file);
    if (more != rest) {
      return fail(absl::StrCat("truncated header: ", kBinaryHeaderBytes + more, " of ",
                               kBinaryHeaderBytesMultiHot, " bytes"));
    }
    if (Get<uint64_t>(header, kMultiHotChecksumOffset) !=
        Fnv1a64(header, kMultiHotChecksumOffset)) {
      return fail(absl::StrCat("header checksum mismatch at offset ", kMultiHotChecksumOffset,
                               " (corrupt header)"));
    }
    BagSizes bags;
    std::memcpy(bags.data(), header + kBagsOffset, sizeof(bags));
    if (absl::Status bad = CheckBags(bags); !bad.ok()) {
      return fail(absl::StrCat(bad.message(), " (corrupt header)"));
    }
    layout = BinaryLayout::MultiHot(bags);
  } else {
    return fail(absl::StrCat("unsupported version ", version));
  }
  const uint32_t num_dense = Get<uint32_t>(header, 12);
  const uint32_t num_cats = Get<uint32_t>(header, 16);
  const uint32_t record_bytes = Get<uint32_t>(header, 20);
  if (num_dense != kCriteoNumDense || num_cats != kCriteoNumCategorical ||
      record_bytes != layout.record_bytes) {
    return fail(absl::StrCat("unsupported shape: ", num_dense, " dense, ", num_cats,
                             " categorical, ", record_bytes, " bytes per record (expected ",
                             kCriteoNumDense, ", ", kCriteoNumCategorical, ", ",
                             layout.record_bytes, ")"));
  }
  const uint64_t count = Get<uint64_t>(header, 24);
  if (std::fseek(file, 0, SEEK_END) != 0) return fail("cannot seek to the end");
  const int64_t size = std::ftell(file);
  // Bounded before the multiplication below, which a forged count would overflow.
  constexpr uint64_t kMaxRecords = 1ULL << 40;
  if (count > kMaxRecords) {
    return fail(absl::StrCat("header says ", count, " records, over the format's limit of ",
                             kMaxRecords, " (corrupt header)"));
  }
  const int64_t header_bytes = layout.header_bytes;
  const int64_t record = layout.record_bytes;
  // count <= 2^40 and record < 2^20: no overflow.
  const int64_t expected = header_bytes + static_cast<int64_t>(count) * record;
  if (size != expected) {
    const int64_t whole = std::max<int64_t>(0, size - header_bytes) / record;
    return fail(absl::StrCat(size < expected ? "truncated" : "trailing bytes", ": header says ",
                             count, " records (", expected, " bytes) but the file has ", size,
                             " bytes; first bad offset ", header_bytes + whole * record));
  }
  if (std::fseek(file, header_bytes, SEEK_SET) != 0) return fail("cannot seek");
  return std::unique_ptr<BinaryReader>(
      new BinaryReader(options, file, static_cast<int64_t>(count), layout));
}

BinaryReader::BinaryReader(const Options& options, std::FILE* file, int64_t num_records,
                           const BinaryLayout& layout)
    : options_(options), layout_(layout), file_(file), num_records_(num_records) {
  if (options_.buffer_records < 1) options_.buffer_records = 1;
}

BinaryReader::~BinaryReader() { std::fclose(file_); }

absl::Status BinaryReader::Seek(int64_t index) {
  if (index < 0 || index > num_records_) {
    return absl::OutOfRangeError(absl::StrCat(options_.path, ": seek to record ", index,
                                              " outside [0, ", num_records_, "]"));
  }
  position_ = index;
  if (index >= buffered_first_ && index < buffered_first_ + buffered_count_)
    return absl::OkStatus();
  buffered_count_ = 0;
  buffered_first_ = index;
  const int64_t offset = layout_.header_bytes + index * layout_.record_bytes;
  if (std::fseek(file_, offset, SEEK_SET) != 0) {
    return absl::DataLossError(absl::StrCat(options_.path, ": cannot seek to offset ", offset));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> BinaryReader::Next(CriteoRecord* record) {
  if (position_ >= num_records_) return false;
  if (position_ >= buffered_first_ + buffered_count_) {
    // The file position is at buffered_first_ + buffered_count_ == position_ here.
    const int64_t record_bytes = layout_.record_bytes;
    const int64_t want =
        std::min(BufferRecords(options_.buffer_records, record_bytes), num_records_ - position_);
    buffer_.resize(want * record_bytes);
    const size_t got = std::fread(buffer_.data(), 1, buffer_.size(), file_);
    if (got != buffer_.size()) {
      return absl::DataLossError(
          absl::StrCat(options_.path, ": truncated at offset ",
                       layout_.header_bytes + position_ * record_bytes + static_cast<int64_t>(got),
                       " while reading record ",
                       position_ + static_cast<int64_t>(got) / record_bytes, " of ", num_records_));
    }
    buffered_first_ = position_;
    buffered_count_ = want;
  }
  const char* in = buffer_.data() + (position_ - buffered_first_) * layout_.record_bytes;
  const std::string bad = DecodeRecord(layout_, in, record);
  if (!bad.empty()) {
    return absl::DataLossError(
        absl::StrCat(options_.path, ": corrupt record ", position_, " at offset ",
                     layout_.header_bytes + position_ * layout_.record_bytes, ": ", bad));
  }
  ++position_;
  return true;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<ConvertResult> ConvertTsvToBinary(const ConvertOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("convert: no input files");
  if (options.output.empty()) return absl::InvalidArgumentError("convert: no output path");
  // Before any input is read, as predict and train check theirs (a missing folder is a usage
  // error, exit 2, as it is there; and no file inside a checkpoint).
  DLRM_RETURN_IF_ERROR(CheckOutputPath(options.output, "convert --out"));
  DLRM_RETURN_IF_ERROR(CheckOutputIsNotAnInput(options.output, "convert --out", options.inputs));
  for (const std::string& input : options.inputs) {
    DLRM_ASSIGN_OR_RETURN(bool binary, IsBinaryCriteoFile(input));
    if (binary) {
      return absl::InvalidArgumentError(
          absl::StrCat("convert: ", input,
                       " is already in the binary format (it starts with DLRMBIN1): nothing to "
                       "convert; train on it, or evaluate it, as it is"));
    }
  }
  DLRM_ASSIGN_OR_RETURN(auto writer,
                        BinaryWriter::Create(options.output, options.bags, "convert --out"));
  ConvertResult result;
  CriteoRecord record;
  for (const std::string& input : options.inputs) {
    TsvReaderOptions reader_options;
    reader_options.path = input;
    reader_options.strict = options.strict;
    reader_options.on_issue = options.on_issue;
    DLRM_ASSIGN_OR_RETURN(auto reader, CriteoTsvReader::Open(reader_options));
    while (true) {
      DLRM_ASSIGN_OR_RETURN(bool more, reader->Next(&record));
      if (!more) break;
      if (options.bags.has_value()) AddBags(*options.bags, options.bag_seed, &record);
      DLRM_RETURN_IF_ERROR(writer->Append(record));
    }
    result.skipped += reader->skipped();
  }
  result.records = writer->records();
  if (result.records == 0) {
    // The writer's temporary file goes with it; an older file at the output stays.
    return absl::FailedPreconditionError(absl::StrCat(
        "convert: no valid records in ", absl::StrJoin(options.inputs, ", "), " (", result.skipped,
        " malformed line(s) skipped): ", options.output, " not written"));
  }
  DLRM_RETURN_IF_ERROR(writer->Finish());
  return result;
}

}  // namespace dlrm::worker
