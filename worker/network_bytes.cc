#include "worker/network_bytes.h"

namespace dlrm::worker {
namespace {

constexpr char kPsService[] = "/dlrm.v1.ParameterServer/";
constexpr char kLookup[] = "/dlrm.v1.ParameterServer/Lookup";
constexpr char kPush[] = "/dlrm.v1.ParameterServer/PushGradients";
// Rows moved between the hot set and the servers at a refresh (worker/hot_refresh.h); in a job's
// training window nothing else reads or writes stored rows.
constexpr char kReadRows[] = "/dlrm.v1.ParameterServer/ReadRows";
constexpr char kWriteRows[] = "/dlrm.v1.ParameterServer/WriteRows";

int64_t Both(const common::RpcBytes& b) { return b.sent + b.received; }

}  // namespace

NetworkSnapshot TakeNetworkSnapshot(const Trainer& trainer,
                                    std::initializer_list<const Collectives*> reducers) {
  NetworkSnapshot s;
  s.rpc = common::RpcByteCounters::ProcessClient().Snapshot();
  for (const Collectives* reducer : reducers) {
    if (reducer != nullptr) s.collective_sent += reducer->sent_bytes();
  }
  const TrainerCounters c = trainer.counters();
  s.dense_sync = c.dense_sync_bytes;
  s.hot_sync = c.hot_sync_bytes;
  absl::StatusOr<common::TcpBytes> tcp = common::OpenTcpSocketBytes();
  if (tcp.ok()) {
    s.has_tcp = true;
    s.tcp = *tcp;
  }
  return s;
}

void LeaveOut(const NetworkSnapshot& from, const NetworkSnapshot& to, NetworkSnapshot* start) {
  for (const auto& [method, after] : to.rpc) {
    common::RpcBytes before;
    if (auto it = from.rpc.find(method); it != from.rpc.end()) before = it->second;
    common::RpcBytes& moved = start->rpc[method];
    moved.sent += after.sent - before.sent;
    moved.received += after.received - before.received;
    moved.calls += after.calls - before.calls;
    moved.received_unsized += after.received_unsized - before.received_unsized;
  }
  start->collective_sent += to.collective_sent - from.collective_sent;
  start->dense_sync += to.dense_sync - from.dense_sync;
  start->hot_sync += to.hot_sync - from.hot_sync;
  if (start->has_tcp && from.has_tcp && to.has_tcp) {
    start->tcp.sent += to.tcp.sent - from.tcp.sent;
    start->tcp.received += to.tcp.received - from.tcp.received;
  }
}

int64_t PsRpcBytes(const NetworkSnapshot& snapshot) {
  return Both(common::Sum(snapshot.rpc, kPsService));
}

int64_t PsRpcBytesNow() {
  return Both(common::Sum(common::RpcByteCounters::ProcessClient().Snapshot(), kPsService));
}

std::map<std::string, double> NetworkBytesPerSample(const NetworkSnapshot& before,
                                                    const NetworkSnapshot& after, int64_t samples) {
  std::map<std::string, double> m;
  if (samples <= 0) return m;
  const auto rpc = common::Difference(after.rpc, before.rpc);
  const int64_t all_rpc = Both(common::Sum(rpc, ""));
  const int64_t lookup = Both(common::Sum(rpc, kLookup));
  const int64_t push = Both(common::Sum(rpc, kPush));
  const int64_t migration = Both(common::Sum(rpc, kReadRows)) + Both(common::Sum(rpc, kWriteRows));
  const int64_t dense = after.dense_sync - before.dense_sync;
  const int64_t hot = after.hot_sync - before.hot_sync;
  const int64_t collectives = after.collective_sent - before.collective_sent;
  const int64_t control = (all_rpc - lookup - push - migration) + (collectives - dense - hot);
  const double n = static_cast<double>(samples);
  m["network_ps_lookup_bytes_per_sample"] = lookup / n;
  m["network_ps_push_bytes_per_sample"] = push / n;
  m["network_hot_sync_bytes_per_sample"] = hot / n;
  m["network_hot_migration_bytes_per_sample"] = migration / n;
  m["network_dense_allreduce_bytes_per_sample"] = dense / n;
  m["network_control_bytes_per_sample"] = control / n;
  m["network_bytes_per_sample"] = (lookup + push + hot + migration + dense + control) / n;
  m["ps_bytes_per_sample"] = Both(common::Sum(rpc, kPsService)) / n;
  if (before.has_tcp && after.has_tcp) {
    m["tcp_sent_bytes_per_sample"] = (after.tcp.sent - before.tcp.sent) / n;
    m["tcp_received_bytes_per_sample"] = (after.tcp.received - before.tcp.received) / n;
  }
  return m;
}

}  // namespace dlrm::worker
