#include "common/job_spec.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;

constexpr char kValid[] = R"(
name: small
model:
  dense_features: 13
  bottom_mlp: [64, 16]
  top_mlp: [32, 1]
  embedding_dim: 16
tables:
  cardinalities: [100, 2000, 30]
optimizer:
  dense: {type: adam, learning_rate: 0.002}
  sparse: {type: rowwise_adagrad, learning_rate: 0.1}
training: {batch_size: 128, epochs: 2, seed: 7, hot_budget: 1MiB}
data: {train: [a.tsv, b.tsv], eval_fraction: 0.2}
)";

TEST(JobSpec, ParsesValidSpec) {
  auto spec = ParseJobSpec(kValid);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "small");
  EXPECT_EQ(spec->tables.size(), 3u);
  EXPECT_EQ(spec->tables[1].name, "C2");
  EXPECT_EQ(spec->tables[1].rows, 2000);
  EXPECT_EQ(spec->dense_optimizer.type, "adam");
  EXPECT_DOUBLE_EQ(spec->sparse_optimizer.learning_rate, 0.1);
  EXPECT_EQ(spec->batch_size, 128);
  EXPECT_EQ(spec->hot_budget_bytes, 1 << 20);
  EXPECT_EQ(spec->train_paths.size(), 2u);
  EXPECT_EQ(spec->TopInputWidth(), 16 + 4 * 3 / 2);
}

TEST(JobSpec, RoundTripsThroughYaml) {
  auto spec = ParseJobSpec(kValid);
  ASSERT_TRUE(spec.ok());
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*spec));
  EXPECT_EQ(again->tables.size(), spec->tables.size());
  EXPECT_EQ(again->seed, spec->seed);
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

TEST(JobSpec, UnknownKeyIsNamed) {
  auto spec = ParseJobSpec(Replace(kValid, "batch_size: 128", "batchsize: 128"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("training.batchsize"));
}

TEST(JobSpec, NegativeSizeIsNamed) {
  auto spec = ParseJobSpec(Replace(kValid, "[100, 2000, 30]", "[100, -5, 30]"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("tables.cardinalities[1]"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("-5"));
  spec = ParseJobSpec(Replace(kValid, "batch_size: 128", "batch_size: -1"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("training.batch_size"));
}

TEST(JobSpec, CheckpointSectionRoundTripsAndBadValuesAreNamed) {
  const std::string with = std::string(kValid) +
                           "checkpoint: {dir: /ckpt/small, every_steps: 100, keep_last: 2, "
                           "full_every: 4, resume_from: /ckpt/old}\n";
  auto spec = ParseJobSpec(with);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint.dir, "/ckpt/small");
  EXPECT_EQ(spec->checkpoint.every_steps, 100);
  EXPECT_EQ(spec->checkpoint.keep_last, 2);
  EXPECT_EQ(spec->checkpoint.full_every, 4);
  EXPECT_EQ(spec->checkpoint.resume_from, "/ckpt/old");
  auto again = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->checkpoint.dir, "/ckpt/small");
  EXPECT_EQ(again->checkpoint.resume_from, "/ckpt/old");
  EXPECT_EQ(again->checkpoint.full_every, 4);

  for (const auto& [bad, key] : std::vector<std::pair<std::string, std::string>>{
           {"checkpoint: {dir: /c, keep_last: 0}", "checkpoint.keep_last"},
           {"checkpoint: {dir: /c, full_every: 0}", "checkpoint.full_every"},
           {"checkpoint: {dir: /c, every_steps: -1}", "checkpoint.every_steps"},
           {"checkpoint: {dir: /c, every_seconds: .nan}", "checkpoint.every_seconds"},
           {"checkpoint: {every_steps: 10}", "checkpoint.dir"},
           {"checkpoint: {dir: /c, evry_steps: 10}", "checkpoint.evry_steps"}}) {
    auto r = ParseJobSpec(std::string(kValid) + bad + "\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(key)) << bad;
  }
}

TEST(JobSpec, MismatchedDimensionsAreNamed) {
  auto spec = ParseJobSpec(Replace(kValid, "bottom_mlp: [64, 16]", "bottom_mlp: [64, 32]"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("model.bottom_mlp"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("model.embedding_dim 16"));
  spec = ParseJobSpec(Replace(kValid, "top_mlp: [32, 1]", "top_mlp: [32, 2]"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("model.top_mlp"));
}

TEST(JobSpec, BadValuesAreNamed) {
  auto spec = ParseJobSpec(Replace(kValid, "type: adam,", "type: lbfgs,"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("optimizer.dense.type"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("lbfgs"));
  spec = ParseJobSpec(Replace(kValid, "epochs: 2", "epochs: two"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("training.epochs"));
  spec = ParseJobSpec("model: [unclosed");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("not valid YAML"));
}

TEST(JobSpec, MissingFileNamesPath) {
  auto spec = LoadJobSpec("/nonexistent/job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("/nonexistent/job.yaml"));
}

TEST(ByteSize, ParsesUnits) {
  EXPECT_EQ(*ParseByteSize("64MiB"), 64LL << 20);
  EXPECT_EQ(*ParseByteSize("2GB"), 2000000000LL);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("MiB").ok());
}

}  // namespace
}  // namespace dlrm::common
