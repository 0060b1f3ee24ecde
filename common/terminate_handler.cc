#include "common/terminate_handler.h"

#include <unistd.h>

#include <cstdlib>
#include <new>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dlrm::common {
namespace {

const char* program_name = "dlrm";

[[noreturn]] void WriteAndAbort() {
  const std::string line =
      absl::StrCat(program_name, ": ", UncaughtExceptionMessage(std::current_exception()), "\n");
  // One write: the line stays whole next to other threads' logging. Nothing else is safe here.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  std::abort();
}

}  // namespace

std::string UncaughtExceptionMessage(std::exception_ptr e) {
  if (e == nullptr) return "fatal: terminate called with no exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& error) {
    // std::thread reports a thread it could not create as EAGAIN (pthread_create's error).
    if (error.code() == std::errc::resource_unavailable_try_again) {
      return absl::StrCat(
          "fatal: cannot start a thread: ", error.what(),
          " (the process reached a limit on threads or memory: the container's pids limit, "
          "ulimit -u, or its memory limit; lower the thread flags or raise the limit)");
    }
    return absl::StrCat("fatal: uncaught system error ", error.code().value(), ": ", error.what());
  } catch (const std::bad_alloc&) {
    return "fatal: out of memory (an allocation failed; raise the memory limit or make the "
           "tables, batch or caches smaller)";
  } catch (const std::exception& error) {
    return absl::StrCat("fatal: uncaught exception: ", error.what());
  } catch (...) {
    return "fatal: uncaught exception of an unknown type";
  }
}

void InstallTerminateHandler(const char* program) {
  program_name = program;
  std::set_terminate(WriteAndAbort);
}

}  // namespace dlrm::common
