// The parameter server's Lookup answer (dlrm.v1.LookupResponse, proto/ps.proto) on the wire
// without the two copies a generated message costs. The rows are most of a lookup's bytes (1 MB
// for 2048 kaggle-shape samples at dim 16, 4 MB at dim 64); with generated messages the server
// gathers them into a bytes field that serialisation copies again, and the client parses them
// into a bytes field that it copies again into its own rows.
//
//   LookupAnswer (server): the table code writes rows in place into one buffer, which becomes
//     the response's slices as it is; the header bytes of each table are the only bytes written
//     besides the rows.
//   DecodeLookupResponse (client): reads the response's slices and copies each table's rows
//     straight to where the caller wants them (one copy, which any decoder makes).
//
// Both produce and accept exactly the bytes of a serialised LookupResponse, so either side may
// talk to a generated stub or service (tests check both directions and unknown fields).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/row_dtype.h"
#include "grpcpp/impl/codegen/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"

namespace dlrm::proto {

// The full method name of ParameterServer.Lookup, for generic stubs.
inline constexpr char kLookupMethod[] = "/dlrm.v1.ParameterServer/Lookup";

// Server side: the answer to one Lookup, its rows in one 64-byte-aligned buffer (taken from a
// process-wide pool of at most 8 buffers of up to 16 MB, to which gRPC returns it after sending
// it).
class LookupAnswer {
 public:
  struct Table {
    int32_t table = 0;  // index in the job
    int32_t dim = 0;
    int64_t rows = 0;                                        // ids asked
    embedding::RowDtype dtype = embedding::RowDtype::kFp32;  // of the rows
  };

  // Lays out an answer for `tables` (in request order) with room for their rows, uninitialised.
  // A buffer earlier given to gRPC by Release stays with gRPC; others are dropped.
  void Reset(absl::Span<const Table> tables);
  int num_tables() const { return static_cast<int>(tables_.size()); }
  // The rows of table i: tables[i].rows x tables[i].dim values of tables[i].dtype (2 or 4 bytes
  // each, no alignment promised), to be filled by the caller.
  void* rows(int i) { return base_ + offsets_[i]; }

  // The serialised LookupResponse: per table a header slice of a few bytes and a slice of the
  // rows, which gRPC sends from this answer's buffer (it frees the buffer when done). The answer
  // is empty afterwards.
  grpc::ByteBuffer Release();

 private:
  std::vector<Table> tables_;
  std::vector<int64_t> offsets_;  // bytes from base_ to each table's rows
  grpc::Slice buffer_;            // owns the rows
  char* base_ = nullptr;
};

// Client side: where the rows of one table of the answer go.
struct LookupRowsTarget {
  int32_t table = 0;  // the table asked for (the answer must name it)
  int32_t dim = 0;
  int64_t count = 0;  // ids asked: the answer carries count x dim values of `dtype`
  // Row j lands at out + positions[j] * dim, or at out + j * dim when positions is null.
  float* out = nullptr;
  const int32_t* positions = nullptr;
  // The table's dtype: the answer must say the same; its rows are widened to floats here.
  embedding::RowDtype dtype = embedding::RowDtype::kFp32;
};

// Decodes a serialised LookupResponse whose tables answer `targets` one for one, in order, and
// copies each table's rows to its target. INTERNAL naming the table and the mismatch when the
// answer has another number of tables, another table, dim or dtype than asked, rows that are not
// count x dim x (4 or 2) bytes, or is not a well-formed message. Unknown fields are skipped.
absl::Status DecodeLookupResponse(grpc::ByteBuffer* buffer,
                                  absl::Span<const LookupRowsTarget> targets);

// A response type for a generic stub (grpc::TemplatedGenericStub<LookupRequest, LookupRowsSink>):
// gRPC decodes the answer into the targets as it receives it.
struct LookupRowsSink {
  absl::Span<const LookupRowsTarget> targets;
  int64_t bytes = 0;  // the serialized answer's size, once one arrived (for byte counting)
};

}  // namespace dlrm::proto

namespace grpc {

template <>
class SerializationTraits<dlrm::proto::LookupRowsSink, void> {
 public:
  // Clients never send a LookupRowsSink.
  static Status Serialize(const dlrm::proto::LookupRowsSink& sink, ByteBuffer* buffer,
                          bool* own_buffer);
  static Status Deserialize(ByteBuffer* buffer, dlrm::proto::LookupRowsSink* sink);
};

}  // namespace grpc
