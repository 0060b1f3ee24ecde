#include "common/terminate_handler.h"

#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlrm::common {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// What std::thread throws when pthread_create fails with EAGAIN (no thread left under the
// process's limit).
std::system_error ThreadLimitError() {
  return std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
}

TEST(UncaughtExceptionMessageTest, NamesTheErrorAndWhatToChange) {
  EXPECT_THAT(UncaughtExceptionMessage(std::make_exception_ptr(ThreadLimitError())),
              AllOf(HasSubstr("fatal: cannot start a thread: Resource temporarily unavailable"),
                    HasSubstr("pids limit")));
  EXPECT_THAT(UncaughtExceptionMessage(std::make_exception_ptr(
                  std::system_error(std::make_error_code(std::errc::permission_denied), "open"))),
              HasSubstr("fatal: uncaught system error 13: open: Permission denied"));
  EXPECT_THAT(UncaughtExceptionMessage(std::make_exception_ptr(std::bad_alloc())),
              HasSubstr("fatal: out of memory"));
  EXPECT_EQ(UncaughtExceptionMessage(std::make_exception_ptr(std::runtime_error("boom"))),
            "fatal: uncaught exception: boom");
  EXPECT_EQ(UncaughtExceptionMessage(std::make_exception_ptr(42)),
            "fatal: uncaught exception of an unknown type");
  EXPECT_EQ(UncaughtExceptionMessage(nullptr), "fatal: terminate called with no exception");
}

TEST(TerminateHandlerDeathTest, AThreadThatCannotStartIsNamedOnStderr) {
  EXPECT_DEATH(
      {
        InstallTerminateHandler("dlrm-test");
        std::thread([] { throw ThreadLimitError(); }).join();
      },
      "dlrm-test: fatal: cannot start a thread: Resource temporarily unavailable");
}

}  // namespace
}  // namespace dlrm::common
