#include "client/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "common/certs.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "worker/local_devices.h"

namespace dlrm::client {
namespace {

namespace fs = std::filesystem;

// In a temporary folder of `dlrm local`: a file its run holds an exclusive flock on while it runs.
constexpr char kTempFolderLock[] = ".dlrm-local.lock";

// Locks `dir` as this run's: the lock file is made and locked under another name, then renamed
// into place, so that a lock file another run can see is always one already held. O_CLOEXEC: the
// children do not inherit it (the lock ends with this process). Returns the fd, -1 on failure.
int LockTempFolder(const std::string& dir) {
  const fs::path making = fs::path(dir) / ".dlrm-local.lock.new";
  const int fd = open(making.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  std::error_code ec;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      (fs::rename(making, fs::path(dir) / kTempFolderLock, ec), ec)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Removes the temporary folders earlier `dlrm local` runs left when they ended without removing
// theirs (SIGKILL, the OOM killer, a crash): the folders named dlrm-local-* in `parent`, owned by
// this user, whose lock file nobody holds. Their parameter servers' RocksDB rows and checkpoints
// can be gigabytes. A folder without a lock file stays: one a run kept on purpose (its logs were
// named to the user), or one of a version before the lock.
void RemoveAbandonedTempFolders(const fs::path& parent, const std::string& own) {
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path dir = it->path();
    if (dir.filename().string().rfind("dlrm-local-", 0) != 0 || dir == fs::path(own)) continue;
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    const int fd = open((dir / kTempFolderLock).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::error_code removing;
      const std::uintmax_t removed = fs::remove_all(dir, removing);
      if (removing) {
        DLRM_LOG(WARNING) << "cannot remove " << dir.string()
                          << ", the folder of an earlier dlrm local that did not end: "
                          << removing.message();
      } else {
        DLRM_LOG(INFO) << "removed " << dir.string()
                       << ", the folder of an earlier dlrm local that did not end (" << removed
                       << " files and folders)";
      }
    }
    close(fd);
  }
}

// The line each start of a child writes into its log (LogTail shows what follows the last).
constexpr char kStartMark[] = "---- dlrm local (pid ";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Reaps `pid` if it has exited; true when it is gone.
bool Reaped(pid_t pid, int* wait_status) {
  const pid_t r = waitpid(pid, wait_status, WNOHANG);
  return r == pid || (r < 0 && errno == ECHILD);
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return "stopped";
}

// A port the kernel reports free on 127.0.0.1 now (another process may take it before the child
// binds it; the child then fails to start and says so).
absl::StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return absl::UnavailableError(absl::StrCat("no free port: ", strerror(errno)));
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Create(
    const LocalClusterOptions& options) {
  for (const auto& [flag, count] :
       {std::pair{"--ps", options.num_ps}, std::pair{"--workers", options.num_workers}}) {
    if (count < 1) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", count, " must be >= 1"));
    }
    if (count > common::kMaxLocalMembers) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", count, " is over the limit of ",
                                                     common::kMaxLocalMembers,
                                                     " (kMaxLocalMembers in common/limits.h)"));
    }
  }
  auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster(options));
  cluster->binary_ = options.dlrm_binary;
  if (cluster->binary_.empty()) {
    std::error_code ec;
    cluster->binary_ = fs::read_symlink("/proc/self/exe", ec).string();
    if (ec) return absl::InternalError(absl::StrCat("/proc/self/exe: ", ec.message()));
  }
  if (options.data_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "dlrm-local-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create a temporary folder ", tmpl, ": ", std::strerror(errno)));
    }
    cluster->data_dir_ = tmpl;
    cluster->temp_dir_ = true;
    cluster->temp_lock_fd_ = LockTempFolder(tmpl);
    if (cluster->temp_lock_fd_ < 0) {
      DLRM_LOG(WARNING) << "cannot lock " << tmpl << " (" << std::strerror(errno)
                        << "): a later dlrm local will not remove it if this one is killed";
    }
    RemoveAbandonedTempFolders(fs::path(tmpl).parent_path(), tmpl);
  } else {
    cluster->data_dir_ = fs::absolute(options.data_dir).string();
  }
  std::error_code ec;
  fs::create_directories(fs::path(cluster->data_dir_) / "logs", ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("--data-dir ", cluster->data_dir_, ": ", ec.message()));
  }
  return cluster;
}

