// What a process says when an exception escapes a thread: one line naming the error and, for the
// errors an operator can act on, what to change. Without it the C++ runtime prints "terminate
// called after throwing an instance of 'std::system_error'" and the reader is left to guess that
// a thread could not start because the container's pids limit was reached.
//
// Every dlrm executable installs it at start (terminate_handler_at_start.cc, linked by
// dlrm_cc_binary); the process then aborts as before (exit by SIGABRT, a core where enabled).
#pragma once

#include <exception>
#include <string>

namespace dlrm::common {

// The line written for `e` (no trailing newline), e.g. "fatal: cannot start a thread: Resource
// temporarily unavailable (...)". A null `e` is std::terminate called with no exception.
std::string UncaughtExceptionMessage(std::exception_ptr e);

// std::set_terminate with a handler that writes "<program>: " and UncaughtExceptionMessage of the
// current exception to stderr, then aborts. `program` must outlive the process (a literal).
void InstallTerminateHandler(const char* program);

}  // namespace dlrm::common
