// OutputFile (worker/input/output_file.h) on its own: what it refuses and what a failed commit
// leaves. The commands' outputs (FIFOs, symlinks, their inputs) are in train_command_io_test.cc.
#include "worker/input/output_file.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/test_util.h"

namespace dlrm::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::WriteFile;

TEST(OutputFileTest, RefusesAFolderAndAnEmptyPathAndCreatesNothing) {
  testing::TempDir dir;
  const std::string folder = dir.File("d");
  fs::create_directory(folder);
  auto out = OutputFile::Open(folder, "--out");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("--out: cannot write '" + folder + "': it is a folder"));
  EXPECT_FALSE(fs::exists(folder + ".tmp"));
  out = OutputFile::Open("", "--out");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  EXPECT_FALSE(fs::exists(".tmp"));
}

// The rename at the end fails (a folder took the name meanwhile): the temporary file goes, the
// reason is given.
TEST(OutputFileTest, AFailedCommitRemovesTheTemporaryFile) {
  testing::TempDir dir;
  const std::string path = dir.File("out");
  auto out = OutputFile::Open(path, "--out");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)->temp(), path + ".tmp");
  ASSERT_TRUE((*out)->Write("scores\n").ok());
  fs::create_directory(path);
  WriteFile(path + "/inside", "x");
  absl::Status st = (*out)->Commit();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("--out: cannot write '" + path + "': "));
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::strerror(EISDIR)));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Ctrl-C (or SIGTERM, SIGHUP) on a command writing its output, e.g. `dlrm gen-data` of a large
// file: the process died with "<out>.tmp" left behind, as large as it had grown. The temporary
// file goes now, the old file stays whole, and the process still ends by the signal.
TEST(OutputFileTest, ASignalThatEndsTheProcessRemovesTheTemporaryFile) {
  testing::TempDir dir;
  const std::string path = dir.File("out");
  WriteFile(path, "old\n");
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    EXPECT_EXIT(
        {
          auto out = OutputFile::Open(path, "--out");
          if (!out.ok() || !(*out)->Write("partial\n").ok()) ::_exit(2);
          std::raise(sig);
          ::_exit(3);
        },
        ::testing::KilledBySignal(sig), "")
        << strsignal(sig);
    EXPECT_FALSE(fs::exists(path + ".tmp")) << strsignal(sig);
    EXPECT_EQ(testing::ReadFile(path), "old\n");
  }
}

}  // namespace
}  // namespace dlrm::worker
