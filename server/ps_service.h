// PsService: the ParameterServer gRPC service (proto/ps.proto) over the jobs loaded on this
// process. Uses the callback API: every handler takes the call's default unary reactor, hands
// the request to the PsWorkPool and returns at once; the pool thread validates, does the table
// work and calls Finish. Fast path: a Lookup whose staleness bound already holds is started on
// the reactor thread: a large one's tables are split into parts, all but the first handed to the
// pool; the reactor serves the first part's tables inline while each table's rows are all in the
// memory tier and its lock is free (TieredStore::TryLookupResident), and hands what is left of
// the part to the pool at the first table that is not; the last part to end finishes the call.
// So a reactor never waits on RocksDB, a table lock or the staleness bound (with injected_delay
// set, every call goes to the pool). A lookup that must wait for the staleness bound (StepGate) is
// parked without holding any thread and is resumed on the pool when the pushes it needs arrive, or
// finished with DEADLINE_EXCEEDED at the call's deadline (from the TimerQueue thread).
//
// Memory: each job gets, when loaded, what is left of memory_budget_bytes after the jobs
// already loaded (the first job gets all of it), so the memory tiers together never exceed it.
//
// Metrics (on the given registry): dlrm_ps_lookup_seconds, dlrm_ps_push_seconds (table work,
// not the staleness wait), dlrm_ps_lookup_wait_seconds (parked time), dlrm_ps_lookup_rows_total,
// dlrm_ps_push_rows_total, dlrm_ps_memory_rows, dlrm_ps_memory_bytes,
// dlrm_ps_memory_budget_bytes, dlrm_ps_rocksdb_reads_total (memory-tier misses) =
// dlrm_ps_rocksdb_hits_total (rows RocksDB had) + dlrm_ps_rows_created_total (rows initialised),
// dlrm_ps_rocksdb_writes_total, dlrm_ps_jobs_loaded, dlrm_ps_rpc_errors_total.
//
// Thread-safe. The pool, timers and metrics registry are not owned and must outlive the
// service; the gRPC server must be shut down before the service is destroyed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/message_pool.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_job.h"
#include "server/ps_job_reaper.h"
#include "server/ps_work_pool.h"
#include "server/timer_queue.h"

