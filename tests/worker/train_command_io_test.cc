// What the user of `dlrm predict`, `eval`, `convert` and `train` sees of their files: scores line
// up with the input's lines, outputs that are FIFOs, devices or symlinks survive, a command never
// overwrites its own input, convert of nothing fails, each scoring input's format is its own,
// the spec's checkpoint.resume_from is honoured, --metrics-out is checked before training, a run
// without eval data says so, and training.target_auc stops a run at the evaluation reaching it.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "worker/checkpoint.h"
#include "worker/input/binary_format.h"
#include "worker/input/criteo_tsv.h"
#include "worker/input/synthetic.h"
#include "worker/train_command.h"
#include "worker/train_report.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::WriteFile;

constexpr int kRows = 600;

int CountLines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The first `n` lines of `text`, each with its '\n'.
std::string HeadLines(const std::string& text, int n) {
  size_t end = 0;
  for (int i = 0; i < n; ++i) end = text.find('\n', end) + 1;
  return text.substr(0, end);
}

bool IsSymlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// One small model, trained once for the suite on `kRows` generated lines (format: tsv), and the
// same data as a binary file.
class TrainCommandIoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::GenerateCappedTsv(Data(), kRows, /*seed=*/7, 1000).ok());
    auto converted = ConvertTsvToBinary({.inputs = {Data()}, .output = dir_->File("data.bin")});
    ASSERT_TRUE(converted.ok()) << converted.status();
    common::JobSpec spec = Job(Data(), dir_->File("ck"));
    spec.format = "tsv";
    auto trained = TrainInProcess(spec, Quiet());
    ASSERT_TRUE(trained.ok()) << trained.status();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::string Data() { return dir_->File("data.tsv"); }
  static common::JobSpec Job(const std::string& train, const std::string& checkpoint_dir) {
    common::JobSpec spec = testing::SmallGeneratedJob(train, /*seed=*/3);
    spec.max_steps = 2;
    spec.checkpoint.dir = checkpoint_dir;
    return spec;
  }
  static TrainRunOptions Quiet() {
    TrainRunOptions o;
    o.show_progress = false;
    o.threads = 1;
    return o;
  }
  static CheckpointModelOptions Model(const std::vector<std::string>& data,
                                      const std::string& checkpoint = dir_->File("ck")) {
    CheckpointModelOptions o;
    o.checkpoint = checkpoint;
    o.data = data;
    o.threads = 1;
    return o;
  }
  // A spec file in this test's folder for the suite's model (its data copied next to it), with
  // these `training:` and `checkpoint:` values.
  std::string Config(const std::string& training, const std::string& data,
                     const std::string& checkpoint) {
    if (!fs::exists(tmp_.File("data.tsv"))) fs::copy_file(Data(), tmp_.File("data.tsv"));
    const std::string config = tmp_.File("job.yaml");
    WriteFile(config,
              absl::StrCat("name: io\n"
                           "model: {dense_features: 13, bottom_mlp: [32, 8], top_mlp: [32, 1], "
                           "embedding_dim: 8}\n"
                           "tables: {cardinalities: [",
                           absl::StrJoin(CappedKaggleCardinalities(1000), ", "),
                           "]}\n"
                           "optimizer: {dense: {type: adam, learning_rate: 0.003}, sparse: {type: "
                           "rowwise_adagrad, learning_rate: 0.1}}\n"
                           "training: {batch_size: 256, seed: 3, device: cpu, ",
                           training, "}\ndata: {train: data.tsv, ", data, "}\ncheckpoint: {",
                           checkpoint, "}\n"));
    return config;
  }
  // A file of the first `n` lines of the data in this test's folder.
  std::string SmallData(int n, const std::string& name = "small.tsv") {
    const std::string path = tmp_.File(name);
    WriteFile(path, HeadLines(ReadFile(Data()), n));
    return path;
  }

  static testing::TempDir* dir_;
  testing::TempDir tmp_;
};

testing::TempDir* TrainCommandIoTest::dir_ = nullptr;

