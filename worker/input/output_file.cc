#include "worker/input/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "embedding/checkpoint_manifest.h"

namespace dlrm::worker {
namespace {

std::string CannotWrite(const std::string& what, const std::string& path,
                        absl::string_view reason) {
  return absl::StrCat(what, ": cannot write '", path, "': ", reason);
}

// The status of a failed call on an output, by its errno.
absl::Status OutputError(int err, const std::string& message) {
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// Where the symlinks from `path` lead (the last one need not exist).
struct FollowedPath {
  std::string target;
  // A link in /dev or /proc was followed (/dev/stdout, /proc/self/fd/N): the target is a
  // descriptor's file, written in place rather than replaced.
  bool through_descriptor = false;
};

absl::StatusOr<FollowedPath> FollowLinks(const std::string& path, const std::string& what) {
  constexpr int kMaxLinks = 40;  // as the kernel's MAXSYMLINKS
  FollowedPath followed;
  std::filesystem::path p(path);
  for (int links = 0; links <= kMaxLinks; ++links) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      followed.target = p.string();
      return followed;
    }
    const std::string name = p.string();
    if (name.starts_with("/dev/") || name.starts_with("/proc/")) followed.through_descriptor = true;
    std::error_code ec;
    const std::filesystem::path to = std::filesystem::read_symlink(p, ec);
    if (ec) {
      return absl::UnavailableError(
          CannotWrite(what, path, absl::StrCat("cannot read the link ", name, ": ", ec.message())));
    }
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return absl::InvalidArgumentError(CannotWrite(what, path, std::strerror(ELOOP)));
}

// Temporary files to remove when SIGINT, SIGTERM or SIGHUP ends the process (Ctrl-C on `dlrm
// gen-data`, `convert`, `predict`): without it their "<file>.tmp" stayed behind, as large as the
// output had grown. A slot's path is a copy that lives as long as the process, so the handler
// never reads freed memory; it only loads atomics and calls unlink and raise (async-signal-safe).
constexpr int kSignalSlots = 32;
struct SignalSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
  char path[PATH_MAX] = {};
};
SignalSlot g_signal_slots[kSignalSlots];

extern "C" void RemoveTemporaryFilesAndDie(int sig) {
  const int saved = errno;
  for (SignalSlot& slot : g_signal_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path);
  }
  errno = saved;
  // SA_RESETHAND restored the default action: the signal, blocked while this runs, ends the
  // process when the handler returns, as it would have without it.
  ::raise(sig);
}

// Only where the signal's action is the default: a process that handles it (the service's
// processes, `dlrm local`) or ignores it (a background job of a shell) keeps its choice.
void InstallSignalRemoval() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction action = {};
    action.sa_handler = RemoveTemporaryFilesAndDie;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &action, nullptr);
  }
}

// -1 when every slot is taken or the path is too long: that file is not removed on a signal.
int TrackTemporaryFile(const std::string& temp) {
  static std::once_flag installed;
  std::call_once(installed, InstallSignalRemoval);
  if (temp.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSignalSlots; ++i) {
    int expected = 0;
    if (!g_signal_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_signal_slots[i].path, temp.c_str(), temp.size() + 1);
    g_signal_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void UntrackTemporaryFile(int slot) {
  if (slot >= 0) g_signal_slots[slot].state.store(0, std::memory_order_release);
}

}  // namespace

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path,
                                                             const std::string& what,
                                                             const Options& options) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no path given"));
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) {
    const int err = errno;
    return OutputError(err, CannotWrite(what, path, std::strerror(err)));
  }
  if (exists && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(CannotWrite(what, path, "it is a folder"));
  }
  FollowedPath followed;
  if (!exists || S_ISREG(st.st_mode)) {
    DLRM_ASSIGN_OR_RETURN(followed, FollowLinks(path, what));
  }
  if (exists && (!S_ISREG(st.st_mode) || followed.through_descriptor)) {
    // A FIFO, a device, a terminal, a descriptor's file: written in place.
    if (options.seekable && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
      return absl::InvalidArgumentError(CannotWrite(
          what, path,
          "it is a FIFO or socket, and this file is written with seeks (its header comes last); "
          "give a regular file"));
    }
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr) {
      const int err = errno;
      return OutputError(err, CannotWrite(what, path, std::strerror(err)));
    }
    return std::unique_ptr<OutputFile>(new OutputFile(path, what, path, "", file));
  }
  const std::string temp = absl::StrCat(followed.target, ".tmp");
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    const std::string reason =
        absl::StrCat(std::strerror(err), " (creating its temporary file '", temp, "')");
    return OutputError(err, CannotWrite(what, path, reason));
  }
  // The replacement keeps the permissions of the file it replaces.
  if (exists) (void)::fchmod(fd, st.st_mode & 07777);
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return OutputError(err, CannotWrite(what, path, std::strerror(err)));
  }
  auto out = std::unique_ptr<OutputFile>(new OutputFile(path, what, followed.target, temp, file));
  out->signal_slot_ = TrackTemporaryFile(temp);
  return out;
}

