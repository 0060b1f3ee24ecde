// Prometheus metrics for one process: a registry plus, optionally, an HTTP endpoint serving it
// at /metrics. No singletons: main creates one MetricsRegistry and passes it down; components
// create their metric families on it.
//
//   DLRM_ASSIGN_OR_RETURN(auto metrics, MetricsRegistry::Create({.port = flags.metrics_port,
//                                                                .bind_address = "127.0.0.1"}));
//   prometheus::Counter& samples = metrics->Counter("samples_trained_total", "Samples trained.");
//   prometheus::Histogram& step = metrics->Histogram("step_seconds", "Training step time.",
//                                                    MetricsRegistry::LatencyBuckets());
//
// Names get a "dlrm_" prefix when they lack it and follow Prometheus conventions: base units
// (seconds, bytes), "_total" on counters, labels for small enumerations only (no ids).
// Thread-safe; the returned metric references live as long as the registry.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace dlrm::common {

struct MetricsOptions {
  // < 0: no HTTP endpoint (metrics are still collected); 0: any free port; > 0: this port.
  int port = -1;
  // The address the endpoint binds (see MetricsEndpointOptions::host). Processes pass the host
  // of their --listen address unless --metrics-listen says otherwise.
  std::string bind_address = "127.0.0.1";
};

using MetricLabels = std::map<std::string, std::string>;

class MetricsEndpoint;

class MetricsRegistry {
 public:
  // Starts the endpoint when options.port >= 0. UNAVAILABLE naming the address if it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsRegistry>> Create(const MetricsOptions& options);
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The bound port of the endpoint, 0 when none.
  int port() const { return port_; }

  // Metric `name` (prefixed with "dlrm_" if needed) with `labels`. Asking again for the same
  // name and labels returns the same metric. A name reused with a different type is a
  // programmer error (aborts).
  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const MetricLabels& labels = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const MetricLabels& labels = {});
  prometheus::Histogram& Histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& buckets,
                                   const MetricLabels& labels = {});

  // Exponential buckets from 50 us to about 13 s, for latencies in seconds.
  static std::vector<double> LatencyBuckets();

  // The text exposition format of everything registered (what /metrics serves).
  std::string Serialize() const;

  prometheus::Registry& registry() { return *registry_; }

 private:
  explicit MetricsRegistry(std::shared_ptr<prometheus::Registry> registry);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsEndpoint> endpoint_;  // declared last: stops serving first
  int port_ = 0;
};

// The host of a "host:port" listen address ("0.0.0.0:50051" -> "0.0.0.0", "[::1]:7" -> "[::1]",
// "localhost" -> "localhost"): where a process's metrics endpoint binds by default.
std::string HostOfAddress(const std::string& address);

// Returns `name` with the "dlrm_" prefix.
std::string DlrmMetricName(const std::string& name);

}  // namespace dlrm::common
