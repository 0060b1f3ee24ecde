#include "proto/lookup_wire.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace dlrm::proto {
namespace {

using google::protobuf::internal::WireFormatLite;

// Field numbers of LookupResponse and TableRows (proto/ps.proto).
constexpr int kResponseTables = 1;
constexpr int kRowsTable = 1;
constexpr int kRowsDim = 2;
constexpr int kRowsRows = 3;
constexpr int kRowsDtype = 4;
constexpr size_t kAlignment = 64;

uint32_t Tag(int field, WireFormatLite::WireType type) {
  return WireFormatLite::MakeTag(field, type);
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Fields of one TableRows, the rows going straight to `target`.
absl::Status DecodeTable(google::protobuf::io::CodedInputStream* in, const LookupRowsTarget& target,
                         int index) {
  const embedding::RowDtype dtype = target.dtype;
  const int64_t row_bytes =
      static_cast<int64_t>(target.dim) * static_cast<int64_t>(embedding::DtypeBytes(dtype));
  const int64_t expected = target.count * row_bytes;
  int64_t table = 0, dim = 0;
  std::string dtype_name;
  bool rows_seen = false;
  // Half rows arrive here first and are widened into target.out.
  thread_local std::vector<char> narrow;
  auto error = [&](const std::string& what) {
    return absl::InternalError(
        absl::StrCat("Lookup answer, table ", index, " (table ", target.table, " asked): ", what));
  };
  while (const uint32_t tag = in->ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    uint64_t value = 0;
    if (field == kRowsTable && type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in->ReadVarint64(&value)) return error("truncated table field");
      table = static_cast<int32_t>(value);
    } else if (field == kRowsDim && type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in->ReadVarint64(&value)) return error("truncated dim field");
      dim = static_cast<int32_t>(value);
    } else if (field == kRowsRows && type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length)) return error("truncated rows length");
      if (static_cast<int64_t>(length) != expected) {
        return error(absl::StrCat(length, " bytes of rows for ", target.count, " ids of dim ",
                                  target.dim, " (expected ", expected, ")"));
      }
      bool ok = true;
      const bool wide = dtype == embedding::RowDtype::kFp32;
      if (target.positions == nullptr) {
        if (wide) {
          ok = in->ReadRaw(target.out, static_cast<int>(length));
        } else {
          narrow.resize(length);
          ok = in->ReadRaw(narrow.data(), static_cast<int>(length));
          if (ok) {
            embedding::DecodeValues(dtype, narrow.data(), target.count * target.dim, target.out);
          }
        }
      } else {
        if (!wide) narrow.resize(row_bytes);
        for (int64_t j = 0; j < target.count && ok; ++j) {
          float* out = target.out + static_cast<int64_t>(target.positions[j]) * target.dim;
          if (wide) {
            ok = in->ReadRaw(out, static_cast<int>(row_bytes));
          } else {
            ok = in->ReadRaw(narrow.data(), static_cast<int>(row_bytes));
            if (ok) embedding::DecodeValues(dtype, narrow.data(), target.dim, out);
          }
        }
      }
      if (!ok) return error("truncated rows");
      rows_seen = true;
    } else if (field == kRowsDtype && type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length) || length > 16 ||
          !in->ReadString(&dtype_name, static_cast<int>(length))) {
        return error("malformed dtype field");
      }
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return error(absl::StrCat("malformed field ", field));
    }
  }
  if (!in->ConsumedEntireMessage()) return error("malformed message");
  if (table != target.table) return error(absl::StrCat("answers table ", table));
  if (dim != target.dim) {
    return error(absl::StrCat("rows of dim ", dim, ", expected ", target.dim));
  }
  const char* asked = dtype == embedding::RowDtype::kFp32 ? "" : embedding::RowDtypeName(dtype);
  if (dtype_name != asked) {
    return error(absl::StrCat("rows of dtype '", dtype_name, "', expected '", asked, "'"));
  }
  if (!rows_seen && expected != 0) return error("no rows");
  return absl::OkStatus();
}

// Answer buffers, reused: a lookup answer is megabytes, and a fresh allocation of that size is
// mapped and faulted in page by page on every call. gRPC returns a buffer here when it has sent
// the last slice of it (the slice's destroy callback). Process-wide, never destroyed, so that a
// buffer released after its server is gone still has somewhere to go.
class BufferPool {
 public:
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
  };
  static constexpr size_t kMaxPooled = 8;
  static constexpr size_t kMaxPooledBytes = size_t{16} << 20;  // at most 128 MB kept

  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool;
    return *pool;
  }
  // A buffer of at least `bytes` bytes, 64-byte aligned.
  Buffer* Take(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      // The smallest pooled buffer that fits.
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if ((*it)->capacity >= bytes &&
            (best == free_.end() || (*it)->capacity < (*best)->capacity)) {
          best = it;
        }
      }
      if (best != free_.end()) {
        Buffer* b = *best;
        free_.erase(best);
        return b;
      }
    }
    auto* b = new Buffer;
    b->capacity = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    b->data = std::aligned_alloc(kAlignment, b->capacity);
    return b;
  }
  static void Return(void* user_data) { Get().Put(static_cast<Buffer*>(user_data)); }

 private:
  void Put(Buffer* b) {
    if (b->capacity <= kMaxPooledBytes) {
      absl::MutexLock lock(&mu_);
      if (free_.size() < kMaxPooled) {
        free_.push_back(b);
        return;
      }
    }
    std::free(b->data);
    delete b;
  }

  absl::Mutex mu_;
  std::vector<Buffer*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void LookupAnswer::Reset(absl::Span<const Table> tables) {
  tables_.assign(tables.begin(), tables.end());
  offsets_.resize(tables_.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < tables_.size(); ++i) {
    offsets_[i] = bytes;
    bytes += tables_[i].rows * tables_[i].dim * embedding::DtypeBytes(tables_[i].dtype);
  }
  // Another buffer each time: the last one may still be on its way out through gRPC.
  BufferPool::Buffer* b = BufferPool::Get().Take(static_cast<size_t>(bytes));
  buffer_ = grpc::Slice(b->data, static_cast<size_t>(bytes), &BufferPool::Return, b);
  base_ = static_cast<char*>(b->data);
}