// --- predict: one score per line ---------------------------------------------------------------

TEST_F(TrainCommandIoTest, PredictRefusesABlankLineInsteadOfShiftingTheScores) {
  const std::string rows = ReadFile(Data());
  const std::string blank = tmp_.File("blank.tsv");
  WriteFile(blank,
            HeadLines(rows, 2) + "\n" + HeadLines(rows, 4).substr(HeadLines(rows, 2).size()));
  const std::string out = tmp_.File("scores.tsv");
  absl::Status st = RunPredictCommand(Model({blank}), out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(blank + ":3: empty line"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  // "\r" alone, and a blank line at the end (after the final newline), are blank lines too.
  const std::string cr = tmp_.File("cr.tsv");
  WriteFile(cr, HeadLines(rows, 3) + "\r\n" + HeadLines(rows, 1));
  st = RunPredictCommand(Model({cr}), out);
  EXPECT_THAT(std::string(st.message()), HasSubstr(cr + ":4: empty line"));
  const std::string trailing = tmp_.File("trailing.tsv");
  WriteFile(trailing, HeadLines(rows, 3) + "\n");
  st = RunPredictCommand(Model({trailing}), out);
  EXPECT_THAT(std::string(st.message()), HasSubstr(trailing + ":4: empty line"));
}

TEST_F(TrainCommandIoTest, PredictWritesOneScorePerLineWithCrlfAndFinalNewline) {
  std::string crlf;
  for (absl::string_view line : absl::StrSplit(HeadLines(ReadFile(Data()), 5), '\n')) {
    if (!line.empty()) absl::StrAppend(&crlf, line, "\r\n");
  }
  const std::string path = tmp_.File("crlf.tsv");
  WriteFile(path, crlf);
  const std::string out = tmp_.File("scores.tsv");
  ASSERT_TRUE(RunPredictCommand(Model({path}), out).ok());
  EXPECT_EQ(CountLines(ReadFile(out)), 5);
}

// Criteo's test files (Kaggle's test.txt) have no label: 39 fields a line. predict scores them
// exactly as the same lines with a label.
TEST_F(TrainCommandIoTest, PredictScoresLinesWithoutALabelAsTheSameLinesWithOne) {
  const std::string labelled = SmallData(50);
  std::string text;
  for (absl::string_view line : absl::StrSplit(ReadFile(labelled), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&text, line.substr(line.find('\t') + 1), "\n");
  }
  const std::string unlabelled = tmp_.File("test.tsv");
  WriteFile(unlabelled, text);
  const std::string with = tmp_.File("with.tsv"), without = tmp_.File("without.tsv");
  ASSERT_TRUE(RunPredictCommand(Model({labelled}), with).ok());
  ASSERT_TRUE(RunPredictCommand(Model({unlabelled}), without).ok());
  EXPECT_EQ(CountLines(ReadFile(without)), 50);
  EXPECT_EQ(ReadFile(without), ReadFile(with));
  // A line of 38 fields is still malformed, naming both counts it takes.
  WriteFile(unlabelled, text.substr(text.find('\t') + 1));
  absl::Status st = RunPredictCommand(Model({unlabelled}), without);
  EXPECT_THAT(
      std::string(st.message()),
      HasSubstr(":1: expected 40 (or 39, without the label) tab-separated fields, found 38"));
}

// --- predict: where the scores go --------------------------------------------------------------

TEST_F(TrainCommandIoTest, PredictWritesIntoAFifoInPlace) {
  const std::string data = SmallData(100);
  const std::string fifo = tmp_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // The read end, opened first without blocking: predict's open finds a reader, and its 100
  // scores fit in the pipe's buffer. Had predict replaced the FIFO, this end would read nothing.
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  absl::Status st = RunPredictCommand(Model({data}), fifo);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) got.append(buf, n);
  ::close(fd);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(CountLines(got), 100);
  struct stat after;
  ASSERT_EQ(::lstat(fifo.c_str(), &after), 0);
  EXPECT_TRUE(S_ISFIFO(after.st_mode)) << "the FIFO was replaced";
  EXPECT_FALSE(fs::exists(fifo + ".tmp"));
}

TEST_F(TrainCommandIoTest, PredictFollowsASymlinkAndKeepsIt) {
  const std::string data = SmallData(20);
  const std::string target = tmp_.File("t");
  WriteFile(target, "keep\n");
  const std::string link = tmp_.File("l");
  fs::create_symlink("t", link);
  absl::Status st = RunPredictCommand(Model({data}), link);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(IsSymlink(link)) << "the symlink was replaced by a file";
  EXPECT_EQ(CountLines(ReadFile(target)), 20);
  EXPECT_FALSE(fs::exists(link + ".tmp"));
  EXPECT_FALSE(fs::exists(target + ".tmp"));

  // A dangling link: its target is created, the link stays.
  const std::string dangling = tmp_.File("dangling");
  fs::create_symlink("new.tsv", dangling);
  st = RunPredictCommand(Model({data}), dangling);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(IsSymlink(dangling));
  EXPECT_EQ(CountLines(ReadFile(tmp_.File("new.tsv"))), 20);
}

// A private copy of /dev/full (and /dev/null): a device is written in place, never replaced, and a
// full one is an error with its reason. Needs CAP_MKNOD (root).
TEST_F(TrainCommandIoTest, PredictWritesADeviceInPlaceAndReportsAFullOne) {
  const std::string full = tmp_.File("full");
  const std::string null = tmp_.File("null");
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0 ||
      ::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod: " << std::strerror(errno);
  }
  const std::string data = SmallData(20);
  absl::Status st = RunPredictCommand(Model({data}), full);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--out: cannot write '" + full + "': No space left on device"));
  EXPECT_TRUE(ReadFile(null).empty());
  st = RunPredictCommand(Model({data}), null);
  EXPECT_TRUE(st.ok()) << st;
  for (const std::string& device : {full, null}) {
    struct stat after;
    ASSERT_EQ(::lstat(device.c_str(), &after), 0);
    EXPECT_TRUE(S_ISCHR(after.st_mode)) << device << " was replaced";
    EXPECT_FALSE(fs::exists(device + ".tmp"));
  }
}

