#include "worker/input/synthetic.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/input/record_reader.h"
#include "worker/input/zipf_sampler.h"

namespace dlrm::worker {
namespace {

using testing::TempDir;

// AUC by the rank-sum (Mann-Whitney) formula, ties given their average rank.
double Auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (i + 1 + j) / 2.0;  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] != 0) {
        positive_rank_sum += average_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = scores.size() - positives;
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

TEST(Auc, MatchesHandComputedValues) {
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(Auc({1, 1, 1, 1}, {0, 1, 0, 1}), 0.5);
}

GenDataOptions SmallOptions(const TempDir& dir, const std::string& name) {
  GenDataOptions options;
  options.output = dir.File(name);
  options.num_rows = 20000;
  options.seed = 42;
  options.cardinalities = CappedKaggleCardinalities(100000);
  return options;
}

TEST(Synthetic, DeterministicPerSeedAndValidCriteo) {
  TempDir dir;
  GenDataOptions a = SmallOptions(dir, "a.tsv");
  a.num_rows = 3000;
  GenDataOptions b = a;
  b.output = dir.File("b.tsv");
  GenDataOptions c = a;
  c.output = dir.File("c.tsv");
  c.seed = 43;
  GenDataStats stats;
  ASSERT_TRUE(GenerateCriteoTsv(a, &stats).ok());
  ASSERT_TRUE(GenerateCriteoTsv(b).ok());
  ASSERT_TRUE(GenerateCriteoTsv(c).ok());
  EXPECT_EQ(stats.rows, 3000);
  const std::string text = testing::ReadFile(a.output);
  EXPECT_EQ(text, testing::ReadFile(b.output));
  EXPECT_NE(text, testing::ReadFile(c.output));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3000);

  // Strict: any malformed line would be an error.
  auto records = LoadAll({.paths = {a.output}, .strict = true});
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3000u);
  int64_t positives = 0;
  int64_t missing = 0;
  for (const CriteoRecord& r : *records) {
    positives += r.label != 0;
    missing += std::popcount(r.missing_mask);
  }
  EXPECT_EQ(positives, stats.positives);
  // About 2% of 26 * 3000 categorical fields are empty.
  EXPECT_NEAR(static_cast<double>(missing) / (26 * 3000), 0.02, 0.006);

  // The binary output holds exactly the records the TSV parses to.
  GenDataOptions d = a;
  d.output = dir.File("a.bin");
  d.format = InputFormat::kBinary;
  ASSERT_TRUE(GenerateCriteoTsv(d).ok());
  auto binary = LoadAll({.paths = {d.output}});
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ(*binary, *records);
}

TEST(Synthetic, IdsAreZipfSkewed) {
  TempDir dir;
  GenDataOptions options = SmallOptions(dir, "zipf.tsv");
  ASSERT_TRUE(GenerateCriteoTsv(options).ok());
  auto records = LoadAll({.paths = {options.output}});
  ASSERT_TRUE(records.ok());
  // Table 2 has 100000 possible ids (capped). With exponent 1.1 the top 1% of ids (1000) carry
  // about 75% of the draws; uniform ids would give them about 1%.
  constexpr int kTable = 2;
  std::unordered_map<uint32_t, int> counts;
  int present = 0;
  for (const CriteoRecord& r : *records) {
    if (r.missing(kTable)) continue;
    ++counts[r.cats[kTable]];
    ++present;
  }
  std::vector<int> sorted;
  for (const auto& [token, n] : counts) sorted.push_back(n);
  std::sort(sorted.rbegin(), sorted.rend());
  const int top = std::min<int>(1000, sorted.size());
  const double top_share = std::accumulate(sorted.begin(), sorted.begin() + top, 0.0) / present;
  EXPECT_GT(top_share, 0.6);
  // The hottest token is the scramble of id 0.
  EXPECT_EQ(counts[ScrambleToken(kTable, 0)], sorted[0]);
}

