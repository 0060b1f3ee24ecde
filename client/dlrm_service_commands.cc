// `dlrm coordinator`, `dlrm ps`, `dlrm worker` and `dlrm local`: flags are parsed here and passed
// down as options structs to the libraries (server/, worker/, client/local_cluster.h). Each
// process shuts down cleanly on SIGINT or SIGTERM (client/termination_signals.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/dlrm_commands.h"
#include "client/local_cluster.h"
#include "client/termination_signals.h"
#include "client/tls_flags.h"
#include "common/authz.h"
#include "common/certs.h"
#include "common/host_port.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/memory_info.h"
#include "common/metrics.h"
#include "common/status.h"
#include "server/coordinator.h"
#include "server/ps_process.h"
#include "worker/worker_process.h"

namespace dlrm {
namespace {

// The TLS flags' refusals (a --tls-dir that is no folder, a file that cannot be read or holds no
// PEM, plaintext off loopback without --insecure) are all about what the user gave: exit 2, as
// dlrmctl does for the same flags, not 1 as for a failure of the run.
int FailTls(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 2;
}

// --lease-ttl of `dlrm coordinator` and `dlrm local`: at least kMinLeaseTtl. Members heartbeat
// every eighth of the lease over gRPC; `--lease-ttl 1ns` was taken, and every member's lease then
// expired between two heartbeats (`dlrm local` failed its job after its recoveries).
constexpr absl::Duration kMinLeaseTtl = absl::Seconds(1);

absl::StatusOr<absl::Duration> ParseLeaseTtl(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease-ttl '", text, "': expected a duration of at least 1s like 10s or 1500ms"));
  }
  if (d < kMinLeaseTtl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease-ttl '", text, "' is shorter than ", absl::FormatDuration(kMinLeaseTtl),
        ": members heartbeat every eighth of the lease, over gRPC, and one this short expires "
        "members that are alive (the default is 14s)"));
  }
  return d;
}

// --metrics-port: a decimal port, 0 for any free one, below 0 for none. CLI11 alone read it with
// strtoll's base 0: `--metrics-port 010` served on port 8, `0x10` on 16.
CLI::Validator MetricsPort() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        if (std::string why = flags_internal::NotDecimal(input); !why.empty()) return why;
        int64_t port = 0;
        if (absl::SimpleAtoi(input, &port) && port <= 65535) return "";
        return absl::StrCat(input, " is not a port (at most 65535; 0: any free port, < 0: none)");
      },
      "");
}

