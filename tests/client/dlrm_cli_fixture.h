// The fixture of the tests that run the real `dlrm` binary (dlrm_cli_test.cc: flags and their
// refusals; dlrm_cli_runs_test.cc: `dlrm local` and the roles as they start and stop).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/process_util.h"

namespace dlrm {

class DlrmCliTest : public ::testing::Test {
 protected:
  // Runs `dlrm args...` in the test's folder; refusals take milliseconds, so 30 s is only a guard
  // against a flag that is not refused and starts real work.
  ::dlrm::testing::ProcessResult Dlrm(std::vector<std::string> args) {
    args.insert(args.begin(), ::dlrm::testing::BinPath("dlrm"));
    return ::dlrm::testing::RunProcess(args, dir_.path(), absl::StrCat("dlrm-", runs_++),
                                       absl::Seconds(30),
                                       /*cwd=*/dir_.path());
  }

  // Expects a refusal (a non-zero exit, not a crash) whose stderr has every one of `parts`.
  void ExpectRefused(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
    const ::dlrm::testing::ProcessResult r = Dlrm(args);
    std::string command;
    for (const std::string& a : args) absl::StrAppend(&command, " ", a);
    EXPECT_FALSE(r.timed_out) << command;
    EXPECT_EQ(r.term_signal, 0) << command << "\n" << r.err;
    EXPECT_GT(r.exit_code, 0) << command << "\n" << r.err;
    for (const std::string& part : parts) EXPECT_THAT(r.err, ::testing::HasSubstr(part)) << command;
  }

  dlrm::testing::ScopedTempDir dir_{"dlrm_cli_test"};
  int runs_ = 0;
};

}  // namespace dlrm