// A write that fails half way (here: RLIMIT_FSIZE, as a full disk) keeps the old file, removes the
// temporary one and says why, naming the user's path.
TEST_F(TrainCommandIoTest, PredictWriteFailureKeepsTheOldFileAndRemovesTheTemp) {
  const std::string out = tmp_.File("scores.tsv");
  WriteFile(out, "old\n");
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 2048;  // the scores of kRows lines take about 7 KB
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = RunPredictCommand(Model({Data()}), out);
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("--out: cannot write '" + out + "': " + std::strerror(EFBIG)));
  EXPECT_EQ(ReadFile(out), "old\n");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// Checked before the model is loaded: the checkpoint given does not exist, and the error is the
// output's.
TEST_F(TrainCommandIoTest, PredictRefusesBadOutputPathsBeforeScoring) {
  const std::string data = SmallData(5);
  const std::string folder = tmp_.File("outdir");
  fs::create_directory(folder);
  absl::Status st = RunPredictCommand(Model({data}, tmp_.File("no-checkpoint")), folder);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("'" + folder + "': it is a folder"));
  EXPECT_FALSE(fs::exists(folder + ".tmp"));

  st = RunPredictCommand(Model({data}, tmp_.File("no-checkpoint")), "");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("--out: no path given"));
  EXPECT_FALSE(fs::exists(".tmp"));

  const std::string nowhere = tmp_.File("nodir/scores.tsv");
  st = RunPredictCommand(Model({data}, tmp_.File("no-checkpoint")), nowhere);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("'" + nowhere + "'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::strerror(ENOENT)));
}

// --- a command never overwrites its input ------------------------------------------------------