LocalCluster::~LocalCluster() {
  Stop();
  JoinSupervisor();
  if (temp_lock_fd_ >= 0) close(temp_lock_fd_);
}

void LocalCluster::JoinSupervisor() {
  absl::MutexLock lock(&join_mu_);
  if (supervisor_.joinable()) supervisor_.join();
}

absl::Status LocalCluster::Spawn(const std::string& name, const std::vector<std::string>& args) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::CancelledError("local cluster is stopping");
  Child child;
  child.name = name;
  child.args = args;
  children_.push_back(std::move(child));
  return StartChildLocked(&children_.back(), /*append_log=*/false);
}

absl::Status LocalCluster::StartChildLocked(Child* child, bool append_log) {
  const std::string log_path = absl::StrCat(data_dir_, "/logs/", child->name, ".log");
  std::vector<std::string> argv_storage = {binary_};
  if (!options_.log_level.empty()) {
    argv_storage.push_back("--log-level");
    argv_storage.push_back(options_.log_level);
  }
  argv_storage.insert(argv_storage.end(), child->args.begin(), child->args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Appended to, never truncated: a restarted child's log keeps the dead one's last words, and a
  // --data-dir used again keeps the earlier run's logs (a crashed run's, or those of a cluster
  // still running there, which the second one's lock then refuses), each start marked.
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND, 0644);
  if (log_fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open ", log_path, ": ", strerror(errno)));
  }
  if (!append_log) {
    const std::string mark = absl::StrCat(
        kStartMark, getpid(), ") starts ", child->name, " at ",
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()), " ----\n");
    if (write(log_fd, mark.data(), mark.size()) < 0) {
      DLRM_LOG(WARNING) << "cannot write " << log_path << ": " << strerror(errno);
    }
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("fork for ", child->name, ": ", strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    setpgid(0, 0);  // Ctrl-C reaches the parent, which stops the children in order
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  child->log_path = log_path;
  child->pid = pid;
  child->started = absl::Now();
  DLRM_LOG(DEBUG) << "started " << child->name << " (pid " << pid
                  << "): " << absl::StrJoin(argv_storage, " ");
  return absl::OkStatus();
}

void LocalCluster::Supervise() {
  absl::MutexLock lock(&mu_);
  while (!stopped_) {
    const absl::Time now = absl::Now();
    for (Child& c : children_) {
      if (c.pid > 0) {
        int wait_status = 0;
        if (!Reaped(c.pid, &wait_status)) continue;
        // A child that exits on its own soon after it started (a crash loop: a bad flag, a port
        // in use) waits longer before the next try; one killed from outside does not.
        const absl::Duration lived = now - c.started;
        c.backoff =
            lived > absl::Seconds(10) || WIFSIGNALED(wait_status)
                ? absl::Milliseconds(200)
                : std::min(std::max(c.backoff * 2, absl::Milliseconds(200)), absl::Seconds(10));
        c.restart_at = now + c.backoff;
        c.pid = -1;
        DLRM_LOG(WARNING) << c.name << " " << DescribeExit(wait_status) << "; restarting it in "
                          << c.backoff << " (see " << c.log_path << ")";
      } else if (c.restart_at != absl::InfiniteFuture() && now >= c.restart_at) {
        c.restart_at = absl::InfiniteFuture();
        absl::Status started = StartChildLocked(&c, /*append_log=*/true);
        if (started.ok()) {
          ++c.restarts;
          DLRM_LOG(WARNING) << "restarted " << c.name << " (pid " << c.pid << ", restart "
                            << c.restarts << ")";
        } else {
          DLRM_LOG(ERROR) << "restarting " << c.name << ": " << started;
          c.restart_at = now + absl::Seconds(1);
        }
      }
    }
    mu_.AwaitWithTimeout(absl::Condition(&stopped_), absl::Milliseconds(100));
  }
}

int LocalCluster::restarts(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  for (const Child& c : children_) {
    if (c.name == name) return c.restarts;
  }
  return 0;
}

absl::Status LocalCluster::WaitForPortFile(const std::string& path) {
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  while (absl::Now() < deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::CancelledError("local cluster is stopping");
      for (const Child& child : children_) {
        int wait_status = 0;
        if (child.name == "coordinator" && Reaped(child.pid, &wait_status)) {
          return absl::UnavailableError(absl::StrCat("the coordinator ", DescribeExit(wait_status),
                                                     " at start-up; see ", child.log_path, ":\n",
                                                     LogTail(child.name)));
        }
      }
    }
    int port = 0;
    if (absl::SimpleAtoi(ReadFile(path), &port) && port > 0) {
      coordinator_address_ = absl::StrCat("127.0.0.1:", port);
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("the coordinator did not report its port within ",
                                                  absl::FormatDuration(options_.ready_timeout)));
}

absl::StatusOr<std::vector<std::string>> LocalCluster::MetricsArgs(const std::string& component) {
  if (!options_.metrics) return std::vector<std::string>{};
  int port = 0;
  if (options_.metrics_base_port > 0) {
    port = options_.metrics_base_port + static_cast<int>(metrics_targets_.size());
  } else {
    DLRM_ASSIGN_OR_RETURN(port, PickFreePort());
  }
  metrics_targets_.emplace_back(component, absl::StrCat("127.0.0.1:", port));
  return std::vector<std::string>{"--metrics-port", absl::StrCat(port), "--metrics-listen",
                                  "127.0.0.1"};
}

common::TransportSecurity LocalCluster::client_security() const {
  return options_.tls ? common::TransportSecurity::FromDir(admin_tls_dir())
                      : common::TransportSecurity{};
}

std::string LocalCluster::admin_tls_dir() const {
  return options_.tls ? absl::StrCat(data_dir_, "/tls/admin") : std::string();
}

std::vector<std::string> LocalCluster::TlsArgs(const std::string& identity) const {
  if (!options_.tls) return {};
  return {"--tls-dir", absl::StrCat(data_dir_, "/tls/", identity)};
}

absl::Status LocalCluster::Launch() {
  metrics_targets_.clear();
  // Each worker's device, before anything starts (--device cuda with too few GPUs stops here).
  DLRM_ASSIGN_OR_RETURN(
      const worker::LocalWorkerPlacement placement,
      worker::PlaceLocalWorkers(options_.device, options_.num_workers,
                                options_.device == "cpu" ? 0 : dense::VisibleCudaDevices()));
  if (!placement.note.empty()) DLRM_LOG(WARNING) << "dlrm local: " << placement.note;
  if (options_.tls) {
    DLRM_RETURN_IF_ERROR(
        common::WriteClusterCertificates({.out_dir = absl::StrCat(data_dir_, "/tls")}));
  }
  const std::string port_file = absl::StrCat(data_dir_, "/coordinator.port");
  std::error_code ec;
  fs::remove(port_file, ec);
  std::vector<std::string> coordinator_args = {
      "coordinator",
      "--listen",
      "127.0.0.1:0",
      "--data-dir",
      absl::StrCat(data_dir_, "/coordinator"),
      "--lease-ttl",
      absl::StrCat(absl::ToInt64Milliseconds(options_.lease_ttl), "ms"),
      "--port-file",
      port_file};
  DLRM_ASSIGN_OR_RETURN(std::vector<std::string> metrics_args, MetricsArgs("coordinator"));
  coordinator_args.insert(coordinator_args.end(), metrics_args.begin(), metrics_args.end());
  std::vector<std::string> tls_args = TlsArgs("coordinator");
  coordinator_args.insert(coordinator_args.end(), tls_args.begin(), tls_args.end());
  DLRM_RETURN_IF_ERROR(Spawn("coordinator", coordinator_args));
  DLRM_RETURN_IF_ERROR(WaitForPortFile(port_file));
  {
    // A restarted coordinator must come back where the others look for it: its bound port.
    absl::MutexLock lock(&mu_);
    for (Child& c : children_) {
      if (c.name != "coordinator") continue;
      for (size_t i = 0; i + 1 < c.args.size(); ++i) {
        if (c.args[i] == "--listen") c.args[i + 1] = coordinator_address_;
      }
    }
  }

  for (int i = 0; i < options_.num_ps; ++i) {
    std::vector<std::string> args = {"ps",
                                     "--coordinator",
                                     coordinator_address_,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--data-dir",
                                     absl::StrCat(data_dir_, "/ps-", i),
                                     "--name",
                                     absl::StrCat("ps-", i)};
    if (!options_.memory_budget.empty()) {
      args.push_back("--memory-budget");
      args.push_back(options_.memory_budget);
    }
    DLRM_ASSIGN_OR_RETURN(metrics_args, MetricsArgs("ps"));
    args.insert(args.end(), metrics_args.begin(), metrics_args.end());
    tls_args = TlsArgs("ps");
    args.insert(args.end(), tls_args.begin(), tls_args.end());
    DLRM_RETURN_IF_ERROR(Spawn(absl::StrCat("ps-", i), args));
  }
  int threads = options_.worker_threads;
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / options_.num_workers);
  }
  for (int i = 0; i < options_.num_workers; ++i) {
    std::vector<std::string> args = {"worker",
                                     "--coordinator",
                                     coordinator_address_,
                                     "--device",
                                     placement.workers[i].device,
                                     "--cuda-device",
                                     absl::StrCat(placement.workers[i].cuda_device),
                                     "--advertise-host",
                                     "127.0.0.1",
                                     "--threads",
                                     absl::StrCat(threads),
                                     "--name",
                                     absl::StrCat("worker-", i)};
    if (!options_.worker_pipeline) args.push_back("--no-pipeline");
    if (!options_.worker_hot_rows) args.push_back("--no-hot-rows");
    if (!options_.worker_overlap_hot_exchange) args.push_back("--sync-hot-exchange");
    if (!options_.worker_overlap_dense_allreduce) args.push_back("--sync-dense-allreduce");
    if (!options_.worker_direct_collectives) args.push_back("--ring-collectives");
    DLRM_ASSIGN_OR_RETURN(metrics_args, MetricsArgs("worker"));
    args.insert(args.end(), metrics_args.begin(), metrics_args.end());
    tls_args = TlsArgs("worker");
    args.insert(args.end(), tls_args.begin(), tls_args.end());
    DLRM_RETURN_IF_ERROR(Spawn(absl::StrCat("worker-", i), args));
  }
  DLRM_RETURN_IF_ERROR(WaitReady());
  if (options_.restart_children) supervisor_ = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitReady() {
  DLRM_ASSIGN_OR_RETURN(auto client, CoordinatorClient::Create({.address = coordinator_address_,
                                                                .timeout = absl::Seconds(2),
                                                                .security = client_security()}));
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  std::string last;
  while (absl::Now() < deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::CancelledError("local cluster is stopping");
      for (const Child& child : children_) {
        int wait_status = 0;
        if (Reaped(child.pid, &wait_status)) {
          return absl::UnavailableError(absl::StrCat(child.name, " ", DescribeExit(wait_status),
                                                     " at start-up; see ", child.log_path, ":\n",
                                                     LogTail(child.name)));
        }
      }
    }
    absl::StatusOr<dlrm::v1::GetClusterViewResponse> view = client->Members();
    if (view.ok()) {
      int ps = 0, workers = 0;
      for (const dlrm::v1::Member& m : view->members()) {
        if (m.state() != dlrm::v1::MEMBER_STATE_ALIVE) continue;
        if (m.role() == dlrm::v1::ROLE_PS) ++ps;
        if (m.role() == dlrm::v1::ROLE_WORKER) ++workers;
      }
      if (ps >= options_.num_ps && workers >= options_.num_workers) return absl::OkStatus();
      last = absl::StrCat(ps, "/", options_.num_ps, " parameter servers and ", workers, "/",
                          options_.num_workers, " workers registered");
    } else {
      last = std::string(view.status().message());
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("the local cluster was not ready within ",
                                                  absl::FormatDuration(options_.ready_timeout),
                                                  ": ", last, "; logs in ", data_dir_, "/logs"));
}

