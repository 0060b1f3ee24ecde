#include "embedding/checkpoint_io.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/parallel.h"
#include "common/status.h"

namespace dlrm::embedding {
namespace {

constexpr char kRowMagic[8] = {'D', 'L', 'R', 'M', 'R', 'O', 'W', 'S'};
constexpr char kRowEndMagic[8] = {'R', 'O', 'W', 'S', 'E', 'N', 'D', '!'};
constexpr uint32_t kRowVersion = 1;      // fp32 rows
constexpr uint32_t kRowVersionHalf = 2;  // fp16 / bf16 weights (RowCodec)
constexpr size_t kWriteBufferBytes = 4 << 20;

// CRC32C (Castagnoli) by ISA-L, which picks its SSE4.2 / PCLMUL / AVX-512 kernel at run time.
// RocksDB has one too, but Debian builds RocksDB for the baseline x86-64, where its CRC32C is a
// table lookup per byte: about 1.4 GB/s here against ISA-L's 9-13 (bench/checkpoint_bench's
// crc32c_gb_per_s), 0.3 s of every 423 MB full checkpoint there. ISA-L's state is the
// uninverted register: start at ~0, finish with ~.
class Crc32cState {
 public:
  void Update(const void* data, size_t n) {
    // ISA-L takes a non-const pointer, which it only reads, and an int length.
    auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
    while (n > 0) {
      const size_t take = std::min<size_t>(n, size_t{1} << 30);
      state_ = crc32_iscsi(p, static_cast<int>(take), state_);
      p += take;
      n -= take;
    }
  }
  uint32_t Finish() const { return ~state_; }

 private:
  uint32_t state_ = 0xFFFFFFFFu;
};

std::string Errno() { return std::strerror(errno); }

}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  Crc32cState state;
  state.Update(data, n);
  return state.Finish();
}

namespace {

// Opens `path` for reading when it is a regular file. O_NONBLOCK: opening a FIFO would wait for a
// writer. NOT_FOUND when it is missing; DATA_LOSS for anything else (a FIFO, a device or a link
// to one, which a checkpoint never holds).
absl::StatusOr<int> OpenRegularFile(const std::string& path, struct stat* st) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": missing"));
    return absl::DataLossError(absl::StrCat(path, ": cannot open: ", Errno()));
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  }
  return fd;
}

// The size and CRC32C of the open file `fd` (of `path`), read to its end; closes it.
absl::StatusOr<FileDigest> DigestOpenFile(int fd, const std::string& path) {
  Crc32cState crc;
  FileDigest d;
  std::vector<char> buf(kWriteBufferBytes);
  while (true) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = Errno();
      close(fd);
      return absl::DataLossError(absl::StrCat(path, ": read error: ", err));
    }
    if (n == 0) break;
    crc.Update(buf.data(), static_cast<size_t>(n));
    d.bytes += n;
  }
  close(fd);
  d.crc32c = crc.Finish();
  return d;
}

}  // namespace

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  struct stat st {};
  DLRM_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &st));
  return DigestOpenFile(fd, path);
}

absl::Status VerifyFile(const std::string& path, const FileDigest& expected) {
  struct stat st {};
  DLRM_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &st));
  // Its size first: a file of another size is not read through (it may be huge).
  int64_t bytes = st.st_size;
  uint32_t crc32c = 0;
  if (bytes == expected.bytes) {
    DLRM_ASSIGN_OR_RETURN(FileDigest got, DigestOpenFile(fd, path));
    bytes = got.bytes;  // it may have changed while it was read
    crc32c = got.crc32c;
  } else {
    close(fd);
  }
  if (bytes != expected.bytes) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes, " bytes, the manifest says ",
                                            expected.bytes, " (truncated or replaced)"));
  }
  if (crc32c != expected.crc32c) {
    return absl::DataLossError(absl::StrFormat("%s: CRC32C %08x, the manifest says %08x (damaged)",
                                               path, crc32c, expected.crc32c));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError(errno, absl::StrCat(dir, ": cannot open"));
  const int rc = fsync(fd);
  const int err = rc != 0 ? errno : 0;
  close(fd);
  if (rc != 0) return FileError(err, absl::StrCat(dir, ": fsync"));
  return absl::OkStatus();
}

// --- ChecksummedWriter ---

class ChecksummedWriter::Crc : public Crc32cState {};

ChecksummedWriter::ChecksummedWriter(std::string path, int fd)
    : path_(std::move(path)), fd_(fd), crc_(std::make_unique<Crc>()) {
  buffer_.reserve(kWriteBufferBytes);
}

ChecksummedWriter::~ChecksummedWriter() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<ChecksummedWriter>> ChecksummedWriter::Create(
    const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError(errno, absl::StrCat(path, ": cannot create"));
  return std::unique_ptr<ChecksummedWriter>(new ChecksummedWriter(path, fd));
}

