// Files a command writes (dlrm predict --out, convert --out, --metrics-out): OutputFile writes
// one atomically (a temporary file renamed over the old one), and the checks a command makes
// before a long run that its output can be written and overwrites none of its inputs.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlrm::worker {

// A file a command writes (dlrm predict --out, convert --out, --metrics-out). A regular file, or a
// path where nothing is yet, is written to "<file>.tmp" next to it, which Commit() renames over
// it: a failed or interrupted command leaves the old file whole and no temporary file (SIGINT,
// SIGTERM and SIGHUP remove it too, where the process left their default action). A symlink
// is followed: the file it leads to is replaced and the link stays. Anything else that exists (a
// FIFO, a character device, /dev/stdout, or a link through /dev or /proc to a descriptor) is
// written in place. A folder and an empty path are refused. Errors name `what` (e.g. "--out")
// and the path as the user gave it, with the reason (strerror where a call failed).
// Not thread-safe.
class OutputFile {
 public:
  struct Options {
    // The writer seeks (BinaryWriter writes the header last): a FIFO or socket is refused.
    bool seekable = false;
  };
  static absl::StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path,
                                                          const std::string& what,
                                                          const Options& options);
  static absl::StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path,
                                                          const std::string& what) {
    return Open(path, what, Options());
  }
  ~OutputFile();  // without Commit(): closes the file and removes the temporary one
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The stream to write to (binary mode), until Commit(). Write() and Error() for short writes.
  std::FILE* file() const { return file_; }
  absl::Status Write(const void* data, size_t size);
  absl::Status Write(absl::string_view data) { return Write(data.data(), data.size()); }
  // "what: cannot write 'path': strerror(err)" (UNAVAILABLE; RESOURCE_EXHAUSTED for a full disk).
  absl::Status Error(int err) const;
  // Flushes and closes; renames the temporary file over the target. On failure the temporary file
  // is removed. Call once.
  absl::Status Commit();

  const std::string& path() const { return path_; }      // as given
  const std::string& target() const { return target_; }  // symlinks followed
  const std::string& temp() const { return temp_; }      // "" when written in place
  bool in_place() const { return temp_.empty(); }

 private:
  OutputFile(std::string path, std::string what, std::string target, std::string temp,
             std::FILE* file);
  void Abandon();

  std::string path_;
  std::string what_;
  std::string target_;
  std::string temp_;
  std::FILE* file_;
  int signal_slot_ = -1;  // where the temporary file is listed for removal on a signal
};

// Checks, before a long run, that OutputFile::Open(path, what) would succeed, creating nothing:
// the path is not empty and not a folder, and the folder it is written in exists and is
// writable. INVALID_ARGUMENT naming `what` and the path, with the reason.
absl::Status CheckOutputPath(const std::string& path, const std::string& what);

// INVALID_ARGUMENT naming both when the output at `path` (or the temporary file OutputFile would
// write next to it) is one of `inputs`: the same regular file by device and inode, whatever the
// names. Paths that do not exist yet, and outputs that are not regular files (written in place:
// a FIFO, /dev/stdout), pass.
absl::Status CheckOutputIsNotAnInput(const std::string& path, const std::string& what,
                                     const std::vector<std::string>& inputs);

}  // namespace dlrm::worker
