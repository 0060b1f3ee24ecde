// How the job spec parser reads what a user wrote: a key given twice, integers with a leading zero
// or past their type, byte sizes up to the PiB limit, a file that cannot be read, and values the
// job would ignore (warned about, not refused).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace dlrm::common {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

// Block style throughout, so that each key has a line of its own (line 1 is "name: small").
constexpr char kSpec[] = R"(name: small
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
training:
  batch_size: 128
  epochs: 2
  seed: 7
data:
  train: [a.tsv]
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string Message(const absl::StatusOr<JobSpec>& spec) {
  return std::string(spec.status().message());
}

TEST(JobSpecDuplicateKeys, AKeyGivenTwiceIsRefusedNamingItAndBothLines) {
  ASSERT_TRUE(ParseJobSpec(kSpec).ok());
  struct Case {
    std::string from, to, key, lines;
  };
  const std::vector<Case> cases = {
      // The tester's case: yaml-cpp's lookup found the first, so 2 epochs were trained.
      {"  epochs: 2\n", "  epochs: 2\n  epochs: 1\n",
       "training.epochs: ", "line 15 (first at line 14)"},
      {"name: small\n", "name: small\nname: other\n", "name: ", "line 2 (first at line 1)"},
      // A whole section twice.
      {"data:\n", "data:\n  train: [b.tsv]\ndata:\n", "data: ", "line 18 (first at line 16)"},
      // Flow style, and inside a sequence.
      {"{type: adam, learning_rate: 0.002}", "{type: adam, learning_rate: 0.002, type: sgd}",
       "optimizer.dense.type: ", "line 10 (first at line 10)"},
      {"  cardinalities: [100, 2000, 30]\n", "  - {name: a, rows: 10, rows: 20}\n",
       "tables[0].rows: ", "line 8 (first at line 8)"},
      // Quoting does not make it another key.
      {"  seed: 7\n", "  seed: 7\n  \"seed\": 8\n",
       "training.seed: ", "line 16 (first at line 15)"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(Replace(kSpec, c.from, c.to), "job.yaml");
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.to;
    EXPECT_THAT(Message(spec), AllOf(HasSubstr("job.yaml: "), HasSubstr(c.key),
                                     HasSubstr("duplicate key"), HasSubstr(c.lines)))
        << c.to;
  }
  // The same key in different mappings is fine: `name` at the root and in each table, `type` in
  // both optimizers, an anchor reused by an alias.
  auto spec = ParseJobSpec(Replace(Replace(kSpec, "  cardinalities: [100, 2000, 30]\n",
                                           "  - {name: a, rows: 10}\n  - {name: b, rows: 20}\n"),
                                   "  dense: {type: adam, learning_rate: 0.002}\n  sparse: "
                                   "{type: rowwise_adagrad, learning_rate: 0.1}\n",
                                   "  dense: &opt {type: adagrad, learning_rate: 0.002}\n"
                                   "  sparse: *opt\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->tables[1].name, "b");
  EXPECT_EQ(spec->sparse_optimizer.type, "adagrad");
}

TEST(JobSpecIntegers, ALeadingZeroIsRefusedNamingTheKeyForEveryIntegerKey) {
  // yaml-cpp read 0400 as octal 256, 0100 as 64, and refused 09.
  struct Case {
    std::string from, to, key, text;
  };
  const std::vector<Case> cases = {
      {"batch_size: 128", "batch_size: 0400", "training.batch_size: ", "'0400'"},
      {"batch_size: 128", "batch_size: 0100", "training.batch_size: ", "'0100'"},
      {"batch_size: 128", "batch_size: 09", "training.batch_size: ", "'09'"},
      {"epochs: 2", "epochs: 02", "training.epochs: ", "'02'"},
      {"seed: 7", "seed: 007", "training.seed: ", "'007'"},
      {"dense_features: 13", "dense_features: 013", "model.dense_features: ", "'013'"},
      {"bottom_mlp: [64, 16]", "bottom_mlp: [064, 16]", "model.bottom_mlp[0]: ", "'064'"},
      {"[100, 2000, 30]", "[100, 02000, 30]", "tables.cardinalities[1]: ", "'02000'"},
      {"  cardinalities: [100, 2000, 30]\n", "  - {name: a, rows: 010}\n",
       "tables[0].rows: ", "'010'"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(Replace(kSpec, c.from, c.to));
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.to;
    EXPECT_THAT(Message(spec), AllOf(HasSubstr(c.key), HasSubstr(c.text), HasSubstr("leading zero"),
                                     HasSubstr("decimal")))
        << c.to;
  }
  auto spec = ParseJobSpec(Replace(kSpec, "batch_size: 128", "batch_size: 0400"));
  EXPECT_THAT(Message(spec), HasSubstr("write 400"));
  // 0 itself is a number: refused for what it is, not for its digits.
  spec = ParseJobSpec(Replace(kSpec, "batch_size: 128", "batch_size: 0"));
  EXPECT_THAT(Message(spec), HasSubstr("training.batch_size: must be > 0, got 0"));
}

TEST(JobSpecIntegers, OnlyDecimalDigitsReadAndEachTypeKeepsItsRange) {
  for (const char* bad : {"0x10", "0o20", "1e3", "12abc", "1_000", "[1]"}) {
    auto spec = ParseJobSpec(Replace(kSpec, "epochs: 2", std::string("epochs: ") + bad));
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_THAT(Message(spec), HasSubstr("training.epochs: cannot read")) << bad;
  }
  auto spec = ParseJobSpec(Replace(kSpec, "batch_size: 128", "batch_size: 99999999999"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Message(spec), AllOf(HasSubstr("training.batch_size: '99999999999' is out of range"),
                                   HasSubstr("2147483647")));
  spec = ParseJobSpec(Replace(kSpec, "seed: 7", "seed: -1"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Message(spec), AllOf(HasSubstr("training.seed: '-1' is out of range"),
                                   HasSubstr("18446744073709551615")));
  spec = ParseJobSpec(Replace(kSpec, "seed: 7", "seed: 18446744073709551615"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->seed, UINT64_MAX);
  spec = ParseJobSpec(Replace(kSpec, "batch_size: 128", "batch_size: +400"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size, 400);
  spec = ParseJobSpec(Replace(kSpec, "[100, 2000, 30]", "[100, 9999999999, 30]"));
  EXPECT_THAT(Message(spec), AllOf(HasSubstr("tables.cardinalities[1]: 9999999999 is over the "
                                             "limit"),
                                   HasSubstr("kMaxTableRows")));
}

// `dlrm ps --memory-budget 0.5` ran with a memory tier of 0 bytes: a fraction without a unit is
// refused, naming the value; with one it is a size.
TEST(JobSpecByteSizes, AFractionOfAByteIsRefused) {
  for (const char* text : {"0.5", "1.5B", "10.25"}) {
    auto bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_THAT(std::string(bytes.status().message()),
                AllOf(HasSubstr(text), HasSubstr("not a whole number of bytes")))
        << text;
  }
  EXPECT_EQ(ParseByteSize("0.5GiB").value_or(-1), int64_t{1} << 29);
  EXPECT_EQ(ParseByteSize("2.0").value_or(-1), 2);
}

TEST(JobSpecByteSizes, TebiAndPebibytesReadSoThatTheLimitIsWhatUsersSee) {
  EXPECT_EQ(ParseByteSize("1TiB").value_or(-1), int64_t{1} << 40);
  EXPECT_EQ(ParseByteSize("2T").value_or(-1), int64_t{2} << 40);
  EXPECT_EQ(ParseByteSize("1PiB").value_or(-1), kMaxByteSize);
  EXPECT_EQ(ParseByteSize("3TB").value_or(-1), 3000000000000);
  EXPECT_EQ(ParseByteSize("1PB").value_or(-1), 1000000000000000);
  for (const char* text : {"2PiB", "1.5P", "2000TiB", "1EiB", "2EB"}) {
    auto bytes = ParseByteSize(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_THAT(std::string(bytes.status().message()),
                AllOf(HasSubstr(text), HasSubstr("over the limit"), HasSubstr("kMaxByteSize")))
        << text;
  }
  auto spec = ParseJobSpec(Replace(kSpec, "seed: 7", "seed: 7\n  hot_budget: 2PiB"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(Message(spec), AllOf(HasSubstr("training.hot_budget: "), HasSubstr("'2PiB'"),
                                   HasSubstr("kMaxByteSize")));
  auto unit = ParseByteSize("2 parsecs");
  EXPECT_THAT(std::string(unit.status().message()), AllOf(HasSubstr("TiB"), HasSubstr("PiB")));
}

TEST(JobSpecFile, AFileThatCannotBeReadIsNamedWithTheReason) {
  dlrm::testing::ScopedTempDir dir("job_spec_input");
  auto missing = LoadJobSpec(dir.Sub("nope.yaml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(missing),
              AllOf(HasSubstr(dir.Sub("nope.yaml")), HasSubstr("No such file or directory")));
  auto folder = LoadJobSpec(dir.path());
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(folder), AllOf(HasSubstr(dir.path()), HasSubstr("is a directory")));
  if (geteuid() != 0) {  // root reads any file
    const std::string locked = dir.Sub("locked.yaml");
    std::ofstream(locked) << kSpec;
    ASSERT_EQ(chmod(locked.c_str(), 0), 0);
    EXPECT_THAT(Message(LoadJobSpec(locked)), HasSubstr("Permission denied"));
  }
}

// `data.train: [a.tsv, ""]` or `data.eval: ""` was read as a file named "", which failed only when
// the run opened it ("cannot open input file : No such file or directory"), naming no key; a null
// or nested list item read as "null" or failed with yaml-cpp's "bad conversion".
TEST(JobSpecPaths, AnEmptyOrNonScalarDataPathIsRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train: [a.tsv, \"\"]", "data.train[1]: empty path"},
      {"train: \"\"", "data.train: empty path"},
      {"train: [a.tsv]\n  eval: ''", "data.eval: empty path"},
      {"train: [a.tsv, ~]", "data.train[1]: must be a path"},
      {"train: [a.tsv, [b.tsv]]", "data.train[1]: must be a path"},
      {"train: [{x: 1}]", "data.train[0]: must be a path"},
  };
  for (const auto& [data, message] : cases) {
    auto spec = ParseJobSpec(Replace(kSpec, "train: [a.tsv]", data), "job.yaml");
    ASSERT_FALSE(spec.ok()) << data;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << data;
    EXPECT_THAT(Message(spec), HasSubstr(message)) << data;
  }
  auto none = ParseJobSpec(Replace(kSpec, "train: [a.tsv]", "train: [a.tsv]\n  eval: []"), "j");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(none->eval_paths, IsEmpty());
}

TEST(JobSpecWarnings, OptimizerParametersTheTypeDoesNotUseAreWarnedAbout) {
  struct Case {
    std::string from, to;
    std::vector<std::string> keys;  // warned about, in order; empty: no warning
  };
  const std::string dense = "{type: adam, learning_rate: 0.002}";
  const std::string sparse = "{type: rowwise_adagrad, learning_rate: 0.1}";
  const std::vector<Case> cases = {
      {dense, "{type: sgd, learning_rate: 0.1, beta1: 0.5}", {"optimizer.dense.beta1: 0.5"}},
      {dense,
       "{type: sgd, learning_rate: 0.1, beta2: 0.9, epsilon: 0.001}",
       {"optimizer.dense.beta2: 0.9", "optimizer.dense.epsilon: 0.001"}},
      {dense, "{type: adagrad, learning_rate: 0.1, beta1: 0.5}", {"optimizer.dense.beta1: 0.5"}},
      {sparse,
       "{type: rowwise_adagrad, learning_rate: 0.1, beta1: 0.8}",
       {"optimizer.sparse.beta1: 0.8"}},
      {sparse,
       "{type: sgd, learning_rate: 0.1, initial_accumulator: 0.1}",
       {"optimizer.sparse.initial_accumulator: 0.1"}},
      {sparse,
       "{type: adam, learning_rate: 0.1, initial_accumulator: 0.1}",
       {"optimizer.sparse.initial_accumulator: 0.1"}},
      // Used: no warning.
      {dense, "{type: adam, learning_rate: 0.1, beta1: 0.5, epsilon: 0.001}", {}},
      {dense, "{type: sgd, learning_rate: 0.1, weight_decay: 0.01}", {}},
      {sparse, "{type: adagrad, learning_rate: 0.1, initial_accumulator: 0.1, epsilon: 0.01}", {}},
      // The default, as older versions wrote every key back: no warning.
      {dense, "{type: sgd, learning_rate: 0.1, epsilon: 1e-08, beta1: 0.9, beta2: 0.999}", {}},
      {sparse, "{type: sgd, learning_rate: 0.1, beta1: 0.9, initial_accumulator: 0}", {}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> warnings;
    auto spec = ParseJobSpec(Replace(kSpec, c.from, c.to), "job.yaml", &warnings);
    ASSERT_TRUE(spec.ok()) << c.to << ": " << spec.status();
    ASSERT_THAT(warnings, SizeIs(c.keys.size())) << c.to;
    for (size_t i = 0; i < c.keys.size(); ++i) {
      EXPECT_THAT(warnings[i], AllOf(HasSubstr("job.yaml: " + c.keys[i]), HasSubstr("ignored")))
          << c.to;
    }
    // Written back, the spec reads without a warning and to the same YAML.
    std::vector<std::string> again_warnings;
    auto again = ParseJobSpec(JobSpecToYaml(*spec), "again", &again_warnings);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_THAT(again_warnings, IsEmpty()) << JobSpecToYaml(*spec);
    EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*spec));
  }
  // The specs this repository ships parse without a warning.
  for (const char* path : {"examples/demo-job.yaml", "examples/dlrm-dcnv2-job.yaml"}) {
    std::vector<std::string> warnings;
    auto spec = LoadJobSpec(absl::StrCat(DLRM_SOURCE_DIR, "/", path), &warnings);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_THAT(warnings, IsEmpty()) << path;
  }
}

TEST(JobSpecToYamlTest, WritesEachDoubleAsTheShortestTextThatReadsBackExactly) {
  auto spec = ParseJobSpec(Replace(kSpec, "learning_rate: 0.002", "learning_rate: 0.003"), "job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->sparse_optimizer.learning_rate = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  spec->eval_fraction = 0.05;
  const std::string yaml = JobSpecToYaml(*spec);
  EXPECT_THAT(yaml, HasSubstr("learning_rate: 0.003\n")) << yaml;
  EXPECT_THAT(yaml, HasSubstr("learning_rate: 0.30000000000000004\n")) << yaml;
  EXPECT_THAT(yaml, HasSubstr("eval_fraction: 0.05\n")) << yaml;
  EXPECT_THAT(yaml, HasSubstr("epsilon: 1e-08")) << yaml;
  auto again = ParseJobSpec(yaml, "again");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(again->dense_optimizer.learning_rate, 0.003);
  EXPECT_EQ(again->sparse_optimizer.learning_rate, 0.1 + 0.2);
  EXPECT_EQ(again->eval_fraction, 0.05);
  EXPECT_EQ(again->dense_optimizer.epsilon, spec->dense_optimizer.epsilon);
}

TEST(JobSpecWarnings, EvalFractionNextToEvalDataIsWarnedAbout) {
  std::vector<std::string> warnings;
  auto spec = ParseJobSpec(Replace(kSpec, "  train: [a.tsv]\n",
                                   "  train: [a.tsv]\n  eval: [e.tsv]\n  eval_fraction: 0.2\n"),
                           "job.yaml", &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("job.yaml: data.eval_fraction: 0.2 is ignored"),
                                 HasSubstr("data.eval")));
  EXPECT_THAT(JobSpecToYaml(*spec), Not(HasSubstr("eval_fraction")));
  // Without data.eval it is what holds out the eval split: no warning, and it is written back.
  warnings.clear();
  spec =
      ParseJobSpec(Replace(kSpec, "  train: [a.tsv]\n", "  train: [a.tsv]\n  eval_fraction: 0.2\n"),
                   "job.yaml", &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_THAT(JobSpecToYaml(*spec), HasSubstr("eval_fraction: 0.2"));
}

TEST(JobSpecWarnings, WithoutAListTheWarningsAreLogged) {
  const std::string text = Replace(kSpec, "{type: adam, learning_rate: 0.002}",
                                   "{type: sgd, learning_rate: 0.1, beta1: 0.5}");
  ::testing::internal::CaptureStderr();
  auto spec = ParseJobSpec(text, "job.yaml");
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(
      err, AllOf(HasSubstr("job.yaml: optimizer.dense.beta1: 0.5 is ignored"), HasSubstr("sgd")));
  dlrm::testing::ScopedTempDir dir("job_spec_input");
  std::ofstream(dir.Sub("job.yaml")) << text;
  std::vector<std::string> warnings;
  ASSERT_TRUE(LoadJobSpec(dir.Sub("job.yaml"), &warnings).ok());
  EXPECT_THAT(warnings, ElementsAre(HasSubstr(dir.Sub("job.yaml") + ": optimizer.dense.beta1")));
}

}  // namespace
}  // namespace dlrm::common