absl::Status ChecksummedWriter::FlushBuffer() {
  crc_->Update(buffer_.data(), buffer_.size());
  bytes_ += static_cast<int64_t>(buffer_.size());
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError(errno, absl::StrCat(path_, ": write"));
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status ChecksummedWriter::Append(const void* data, size_t n) {
  if (fd_ < 0 || finished_)
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t take = std::min(n, kWriteBufferBytes - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + take);
    p += take;
    n -= take;
    if (buffer_.size() == kWriteBufferBytes) DLRM_RETURN_IF_ERROR(FlushBuffer());
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> ChecksummedWriter::Close() {
  DLRM_ASSIGN_OR_RETURN(FileDigest digest, Finish());
  DLRM_RETURN_IF_ERROR(Sync());
  return digest;
}

absl::StatusOr<FileDigest> ChecksummedWriter::Finish() {
  if (fd_ < 0 || finished_) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  }
  DLRM_RETURN_IF_ERROR(FlushBuffer());
  // Only a hint (write-back starts now rather than when the kernel gets round to it): Sync's
  // fsync is what makes the file durable and reports any error.
  (void)sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
  finished_ = true;
  return FileDigest{.bytes = bytes_, .crc32c = crc_->Finish()};
}

absl::Status ChecksummedWriter::Sync() {
  if (fd_ < 0 || !finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, fd_ < 0 ? ": already closed" : ": Sync before Finish"));
  }
  if (fsync(fd_) != 0) return FileError(errno, absl::StrCat(path_, ": fsync"));
  close(fd_);
  fd_ = -1;
  return absl::OkStatus();
}

// --- row files ---

absl::StatusOr<std::unique_ptr<RowFileWriter>> RowFileWriter::Create(const std::string& path,
                                                                     int table, int row_floats) {
  return Create(path, table, RowCodec{RowDtype::kFp32, row_floats, 0});
}

absl::StatusOr<std::unique_ptr<RowFileWriter>> RowFileWriter::Create(const std::string& path,
                                                                     int table,
                                                                     const RowCodec& codec) {
  const int row_floats = codec.row_floats();
  if (table < 0 || codec.dim <= 0 || codec.state_floats < 0 || codec.dim > 0xFFFFFF) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad table ", table, " or row width ", row_floats));
  }
  std::unique_ptr<RowFileWriter> w(new RowFileWriter());
  w->path_ = path;
  w->row_floats_ = row_floats;
  w->codec_ = codec;
  const bool half = codec.dtype != RowDtype::kFp32;
  if (half) w->encoded_.resize(static_cast<size_t>(codec.bytes()));
  DLRM_ASSIGN_OR_RETURN(w->out_, ChecksummedWriter::Create(path));
  char header[kRowFileHeaderBytes] = {};
  std::memcpy(header, kRowMagic, 8);
  const uint32_t format =
      half ? static_cast<uint32_t>(codec.dtype) | static_cast<uint32_t>(codec.dim) << 8 : 0;
  const uint32_t fields[4] = {half ? kRowVersionHalf : kRowVersion, static_cast<uint32_t>(table),
                              static_cast<uint32_t>(row_floats), format};
  std::memcpy(header + 8, fields, sizeof(fields));
  DLRM_RETURN_IF_ERROR(w->out_->Append(header, sizeof(header)));
  return w;
}

absl::Status RowFileWriter::AppendRow(int64_t id, const float* row) {
  DLRM_RETURN_IF_ERROR(out_->Append(&id, sizeof(id)));
  if (!encoded_.empty()) {
    codec_.Encode(row, encoded_.data());
    DLRM_RETURN_IF_ERROR(out_->Append(encoded_.data(), encoded_.size()));
  } else {
    DLRM_RETURN_IF_ERROR(out_->Append(row, sizeof(float) * row_floats_));
  }
  ++rows_;
  return absl::OkStatus();
}

