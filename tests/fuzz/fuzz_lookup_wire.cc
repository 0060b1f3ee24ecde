// Fuzz target: the client's in-place decoder of LookupResponse bytes (proto/lookup_wire.h). The
// first bytes choose what was asked (tables, dims, dtypes, counts); the rest is the answer. Any
// answer is decoded or refused (INTERNAL naming the mismatch); nothing is written outside the
// targets.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/lookup_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int tables = 1 + data[0] % 4;
  size_t pos = 1;
  std::vector<dlrm::proto::LookupRowsTarget> targets(tables);
  std::vector<std::vector<float>> out(tables);
  for (int t = 0; t < tables; ++t) {
    const uint8_t a = pos < size ? data[pos++] : 1;
    const uint8_t b = pos < size ? data[pos++] : 1;
    targets[t].table = t;
    targets[t].dim = 1 + a % 16;
    targets[t].dtype = static_cast<dlrm::embedding::RowDtype>((a >> 4) % 3);  // fp32 fp16 bf16
    targets[t].count = b % 8;
    out[t].assign(targets[t].dim * targets[t].count, 0.0f);
    targets[t].out = out[t].data();
  }
  grpc::Slice slice(data + pos, size - pos);
  grpc::ByteBuffer buffer(&slice, 1);
  (void)dlrm::proto::DecodeLookupResponse(&buffer, targets);
  return 0;
}
