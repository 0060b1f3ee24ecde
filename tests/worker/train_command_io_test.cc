// What the user of `dlrm predict`, `eval` and `convert` sees of their files: scores line up with
// the input's lines, outputs that are FIFOs, devices or symlinks survive, a command never
// overwrites its own input, convert of nothing fails, and each scoring input's format is its own.
// `dlrm train`'s files are train_command_test.cc's.
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
#include "embedding/checkpoint_manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"
#include "tests/worker/train_command_io_fixture.h"
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

  // "\r" alone is a blank line too.
  const std::string cr = tmp_.File("cr.tsv");
  WriteFile(cr, HeadLines(rows, 3) + "\r\n" + HeadLines(rows, 1));
  st = RunPredictCommand(Model({cr}), out);
  EXPECT_THAT(std::string(st.message()), HasSubstr(cr + ":4: empty line"));
  // Blank lines that end the file (after the final newline) shift no score: one score per record.
  const std::string trailing = tmp_.File("trailing.tsv");
  WriteFile(trailing, HeadLines(rows, 3) + "\n\r\n\n");
  st = RunPredictCommand(Model({trailing}), out);
  ASSERT_TRUE(st.ok()) << st;
  const std::string scores = ReadFile(out);
  EXPECT_EQ(std::count(scores.begin(), scores.end(), '\n'), 3) << scores;
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
  // A labelled file whose third line lost its last column: that line was scored as unlabelled,
  // every feature one column off, in silence. The file's first record decides, and the line is
  // malformed, naming both counts.
  std::string cut = ReadFile(labelled);
  size_t third = 0;
  for (int i = 0; i < 2; ++i) third = cut.find('\n', third) + 1;
  const size_t end_of_third = cut.find('\n', third);
  cut.erase(cut.rfind('\t', end_of_third), end_of_third - cut.rfind('\t', end_of_third));
  WriteFile(unlabelled, cut);
  st = RunPredictCommand(Model({unlabelled}), without);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(":3: 39 tab-separated fields where the file's first record (line 1) has "
                        "40: every line has the label or none does"));
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

// --out or --metrics-out naming a file of the checkpoint being loaded (its manifest, its dense
// parameters) would replace the model with scores: refused, and the checkpoint still loads.
TEST_F(TrainCommandIoTest, ScoringRefusesToOverwriteTheCheckpointItLoads) {
  const std::string ck = tmp_.File("ck");
  fs::copy(dir_->File("ck"), ck, fs::copy_options::recursive);
  const std::string newest = embedding::ResolveCheckpoint(ck).value();
  for (const std::string& name :
       {std::string(embedding::kManifestName), std::string("dense.bin")}) {
    const std::string file = newest + "/" + name;
    const std::string before = ReadFile(file);
    absl::Status st = RunPredictCommand(Model({Data()}, ck), file);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("--out: cannot write '" + file + "': it lies in the checkpoint"));
    auto evaluated = RunEvalCommand(Model({Data()}, ck), file);
    EXPECT_EQ(evaluated.status().code(), absl::StatusCode::kInvalidArgument) << evaluated.status();
    EXPECT_THAT(std::string(evaluated.status().message()),
                HasSubstr("--metrics-out: cannot write '" + file + "': it lies in the checkpoint"));
    EXPECT_EQ(ReadFile(file), before);
  }
  // Nor a file of another checkpoint than the one loaded: predict wrote scores over the dense.bin
  // of a sibling, which then failed to load.
  const std::string sibling = ck + "/" + embedding::CheckpointDirName(1);
  ASSERT_NE(sibling, newest);
  fs::copy(newest, sibling, fs::copy_options::recursive);
  const std::string dense = ReadFile(sibling + "/dense.bin");
  absl::Status st = RunPredictCommand(Model({Data()}, newest), sibling + "/dense.bin");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("it lies in the checkpoint '" + sibling));
  auto evaluated = RunEvalCommand(Model({Data()}, newest), sibling + "/MANIFEST.json");
  EXPECT_EQ(evaluated.status().code(), absl::StatusCode::kInvalidArgument) << evaluated.status();
  EXPECT_EQ(ReadFile(sibling + "/dense.bin"), dense);
  EXPECT_TRUE(RunPredictCommand(Model({Data()}, ck), tmp_.File("scores.txt")).ok());
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

}  // namespace
}  // namespace dlrm::worker