TEST(Synthetic, ZipfSamplerMatchesTheExactPmf) {
  // n = 5, exponent 1.1: compare frequencies with k^-s / H(5, s) within 5 sigma.
  ZipfSampler sampler(5, 1.1);
  Xoshiro256 rng(7);
  constexpr int kDraws = 200000;
  std::vector<int> counts(6, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.Sample(rng)];
  double norm = 0;
  for (int k = 1; k <= 5; ++k) norm += std::pow(k, -1.1);
  for (int k = 1; k <= 5; ++k) {
    const double p = std::pow(k, -1.1) / norm;
    const double sigma = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(counts[k], kDraws * p, 5 * sigma) << "k = " << k;
  }
}

TEST(Synthetic, PlantedModelIsAStrongOracle) {
  TempDir dir;
  GenDataOptions options = SmallOptions(dir, "oracle.tsv");
  ASSERT_TRUE(GenerateCriteoTsv(options).ok());
  auto records = LoadAll({.paths = {options.output}});
  ASSERT_TRUE(records.ok());
  const PlantedModel oracle(options);
  std::vector<double> scores;
  std::vector<float> labels;
  for (const CriteoRecord& r : *records) {
    scores.push_back(oracle.Logit(r));
    labels.push_back(r.label);
  }
  const double auc = Auc(scores, labels);
  // Measured oracle AUC, 20000 rows, seed 42, cardinalities capped at 100000: 0.911 at signal
  // 1.0 (0.796 at 0.5, 0.676 at 0.25). With full Kaggle cardinalities, 1M rows: 0.913.
  EXPECT_GT(auc, 0.85);
  const double ctr = std::accumulate(labels.begin(), labels.end(), 0.0) / labels.size();
  EXPECT_GT(ctr, 0.1);
  EXPECT_LT(ctr, 0.6);

  // Without signal the same oracle is chance.
  options.signal_strength = 0;
  options.output = dir.File("noise.tsv");
  ASSERT_TRUE(GenerateCriteoTsv(options).ok());
  auto noise = LoadAll({.paths = {options.output}});
  ASSERT_TRUE(noise.ok());
  GenDataOptions strong = options;
  strong.signal_strength = 1.0;
  const PlantedModel unrelated(strong);
  scores.clear();
  labels.clear();
  for (const CriteoRecord& r : *noise) {
    scores.push_back(unrelated.Logit(r));
    labels.push_back(r.label);
  }
  EXPECT_NEAR(Auc(scores, labels), 0.5, 0.03);
}

TEST(Synthetic, RejectsBadOptions) {
  TempDir dir;
  GenDataOptions options = SmallOptions(dir, "bad.tsv");
  options.cardinalities.pop_back();
  EXPECT_EQ(GenerateCriteoTsv(options).code(), absl::StatusCode::kInvalidArgument);
  options = SmallOptions(dir, "bad.tsv");
  options.zipf_exponent = 0;
  EXPECT_EQ(GenerateCriteoTsv(options).code(), absl::StatusCode::kInvalidArgument);
  // Named by the flag the user gave (it said "zipf_exponent 0").
  EXPECT_THAT(std::string(GenerateCriteoTsv(options).message()),
              ::testing::HasSubstr("gen-data: --zipf 0 must be"));
  options = SmallOptions(dir, "bad.tsv");
  options.cardinalities[4] = 0;
  auto status = GenerateCriteoTsv(options);
  EXPECT_NE(std::string(status.message()).find("table 4: cardinality 0"), std::string::npos);
}