TEST_F(TrainCommandIoTest, PredictRefusesToOverwriteItsInput) {
  const std::string data = SmallData(3, "x.tsv");
  const std::string before = ReadFile(data);
  absl::Status st = RunPredictCommand(Model({data}), data);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("'" + data + "' is the input file"));
  EXPECT_EQ(ReadFile(data), before);

  // Another name for the same file.
  const std::string link = tmp_.File("other-name.tsv");
  fs::create_symlink(data, link);
  st = RunPredictCommand(Model({data}), link);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(ReadFile(data), before);
}

TEST_F(TrainCommandIoTest, ConvertRefusesToOverwriteItsInput) {
  const std::string data = SmallData(3, "x.tsv");
  const std::string before = ReadFile(data);
  auto converted = ConvertTsvToBinary({.inputs = {data}, .output = data});
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument) << converted.status();
  EXPECT_THAT(std::string(converted.status().message()), HasSubstr(data));
  EXPECT_EQ(ReadFile(data), before);

  // An input named like the output's temporary file would be truncated by it.
  const std::string tmp_named = SmallData(3, "y.tmp");
  converted = ConvertTsvToBinary({.inputs = {tmp_named}, .output = tmp_.File("y")});
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument) << converted.status();
  EXPECT_EQ(ReadFile(tmp_named), before);
}

// --- convert ------------------------------------------------------------------------------------

TEST_F(TrainCommandIoTest, ConvertOfNothingFailsAndWritesNothing) {
  const std::string out = tmp_.File("out.bin");
  WriteFile(out, "old");
  auto converted = ConvertTsvToBinary({.inputs = {dir_->File("data.bin")}, .output = out});
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument) << converted.status();
  EXPECT_THAT(std::string(converted.status().message()), HasSubstr("already in the binary format"));

  const std::string empty = tmp_.File("empty.tsv");
  WriteFile(empty, "");
  const std::string malformed = tmp_.File("malformed.tsv");
  WriteFile(malformed, "1\tnot\ta\trecord\nnor this\n");
  for (const std::string& input : {empty, malformed}) {
    SCOPED_TRACE(input);
    converted = ConvertTsvToBinary({.inputs = {input}, .output = out});
    EXPECT_EQ(converted.status().code(), absl::StatusCode::kFailedPrecondition)
        << converted.status();
    EXPECT_THAT(std::string(converted.status().message()), HasSubstr("no valid records"));
  }
  EXPECT_THAT(std::string(converted.status().message()), HasSubstr("2 malformed line(s)"));
  EXPECT_EQ(ReadFile(out), "old");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(TrainCommandIoTest, ConvertFollowsASymlinkAndRefusesAFifo) {
  const std::string data = SmallData(10);
  const std::string link = tmp_.File("link.bin");
  fs::create_symlink("real.bin", link);
  auto converted = ConvertTsvToBinary({.inputs = {data}, .output = link});
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_TRUE(IsSymlink(link));
  absl::StatusOr<bool> binary = IsBinaryCriteoFile(tmp_.File("real.bin"));
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_TRUE(*binary);

  const std::string fifo = tmp_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  converted = ConvertTsvToBinary({.inputs = {data}, .output = fifo});
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument) << converted.status();
  EXPECT_THAT(std::string(converted.status().message()), HasSubstr("FIFO"));
}

// --- eval and predict: each input's format is its own ------------------------------------------

TEST_F(TrainCommandIoTest, ScoringTellsEachInputsFormatFromItsBytes) {
  // The suite's model was trained with data.format tsv: it scores binary data.
  const std::string from_tsv = tmp_.File("from_tsv.txt");
  const std::string from_bin = tmp_.File("from_bin.txt");
  ASSERT_TRUE(RunPredictCommand(Model({Data()}), from_tsv).ok());
  absl::Status st = RunPredictCommand(Model({dir_->File("data.bin")}), from_bin);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ReadFile(from_bin), ReadFile(from_tsv));
  auto eval = RunEvalCommand(Model({dir_->File("data.bin"), Data()}), "");
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->samples, 2 * kRows);

  // A model trained on binary data (data.format binary) scores TSV.
  common::JobSpec spec = Job(dir_->File("data.bin"), tmp_.File("ckb"));
  spec.format = "binary";
  ASSERT_TRUE(TrainInProcess(spec, Quiet()).ok());
  st = RunPredictCommand(Model({Data()}, tmp_.File("ckb")), from_tsv);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(CountLines(ReadFile(from_tsv)), kRows);
  eval = RunEvalCommand(Model({Data()}, tmp_.File("ckb")), "");
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->samples, kRows);
}