grpc::ByteBuffer LookupAnswer::Release() {
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * tables_.size());
  for (size_t i = 0; i < tables_.size(); ++i) {
    const Table& t = tables_[i];
    const uint64_t row_bytes =
        static_cast<uint64_t>(t.rows) * t.dim * embedding::DtypeBytes(t.dtype);
    const std::string_view dtype =
        t.dtype == embedding::RowDtype::kFp32 ? "" : embedding::RowDtypeName(t.dtype);
    // int32 fields are varints of their sign-extended 64-bit value.
    const uint64_t table = static_cast<uint64_t>(static_cast<int64_t>(t.table));
    const uint64_t dim = static_cast<uint64_t>(static_cast<int64_t>(t.dim));
    const uint64_t dtype_bytes = dtype.empty() ? 0 : 1 + VarintSize(dtype.size()) + dtype.size();
    const uint64_t inner = 1 + VarintSize(table) + 1 + VarintSize(dim) + dtype_bytes + 1 +
                           VarintSize(row_bytes) + row_bytes;
    char header[64];
    char* p = header;
    p = PutVarint(Tag(kResponseTables, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
    p = PutVarint(inner, p);
    p = PutVarint(Tag(kRowsTable, WireFormatLite::WIRETYPE_VARINT), p);
    p = PutVarint(table, p);
    p = PutVarint(Tag(kRowsDim, WireFormatLite::WIRETYPE_VARINT), p);
    p = PutVarint(dim, p);
    if (!dtype.empty()) {
      p = PutVarint(Tag(kRowsDtype, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
      p = PutVarint(dtype.size(), p);
      std::memcpy(p, dtype.data(), dtype.size());
      p += dtype.size();
    }
    p = PutVarint(Tag(kRowsRows, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
    p = PutVarint(row_bytes, p);
    slices.emplace_back(header, static_cast<size_t>(p - header));
    if (row_bytes > 0) {
      const size_t begin = static_cast<size_t>(offsets_[i]);
      slices.push_back(buffer_.sub(begin, begin + row_bytes));
    }
  }
  grpc::ByteBuffer out(slices.data(), slices.size());
  tables_.clear();
  offsets_.clear();
  buffer_ = grpc::Slice();
  base_ = nullptr;
  return out;
}

absl::Status DecodeLookupResponse(grpc::ByteBuffer* buffer,
                                  absl::Span<const LookupRowsTarget> targets) {
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) {
    return absl::InternalError("Lookup answer: unreadable response buffer");
  }
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  size_t k = 0;
  while (const uint32_t tag = in.ReadTag()) {
    if (tag != Tag(kResponseTables, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      if (!WireFormatLite::SkipField(&in, tag)) {
        return absl::InternalError("Lookup answer: malformed message");
      }
      continue;
    }
    if (k == targets.size()) {
      return absl::InternalError(
          absl::StrCat("Lookup answer: more than the ", targets.size(), " tables asked"));
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return absl::InternalError("Lookup answer: truncated");
    const auto limit = in.PushLimit(static_cast<int>(length));
    absl::Status status = DecodeTable(&in, targets[k], static_cast<int>(k));
    if (!status.ok()) return status;
    in.PopLimit(limit);
    ++k;
  }
  if (!in.ConsumedEntireMessage()) return absl::InternalError("Lookup answer: malformed message");
  if (k != targets.size()) {
    return absl::InternalError(
        absl::StrCat("Lookup answer: ", k, " tables answered, ", targets.size(), " asked"));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::proto

namespace grpc {

Status SerializationTraits<dlrm::proto::LookupRowsSink, void>::Serialize(
    const dlrm::proto::LookupRowsSink& /*sink*/, ByteBuffer* /*buffer*/, bool* /*own_buffer*/) {
  return Status(StatusCode::INTERNAL, "a LookupRowsSink only receives");
}

Status SerializationTraits<dlrm::proto::LookupRowsSink, void>::Deserialize(
    ByteBuffer* buffer, dlrm::proto::LookupRowsSink* sink) {
  sink->bytes = static_cast<int64_t>(buffer->Length());
  absl::Status status = dlrm::proto::DecodeLookupResponse(buffer, sink->targets);
  buffer->Clear();
  if (status.ok()) return Status::OK;
  return Status(StatusCode::INTERNAL, std::string(status.message()));
}

}  // namespace grpc