absl::Status RowFileWriter::Append(absl::Span<const int64_t> ids, const float* rows) {
  for (size_t i = 0; i < ids.size(); ++i) {
    DLRM_RETURN_IF_ERROR(AppendRow(ids[i], rows + i * row_floats_));
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> RowFileWriter::Close() {
  DLRM_ASSIGN_OR_RETURN(FileDigest digest, Finish());
  DLRM_RETURN_IF_ERROR(Sync());
  return digest;
}

absl::StatusOr<FileDigest> RowFileWriter::Finish() {
  char trailer[kRowFileTrailerBytes];
  const uint64_t rows = static_cast<uint64_t>(rows_);
  std::memcpy(trailer, &rows, 8);
  std::memcpy(trailer + 8, kRowEndMagic, 8);
  DLRM_RETURN_IF_ERROR(out_->Append(trailer, sizeof(trailer)));
  return out_->Finish();
}

absl::Status ReadRowFile(
    const std::string& path, int table, int row_floats,
    const std::function<absl::Status(absl::Span<const int64_t> ids, const float* rows)>& apply,
    int64_t chunk_rows) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", Errno()));
  auto fail = [&](const std::string& what) {
    std::fclose(f);
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  char header[kRowFileHeaderBytes];
  if (std::fread(header, 1, sizeof(header), f) != sizeof(header)) return fail("short header");
  if (std::memcmp(header, kRowMagic, 8) != 0) return fail("not a row file (bad magic)");
  uint32_t fields[4];
  std::memcpy(fields, header + 8, sizeof(fields));
  if (fields[0] != kRowVersion && fields[0] != kRowVersionHalf) {
    return fail(absl::StrCat("row file version ", fields[0], ", this build reads ", kRowVersion,
                             " and ", kRowVersionHalf));
  }
  if (fields[1] != static_cast<uint32_t>(table) || fields[2] != static_cast<uint32_t>(row_floats)) {
    return fail(absl::StrCat("holds table ", fields[1], " with rows of ", fields[2],
                             " floats; expected table ", table, " with ", row_floats));
  }
  RowCodec codec{RowDtype::kFp32, row_floats, 0};
  if (fields[0] == kRowVersionHalf) {
    const uint32_t dtype = fields[3] & 0xFF, dim = fields[3] >> 8;
    if ((dtype != static_cast<uint32_t>(RowDtype::kFp16) &&
         dtype != static_cast<uint32_t>(RowDtype::kBf16)) ||
        dim < 1 || dim > static_cast<uint32_t>(row_floats)) {
      return fail(absl::StrCat("half-precision row format ", fields[3], " (dtype ", dtype, ", dim ",
                               dim, ") for rows of ", row_floats, " floats"));
    }
    codec = {static_cast<RowDtype>(dtype), static_cast<int>(dim),
             row_floats - static_cast<int>(dim)};
  }
  // The record count follows from the size; the trailer must agree with it.
  if (std::fseek(f, 0, SEEK_END) != 0) return fail("cannot seek");
  const int64_t size = std::ftell(f);
  const int64_t record_size = 8 + codec.bytes();
  const int64_t body = size - kRowFileHeaderBytes - kRowFileTrailerBytes;
  if (body < 0 || body % record_size != 0) {
    return fail(absl::StrCat(size, " bytes is not a whole number of ", record_size, "-byte rows"));
  }
  char trailer[kRowFileTrailerBytes];
  if (std::fseek(f, size - kRowFileTrailerBytes, SEEK_SET) != 0 ||
      std::fread(trailer, 1, sizeof(trailer), f) != sizeof(trailer) ||
      std::memcmp(trailer + 8, kRowEndMagic, 8) != 0) {
    return fail("no end marker (unfinished file)");
  }
  uint64_t rows = 0;
  std::memcpy(&rows, trailer, 8);
  if (rows != static_cast<uint64_t>(body / record_size)) {
    return fail(
        absl::StrCat("trailer counts ", rows, " rows, the file holds ", body / record_size));
  }
  if (std::fseek(f, kRowFileHeaderBytes, SEEK_SET) != 0) return fail("cannot seek");
  const size_t record_bytes = static_cast<size_t>(record_size);
  std::vector<char> buf;
  std::vector<int64_t> ids;
  std::vector<float> values;
  uint64_t left = rows;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk_rows));
    buf.resize(n * record_bytes);
    if (std::fread(buf.data(), 1, buf.size(), f) != buf.size()) {
      return fail(absl::StrCat("ends after ", rows - left, " of ", rows, " rows"));
    }
    ids.resize(n);
    values.resize(n * row_floats);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&ids[i], buf.data() + i * record_bytes, 8);
      codec.Decode(buf.data() + i * record_bytes + 8, values.data() + i * row_floats);
    }
    absl::Status st = apply(ids, values.data());
    if (!st.ok()) {
      std::fclose(f);
      return Annotate(st, path);
    }
    left -= n;
  }
  std::fclose(f);
  return absl::OkStatus();
}

absl::Status SyncAll(absl::Span<const std::unique_ptr<RowFileWriter>> writers) {
  constexpr int kThreads = 4;
  std::vector<absl::Status> status(writers.size());
  common::ParallelForOnce(static_cast<int64_t>(writers.size()), kThreads,
                          [&](int64_t i) { status[i] = writers[i]->Sync(); });
  for (const absl::Status& s : status) DLRM_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace dlrm::embedding