TEST_F(TrainCommandIoTest, EvalOfNoRecordsSaysSo) {
  const std::string empty = tmp_.File("empty.tsv");
  WriteFile(empty, "x\n");
  auto eval = RunEvalCommand(Model({empty}), "");
  EXPECT_EQ(eval.status().code(), absl::StatusCode::kFailedPrecondition) << eval.status();
  EXPECT_THAT(std::string(eval.status().message()),
              HasSubstr("no valid records in " + empty + " (1 malformed line(s) skipped)"));
}

// --- train: checkpoint.resume_from --------------------------------------------------------------

TEST_F(TrainCommandIoTest, TrainResumesFromTheSpecsResumeFrom) {
  common::JobSpec spec = Job(Data(), tmp_.File("ck2"));
  spec.max_steps = 4;
  spec.checkpoint.resume_from = dir_->File("ck");  // the suite's model, trained 2 steps
  auto report = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 4);
  // Steps 3 and 4 are the second epoch, all 480 training records (600 less 20% held out); from
  // step 0 it would have been twice that.
  EXPECT_EQ(report->train_samples, 480) << "trained from step 0, not from 2";

  // --resume naming the same checkpoint (another spelling) agrees; another one does not.
  TrainRunOptions same = Quiet();
  same.resume_from = dir_->File("./ck");
  spec.checkpoint.dir = tmp_.File("ck3");
  report = TrainInProcess(spec, same);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->train_samples, 480);
  TrainRunOptions other = Quiet();
  other.resume_from = tmp_.File("ck2");
  report = TrainInProcess(spec, other);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("--resume " + tmp_.File("ck2") +
                        " and the job spec's checkpoint.resume_from " + dir_->File("ck")));

  // A resume_from that is not a checkpoint is an error, not a fresh start.
  spec.checkpoint.resume_from = tmp_.File("nope");
  report = TrainInProcess(spec, Quiet());
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("checkpoint.resume_from: " + tmp_.File("nope")));
}

// The YAML's resume_from is relative to the spec's folder, like its other paths.
TEST_F(TrainCommandIoTest, TrainCommandResolvesResumeFromAgainstTheSpec) {
  fs::copy(dir_->File("ck"), tmp_.File("old"), fs::copy_options::recursive);
  TrainCommandOptions o;
  o.config_path =
      Config("epochs: 2, max_steps: 3", "eval_fraction: 0.2", "dir: new, resume_from: old");
  o.run = Quiet();
  auto report = RunTrainCommand(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 3);
  EXPECT_EQ(report->train_samples, 256) << "one step after the 2 of the checkpoint";
}

// --- train: --metrics-out and a run without eval data --------------------------------------------

class TrainCommandMetricsTest : public TrainCommandIoTest {
 protected:
  // Two steps on the suite's data, checkpoints in "ck".
  std::string Config(double eval_fraction) {
    return TrainCommandIoTest::Config("epochs: 1, max_steps: 2",
                                      absl::StrCat("eval_fraction: ", eval_fraction), "dir: ck");
  }
  TrainCommandOptions Options(const std::string& config, const std::string& metrics_out) {
    TrainCommandOptions o;
    o.config_path = config;
    o.metrics_out = metrics_out;
    o.run = Quiet();
    return o;
  }
};

