// Limits on everything a caller controls: the job spec, the messages of the coordinator and the
// parameter servers, the rendezvous store. Every check of such a value uses these constants, and
// docs/SECURITY.md ("Limits") lists them, so this file is the one place to read or change them.
//
// Each limit is checked before anything is allocated for the value. Past a limit the answer is
// INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a budget that fills up over many calls) whose
// message names the value and the limit, and the process and its data stay as they were.
//
// The limits are generous for real jobs: Criteo Terabyte (26 tables of up to ~40M rows after
// hashing, batch 65536, embedding_dim up to 512, MLP widths up to 4096) is well inside all of
// them. gRPC message sizes are in common/grpc_util.h (kMaxGrpcMessageBytes, kMaxRpcPayloadBytes,
// kMaxIdsPerRequest).
#pragma once

#include <cstdint>

namespace dlrm::common {

// ---- the job spec (common/job_spec.cc) ----

// Bytes of one job spec's YAML: a file given to `dlrm train` / `dlrmctl submit` and
// SubmitJobRequest.spec_yaml (checked before parsing).
inline constexpr int64_t kMaxSpecBytes = int64_t{1} << 20;  // 1 MiB
// A checkpoint's MANIFEST.json (its spec, one entry per file of every table and shard, every
// rank's position): refused past it, before it is read.
inline constexpr int64_t kMaxManifestBytes = int64_t{64} << 20;  // 64 MiB
// Bytes of a name: the job name, a table name, a member's name.
inline constexpr int64_t kMaxNameBytes = 256;
// Bytes of one path in the spec (data files, checkpoint folders).
inline constexpr int64_t kMaxPathBytes = 4096;
// Samples in one batch (training.batch_size).
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 20;  // 1,048,576
// Embedding tables of one job (spec `tables`, LoadJobRequest.tables): each is a RocksDB column
// family on every parameter server.
inline constexpr int64_t kMaxTables = 1024;
// Rows of one embedding table.
inline constexpr int64_t kMaxTableRows = int64_t{1} << 33;  // 8,589,934,592
// Floats of one embedding row (model.embedding_dim, TableDef.dim).
inline constexpr int64_t kMaxEmbeddingDim = 4096;
// Dense input features (model.dense_features).
inline constexpr int64_t kMaxDenseFeatures = 4096;
// Layers of one MLP (model.bottom_mlp, model.top_mlp).
inline constexpr int64_t kMaxMlpLayers = 64;
// Width of one MLP layer.
inline constexpr int64_t kMaxMlpWidth = 65536;
// DCNv2 cross layers (model.cross_layers) and their rank (model.low_rank).
inline constexpr int64_t kMaxCrossLayers = 64;
inline constexpr int64_t kMaxLowRank = 65536;
// Weights and biases of the dense model (both MLPs and the cross layers together); each worker
// holds them and their optimizer state.
inline constexpr int64_t kMaxDenseParameters = int64_t{1} << 30;  // 1,073,741,824 (4 GiB fp32)
// Floats of the largest activation of one batch: batch_size x the widest layer, where the
// layers are the MLP widths, the top MLP input, the cross layers' rank and the stacked
// embeddings of the interaction ((T+1) x embedding_dim). Keeps every activation under 4 GiB and
// its element count in an int.
inline constexpr int64_t kMaxActivationElements = int64_t{1} << 30;
// training.epochs.
inline constexpr int64_t kMaxEpochs = 100000;
// training.staleness (LoadJobRequest.staleness).
inline constexpr int64_t kMaxStaleness = 1000;
// optimizer.schedule's step counts (warmup_steps, decay_start, decay_steps), each.
inline constexpr int64_t kMaxScheduleSteps = int64_t{1} << 40;
// training.hot_budget, and any byte size the spec gives (ParseByteSize).
inline constexpr int64_t kMaxByteSize = int64_t{1} << 50;  // 1 PiB
// training.hot_sample_batches.
inline constexpr int64_t kMaxHotSampleBatches = 100000;
// training.max_recoveries.
inline constexpr int64_t kMaxRecoveries = 1000;
// Learning rates, epsilons, weight decay, initial accumulators: finite, and at most this.
inline constexpr double kMaxOptimizerValue = 1e6;

// ---- command-line flags of `dlrm` (client/dlrm_main.cc, client/dlrm_service_commands.cc) ----

// CPU threads one process is told to use: --threads of `dlrm train`, `eval`, `predict`, `bench`,
// `worker` and `ps`, and `dlrm local --worker-threads` (0 still means all cores). A fixed number,
// not a multiple of the cores, so that a flag means the same on every machine (a pod sees its
// node's cores): four times the 256 hardware threads of today's largest two-socket servers. Past
// it thread creation fails (EAGAIN) and the process would abort.
inline constexpr int64_t kMaxThreads = 1024;
// `dlrm local --ps` and `--workers`: parameter servers, and workers, of a cluster on one machine.
// One process per hardware thread of today's largest two-socket servers (256, as for
// kMaxThreads): past it the processes of one kind share cores, and each worker keeps a collective
// connection to every other. Far inside kMaxJobWorkers, which bounds a job on a real cluster.
inline constexpr int64_t kMaxLocalMembers = 256;
// `dlrm gen-data --rows`: 10^12 samples, about 200 TB of TSV, far past Criteo Terabyte's 4.4
// billion; keeps the count, and every count derived from it, well inside int64.
inline constexpr int64_t kMaxGenDataRows = 1000000000000;

// ---- the coordinator (server/coordinator_service.cc) ----

// Workers, and parameter servers, of one job (LoadJobRequest.num_workers, shard_count).
inline constexpr int64_t kMaxJobWorkers = 4096;
// Bytes of a member's address or metrics address (host:port) in Register.
inline constexpr int64_t kMaxAddressBytes = 512;
// Bytes of a free-text message a caller leaves in the coordinator's state: a cancel reason, a
// failure report's message.
inline constexpr int64_t kMaxMessageBytes = 64 << 10;  // 64 KiB
// Metrics in one progress report.
inline constexpr int64_t kMaxReportMetrics = 256;
// Jobs in one page of ListJobs (also its page size when the request names none), and the bytes
// after which a page ends early: a job can carry up to kMaxJobWorkers member ids and
// kMaxRecoveries recovery reasons, so a thousand of them could outgrow a gRPC message.
inline constexpr int64_t kMaxJobsPage = 1000;
inline constexpr int64_t kMaxListPageBytes = int64_t{16} << 20;  // 16 MiB

// ---- the parameter server (server/ps_service.cc) ----

// Jobs one parameter server holds at once (LoadJob of another is RESOURCE_EXHAUSTED): each holds
// a RocksDB instance with a column family per table, so file descriptors and memory grow with
// them. A server serves a shard of each running job; 64 is far more than run side by side.
inline constexpr int64_t kMaxJobsPerPs = 64;

// ---- the rendezvous store (server/rendezvous_store.cc) ----

// Bytes of one rendezvous key.
inline constexpr int64_t kMaxKvKeyBytes = 1024;
// Bytes of one rendezvous value (Gloo and NCCL publish addresses of a few hundred bytes per rank).
inline constexpr int64_t kMaxKvValueBytes = int64_t{1} << 20;  // 1 MiB
// Bytes of every key and value in the store together: past it KvSet / KvAdd of a new or larger
// value are RESOURCE_EXHAUSTED (delete keys to make room).
inline constexpr int64_t kMaxKvStoreBytes = int64_t{256} << 20;  // 256 MiB
// The largest request a coordinator reads (its gRPC servers' receive limit): its biggest, a spec
// (kMaxSpecBytes) or a KV value (kMaxKvValueBytes), fits with room to spare, while a parse (which
// can take many times a request's size in memory) stays bounded.
inline constexpr int64_t kMaxCoordinatorRequestBytes = int64_t{4} << 20;  // 4 MiB
// WatchJob streams a coordinator serves at once (`dlrmctl watch`, `submit --wait`, dashboards):
// past it a new one is RESOURCE_EXHAUSTED, so that opening streams cannot take its memory.
inline constexpr int64_t kMaxWatchStreams = 4096;
// Members alive at once (Register past it is RESOURCE_EXHAUSTED): room for the largest job's
// workers (kMaxJobWorkers) four times over with their servers, while the cluster view, which
// lists them all, stays far below a gRPC message (about 1 KB a member).
inline constexpr int64_t kMaxLiveMembers = 16384;

}  // namespace dlrm::common