// Writes `port` to `path` atomically (write + rename), so a reader never sees half a number.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    // Closed before it is checked: a full disk fails the flush, and an empty file would pass.
    out.close();
    if (out.fail()) {
      const int err = errno != 0 ? errno : EIO;
      std::remove(tmp.c_str());
      return FileError(err, absl::StrCat("--port-file: cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return FileError(err, absl::StrCat("--port-file: cannot rename to ", path));
  }
  return absl::OkStatus();
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

// --- dlrm coordinator ------------------------------------------------------------------------

struct CoordinatorFlags {
  server::CoordinatorOptions options;
  client::TlsFlags tls;
  std::string tokens;  // --tokens: the bearer tokens people and scripts may use
  std::string lease_ttl = "14s";
  std::string port_file;
};

int RunCoordinator(CoordinatorFlags& flags) {
  client::IgnoreBrokenPipes();
  client::InstallTerminationHandlers();
  if (absl::Status st =
          common::CheckHostPort("--listen", flags.options.listen_address, common::kListenAddress);
      !st.ok()) {
    return Fail(st);
  }
  auto ttl = ParseLeaseTtl(flags.lease_ttl);
  if (!ttl.ok()) return Fail(ttl.status());
  flags.options.lease_ttl = *ttl;
  auto security = client::ResolveTls(flags.tls, flags.options.listen_address, "dlrm coordinator");
  if (!security.ok()) return FailTls(security.status());
  flags.options.security = *security;
  if (!flags.tokens.empty()) {
    if (!flags.options.security.tls()) {
      return Fail(absl::InvalidArgumentError(
          "dlrm coordinator: --tokens needs TLS (a bearer token is never accepted in plaintext)"));
    }
    auto tokens = common::LoadTokenFile(flags.tokens);
    if (!tokens.ok()) return Fail(tokens.status());
    DLRM_LOG(INFO) << tokens->size() << " bearer token(s) from " << flags.tokens
                   << "; clients may come with a token instead of a certificate";
    common::SetBearerTokens(std::move(*tokens));
    flags.options.security.require_client_certificate = false;
  }
  auto coordinator = server::Coordinator::Create(flags.options);
  if (!coordinator.ok()) return Fail(coordinator.status());
  absl::Status started = (*coordinator)->Start();
  if (!started.ok()) return Fail(started);
  DLRM_LOG(INFO) << "coordinator listening on " << (*coordinator)->address() << ", data in "
                 << flags.options.data_dir << ", lease " << flags.options.lease_ttl
                 << (flags.options.security.tls() ? ", mutual TLS" : ", plaintext")
                 << ((*coordinator)->metrics_port() > 0
                         ? absl::StrCat(", metrics on :", (*coordinator)->metrics_port())
                         : std::string());
  if (!flags.port_file.empty()) {
    absl::Status st = WritePortFile(flags.port_file, (*coordinator)->port());
    if (!st.ok()) {
      (*coordinator)->Shutdown();
      return Fail(st);
    }
  }
  client::TerminationSignals signals([&](int) { (*coordinator)->Shutdown(); });
  (*coordinator)->Wait();
  DLRM_LOG(INFO) << "coordinator stopped";
  return 0;
}

void AddCoordinator(CLI::App& app, std::function<int()>* run) {
  auto* cmd =
      app.add_subcommand("coordinator", "Run the coordinator (membership, jobs, rendezvous)");
  static CoordinatorFlags flags;
  cmd->add_option("--listen", flags.options.listen_address, "gRPC address (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--data-dir", flags.options.data_dir, "Folder of the coordinator's RocksDB")
      ->required();
  cmd->add_option("--lease-ttl", flags.lease_ttl, "Member lease, at least 1s, e.g. 10s or 1500ms")
      ->capture_default_str();
  cmd->add_option("--metrics-port", flags.options.metrics_port,
                  "Prometheus port (0: any free port, < 0: none)")
      ->check(MetricsPort());
  cmd->add_option("--metrics-listen", flags.options.metrics_host,
                  "Address the metrics endpoint binds (default: the host of --listen)");
  cmd->add_option("--port-file", flags.port_file, "Write the bound gRPC port to this file")
      ->check(NonEmptyPath());
  cmd->add_option("--tokens", flags.tokens,
                  "Bearer tokens for dlrmctl users: lines of 'admin|viewer TOKEN' (needs TLS)")
      ->check(NonEmptyPath());
  client::AddTlsFlags(cmd, &flags.tls);
  cmd->callback([run] { *run = [] { return RunCoordinator(flags); }; });
}

// --- dlrm ps ---------------------------------------------------------------------------------

struct PsFlags {
  server::PsProcessOptions options;
  client::TlsFlags tls;
  std::string memory_budget = "1GiB";
  int metrics_port = -1;
  std::string metrics_listen;  // "" = the host of --listen
};

int RunPs(PsFlags& flags) {
  client::IgnoreBrokenPipes();
  client::InstallTerminationHandlers();
  for (const auto& [flag, address, rules] :
       {std::tuple<const char*, const std::string&, common::HostPortRules>{
            "--listen", flags.options.server.listen_address, common::kListenAddress},
        {"--coordinator", flags.options.coordinator, common::kDialAddress}}) {
    if (absl::Status st = common::CheckHostPort(flag, address, rules); !st.ok()) return Fail(st);
  }
  if (!flags.options.advertise_address.empty()) {
    if (absl::Status st = common::CheckHostPort("--advertise", flags.options.advertise_address,
                                                common::kDialAddress);
        !st.ok()) {
      return Fail(st);
    }
  }
  auto budget = common::ParseByteSize(flags.memory_budget);
  if (!budget.ok()) return Fail(Annotate(budget.status(), "--memory-budget"));
  flags.options.server.memory_budget_bytes = *budget;
  if (absl::Status st = common::CheckMemoryBudgetFits(
          *budget, 1, absl::StrCat("--memory-budget ", flags.memory_budget),
          common::ReadMemoryInfo());
      !st.ok()) {
    return Fail(st);
  }
  auto security = client::ResolveTls(flags.tls, flags.options.server.listen_address, "dlrm ps");
  if (!security.ok()) return FailTls(security.status());
  flags.options.server.security = *security;
  auto metrics = common::MetricsRegistry::Create(
      {.port = flags.metrics_port,
       .bind_address = flags.metrics_listen.empty()
                           ? common::HostOfAddress(flags.options.server.listen_address)
                           : flags.metrics_listen});
  if (!metrics.ok()) return Fail(metrics.status());
  flags.options.server.metrics = metrics->get();
  if ((*metrics)->port() > 0) {
    const std::string& advertise = flags.options.advertise_address;
    const std::string host =
        advertise.empty() ? HostName() : advertise.substr(0, advertise.rfind(':'));
    flags.options.metrics_address = absl::StrCat(host, ":", (*metrics)->port());
  }
  auto ps = server::PsProcess::Create(flags.options);
  if (!ps.ok()) return Fail(ps.status());
  DLRM_LOG(INFO) << "parameter server listening on " << (*ps)->server().address()
                 << " (advertised as " << (*ps)->advertise_address() << "), memory budget "
                 << flags.memory_budget << ", data in " << flags.options.server.data_dir
                 << (flags.options.server.security.tls() ? ", mutual TLS" : ", plaintext");
  client::TerminationSignals signals([&](int) { (*ps)->Shutdown(); });
  absl::Status status = (*ps)->Run();
  return status.ok() ? 0 : Fail(status);
}

void AddPs(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("ps", "Run a parameter server (embedding shards)");
  static PsFlags flags;
  flags.options.server.listen_address = "0.0.0.0:50061";
  cmd->add_option("--coordinator", flags.options.coordinator, "Coordinator address")
      ->envname("DLRM_COORDINATOR")
      ->capture_default_str();
  cmd->add_option("--listen", flags.options.server.listen_address,
                  "gRPC address (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--advertise", flags.options.advertise_address,
                  "HOST:PORT workers reach this server at (default: the bound address)");
  cmd->add_option("--data-dir", flags.options.server.data_dir, "Folder of the RocksDB tiers")
      ->required();
  cmd->add_option("--memory-budget", flags.memory_budget, "Bytes of the memory tier, e.g. 4GiB")
      ->capture_default_str();
  cmd->add_option("--threads", flags.options.server.num_threads, "Work-pool threads (0: cores)")
      ->check(ThreadCount());
  cmd->add_option("--metrics-port", flags.metrics_port,
                  "Prometheus port (0: any free port, < 0: none)")
      ->check(MetricsPort());
  cmd->add_option("--metrics-listen", flags.metrics_listen,
                  "Address the metrics endpoint binds (default: the host of --listen)");
  cmd->add_option(
      "--name", flags.options.name,
      "The member's identity (e.g. its pod's name), shown by dlrmctl members: a process that "
      "registers under the name of a live member replaces it, and the older one stops");
  cmd->add_option("--checkpoint-root", flags.options.server.checkpoint_root,
                  "Write checkpoint row files only under this folder (default: any path)")
      ->check(NonEmptyPath());
  client::AddTlsFlags(cmd, &flags.tls);
  cmd->callback([run] { *run = [] { return RunPs(flags); }; });
}

// --- dlrm worker -----------------------------------------------------------------------------

struct WorkerFlags {
  worker::WorkerProcessOptions options;
  client::TlsFlags tls;
  int metrics_port = -1;
  // A worker serves no gRPC: its endpoint binds every interface unless told otherwise.
  std::string metrics_listen = "0.0.0.0";
  bool no_pipeline = false;
  bool no_hot_rows = false;
  bool sync_hot_exchange = false;
  bool sync_dense_allreduce = false;
  bool ring_collectives = false;
};

int RunWorker(WorkerFlags& flags) {
  client::IgnoreBrokenPipes();
  client::InstallTerminationHandlers();
  if (absl::Status st =
          common::CheckHostPort("--coordinator", flags.options.coordinator, common::kDialAddress);
      !st.ok()) {
    return Fail(st);
  }
  // A host only: the collectives bind ports of their own. `10.0.0.5:7000` was accepted and handed
  // to Gloo as a host name, to be found out only when a multi-worker job connected.
  if (const std::string& host = flags.options.advertise_host;
      std::count(host.begin(), host.end(), ':') == 1 || absl::StartsWith(host, "[")) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--advertise-host '", host,
                     "': give a host name or address without a port (the collectives choose "
                     "their own ports)")));
  }
  // A worker serves no gRPC: the flags only choose how it dials out.
  auto security = client::ResolveTls(flags.tls, "", "dlrm worker");
  if (!security.ok()) return FailTls(security.status());
  flags.options.security = *security;
  auto metrics = common::MetricsRegistry::Create(
      {.port = flags.metrics_port, .bind_address = flags.metrics_listen});
  if (!metrics.ok()) return Fail(metrics.status());
  flags.options.metrics = metrics->get();
  flags.options.use_pipeline = !flags.no_pipeline;
  flags.options.use_hot_rows = !flags.no_hot_rows;
  flags.options.overlap_hot_exchange = !flags.sync_hot_exchange;
  flags.options.overlap_dense_allreduce = !flags.sync_dense_allreduce;
  flags.options.direct_collectives = !flags.ring_collectives;
  if ((*metrics)->port() > 0) {
    flags.options.metrics_address = absl::StrCat(
        flags.options.advertise_host.empty() ? HostName() : flags.options.advertise_host, ":",
        (*metrics)->port());
  }
  auto worker = worker::WorkerProcess::Create(flags.options);
  if (!worker.ok()) return Fail(worker.status());
  client::TerminationSignals signals([&](int) { (*worker)->Shutdown(); });
  absl::Status status = (*worker)->Run();
  return status.ok() ? 0 : Fail(status);
}