// gen-data's TSV output goes through an OutputFile like its binary output and every other file a
// command writes. It was written to "<out>.tmp" and renamed over --out: a symlink was replaced by
// a regular file (its target kept the old data), a FIFO was replaced too (its reader got nothing;
// as root, --out /dev/stdout would have replaced /dev/stdout), and a folder was refused only after
// every row had been written next to it.
TEST(Synthetic, TsvOutputFollowsASymlinkWritesAFifoInPlaceAndRefusesAFolderFirst) {
  TempDir dir;
  GenDataOptions options = SmallOptions(dir, "real.tsv");
  options.num_rows = 50;
  const std::string reference = dir.File("reference.tsv");
  options.output = reference;
  ASSERT_TRUE(GenerateCriteoTsv(options).ok());
  const std::string expected = testing::ReadFile(reference);
  ASSERT_FALSE(expected.empty());

  const std::string real = dir.File("real.tsv");
  const std::string link = dir.File("link.tsv");
  testing::WriteFile(real, "old\n");
  std::filesystem::create_symlink(real, link);
  options.output = link;
  ASSERT_TRUE(GenerateCriteoTsv(options).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(testing::ReadFile(real), expected);

  // The reading end is open (non-blocking, so that this needs no thread) before gen-data writes:
  // its 20 rows fit in the pipe's buffer, and they are read once gen-data has closed its end.
  // (The rename put a regular file in the FIFO's place: the reader got nothing.)
  const std::string fifo = dir.File("fifo.tsv");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  options.output = fifo;
  options.num_rows = 20;
  const std::string reference20 = dir.File("reference20.tsv");
  GenDataOptions twenty = options;
  twenty.output = reference20;
  ASSERT_TRUE(GenerateCriteoTsv(twenty).ok());
  const absl::Status written = GenerateCriteoTsv(options);
  std::string read;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof(buf))) > 0;) read.append(buf, n);
  ::close(reader);
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(read, testing::ReadFile(reference20));
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_FALSE(std::filesystem::exists(fifo + ".tmp"));

  const std::string folder = dir.File("folder");
  std::filesystem::create_directory(folder);
  options.output = folder;
  options.num_rows = 1000000;  // refused before any row is drawn
  const absl::Status refused = GenerateCriteoTsv(options);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.message()).find("it is a folder"), std::string::npos) << refused;
  EXPECT_FALSE(std::filesystem::exists(folder + ".tmp"));
}

// `dlrm gen-data --rows 1000000000000` (the limit) wrote until the disk was full. What cannot fit
// the free space is refused before a row is written, naming both sizes.
TEST(Synthetic, OutputThatCannotFitTheFreeSpaceIsRefusedFirst) {
  // Should the check go, the writes stop at 64 MiB (EFBIG, not SIGXFSZ) instead of filling the
  // disk, and the messages below do not match.
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = std::min<rlim_t>(old_limit.rlim_max, rlim_t{64} << 20);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const sighandler_t old_xfsz = std::signal(SIGXFSZ, SIG_IGN);
  struct Restore {
    rlimit limit;
    sighandler_t xfsz;
    ~Restore() {
      ::setrlimit(RLIMIT_FSIZE, &limit);
      std::signal(SIGXFSZ, xfsz);
    }
  } restore{old_limit, old_xfsz};
  TempDir dir;
  GenDataOptions options = SmallOptions(dir, "huge.bin");
  options.num_rows = 1000000000000;  // kMaxGenDataRows
  options.format = InputFormat::kBinary;
  options.bags = MlperfDlrmV2BagSizes();  // 913 bytes a row: 913 TB
  absl::Status st = GenerateCriteoTsv(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(std::string(st.message())
                .find("gen-data --out: 1000000000000 rows need 9.13e+05 GB "
                      "(913 bytes a row), over the "),
            std::string::npos)
      << st;
  EXPECT_FALSE(std::filesystem::exists(options.output));
  EXPECT_FALSE(std::filesystem::exists(options.output + ".tmp"));

  options.output = dir.File("huge.tsv");
  options.format = InputFormat::kTsv;
  options.bags.reset();
  st = GenerateCriteoTsv(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(std::string(st.message()).find("rows need at least 2.448e+05 GB (245 bytes a row)"),
            std::string::npos)
      << st;
  EXPECT_FALSE(std::filesystem::exists(options.output + ".tmp"));
}

}  // namespace
}  // namespace dlrm::worker
