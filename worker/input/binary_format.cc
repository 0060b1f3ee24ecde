#include "worker/input/binary_format.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dlrm::worker {
namespace {

// Records are copied with memcpy; a big-endian host would need byte swaps here.
static_assert(std::endian::native == std::endian::little, "binary format assumes little-endian");

constexpr int64_t kWriterBufferRecords = 8192;
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

void EncodeHeader(int64_t records, char* out) {
  std::memcpy(out, kBinaryMagic, 8);
  Put<uint32_t>(out, 8, kBinaryVersion);
  Put<uint32_t>(out, 12, kCriteoNumDense);
  Put<uint32_t>(out, 16, kCriteoNumCategorical);
  Put<uint32_t>(out, 20, static_cast<uint32_t>(kBinaryRecordBytes));
  Put<uint64_t>(out, 24, static_cast<uint64_t>(records));
  Put<uint64_t>(out, 32, Fnv1a64(out, 32));
}

void EncodeRecord(const CriteoRecord& r, char* out) {
  out[0] = r.label != 0.0f ? 1 : 0;
  std::memcpy(out + 1, r.dense.data(), 4 * kCriteoNumDense);
  std::memcpy(out + 1 + 4 * kCriteoNumDense, r.cats.data(), 4 * kCriteoNumCategorical);
  Put<uint32_t>(out, kBinaryRecordBytes - 4, r.missing_mask);
}

// Returns the reason a record is corrupt, or "" when it is fine.
std::string DecodeRecord(const char* in, CriteoRecord* r) {
  const uint8_t label = static_cast<uint8_t>(in[0]);
  if (label > 1) return absl::StrCat("label byte ", label, " is not 0 or 1");
  r->label = label;
  std::memcpy(r->dense.data(), in + 1, 4 * kCriteoNumDense);
  for (int j = 0; j < kCriteoNumDense; ++j) {
    if (!std::isfinite(r->dense[j]) || r->dense[j] < 0) {
      return absl::StrCat("dense I", j + 1, " = ", r->dense[j], " is not a finite value >= 0");
    }
  }
  std::memcpy(r->cats.data(), in + 1 + 4 * kCriteoNumDense, 4 * kCriteoNumCategorical);
  r->missing_mask = Get<uint32_t>(in, kBinaryRecordBytes - 4);
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

}  // namespace

absl::StatusOr<bool> IsBinaryCriteoFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return OpenError("open input file", path, errno);
  char magic[8];
  const size_t got = std::fread(magic, 1, 8, file);
  std::fclose(file);
  return got == 8 && std::memcmp(magic, kBinaryMagic, 8) == 0;
}

// ---------------------------------------------------------------------------------------------
// BinaryWriter

absl::StatusOr<std::unique_ptr<BinaryWriter>> BinaryWriter::Create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) return OpenError("create binary file", tmp, errno);
  auto writer = std::unique_ptr<BinaryWriter>(new BinaryWriter(path, file));
  char header[kBinaryHeaderBytes];
  EncodeHeader(0, header);  // placeholder; Finish() writes the real count
  if (std::fwrite(header, 1, sizeof(header), file) != sizeof(header)) {
    return absl::DataLossError(absl::StrCat("cannot write header of ", tmp));
  }
  return writer;
}

BinaryWriter::BinaryWriter(std::string path, std::FILE* file)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), file_(file) {
  buffer_.reserve(kWriterBufferRecords * kBinaryRecordBytes);
}

BinaryWriter::~BinaryWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

absl::Status BinaryWriter::Append(const CriteoRecord& record) {
  if (file_ == nullptr) return absl::FailedPreconditionError("BinaryWriter: Append after Finish");
  const size_t at = buffer_.size();
  buffer_.resize(at + kBinaryRecordBytes);
  EncodeRecord(record, buffer_.data() + at);
  ++records_;
  if (buffer_.size() >= static_cast<size_t>(kWriterBufferRecords * kBinaryRecordBytes)) {
    return Flush();
  }
  return absl::OkStatus();
}

