// What a worker sends and receives over the network while it trains, per sample, by purpose.
//
// Counted where the bytes are sent, between two snapshots (the start and the end of training):
//   - gRPC: every message on the worker's channels, sent and received, per method
//     (common/rpc_bytes.h: serialized bytes plus gRPC's 5-byte prefix; not HTTP/2, TLS or TCP/IP
//     framing): Lookup is `ps_lookup`, PushGradients `ps_push`, every other PS and coordinator
//     method `control`;
//   - collectives: the bytes this worker sends in them (Collectives::sent_bytes: the ring
//     algorithm's share of each payload; what it receives is what its ring neighbour sends, so
//     summed over the workers every byte counts once): the dense gradients are
//     `dense_allreduce`, the hot rows' exchange `hot_sync`, barriers and the rest `control`;
//   - and, independent of both, the kernel's TCP payload counts of the process's sockets
//     (`tcp_sent`, `tcp_received`: they include TLS, HTTP/2 and Gloo's own framing, and every
//     connection of the process).
//
//   const NetworkSnapshot before = TakeNetworkSnapshot(*trainer, {reducer, hot_reducer});
//   ... train ...
//   for (auto& [key, value] : NetworkBytesPerSample(before, TakeNetworkSnapshot(...), samples))
//     metrics[key] = value;   // "network_bytes_per_sample",
//     "network_ps_lookup_bytes_per_sample"...
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>

#include "common/rpc_bytes.h"
#include "worker/collective.h"
#include "worker/trainer.h"

namespace dlrm::worker {

struct NetworkSnapshot {
  std::map<std::string, common::RpcBytes> rpc;  // this process's channels, per method
  int64_t collective_sent = 0;                  // Collectives::sent_bytes
  int64_t dense_sync = 0;                       // TrainerCounters::dense_sync_bytes
  int64_t hot_sync = 0;                         // TrainerCounters::hot_sync_bytes
  bool has_tcp = false;
  common::TcpBytes tcp;
};

// `reducers`: the job's collectives (null entries are skipped).
NetworkSnapshot TakeNetworkSnapshot(const Trainer& trainer,
                                    std::initializer_list<const Collectives*> reducers);

// Moves `start` forward by what was counted from `from` to `to`, so that NetworkBytesPerSample
// from `start` leaves that stretch out (a periodic evaluation's lookups, which are not training).
void LeaveOut(const NetworkSnapshot& from, const NetworkSnapshot& to, NetworkSnapshot* start);

// Per sample of `samples` between the snapshots: network_bytes_per_sample (the sum of the six
// parts), network_{ps_lookup,ps_push,hot_sync,hot_migration,dense_allreduce,control}_bytes_per_
// sample (hot_migration: the rows hot-set refreshes moved, ReadRows and WriteRows; control: every
// other RPC, and collectives other than the two gradient exchanges),
// ps_bytes_per_sample (every ParameterServer method, sent and received) and, where the kernel
// gave them, tcp_{sent,received}_bytes_per_sample.
std::map<std::string, double> NetworkBytesPerSample(const NetworkSnapshot& before,
                                                    const NetworkSnapshot& after, int64_t samples);

// The ParameterServer methods' bytes (sent and received) in a snapshot, and in this process's
// counters now (cheap: no walk of the process's sockets).
int64_t PsRpcBytes(const NetworkSnapshot& snapshot);
int64_t PsRpcBytesNow();

}  // namespace dlrm::worker
