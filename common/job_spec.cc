#include "common/job_spec.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec_internal.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common {

using job_spec_internal::ParseNode;

int JobSpec::TopInputWidth() const {
  int t = static_cast<int>(tables.size());
  return interaction == "dcnv2" ? (t + 1) * embedding_dim : embedding_dim + (t + 1) * t / 2;
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& source,
                                     std::vector<std::string>* warnings) {
  if (static_cast<int64_t>(yaml_text.size()) > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": job spec of ", yaml_text.size(),
                                                   " bytes is over the limit of ", kMaxSpecBytes,
                                                   " bytes (kMaxSpecBytes in common/limits.h)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": a job spec must be a YAML mapping"));
  }
  std::vector<std::string> found;
  try {
    // yaml-cpp keeps both entries of a repeated key and a lookup finds the first: refuse it.
    DLRM_RETURN_IF_ERROR(Annotate(job_spec_internal::CheckDuplicateKeys(yaml_text), source));
    auto spec = ParseNode(root, &found);
    if (!spec.ok()) return Annotate(spec.status(), source);
    for (const std::string& warning : found) {
      if (warnings != nullptr) {
        warnings->push_back(absl::StrCat(source, ": ", warning));
      } else {
        DLRM_LOG(WARNING) << source << ": " << warning;
      }
    }
    return spec;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
}

absl::StatusOr<int> WorkerBatchSize(const JobSpec& spec, int workers) {
  if (workers <= 0) return absl::InvalidArgumentError(absl::StrCat("workers ", workers, " <= 0"));
  if (spec.batch_size % workers != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.batch_size ", spec.batch_size, " is not a multiple of the ", workers,
                     " workers: the global batch is split evenly across them (",
                     spec.batch_size / workers * workers, " or ",
                     (spec.batch_size / workers + 1) * workers, " would do)"));
  }
  return spec.batch_size / workers;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path, std::vector<std::string>* warnings) {
  auto cannot_read = [&path](const std::string& why) {
    return absl::NotFoundError(absl::StrCat("cannot read job spec '", path, "': ", why));
  };
  // A folder opens for reading, and only its read fails (EISDIR): name it up front.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return cannot_read("is a directory");
  errno = 0;
  std::ifstream in(path);
  if (!in) return cannot_read(errno != 0 ? std::strerror(errno) : "cannot open it");
  // Read at most one byte past the limit, so that a huge file (or a device that never ends) is
  // never read whole.
  std::string text(static_cast<size_t>(kMaxSpecBytes) + 1, '\0');
  errno = 0;
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(
        "error reading job spec '", path, "': ", errno != 0 ? std::strerror(errno) : "I/O error"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job spec '", path, "' is over the limit of ",
                                                   kMaxSpecBytes,
                                                   " bytes (kMaxSpecBytes in common/limits.h)"));
  }
  DLRM_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(text, path, warnings));
  // Relative data paths are relative to the spec file, so a spec travels with its data.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto resolve = [&dir](std::vector<std::string>* paths) {
    for (std::string& p : *paths) {
      if (!p.empty() && std::filesystem::path(p).is_relative()) p = (dir / p).lexically_normal();
    }
  };
  resolve(&spec.train_paths);
  resolve(&spec.eval_paths);
  std::vector<std::string> checkpoint_dirs = {spec.checkpoint.dir, spec.checkpoint.resume_from};
  resolve(&checkpoint_dirs);
  spec.checkpoint.dir = checkpoint_dirs[0];
  spec.checkpoint.resume_from = checkpoint_dirs[1];
  return spec;
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
    ++pos;
  }
  if (pos == 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", text, "'"));
  }
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, pos), &used);
    if (used != pos) throw std::invalid_argument("trailing characters");
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", text, "'"));
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KiB" || unit == "K" || unit == "Ki")
    mult = 1024.0;
  else if (unit == "MiB" || unit == "M" || unit == "Mi")
    mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G" || unit == "Gi")
    mult = 0x1p30;
  else if (unit == "TiB" || unit == "T" || unit == "Ti")
    mult = 0x1p40;
  else if (unit == "PiB" || unit == "P" || unit == "Pi")
    mult = 0x1p50;
  else if (unit == "EiB" || unit == "E" || unit == "Ei")  // past the limit: refused below
    mult = 0x1p60;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else if (unit == "PB")
    mult = 1e15;
  else if (unit == "EB")
    mult = 1e18;
  else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown unit '", unit, "' in byte size '", text,
                     "' (B, KiB, MiB, GiB, TiB, PiB, EiB, KB, MB, GB, TB, PB, EB)"));
  }
  // "0.5" was read as 0 bytes (a --memory-budget of nothing): a fraction needs its unit.
  if (mult == 1 && value != std::floor(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size '", text, "' is not a whole number of bytes; give its unit, e.g. '",
                     text.substr(0, pos), "GiB'"));
  }
  // Compared as a double, before the conversion: a value past int64 would be undefined.
  const double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes > static_cast<double>(kMaxByteSize)) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", text, "' is over the limit of ",
                                                   kMaxByteSize,
                                                   " bytes (kMaxByteSize in common/limits.h)"));
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace dlrm::common
