#include "common/metrics.h"

#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "prometheus/text_serializer.h"

namespace dlrm::common {

std::string HostOfAddress(const std::string& address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(0, close + 1);
  }
  // One colon: host:port. None: a bare host. More: a bare IPv6 address.
  const size_t colon = address.find(':');
  if (colon == std::string::npos || address.find(':', colon + 1) != std::string::npos) {
    return address;
  }
  return address.substr(0, colon);
}

std::string DlrmMetricName(const std::string& name) {
  return absl::StartsWith(name, "dlrm_") ? name : absl::StrCat("dlrm_", name);
}

MetricsRegistry::MetricsRegistry(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {}

MetricsRegistry::~MetricsRegistry() = default;

absl::StatusOr<std::unique_ptr<MetricsRegistry>> MetricsRegistry::Create(
    const MetricsOptions& options) {
  std::unique_ptr<MetricsRegistry> metrics(
      new MetricsRegistry(std::make_shared<prometheus::Registry>()));
  if (options.port >= 0) {
    MetricsRegistry* self = metrics.get();
    DLRM_ASSIGN_OR_RETURN(
        metrics->endpoint_,
        MetricsEndpoint::Start({.host = options.bind_address, .port = options.port},
                               [self] { return self->Serialize(); }));
    metrics->port_ = metrics->endpoint_->port();
  }
  return metrics;
}

namespace {

// Registers (or finds) the family `name` and returns its metric with `labels` (extra: the
// histogram's buckets). A name or label prometheus-cpp refuses is a programming error.
template <typename Metric, typename... Extra>
Metric& AddMetric(prometheus::detail::Builder<Metric> builder, prometheus::Registry& registry,
                  const std::string& name, const std::string& help, const MetricLabels& labels,
                  const Extra&... extra) {
  try {
    return builder.Name(DlrmMetricName(name)).Help(help).Register(registry).Add(labels, extra...);
  } catch (const std::exception& e) {
    DLRM_CHECK(false) << "metric " << name << ": " << e.what();
    throw;
  }
}

}  // namespace

prometheus::Counter& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                              const MetricLabels& labels) {
  return AddMetric(prometheus::BuildCounter(), *registry_, name, help, labels);
}

prometheus::Gauge& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                          const MetricLabels& labels) {
  return AddMetric(prometheus::BuildGauge(), *registry_, name, help, labels);
}

prometheus::Histogram& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                                  const std::vector<double>& buckets,
                                                  const MetricLabels& labels) {
  return AddMetric(prometheus::BuildHistogram(), *registry_, name, help, labels, buckets);
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  std::vector<double> buckets;
  for (double b = 50e-6; b < 15.0; b *= 2) buckets.push_back(b);
  return buckets;
}

std::string MetricsRegistry::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace dlrm::common
