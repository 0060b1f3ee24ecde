// The hand-written Lookup answer encoding (proto/lookup_wire.h) against the generated message:
// bytes written by LookupAnswer parse as a LookupResponse, and DecodeLookupResponse reads what
// the generated message writes, from any slicing of the bytes, skipping unknown fields and
// refusing answers that do not match what was asked.
#include "proto/lookup_wire.h"

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace dlrm::proto {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The bytes in slices of `piece` bytes each (the last one shorter).
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

float Value(int table, int64_t row, int k) { return table * 1000.0f + row + k * 0.125f; }

dlrm::v1::LookupResponse MakeResponse(const std::vector<LookupAnswer::Table>& tables) {
  dlrm::v1::LookupResponse response;
  for (const auto& t : tables) {
    dlrm::v1::TableRows* rows = response.add_tables();
    rows->set_table(t.table);
    rows->set_dim(t.dim);
    std::vector<float> v(t.rows * t.dim);
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int k = 0; k < t.dim; ++k) v[r * t.dim + k] = Value(t.table, r, k);
    }
    rows->set_rows(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return response;
}

const std::vector<LookupAnswer::Table> kTables = {{0, 16, 5}, {7, 4, 0}, {25, 64, 300}, {3, 3, 1}};

TEST(LookupWireTest, AnswerParsesAsTheGeneratedMessage) {
  LookupAnswer answer;
  answer.Reset(kTables);
  ASSERT_EQ(answer.num_tables(), 4);
  for (int i = 0; i < answer.num_tables(); ++i) {
    const auto& t = kTables[i];
    EXPECT_EQ(reinterpret_cast<uintptr_t>(answer.rows(i)) % alignof(float), 0u);
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int k = 0; k < t.dim; ++k) {
        static_cast<float*>(answer.rows(i))[r * t.dim + k] = Value(t.table, r, k);
      }
    }
  }
  const grpc::ByteBuffer bytes = answer.Release();
  EXPECT_EQ(answer.num_tables(), 0);
  dlrm::v1::LookupResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(bytes)));
  // Equal to what the generated message would send, field by field.
  const dlrm::v1::LookupResponse expected = MakeResponse(kTables);
  ASSERT_EQ(parsed.tables_size(), expected.tables_size());
  for (int i = 0; i < parsed.tables_size(); ++i) {
    EXPECT_EQ(parsed.tables(i).table(), expected.tables(i).table());
    EXPECT_EQ(parsed.tables(i).dim(), expected.tables(i).dim());
    EXPECT_EQ(parsed.tables(i).rows(), expected.tables(i).rows()) << "table " << i;
  }
}