TEST_F(TrainCommandMetricsTest, MetricsOutIsCheckedBeforeTraining) {
  const std::string config = Config(0.2);
  const std::string nowhere = tmp_.File("nodir/m.json");
  auto report = RunTrainCommand(Options(config, nowhere));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("--metrics-out: cannot write '" + nowhere + "'"));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr(std::strerror(ENOENT)));
  EXPECT_FALSE(fs::exists(tmp_.File("ck"))) << "trained before --metrics-out was checked";

  report = RunTrainCommand(Options(config, config));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_FALSE(fs::exists(tmp_.File("ck")));

  const std::string metrics = tmp_.File("m.json");
  report = RunTrainCommand(Options(config, metrics));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(ReadFile(metrics), HasSubstr("\"steps\":2"));
  EXPECT_FALSE(fs::exists(metrics + ".tmp"));
}

// `dlrm train --report` wrote its page over whatever the path named: `--report job.yaml` replaced
// the spec and `--report data.tsv` the training data, after training on it; the page also replaced
// --metrics-out's JSON when both named one file. Each is refused before training, naming both.
TEST_F(TrainCommandMetricsTest, ReportIsCheckedAgainstTheInputsAndMetricsOutBeforeTraining) {
  const std::string config = Config(0.2);
  const std::string spec_text = ReadFile(config);
  const std::string data = tmp_.File("data.tsv");
  const std::string data_text = ReadFile(data);
  for (const std::string& input : {config, data}) {
    TrainCommandOptions o = Options(config, "");
    o.report = input;
    auto report = RunTrainCommand(o);
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
    EXPECT_THAT(std::string(report.status().message()),
                HasSubstr("--report: '" + input + "' is the input file"));
  }
  EXPECT_EQ(ReadFile(config), spec_text);
  EXPECT_EQ(ReadFile(data), data_text);
  EXPECT_FALSE(fs::exists(tmp_.File("ck"))) << "trained before --report was checked";

  const std::string both = tmp_.File("out.json");
  TrainCommandOptions o = Options(config, both);
  o.report = tmp_.File("./out.json");
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("are the same file"));
  EXPECT_FALSE(fs::exists(both));
  EXPECT_FALSE(fs::exists(tmp_.File("ck")));
}

// Ctrl-C on `dlrm train --report` killed the process and wrote no page, though the page is
// documented for a run that "fails or is interrupted after some steps". The command's handler sets
// `interrupted`; the run stops after its step with CANCELLED and the page of that step is written.
TEST_F(TrainCommandMetricsTest, AnInterruptedRunStopsAfterItsStepAndWritesTheReport) {
  TrainCommandOptions o = Options(Config(0.2), "");
  o.report = tmp_.File("run.html");
  std::atomic<int> interrupted{SIGINT};
  o.run.interrupted = &interrupted;
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr(absl::StrCat("interrupted (", strsignal(SIGINT), ") after step 1")));
  ASSERT_TRUE(fs::exists(o.report));
  EXPECT_THAT(ReadFile(o.report), HasSubstr("after step 1"));
  EXPECT_FALSE(fs::exists(o.report + ".tmp"));
}

// Ctrl-C on `dlrm train` with a checkpoint.dir stopped after its step but wrote no checkpoint: the
// steps since the last periodic checkpoint (all of them, without every_steps) were lost, and
// --resume could not go on from them. The interrupted run now keeps its model as a run's end does.
TEST_F(TrainCommandMetricsTest, AnInterruptedRunKeepsItsStepsAsACheckpointToResumeFrom) {
  TrainCommandOptions o = Options(Config(0.2), "");
  std::atomic<int> interrupted{SIGINT};
  o.run.interrupted = &interrupted;
  auto report = RunTrainCommand(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled) << report.status();
  const std::string kept = tmp_.File("ck/ckpt-000000000001");
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("after step 1; its model is checkpoint "));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("ck/ckpt-000000000001"));
  ASSERT_TRUE(fs::exists(kept + "/MANIFEST.json"));

  o.run.interrupted = nullptr;
  o.run.resume_from = tmp_.File("ck");
  report = RunTrainCommand(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 2);
  // 480 training lines in batches of 256: the resumed run trains only the second, of 224.
  EXPECT_EQ(report->train_samples, 224) << "went on from step 1";
}