absl::Status BinaryWriter::Flush() {
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
    return absl::DataLossError(
        absl::StrCat("write to ", tmp_path_, " failed: ", std::strerror(errno)));
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status BinaryWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError("BinaryWriter: Finish called twice");
  DLRM_RETURN_IF_ERROR(Flush());
  char header[kBinaryHeaderBytes];
  EncodeHeader(records_, header);
  if (std::fseek(file_, 0, SEEK_SET) != 0 ||
      std::fwrite(header, 1, sizeof(header), file_) != sizeof(header) || std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write header of ", tmp_path_, ": ", std::strerror(errno)));
  }
  const int close_result = std::fclose(file_);
  file_ = nullptr;
  if (close_result != 0 || std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    return absl::DataLossError(
        absl::StrCat("cannot finish binary file ", path_, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
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
  char header[kBinaryHeaderBytes];
  const size_t got = std::fread(header, 1, sizeof(header), file);
  if (got != sizeof(header)) {
    return fail(absl::StrCat("truncated header: ", got, " of ", kBinaryHeaderBytes, " bytes"));
  }
  if (std::memcmp(header, kBinaryMagic, 8) != 0)
    return fail("bad magic at offset 0 (not DLRMBIN1)");
  if (Get<uint64_t>(header, 32) != Fnv1a64(header, 32)) {
    return fail("header checksum mismatch at offset 32 (corrupt header)");
  }
  const uint32_t version = Get<uint32_t>(header, 8);
  if (version != kBinaryVersion) return fail(absl::StrCat("unsupported version ", version));
  const uint32_t num_dense = Get<uint32_t>(header, 12);
  const uint32_t num_cats = Get<uint32_t>(header, 16);
  const uint32_t record_bytes = Get<uint32_t>(header, 20);
  if (num_dense != kCriteoNumDense || num_cats != kCriteoNumCategorical ||
      record_bytes != kBinaryRecordBytes) {
    return fail(absl::StrCat("unsupported shape: ", num_dense, " dense, ", num_cats,
                             " categorical, ", record_bytes, " bytes per record (expected ",
                             kCriteoNumDense, ", ", kCriteoNumCategorical, ", ", kBinaryRecordBytes,
                             ")"));
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
  const int64_t expected = kBinaryHeaderBytes + static_cast<int64_t>(count) * kBinaryRecordBytes;
  if (size != expected) {
    const int64_t whole = (size - kBinaryHeaderBytes) / kBinaryRecordBytes;
    return fail(absl::StrCat(size < expected ? "truncated" : "trailing bytes", ": header says ",
                             count, " records (", expected, " bytes) but the file has ", size,
                             " bytes; first bad offset ",
                             kBinaryHeaderBytes + whole * kBinaryRecordBytes));
  }
  if (std::fseek(file, kBinaryHeaderBytes, SEEK_SET) != 0) return fail("cannot seek");
  return std::unique_ptr<BinaryReader>(
      new BinaryReader(options, file, static_cast<int64_t>(count)));
}

BinaryReader::BinaryReader(const Options& options, std::FILE* file, int64_t num_records)
    : options_(options), file_(file), num_records_(num_records) {
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
  if (std::fseek(file_, kBinaryHeaderBytes + index * kBinaryRecordBytes, SEEK_SET) != 0) {
    return absl::DataLossError(absl::StrCat(options_.path, ": cannot seek to offset ",
                                            kBinaryHeaderBytes + index * kBinaryRecordBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> BinaryReader::Next(CriteoRecord* record) {
  if (position_ >= num_records_) return false;
  if (position_ >= buffered_first_ + buffered_count_) {
    // The file position is at buffered_first_ + buffered_count_ == position_ here.
    const int64_t want = std::min(options_.buffer_records, num_records_ - position_);
    buffer_.resize(want * kBinaryRecordBytes);
    const size_t got = std::fread(buffer_.data(), 1, buffer_.size(), file_);
    if (got != buffer_.size()) {
      return absl::DataLossError(absl::StrCat(
          options_.path, ": truncated at offset ",
          kBinaryHeaderBytes + position_ * kBinaryRecordBytes + got, " while reading record ",
          position_ + got / kBinaryRecordBytes, " of ", num_records_));
    }
    buffered_first_ = position_;
    buffered_count_ = want;
  }
  const char* in = buffer_.data() + (position_ - buffered_first_) * kBinaryRecordBytes;
  const std::string bad = DecodeRecord(in, record);
  if (!bad.empty()) {
    return absl::DataLossError(
        absl::StrCat(options_.path, ": corrupt record ", position_, " at offset ",
                     kBinaryHeaderBytes + position_ * kBinaryRecordBytes, ": ", bad));
  }
  ++position_;
  return true;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<ConvertResult> ConvertTsvToBinary(const ConvertOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("convert: no input files");
  if (options.output.empty()) return absl::InvalidArgumentError("convert: no output path");
  DLRM_ASSIGN_OR_RETURN(auto writer, BinaryWriter::Create(options.output));
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
      DLRM_RETURN_IF_ERROR(writer->Append(record));
    }
    result.skipped += reader->skipped();
  }
  result.records = writer->records();
  DLRM_RETURN_IF_ERROR(writer->Finish());
  return result;
}

}  // namespace dlrm::worker