void AddWorker(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("worker", "Run a training worker (serves jobs one after another)");
  static WorkerFlags flags;
  cmd->add_option("--coordinator", flags.options.coordinator, "Coordinator address")
      ->envname("DLRM_COORDINATOR")
      ->capture_default_str();
  cmd->add_option("--device", flags.options.device, "auto | cpu | cuda (overrides the spec)")
      ->check(DeviceName())
      ->capture_default_str();
  cmd->add_option("--cuda-device", flags.options.cuda_device,
                  "CUDA device ordinal to train on when the device is CUDA (one per worker); "
                  "-1: none of its own (a job asking for cuda fails, auto trains on the CPU)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--advertise-host", flags.options.advertise_host,
                  "Address the other workers reach this one at for collectives");
  cmd->add_option("--metrics-port", flags.metrics_port,
                  "Prometheus port (0: any free port, < 0: none)")
      ->check(MetricsPort());
  cmd->add_option("--metrics-listen", flags.metrics_listen,
                  "Address the metrics endpoint binds (a worker has no --listen)")
      ->capture_default_str();
  cmd->add_option("--threads", flags.options.threads, "CPU threads (0 = all cores)")
      ->check(ThreadCount());
  cmd->add_option(
      "--name", flags.options.name,
      "The member's identity (e.g. its pod's name), shown by dlrmctl members: a process that "
      "registers under the name of a live member replaces it, and the older one stops");
  cmd->add_flag("--no-pipeline", flags.no_pipeline,
                "Run the plain Trainer::Step loop instead of the pipelined trainer");
  cmd->add_flag("--no-hot-rows", flags.no_hot_rows,
                "Keep no hot rows here, whatever the job's hot_budget (every row on the PS)");
  cmd->add_flag("--sync-hot-exchange", flags.sync_hot_exchange,
                "Exchange hot-row gradients on the compute thread before the next step (fresh hot "
                "rows) instead of while it computes (one step stale, with staleness >= 1)");
  cmd->add_flag("--sync-dense-allreduce", flags.sync_dense_allreduce,
                "Allreduce the dense gradients after the backward instead of in buckets while it "
                "runs (CPU workers; the same sums)");
  cmd->add_flag("--ring-collectives", flags.ring_collectives,
                "Send every collective around Gloo's ring, also those small enough for the direct "
                "exchange (CPU workers; the same sums with two workers)");
  client::AddTlsFlags(cmd, &flags.tls);
  cmd->callback([run] { *run = [] { return RunWorker(flags); }; });
}