TEST_F(TrainCommandMetricsTest, NoEvalDataIsNotReportedAsZeros) {
  const std::string metrics = tmp_.File("m.json");
  ::testing::internal::CaptureStdout();
  auto report = RunTrainCommand(Options(Config(0), metrics));
  const std::string printed = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->eval_samples, 0);
  EXPECT_TRUE(std::isnan(report->auc));
  EXPECT_TRUE(std::isnan(report->logloss));
  EXPECT_THAT(printed, HasSubstr("AUC n/a  logloss n/a  accuracy n/a  (no eval data"));
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"auc\":null"));
  EXPECT_THAT(json, HasSubstr("\"logloss\":null"));
  EXPECT_THAT(json, HasSubstr("\"accuracy\":null"));

  // Eval files without a valid record: the same.
  common::JobSpec spec = Job(Data(), tmp_.File("ck-eval"));
  const std::string empty = tmp_.File("empty.tsv");
  WriteFile(empty, "");
  spec.eval_paths = {empty};
  auto trained = TrainInProcess(spec, Quiet());
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->eval_samples, 0);
  EXPECT_TRUE(std::isnan(trained->auc));
}

// --- train: training.target_auc --------------------------------------------------------------

// MLPerf's "train to target quality": the run stops at the first periodic evaluation whose AUC
// reaches training.target_auc, as if max_steps ended it there (its final checkpoint, evaluation
// and report), and the report says at which step; a target it never reaches changes nothing.
class TrainTargetAucTest : public TrainCommandMetricsTest {
 protected:
  // 3000 generated lines (2400 to train on: 10 steps of 256 an epoch, 20 in all), evaluated every
  // 2 steps, checkpoints in "ck".
  std::string TargetConfig(const std::string& target_auc) {
    if (!fs::exists(tmp_.File("data.tsv"))) {
      EXPECT_TRUE(testing::GenerateCappedTsv(tmp_.File("data.tsv"), 3000, /*seed=*/5, 1000).ok());
    }
    return TrainCommandIoTest::Config(
        absl::StrCat("epochs: 2, eval_every_steps: 2, target_auc: ", target_auc),
        "eval_fraction: 0.2", "dir: ck");
  }
  // The step of the newest checkpoint in "ck".
  int64_t CheckpointStep() {
    auto found = FindValidCheckpoint(tmp_.File("ck"));
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? found->chain.back().step : -1;
  }
};

TEST_F(TrainTargetAucTest, StopsAtTheFirstEvaluationThatReachesTheTarget) {
  const std::string metrics = tmp_.File("m.json");
  ::testing::internal::CaptureStderr();
  auto report = RunTrainCommand(Options(TargetConfig("0.65"), metrics));
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.status() << "\n" << logged;
  // The evaluation of step 2 (AUC 0.58 on this data) did not reach it; a later one did.
  EXPECT_THAT(logged, HasSubstr("step 2: eval AUC"));
  ASSERT_GT(report->reached_target_step, 2) << logged;
  EXPECT_EQ(report->reached_target_step % 2, 0) << "not a step of a periodic evaluation";
  EXPECT_LT(report->reached_target_step, 20) << logged;
  EXPECT_EQ(report->steps, report->reached_target_step);
  EXPECT_EQ(report->train_samples, report->steps * 256);
  EXPECT_GE(report->auc, 0.65);  // the final evaluation is the one at that step
  EXPECT_DOUBLE_EQ(report->target_auc, 0.65);
  const std::string step = absl::StrCat(report->steps);
  EXPECT_THAT(logged, HasSubstr("reached target AUC 0.65 (eval AUC "));
  EXPECT_THAT(logged, HasSubstr(absl::StrCat(") at step ", step, " of 20: training stops")));
  // No evaluation after that step: the earlier ones did not reach the target.
  EXPECT_THAT(logged,
              ::testing::Not(HasSubstr(absl::StrCat("step ", report->steps + 2, ": eval AUC"))));
  // The trained model is checkpointed at that step, as at the end of max_steps.
  EXPECT_EQ(CheckpointStep(), report->steps);
  // --metrics-out says it, and reads back.
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"target_auc\":0.65"));
  EXPECT_THAT(json, HasSubstr(absl::StrCat("\"reached_target_step\":", step)));
  auto read = TrainReportFromJson(json);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->reached_target_step, report->steps);
  EXPECT_DOUBLE_EQ(read->target_auc, 0.65);
}

