// Private to server/ (included by the ps_service*.cc files only): PsService::Metrics, the
// service's Prometheus metrics, which every part of the service (ps_service.cc,
// ps_service_lookup.cc, ps_service_rows.cc) updates.
#pragma once

#include "common/metrics.h"
#include "server/ps_service.h"

namespace dlrm::server {

struct PsService::Metrics {
  explicit Metrics(common::MetricsRegistry& r)
      : lookup_seconds(r.Histogram("ps_lookup_seconds",
                                   "Time a parameter server spends serving one Lookup.",
                                   common::MetricsRegistry::LatencyBuckets())),
        lookup_wait_seconds(r.Histogram(
            "ps_lookup_wait_seconds",
            "Time a Lookup was parked waiting for the staleness bound (only lookups that waited).",
            common::MetricsRegistry::LatencyBuckets())),
        push_seconds(r.Histogram("ps_push_seconds",
                                 "Time a parameter server spends applying one PushGradients.",
                                 common::MetricsRegistry::LatencyBuckets())),
        lookup_rows(r.Counter("ps_lookup_rows_total", "Embedding rows served by Lookup.")),
        push_rows(r.Counter("ps_push_rows_total", "Embedding rows updated by PushGradients.")),
        memory_rows(r.Gauge("ps_memory_rows", "Rows resident in the memory tier.")),
        memory_bytes(r.Gauge("ps_memory_bytes", "Accounted bytes of the memory tier.")),
        memory_budget_bytes(
            r.Gauge("ps_memory_budget_bytes", "Byte budget of the memory tier (all jobs).")),
        rocksdb_reads(r.Counter(
            "ps_rocksdb_reads_total",
            "Rows asked of the RocksDB tier (memory-tier misses of lookups and pushes): those it "
            "had (dlrm_ps_rocksdb_hits_total) plus those it did not have, which were created "
            "(dlrm_ps_rows_created_total).")),
        rocksdb_hits(r.Counter("ps_rocksdb_hits_total",
                               "Rows read from the RocksDB tier (memory-tier misses it had): the "
                               "real cold reads.")),
        rows_created(r.Counter(
            "ps_rows_created_total",
            "Rows initialised because neither tier had them: a row's first use, and again for a "
            "row only ever looked up and not kept in memory (lookups alone write nothing to "
            "RocksDB).")),
        rocksdb_writes(r.Counter("ps_rocksdb_writes_total", "Rows written to the RocksDB tier.")),
        jobs_loaded(r.Gauge("ps_jobs_loaded", "Jobs loaded on this parameter server.")),
        rpc_errors(r.Counter("ps_rpc_errors_total", "Parameter-server calls that failed.")) {}

  prometheus::Histogram& lookup_seconds;
  prometheus::Histogram& lookup_wait_seconds;
  prometheus::Histogram& push_seconds;
  prometheus::Counter& lookup_rows;
  prometheus::Counter& push_rows;
  prometheus::Gauge& memory_rows;
  prometheus::Gauge& memory_bytes;
  prometheus::Gauge& memory_budget_bytes;
  prometheus::Counter& rocksdb_reads;
  prometheus::Counter& rocksdb_hits;
  prometheus::Counter& rows_created;
  prometheus::Counter& rocksdb_writes;
  prometheus::Gauge& jobs_loaded;
  prometheus::Counter& rpc_errors;
};

}  // namespace dlrm::server