// --- dlrm local ------------------------------------------------------------------------------

struct LocalFlags {
  client::LocalCommandOptions options;
  std::string lease_ttl = "14s";
  bool no_pipeline = false;
  bool no_hot_rows = false;
  bool sync_hot_exchange = false;
  bool sync_dense_allreduce = false;
  bool ring_collectives = false;
  bool no_progress = false;
  bool insecure = false;
};

void AddLocal(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand(
      "local",
      "Run a whole cluster on this machine (coordinator, parameter servers, workers), "
      "train a job on it and exit with its result");
  static LocalFlags flags;
  auto& o = flags.options;
  cmd->add_option("-c,--config", o.config_path, "Job spec (YAML)")->required();
  cmd->add_option("--ps", o.cluster.num_ps, "Parameter servers")
      ->check(LocalMemberCount())
      ->capture_default_str();
  cmd->add_option("--workers", o.cluster.num_workers, "Workers")
      ->check(LocalMemberCount())
      ->capture_default_str();
  cmd->add_option("--data-dir", o.cluster.data_dir,
                  "Folder for the processes' data and logs (default: a temporary folder)")
      ->check(NonEmptyPath());
  cmd->add_option("--metrics-out", o.metrics_out, "Write the final metrics as JSON (as dlrm train)")
      ->check(NonEmptyPath());
  cmd->add_option("--report", o.report,
                  "Write a self-contained HTML page with the job's loss, eval AUC and logloss, "
                  "and throughput curves (also when the job fails)")
      ->check(NonEmptyPath());
  cmd->add_option("--resume-from", o.resume_from,
                  "Continue the job from a checkpoint (or the newest in a checkpoint folder)")
      ->check(NonEmptyPath());
  cmd->add_flag("--keep-running", o.keep_running,
                "After the job, keep the cluster up (for dlrmctl) until Ctrl-C");
  cmd->add_option("--memory-budget", o.cluster.memory_budget,
                  "Each parameter server's memory tier, e.g. 1GiB");
  cmd->add_option("--lease-ttl", flags.lease_ttl, "Member lease of the coordinator")
      ->capture_default_str();
  cmd->add_option("--device", o.cluster.device,
                  "Workers' device: auto | cpu | cuda (worker i on CUDA device i; auto with "
                  "fewer GPUs than workers: the CPU)")
      ->check(DeviceName());
  cmd->add_option("--worker-threads", o.cluster.worker_threads,
                  "CPU threads per worker (0 = cores / workers)")
      ->check(ThreadCount());
  cmd->add_flag("--no-pipeline", flags.no_pipeline, "Workers run the plain Trainer::Step loop");
  cmd->add_flag("--no-hot-rows", flags.no_hot_rows, "Workers keep no hot rows (all on the PS)");
  cmd->add_flag("--sync-hot-exchange", flags.sync_hot_exchange,
                "Workers exchange hot-row gradients before the next step instead of while it "
                "computes");
  cmd->add_flag("--sync-dense-allreduce", flags.sync_dense_allreduce,
                "Workers allreduce the dense gradients after the backward instead of while it "
                "runs");
  cmd->add_flag("--ring-collectives", flags.ring_collectives,
                "Workers send every collective around Gloo's ring (no direct exchange)");
  cmd->add_flag("--no-progress", flags.no_progress, "Do not draw the progress line");
  cmd->add_flag("--insecure", flags.insecure,
                "Plaintext gRPC between the processes (default: mutual TLS with certificates "
                "made for this cluster in DATA_DIR/tls)");
  cmd->add_flag("--metrics", o.cluster.metrics,
                "Every process serves Prometheus metrics on 127.0.0.1; prints the scrape targets");
  cmd->add_option("--metrics-base-port", o.cluster.metrics_base_port,
                  "First metrics port (coordinator; then parameter servers, workers); 0: free "
                  "ports")
      ->check(CLI::Range(0, 65000))
      ->capture_default_str();
  cmd->callback([run] {
    *run = [] {
      client::IgnoreBrokenPipes();
      auto ttl = ParseLeaseTtl(flags.lease_ttl);
      if (!ttl.ok()) return Fail(ttl.status());
      flags.options.cluster.lease_ttl = *ttl;
      flags.options.cluster.worker_pipeline = !flags.no_pipeline;
      flags.options.cluster.worker_hot_rows = !flags.no_hot_rows;
      flags.options.cluster.worker_overlap_hot_exchange = !flags.sync_hot_exchange;
      flags.options.cluster.worker_overlap_dense_allreduce = !flags.sync_dense_allreduce;
      flags.options.cluster.worker_direct_collectives = !flags.ring_collectives;
      flags.options.show_progress = !flags.no_progress;
      flags.options.cluster.tls = !flags.insecure;
      if (!flags.options.cluster.memory_budget.empty()) {
        auto budget = common::ParseByteSize(flags.options.cluster.memory_budget);
        if (!budget.ok()) return Fail(Annotate(budget.status(), "--memory-budget"));
        if (absl::Status st = common::CheckMemoryBudgetFits(
                *budget, flags.options.cluster.num_ps,
                absl::StrCat("--memory-budget ", flags.options.cluster.memory_budget),
                common::ReadMemoryInfo());
            !st.ok()) {
          return Fail(st);
        }
      }
      flags.options.cluster.log_level =
          common::MinLogSeverity() == common::LogSeverity::kDebug ? "debug" : "";
      return client::RunLocalCommand(flags.options);
    };
  });
}