std::string LocalCluster::LogTail(const std::string& name) const {
  std::string text = ReadFile(absl::StrCat(data_dir_, "/logs/", name, ".log"));
  // This run's part: the log is appended to (StartChild).
  if (const size_t mark = text.rfind(kStartMark); mark != std::string::npos) {
    text = text.substr(mark);
  }
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t keep = 15;
  if (lines.size() > keep) lines.erase(lines.begin(), lines.end() - keep);
  return absl::StrJoin(lines, "\n");
}

std::vector<std::pair<std::string, std::string>> LocalCluster::logs() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const Child& c : children_) out.emplace_back(c.name, c.log_path);
  return out;
}

void LocalCluster::KeepDataDir() {
  absl::MutexLock lock(&mu_);
  keep_data_dir_ = true;
}

std::vector<pid_t> LocalCluster::pids() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> out;
  for (const Child& c : children_) {
    if (c.pid > 0) out.push_back(c.pid);
  }
  return out;
}

void LocalCluster::SignalAndWait(const std::string& prefix, absl::Duration wait) {
  // REQUIRES: mu_ held.
  for (Child& c : children_) {
    if (c.pid > 0 && c.name.rfind(prefix, 0) == 0) kill(c.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    bool all_gone = true;
    for (Child& c : children_) {
      if (c.pid <= 0 || c.name.rfind(prefix, 0) != 0) continue;
      int wait_status = 0;
      if (Reaped(c.pid, &wait_status)) {
        DLRM_LOG(DEBUG) << c.name << " " << DescribeExit(wait_status);
        c.pid = -1;
      } else {
        all_gone = false;
      }
    }
    if (all_gone || absl::Now() >= deadline) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void LocalCluster::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;  // the supervisor restarts nothing from now on
  }
  JoinSupervisor();
  absl::MutexLock lock(&mu_);
  // Workers first, so they can leave the cluster while the coordinator still answers; then
  // everyone (a worker stuck in a lookup is released when its parameter server stops).
  SignalAndWait("worker-", std::min(options_.stop_grace, absl::Seconds(2)));
  SignalAndWait("", options_.stop_grace);
  for (Child& c : children_) {
    if (c.pid <= 0) continue;
    DLRM_LOG(WARNING) << c.name << " (pid " << c.pid << ") did not stop within "
                      << options_.stop_grace << "; killing it";
    kill(c.pid, SIGKILL);
    int wait_status = 0;
    waitpid(c.pid, &wait_status, 0);
    c.pid = -1;
  }
  std::error_code ec;
  if (temp_dir_ && !keep_data_dir_) {
    fs::remove_all(data_dir_, ec);
  } else if (temp_dir_) {
    // Kept for the user to read: a later run must not take it for an abandoned one.
    fs::remove(fs::path(data_dir_) / kTempFolderLock, ec);
  }
}

}  // namespace dlrm::client