namespace dlrm::server {

struct PsServiceOptions {
  std::string data_dir;  // required; jobs live in <data_dir>/<job_id>/shard-<i>
  int64_t memory_budget_bytes = 1ll << 30;
  bool rocksdb_wal = false;
  // When set, Checkpoint writes row files only under this folder (after resolving symbolic
  // links); a directory outside it is PERMISSION_DENIED. Empty: any absolute path.
  std::string checkpoint_root;
  // Test/benchmark knob: a pool thread sleeps this long before answering each Lookup and
  // PushGradients (simulates a slow or distant PS). Zero in production.
  absl::Duration injected_delay = absl::ZeroDuration();
  // How long a LoadJob waits for the same job's store of an earlier load to close (calls of the
  // old load still hold it) before UNAVAILABLE, which clients retry.
  absl::Duration store_close_wait = absl::Seconds(10);
  common::MetricsRegistry* metrics = nullptr;  // required, not owned
  PsWorkPool* pool = nullptr;                  // required, not owned
  // LoadJob and UnloadJob run here (not owned; null: on `pool`): a load can hold the load lock
  // for minutes, and every rank's LoadJob waits behind it; on the data plane's pool those waits
  // would hold the threads other jobs' pushes and lookups need.
  PsWorkPool* admin_pool = nullptr;
  // Checkpoint WRITEs run here (not owned; null: on `pool`): each holds a thread while its shard
  // is written, seconds to minutes.
  PsWorkPool* checkpoint_pool = nullptr;
  TimerQueue* timers = nullptr;  // required, not owned
};

// Lookup is a raw method: its answer is written in place and sent without a copy
// (proto/lookup_wire.h). PushGradients is raw too, so that bytes which are no request get
// INVALID_ARGUMENT from the service (gRPC 1.51 answers UNIMPLEMENTED for a generated method's
// undecodable request). Every other method is a plain callback method.
// Every method is registered raw: Lookup and PushGradients decode their own wire format; the
// others parse through common/raw_unary.h. Bytes that are no request are INVALID_ARGUMENT.
using PsRawService = dlrm::v1::ParameterServer::WithRawCallbackMethod_LoadJob<
    dlrm::v1::ParameterServer::WithRawCallbackMethod_UnloadJob<
        dlrm::v1::ParameterServer::WithRawCallbackMethod_Lookup<
            dlrm::v1::ParameterServer::WithRawCallbackMethod_PushGradients<
                dlrm::v1::ParameterServer::WithRawCallbackMethod_GetStats<
                    dlrm::v1::ParameterServer::WithRawCallbackMethod_ReadRows<
                        dlrm::v1::ParameterServer::WithRawCallbackMethod_WriteRows<
                            dlrm::v1::ParameterServer::WithRawCallbackMethod_Checkpoint<
                                dlrm::v1::ParameterServer::CallbackService>>>>>>>>;

class PsService final : public PsRawService {
 public:
  explicit PsService(const PsServiceOptions& options);
  ~PsService() override;
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  // Takes a serialised LookupRequest, answers a serialised LookupResponse.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PushGradients(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response_bytes) override;
  grpc::ServerUnaryReactor* LoadJob(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnloadJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReadRows(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* WriteRows(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

  // Checkpoint's core: SNAPSHOT or WRITE of this server's part (proto/ps.proto).
  // `cancelled` (may be empty) is asked before each table and chunk of rows a WRITE writes: true
  // ends it CANCELLED.
  absl::StatusOr<dlrm::v1::CheckpointResponse> DoCheckpoint(
      const dlrm::v1::CheckpointRequest& request, const std::function<bool()>& cancelled = nullptr);

  // The synchronous cores of LoadJob, UnloadJob and GetStats (also used in-process).
  // LoadJob: idempotent for the same parameters; FAILED_PRECONDITION for the same job id with
  // other parameters or an older epoch; a newer epoch keeps the rows and restarts staleness
  // tracking, unless request.restart: then the older epoch's tables are dropped and created
  // anew (a recovery rolling back to a checkpoint), whatever its parameters were. Dropping rows
  // takes the job's grant (`granted`: the call carried it, or the server trusts a plaintext
  // network), which only rank 0 holds: a restart without it moves the job to the new epoch like
  // a plain load and leaves the drop to rank 0's LoadJob of that epoch (every rank reads rows
  // only after all ranks have loaded: they connect to each other after it).
  absl::StatusOr<dlrm::v1::LoadJobResponse> DoLoadJob(const dlrm::v1::LoadJobRequest& request,
                                                      bool granted = true);
  // NOT_FOUND naming the job when it is not loaded. Parked lookups of the job fail (ABORTED)
  // and its folder is removed once calls in flight are done: at once when none holds the job,
  // else by the first RemoveReleasedJobFolders after the last of them has let go.
  // Unloads the job when it is loaded at an epoch <= max_epoch (FAILED_PRECONDITION, keeping
  // it, when newer: a heartbeat answer older than the job's restart must not unload it).
  absl::Status DoUnloadJob(const std::string& job_id,
                           int64_t max_epoch = std::numeric_limits<int64_t>::max());
  // DoUnloadJob unless a load or unload is under way (UNAVAILABLE then, nothing done): for the
  // heartbeat loop, which must not wait for a LoadJob (one of many tables takes minutes) while
  // its lease runs out.
  absl::Status TryUnloadJob(const std::string& job_id, int64_t max_epoch);
  absl::StatusOr<dlrm::v1::GetStatsResponse> DoGetStats(const std::string& job_id) const;

  // Removes the folders (store, snapshots, and the job's folder when nothing else is in it) of
  // jobs that calls in flight still held when they were unloaded, once those calls have let go;
  // a folder a job loaded since uses is kept. The parameter server's heartbeat loop calls it, and
  // every load and unload. Returns how many jobs' folders it removed. Does nothing while a load
  // or unload is under way (it does this itself): the heartbeat loop calls it.
  int RemoveReleasedJobFolders();
  // The loaded job; NOT_FOUND naming it when it is not loaded. A holder keeps it alive (as a
  // call in flight does) after an unload.
  absl::StatusOr<std::shared_ptr<PsJob>> FindJob(const std::string& job_id) const;

  std::vector<std::string> job_ids() const;
  // The key of the coordinator's job grants (RegisterResponse.ps_grant_key, common/grants.h).
  // Once set, the admin methods (UnloadJob, WriteRows, Checkpoint) accept a call for a job only
  // with that job's grant; before, only on a plaintext server.
  void SetGrantKey(std::string key);
  // Closes every job's StepGate with `status` (server shutdown): parked lookups fail now and
  // later ones that would have to wait fail at once, so no call outlives the server; so do those
  // of jobs a LoadJob still running loads, or moves to a newer epoch, afterwards.
  void FailParkedLookups(const absl::Status& status);

 private:
  // DoUnloadJob's work. REQUIRES: load_mu_ held. `wait_for_close`: when no call holds the job,
  // waits for its store to close (on the reaper) and removes its folders before returning (an
  // UnloadJob call); else they go at a later sweep (the heartbeat does not wait).
  absl::Status UnloadLocked(const std::string& job_id, int64_t max_epoch, bool wait_for_close)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  // What the call shows of the job's grant (SetGrantKey). kTrusted: no grant key and no TLS, so
  // the server trusts a plaintext network.
  enum class Grant { kGiven, kTrusted, kNoKeyYet, kMissing, kWrong };
  Grant CheckGrant(const grpc::CallbackServerContext& context, const std::string& job_id) const;
  // The same for the member grant of `job_id` at `epoch` (common::kMemberGrantMetadata).
  Grant CheckMemberGrant(const grpc::CallbackServerContext& context, const std::string& job_id,
                         int64_t epoch) const;
  // Either of the two: from the grant key (empty: none yet) and the metadata the call carries
  // under `metadata`, checked by is_grant(key, given).
  template <typename IsGrant>
  Grant CheckGrantWith(const grpc::CallbackServerContext& context, const char* metadata,
                       IsGrant is_grant) const;
  // OK for kGiven and kTrusted, UNAVAILABLE naming `method` for kNoKeyYet; nullopt for a call
  // to refuse (the caller says why).
  static std::optional<absl::Status> Allowed(Grant grant, absl::string_view method);
  // RemoveReleasedJobFolders' work. REQUIRES: load_mu_ held.
  int RemoveReleasedJobFoldersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  struct Metrics;
  struct LookupCall;
  // Serves a Lookup on the calling (reactor) thread without waiting, as far as it can (see the
  // header comment), handing other parts and the rest to the pool. Returns false when it did
  // nothing (the caller then hands the whole call to the pool).
  bool TryLookupInline(const std::shared_ptr<LookupCall>& call);
  // Serves a Lookup whose bound holds on the pool (on this thread and, for a large one, others).
  void RunLookup(std::shared_ptr<PsJob> job, const std::shared_ptr<LookupCall>& call);
  // Lays the answer out, splits the tables into parts and submits parts 1.. to the pool; returns
  // the parts' bounds (part p is tables [bounds[p], bounds[p + 1])); the caller serves part 0.
  std::vector<int> StartLookup(std::shared_ptr<PsJob> job, const std::shared_ptr<LookupCall>& call);
  void RunLookupPart(const std::shared_ptr<LookupCall>& call, int begin, int end);
  // Records a part's result; the last part counts the lookup and finishes the call.
  void FinishLookupPart(const std::shared_ptr<LookupCall>& call,
                        const absl::StatusOr<int64_t>& rows, bool on_reactor);
  // Applies one push; fills `response`.
  absl::Status RunPush(const dlrm::v1::PushGradientsRequest& request,
                       dlrm::v1::PushGradientsResponse* response);
  // The typed work of the methods parsed by common/raw_unary.h; each answers through `done`.
  using Done = std::function<void(absl::Status)>;
  void HandleLoadJob(grpc::CallbackServerContext* context, const dlrm::v1::LoadJobRequest* request,
                     dlrm::v1::LoadJobResponse* response, Done done);
  void HandleUnloadJob(grpc::CallbackServerContext* context,
                       const dlrm::v1::UnloadJobRequest* request,
                       dlrm::v1::UnloadJobResponse* response, Done done);
  void HandleReadRows(grpc::CallbackServerContext* context,
                      const dlrm::v1::ReadRowsRequest* request,
                      dlrm::v1::ReadRowsResponse* response, Done done);
  void HandleWriteRows(grpc::CallbackServerContext* context,
                       const dlrm::v1::WriteRowsRequest* request,
                       dlrm::v1::WriteRowsResponse* response, Done done);
  void HandleGetStats(grpc::CallbackServerContext* context,
                      const dlrm::v1::GetStatsRequest* request,
                      dlrm::v1::GetStatsResponse* response, Done done);
  void HandleCheckpoint(grpc::CallbackServerContext* context,
                        const dlrm::v1::CheckpointRequest* request,
                        dlrm::v1::CheckpointResponse* response, Done done);
  // Authorize, then the job grant of an admin method (SetGrantKey).
  absl::Status AuthorizeAdmin(const grpc::CallbackServerContext& context, absl::string_view method,
                              const std::string& job_id) const;
  // The member grant of a data call (LoadJob, Lookup, PushGradients, ReadRows) of `job_id` at
  // `epoch`: OK with it, or on a plaintext server without a grant key; UNAVAILABLE under TLS
  // before the server registered; PERMISSION_DENIED naming method, job and epoch otherwise.
  absl::Status AuthorizeMember(const grpc::CallbackServerContext& context, absl::string_view method,
                               const std::string& job_id, int64_t epoch) const;
  // The load grant of a LoadJob (common::kLoadGrantMetadata), over the request as given: OK
  // with it or without a grant key on plaintext; PERMISSION_DENIED naming the job otherwise (its
  // tables or parameters are not those the coordinator signed). Called after AuthorizeMember.
  absl::Status AuthorizeLoad(const grpc::CallbackServerContext& context,
                             const dlrm::v1::LoadJobRequest& request) const;
  PsWorkPool* AdminPool() const {
    return options_.admin_pool != nullptr ? options_.admin_pool : options_.pool;
  }
  PsWorkPool* CheckpointPool() const {
    return options_.checkpoint_pool != nullptr ? options_.checkpoint_pool : options_.pool;
  }
  // Finishes the call, counting errors.
  void Finish(grpc::ServerUnaryReactor* reactor, const absl::Status& status);
  // wait = false (on a reactor): skipped when the service lock is busy.
  void UpdateStoreMetrics(bool wait = true);

  const PsServiceOptions options_;
  std::unique_ptr<Metrics> metrics_;
  // Lookup requests are reused from call to call (their id buffers keep their capacity); shared
  // with the calls, which may end after the service.
  std::shared_ptr<proto::MessagePool<dlrm::v1::LookupRequest>> lookup_requests_;

  absl::Mutex load_mu_;  // serialises LoadJob / UnloadJob (store creation is slow)
  // Where unloaded jobs' stores close (ps_job_reaper.h); each job's deleter holds it too.
  std::shared_ptr<JobReaper> reaper_;
  // Per loaded job: set by the reaper once the job's store has closed.
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> closed_flags_ ABSL_GUARDED_BY(load_mu_);
  // Jobs unloaded, with their folders, until those are removed (once the store has closed).
  struct UnloadedJob {
    std::shared_ptr<std::atomic<bool>> closed;
    std::string path;
    std::string snapshots_path;
  };
  std::vector<UnloadedJob> held_at_unload_ ABSL_GUARDED_BY(load_mu_);
  // Waits (up to options_.store_close_wait) for an unloaded job's store at `path` to close,
  // removing its folders; UNAVAILABLE naming it when it is still open (a call of the old load
  // still holds it): a new store must not open in a folder RocksDB still writes and cleans.
  absl::Status WaitForStoreClosedLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  // Per job: the epoch a restart without the grant asked for, whose drop of the rows waits for
  // rank 0's LoadJob (DoLoadJob).
  absl::flat_hash_map<std::string, int64_t> pending_restarts_ ABSL_GUARDED_BY(load_mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<PsJob>> jobs_ ABSL_GUARDED_BY(mu_);
  // Not OK once FailParkedLookups ran: the gates of jobs loaded, or epochs moved, after it are
  // closed with it too.
  absl::Status gates_closed_ ABSL_GUARDED_BY(mu_);
  // The store counts of the counter metrics (RocksDB reads, hits and writes, rows created).
  struct StoreCounts {
    int64_t reads = 0;
    int64_t hits = 0;
    int64_t created = 0;
    int64_t writes = 0;
  };
  // Those of jobs already unloaded, and what the counters have been given.
  StoreCounts unloaded_ ABSL_GUARDED_BY(mu_);
  StoreCounts reported_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex grant_mu_;
  std::string grant_key_ ABSL_GUARDED_BY(grant_mu_);

  std::atomic<int64_t> lookups_{0};
  std::atomic<int64_t> rows_looked_up_{0};
  std::atomic<int64_t> pushes_{0};
  std::atomic<int64_t> rows_pushed_{0};
};

}  // namespace dlrm::server