// Tables of fp16 and bf16 rows (2 bytes a value) next to an fp32 one: the answer names each
// dtype, parses as the generated message, and decodes back to the same floats in any slicing; a
// decoder expecting another dtype refuses it.
TEST(LookupWireTest, HalfPrecisionRowsGoAsTwoBytesAValueAndNameTheirDtype) {
  using embedding::RowDtype;
  const std::vector<LookupAnswer::Table> tables = {
      {0, 16, 5, RowDtype::kFp16}, {1, 3, 7, RowDtype::kFp32}, {2, 8, 9, RowDtype::kBf16}};
  // Values each dtype holds exactly: small multiples of 1/8.
  auto value = [](int table, int64_t r, int k) { return table * 4.0f + r + k * 0.125f; };
  LookupAnswer answer;
  answer.Reset(tables);
  for (int i = 0; i < 3; ++i) {
    const auto& t = tables[i];
    std::vector<float> v(t.rows * t.dim);
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int k = 0; k < t.dim; ++k) v[r * t.dim + k] = value(t.table, r, k);
    }
    embedding::EncodeValues(t.dtype, v.data(), static_cast<int64_t>(v.size()), answer.rows(i));
  }
  const std::string bytes = Flatten(answer.Release());
  dlrm::v1::LookupResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.tables_size(), 3);
  EXPECT_EQ(parsed.tables(0).dtype(), "fp16");
  EXPECT_EQ(parsed.tables(0).rows().size(), 5u * 16 * 2);
  EXPECT_EQ(parsed.tables(1).dtype(), "");
  EXPECT_EQ(parsed.tables(1).rows().size(), 7u * 3 * 4);
  EXPECT_EQ(parsed.tables(2).dtype(), "bf16");
  EXPECT_EQ(parsed.tables(2).rows().size(), 9u * 8 * 2);
  for (size_t piece : {size_t{1}, size_t{5}, size_t{64}, bytes.size()}) {
    std::vector<std::vector<float>> out(3);
    std::vector<LookupRowsTarget> targets;
    for (int i = 0; i < 3; ++i) {
      out[i].assign(tables[i].rows * tables[i].dim, -1.0f);
      targets.push_back({tables[i].table, tables[i].dim, tables[i].rows, out[i].data(), nullptr,
                         tables[i].dtype});
    }
    grpc::ByteBuffer buffer = Sliced(bytes, piece);
    ASSERT_TRUE(DecodeLookupResponse(&buffer, targets).ok()) << "slices of " << piece;
    for (int i = 0; i < 3; ++i) {
      const auto& t = tables[i];
      for (int64_t r = 0; r < t.rows; ++r) {
        for (int k = 0; k < t.dim; ++k) {
          ASSERT_EQ(out[i][r * t.dim + k], value(t.table, r, k)) << "table " << i << " row " << r;
        }
      }
    }
  }
  // Scattered to positions too.
  const std::vector<int32_t> positions = {8, 0, 6, 2, 5, 1, 3, 7, 4};
  std::vector<float> scattered(9 * 8, -1.0f);
  dlrm::v1::LookupResponse only_bf16;
  *only_bf16.add_tables() = parsed.tables(2);
  grpc::ByteBuffer buffer = Sliced(only_bf16.SerializeAsString(), 7);
  ASSERT_TRUE(DecodeLookupResponse(&buffer,
                                   {{2, 8, 9, scattered.data(), positions.data(), RowDtype::kBf16}})
                  .ok());
  for (int j = 0; j < 9; ++j) EXPECT_EQ(scattered[positions[j] * 8 + 3], value(2, j, 3));
  // Another dtype than asked, even of the same width, is refused by name.
  std::vector<float> out(9 * 8);
  buffer = Sliced(only_bf16.SerializeAsString(), 7);
  absl::Status s = DecodeLookupResponse(&buffer, {{2, 8, 9, out.data(), nullptr, RowDtype::kFp16}});
  EXPECT_NE(s.message().find("rows of dtype 'bf16', expected 'fp16'"), std::string::npos) << s;
  // An answer whose dim field says more than was asked, with rows of the asked size: refused by
  // name, and nothing is read or written past the rows (found by fuzz_lookup_wire).
  dlrm::v1::LookupResponse wider = only_bf16;
  wider.mutable_tables(0)->set_dim(64);
  buffer = Sliced(wider.SerializeAsString(), 7);
  s = DecodeLookupResponse(&buffer, {{2, 8, 9, out.data(), nullptr, RowDtype::kBf16}});
  EXPECT_NE(s.message().find("rows of dim 64, expected 8"), std::string::npos) << s;
  buffer = Sliced(only_bf16.SerializeAsString(), 7);
  s = DecodeLookupResponse(&buffer, {{2, 8, 9, out.data()}});
  EXPECT_NE(s.message().find("144 bytes of rows for 9 ids of dim 8"), std::string::npos) << s;
}

TEST(LookupWireTest, DecodesGeneratedBytesInAnySlicing) {
  const std::string bytes = MakeResponse(kTables).SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{7}, size_t{64}, size_t{4096}, bytes.size()}) {
    std::vector<std::vector<float>> out(kTables.size());
    std::vector<LookupRowsTarget> targets;
    for (size_t i = 0; i < kTables.size(); ++i) {
      out[i].assign(kTables[i].rows * kTables[i].dim, -1.0f);
      targets.push_back({kTables[i].table, kTables[i].dim, kTables[i].rows, out[i].data()});
    }
    grpc::ByteBuffer buffer = Sliced(bytes, piece);
    ASSERT_TRUE(DecodeLookupResponse(&buffer, targets).ok()) << "slices of " << piece;
    for (size_t i = 0; i < kTables.size(); ++i) {
      const auto& t = kTables[i];
      for (int64_t r = 0; r < t.rows; ++r) {
        for (int k = 0; k < t.dim; ++k) {
          ASSERT_EQ(out[i][r * t.dim + k], Value(t.table, r, k))
              << "slices of " << piece << ", table " << i << " row " << r << " float " << k;
        }
      }
    }
  }
}

