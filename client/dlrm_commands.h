// Subcommands of `dlrm` that run the service's processes (coordinator, ps, worker, local), and
// the CLI11 validators every `dlrm` subcommand checks its numeric flags with.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace dlrm {

// Prints "error: <message>" and returns a failed command's exit code: 2 when what the user gave
// was wrong (INVALID_ARGUMENT), 1 for a failure of the run (README, after the command table).
inline int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// Adds `certs`, `coordinator`, `ps`, `worker` and `local`; the chosen one sets *run.
void AddServiceCommands(CLI::App& app, std::function<int()>* run);

// CLI11 converts integers with strtoll(base 0): `--rows 010` is 8, `0x10` is 16, and a value past
// int64 silently becomes INT64_MAX (or wraps, for an unsigned flag); a range check of its own
// passes NaN. These validators read integers as decimal and numbers as finite, and refuse
// anything else naming the value (CLI11 puts the flag in front):
//   --threads: 100000 is over the limit of 1024 (kMaxThreads in common/limits.h)
//   --rows: '10abc' is not an integer
//   --rows: '010' has a leading zero (integers are decimal: write 10)
//   --zipf: -1 is not a finite number > 0
namespace flags_internal {

// Why `text` is no decimal integer (an optional sign, then 0 or digits without a leading zero),
// or "" when it is one.
inline std::string NotDecimal(const std::string& text) {
  const size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (i == text.size() || !std::all_of(text.begin() + i, text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    return absl::StrCat("'", text, "' is not an integer");
  }
  if (text.size() - i > 1 && text[i] == '0') {
    const size_t first = text.find_first_not_of('0', i);
    return absl::StrCat("'", text, "' has a leading zero (integers are decimal: write ",
                        first == std::string::npos
                            ? "0"
                            : absl::StrCat(text[0] == '-' ? "-" : "", text.substr(first)),
                        ")");
  }
  return "";
}

}  // namespace flags_internal

// An integer in [min, max]. `limit_name` names the constant of common/limits.h that `max` is, if
// any; past `max` the message then names it.
inline CLI::Validator IntegerIn(int64_t min, int64_t max, const std::string& limit_name = "") {
  return CLI::Validator(
      [min, max, limit_name](std::string& input) -> std::string {
        if (std::string why = flags_internal::NotDecimal(input); !why.empty()) return why;
        int64_t value = 0;
        const bool fits = absl::SimpleAtoi(input, &value);
        const bool over = fits ? value > max : input[0] != '-';
        if (over && !limit_name.empty()) {
          return absl::StrCat(input, " is over the limit of ", max, " (", limit_name,
                              " in common/limits.h)");
        }
        if (!fits || value < min || value > max) {
          return absl::StrCat(input, " is not in [", min, ", ", max, "]");
        }
        return "";
      },
      absl::StrCat("[", min, ", ", max, "]"));
}

// An unsigned 64-bit integer (a seed).
inline CLI::Validator UnsignedInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        if (std::string why = flags_internal::NotDecimal(input); !why.empty()) return why;
        uint64_t value = 0;
        if (input[0] == '-' || !absl::SimpleAtoi(input, &value)) {
          return absl::StrCat(input, " is not in [0, ", std::numeric_limits<uint64_t>::max(), "]");
        }
        return "";
      },
      "decimal");
}

// A finite number in [min, max], or (min, max] when `min_excluded`; max may be infinity.
inline CLI::Validator FiniteNumberIn(double min, double max, bool min_excluded = false) {
  const std::string range =
      std::isinf(max) ? absl::StrCat(min_excluded ? "> " : ">= ", min)
                      : absl::StrCat("in ", min_excluded ? "(" : "[", min, ", ", max, "]");
  return CLI::Validator(
      [min, max, min_excluded, range](std::string& input) -> std::string {
        double value = 0;
        if (!absl::SimpleAtod(input, &value)) return absl::StrCat("'", input, "' is not a number");
        const bool low_ok = min_excluded ? value > min : value >= min;
        if (!std::isfinite(value) || !low_ok || value > max) {
          return absl::StrCat(input, " is not a finite number ", range);
        }
        return "";
      },
      absl::StrCat("finite, ", range));
}

// --threads: 0 (all cores) up to kMaxThreads.
inline CLI::Validator ThreadCount() { return IntegerIn(0, common::kMaxThreads, "kMaxThreads"); }

// --device: auto, cpu or cuda, checked before a command opens anything.
inline CLI::Validator DeviceName() { return CLI::IsMember({"auto", "cpu", "cuda"}); }

// `dlrm local --ps` and `--workers`: 1 up to kMaxLocalMembers.
inline CLI::Validator LocalMemberCount() {
  return IntegerIn(1, common::kMaxLocalMembers, "kMaxLocalMembers");
}

// A path flag given an empty value (`--metrics-out "$UNSET"`) was taken as not given: the run
// succeeded and wrote nothing, `--resume` started from scratch, `dlrm ps --checkpoint-root ""`
// let checkpoint files go anywhere. Refused as "--report: no path given".
inline CLI::Validator NonEmptyPath() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("no path given") : ""; }, "");
}

}  // namespace dlrm
