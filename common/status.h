// Status helpers. Our abseil (20220623) has no status macros, so the project keeps its own.
//
//   DLRM_RETURN_IF_ERROR(table->Write(ids, rows));
//   DLRM_ASSIGN_OR_RETURN(auto store, TieredStore::Create(options));
#pragma once

#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define DLRM_STATUS_CONCAT_INNER(a, b) a##b
#define DLRM_STATUS_CONCAT(a, b) DLRM_STATUS_CONCAT_INNER(a, b)

#define DLRM_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status dlrm_status_ = (expr);        \
    if (!dlrm_status_.ok()) return dlrm_status_; \
  } while (0)

#define DLRM_ASSIGN_OR_RETURN(lhs, rexpr) \
  DLRM_ASSIGN_OR_RETURN_IMPL(DLRM_STATUS_CONCAT(dlrm_statusor_, __LINE__), lhs, rexpr)

#define DLRM_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr)   \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace dlrm {

// Text from a caller (a job id, a rendezvous key) as a message quotes it: the first 64 bytes, then
// "... (N bytes)", so that a 10 MB id cannot make an error message larger than gRPC sends.
inline std::string Shown(absl::string_view text) {
  constexpr size_t kShown = 64;
  if (text.size() <= kShown) return std::string(text);
  return absl::StrCat(text.substr(0, kShown), "... (", text.size(), " bytes)");
}

// "1 idle worker", "2 idle workers": a count in a message.
inline std::string Count(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// Returns `status` with `context: ` put in front of its message, keeping the code.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// A failed file-system call as a status: "what: <strerror>" with absl::ErrnoToStatus's code
// (ENOSPC RESOURCE_EXHAUSTED, EACCES PERMISSION_DENIED, ENOTDIR FAILED_PRECONDITION, ...). Never
// UNAVAILABLE for a file that cannot be made or written (only for EIO, EAGAIN and the like):
// workers take UNAVAILABLE for a lost peer and recover, which a full disk or a file where a folder
// should be does not cure.
inline absl::Status FileError(int error_number, absl::string_view what) {
  return absl::ErrnoToStatus(error_number, what);
}
inline absl::Status FileError(const std::error_code& ec, absl::string_view what) {
  if (ec.category() == std::generic_category() || ec.category() == std::system_category()) {
    return FileError(ec.value(), what);
  }
  return absl::InternalError(absl::StrCat(what, ": ", ec.message()));
}

}  // namespace dlrm