TEST(LookupWireTest, ScattersRowsToPositions) {
  const std::vector<LookupAnswer::Table> one = {{2, 8, 5}};
  const std::string bytes = MakeResponse(one).SerializeAsString();
  const std::vector<int32_t> positions = {4, 0, 6, 2, 5};  // 7 slots; 1 and 3 untouched
  std::vector<float> out(7 * 8, -1.0f);
  LookupRowsTarget target{2, 8, 5, out.data(), positions.data()};
  grpc::ByteBuffer buffer = Sliced(bytes, 13);
  ASSERT_TRUE(DecodeLookupResponse(&buffer, {target}).ok());
  for (int j = 0; j < 5; ++j) {
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[positions[j] * 8 + k], Value(2, j, k));
  }
  for (int untouched : {1, 3}) EXPECT_EQ(out[untouched * 8], -1.0f);
}

TEST(LookupWireTest, SkipsUnknownFields) {
  dlrm::v1::LookupResponse response = MakeResponse({{1, 2, 3}});
  response.GetReflection()->MutableUnknownFields(&response)->AddVarint(99, 12345);
  dlrm::v1::TableRows* rows = response.mutable_tables(0);
  rows->GetReflection()->MutableUnknownFields(rows)->AddLengthDelimited(42, "ignore me");
  rows->GetReflection()->MutableUnknownFields(rows)->AddFixed64(43, 7);
  std::vector<float> out(6);
  grpc::ByteBuffer buffer = Sliced(response.SerializeAsString(), 5);
  ASSERT_TRUE(DecodeLookupResponse(&buffer, {{1, 2, 3, out.data()}}).ok());
  EXPECT_EQ(out[5], Value(1, 2, 1));
}

absl::Status DecodeOne(const std::string& bytes, LookupRowsTarget target) {
  grpc::ByteBuffer buffer = Sliced(bytes, 16);
  return DecodeLookupResponse(&buffer, {target});
}

TEST(LookupWireTest, RefusesAnswersThatDoNotMatchTheQuestion) {
  const std::string bytes = MakeResponse({{4, 8, 10}}).SerializeAsString();
  std::vector<float> out(10 * 8);
  // Right question: fine.
  EXPECT_TRUE(DecodeOne(bytes, {4, 8, 10, out.data()}).ok());
  // Another row count, table or dim: named in the error.
  absl::Status s = DecodeOne(bytes, {4, 8, 9, out.data()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("320 bytes of rows for 9 ids of dim 8"), std::string::npos) << s;
  s = DecodeOne(bytes, {5, 8, 10, out.data()});
  EXPECT_NE(s.message().find("answers table 4"), std::string::npos) << s;
  s = DecodeOne(MakeResponse({{4, 4, 20}}).SerializeAsString(), {4, 8, 10, out.data()});
  EXPECT_NE(s.message().find("rows of dim 4, expected 8"), std::string::npos) << s;
  // Fewer or more tables than asked.
  grpc::ByteBuffer buffer = Sliced(bytes, 16);
  s = DecodeLookupResponse(&buffer, {{4, 8, 10, out.data()}, {4, 8, 10, out.data()}});
  EXPECT_NE(s.message().find("1 tables answered, 2 asked"), std::string::npos) << s;
  buffer = Sliced(MakeResponse({{4, 8, 10}, {4, 8, 10}}).SerializeAsString(), 16);
  s = DecodeLookupResponse(&buffer, {{4, 8, 10, out.data()}});
  EXPECT_NE(s.message().find("more than the 1 tables asked"), std::string::npos) << s;
}

TEST(LookupWireTest, TruncatedOrGarbageBytesAreErrorsNotCrashes) {
  const std::string bytes = MakeResponse({{4, 8, 10}}).SerializeAsString();
  std::vector<float> out(10 * 8);
  for (size_t cut = 1; cut < bytes.size(); cut += 37) {
    EXPECT_FALSE(DecodeOne(bytes.substr(0, cut), {4, 8, 10, out.data()}).ok()) << "cut " << cut;
  }
  std::string garbage(300, '\xff');
  EXPECT_FALSE(DecodeOne(garbage, {4, 8, 10, out.data()}).ok());
}

TEST(LookupWireTest, SinkReportsDecodeErrorsAsGrpcStatus) {
  std::vector<float> out(10 * 8);
  std::vector<LookupRowsTarget> targets = {{4, 8, 9, out.data()}};
  LookupRowsSink sink{targets};
  grpc::ByteBuffer buffer = Sliced(MakeResponse({{4, 8, 10}}).SerializeAsString(), 100);
  const grpc::Status s = grpc::SerializationTraits<LookupRowsSink>::Deserialize(&buffer, &sink);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("for 9 ids"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace dlrm::proto