OutputFile::OutputFile(std::string path, std::string what, std::string target, std::string temp,
                       std::FILE* file)
    : path_(std::move(path)),
      what_(std::move(what)),
      target_(std::move(target)),
      temp_(std::move(temp)),
      file_(file) {}

OutputFile::~OutputFile() { Abandon(); }

void OutputFile::Abandon() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  UntrackTemporaryFile(std::exchange(signal_slot_, -1));
}

absl::Status OutputFile::Error(int err) const {
  return OutputError(err, CannotWrite(what_, path_, std::strerror(err)));
}

absl::Status OutputFile::Write(const void* data, size_t size) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(what_, ": closed"));
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) return Error(errno);
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(what_, ": committed twice"));
  }
  int err = 0;
  errno = 0;
  if (std::fflush(file_) != 0 || std::ferror(file_)) err = errno != 0 ? errno : EIO;
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0 && err == 0) err = errno;
  if (err == 0 && !temp_.empty() && std::rename(temp_.c_str(), target_.c_str()) != 0) err = errno;
  if (err != 0 && !temp_.empty()) ::unlink(temp_.c_str());
  UntrackTemporaryFile(std::exchange(signal_slot_, -1));
  if (err != 0) return Error(err);
  return absl::OkStatus();
}

absl::Status CheckOutputPath(const std::string& path, const std::string& what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no path given"));
  auto refuse = [&](absl::string_view reason) {
    return absl::InvalidArgumentError(CannotWrite(what, path, reason));
  };
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return refuse(std::strerror(errno));
  if (exists && S_ISDIR(st.st_mode)) return refuse("it is a folder");
  FollowedPath followed;
  if (!exists || S_ISREG(st.st_mode)) {
    DLRM_ASSIGN_OR_RETURN(followed, FollowLinks(path, what));
  }
  if (exists && (!S_ISREG(st.st_mode) || followed.through_descriptor)) {
    // Written in place: opening a FIFO here would wait for its reader.
    if (::access(path.c_str(), W_OK) != 0) return refuse(std::strerror(errno));
    return absl::OkStatus();
  }
  std::filesystem::path folder = std::filesystem::path(followed.target).parent_path();
  if (folder.empty()) folder = ".";
  struct stat dir;
  if (::stat(folder.c_str(), &dir) != 0) {
    return refuse(absl::StrCat("folder '", folder.string(), "': ", std::strerror(errno)));
  }
  if (!S_ISDIR(dir.st_mode)) {
    return refuse(absl::StrCat("'", folder.string(), "' is not a folder"));
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return refuse(absl::StrCat("folder '", folder.string(), "': ", std::strerror(errno)));
  }
  // Any checkpoint's folder, not only the run's own: `train --metrics-out` into a sibling of the
  // checkpoint resumed from replaced its MANIFEST.json, and eval then quietly took an older one.
  std::error_code ec;
  if (std::filesystem::exists(folder / embedding::kManifestName, ec)) {
    return refuse(absl::StrCat("it lies in the checkpoint '", folder.string(),
                               "' and would replace one of its files; write it elsewhere"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputIsNotAnInput(const std::string& path, const std::string& what,
                                     const std::vector<std::string>& inputs) {
  // The files the output would write: the path itself, and the temporary file next to its target.
  struct Written {
    std::string name;
    struct stat st;
  };
  std::vector<Written> written;
  Written w;
  if (::stat(path.c_str(), &w.st) == 0) {
    if (!S_ISREG(w.st.st_mode)) return absl::OkStatus();  // written in place, never replaced
    w.name = path;
    written.push_back(w);
  }
  absl::StatusOr<FollowedPath> followed = FollowLinks(path, what);
  if (followed.ok()) {
    w.name = absl::StrCat(followed->target, ".tmp");
    if (::stat(w.name.c_str(), &w.st) == 0 && S_ISREG(w.st.st_mode)) written.push_back(w);
  }
  for (const std::string& input : inputs) {
    struct stat in;
    if (::stat(input.c_str(), &in) != 0 || !S_ISREG(in.st_mode)) continue;
    for (const Written& out : written) {
      if (out.st.st_dev != in.st_dev || out.st.st_ino != in.st_ino) continue;
      if (out.name == path) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '", path, "' is the input file '", input,
                         "': refusing to overwrite the data being read; write somewhere else"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the temporary file '", out.name, "' written for '", path,
                       "' is the input file '", input,
                       "': refusing to overwrite the data being read; write somewhere else"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dlrm::worker