// --- dlrm certs ------------------------------------------------------------------------------

void AddCerts(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand(
      "certs",
      "Make a CA and mutual-TLS certificates for a cluster: OUT/ca.crt and, for coordinator, ps, "
      "worker and admin (dlrmctl), OUT/<identity>/{tls.crt,tls.key,ca.crt}");
  static common::ClusterCertOptions options;
  static std::vector<std::string> hosts;
  cmd->add_option("--out", options.out_dir, "Folder to write them to")->required();
  cmd->add_option("--host", hosts,
                  "Name or IP address the servers are dialled at (repeat; default localhost and "
                  "127.0.0.1)");
  cmd->add_option("--days", options.valid_days, "Days the certificates are valid")
      ->check(IntegerIn(1, 3650))
      ->capture_default_str();
  static bool overwrite = false;
  cmd->add_flag("--overwrite", overwrite,
                "Replace the CA of a folder that already holds one (ca.key, ca.crt): every "
                "certificate the old CA issued stops being trusted");
  cmd->callback([run] {
    *run = [] {
      if (!hosts.empty()) options.hosts = hosts;
      options.overwrite = overwrite;
      absl::Status written = common::WriteClusterCertificates(options);
      if (!written.ok()) return Fail(written);
      std::printf("certificates in %s: ca.crt (ca.key: keep it off the cluster), and %s\n",
                  options.out_dir.c_str(),
                  "coordinator/ ps/ worker/ admin/ (tls.crt, tls.key, ca.crt)");
      return 0;
    };
  });
}

}  // namespace

void AddServiceCommands(CLI::App& app, std::function<int()>* run) {
  AddCerts(app, run);
  AddCoordinator(app, run);
  AddPs(app, run);
  AddWorker(app, run);
  AddLocal(app, run);
}

}  // namespace dlrm