TEST_F(TrainTargetAucTest, ATargetNeverReachedTrainsEveryStep) {
  const std::string metrics = tmp_.File("m.json");
  auto report = RunTrainCommand(Options(TargetConfig("0.99"), metrics));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->steps, 20);
  EXPECT_EQ(report->reached_target_step, -1);
  EXPECT_LT(report->auc, 0.99);
  EXPECT_EQ(CheckpointStep(), 20);
  const std::string json = ReadFile(metrics);
  EXPECT_THAT(json, HasSubstr("\"target_auc\":0.99"));
  EXPECT_THAT(json, HasSubstr("\"reached_target_step\":-1"));
}

// --- the TSV reader
// -------------------------------------------------------------------------------

TEST(TsvReaderLimits, OutOfRangeIntegerAndOverlongLine) {
  CriteoRecord record;
  std::vector<std::string> fields(40, "");
  fields[0] = "1";
  fields[3] = "99999999999999999999999";
  absl::Status st = ParseCriteoLine(absl::StrJoin(fields, "\t"), &record);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("dense I3: \"99999999999999999999999\" is out of range"));

  testing::TempDir dir;
  const std::string path = dir.File("long.tsv");
  WriteFile(path, absl::StrCat(absl::StrJoin(fields, "\t"), "\n", std::string(200000, 'x'), "\n"));
  TsvReaderOptions options;
  options.path = path;
  options.buffer_bytes = 4096;  // the line must not grow the buffer past the limit
  auto reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<bool> more = (*reader)->Next(&record);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument) << more.status();
  EXPECT_THAT(std::string(more.status().message()),
              HasSubstr(absl::StrCat(path, ":2: line is longer than the limit of ",
                                     kMaxTsvLineBytes, " bytes")));

  // The same with a buffer that holds the whole line.
  options.buffer_bytes = size_t{1} << 20;
  reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  more = (*reader)->Next(&record);  // line 1 (out of range) is skipped
  EXPECT_THAT(std::string(more.status().message()), HasSubstr(path + ":2: line is longer"));

  // A file without a line end at all (as /dev/zero) stops at the limit too.
  options.path = "/dev/zero";
  reader = CriteoTsvReader::Open(options);
  ASSERT_TRUE(reader.ok());
  more = (*reader)->Next(&record);
  EXPECT_THAT(std::string(more.status().message()), HasSubstr("/dev/zero:1: line is longer"));
}

TEST(TsvReaderLimits, BlankLinesAreMalformedOnlyWhenAsked) {
  testing::TempDir dir;
  const std::string path = dir.File("blank.tsv");
  std::vector<std::string> fields(40, "");
  fields[0] = "0";
  const std::string row = absl::StrJoin(fields, "\t");
  WriteFile(path, row + "\n\n" + row + "\n");
  for (bool malformed : {false, true}) {
    TsvReaderOptions options;
    options.path = path;
    options.blank_lines_are_malformed = malformed;
    std::vector<ParseIssue> issues;
    options.on_issue = [&](const ParseIssue& issue) { issues.push_back(issue); };
    auto reader = CriteoTsvReader::Open(options);
    ASSERT_TRUE(reader.ok());
    CriteoRecord record;
    int records = 0;
    for (absl::StatusOr<bool> more = (*reader)->Next(&record); more.ok() && *more;
         more = (*reader)->Next(&record)) {
      ++records;
    }
    EXPECT_EQ(records, 2);
    EXPECT_EQ((*reader)->skipped(), malformed ? 1 : 0);
    if (malformed) {
      ASSERT_EQ(issues.size(), 1u);
      EXPECT_EQ(issues[0].ToString(), path + ":2: empty line");
    }
  }
}

}  // namespace
}  // namespace dlrm::worker
