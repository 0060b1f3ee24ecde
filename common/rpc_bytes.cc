#include "common/rpc_bytes.h"

#include <dirent.h>
#include <errno.h>
#include <linux/tcp.h>  // struct tcp_info with the byte counts (glibc's netinet/tcp.h lacks them)
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/metrics.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace dlrm::common {

RpcBytes RpcMethodCounters::Get() const {
  RpcBytes b;
  b.sent = sent_.load(std::memory_order_relaxed);
  b.received = received_.load(std::memory_order_relaxed);
  b.calls = calls_.load(std::memory_order_relaxed);
  b.received_unsized = received_unsized_.load(std::memory_order_relaxed);
  return b;
}

RpcMethodCounters& RpcByteCounters::ForMethod(absl::string_view method) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = methods_.find(method);
    if (it != methods_.end()) return *it->second;
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<RpcMethodCounters>& entry = methods_[method];
  if (entry == nullptr) entry = std::make_unique<RpcMethodCounters>();
  return *entry;
}

std::map<std::string, RpcBytes> RpcByteCounters::Snapshot() const {
  std::map<std::string, RpcBytes> snapshot;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [method, counters] : methods_) snapshot[method] = counters->Get();
  return snapshot;
}

RpcByteCounters& RpcByteCounters::ProcessClient() {
  static RpcByteCounters* const counters = new RpcByteCounters();
  return *counters;
}

RpcByteCounters& RpcByteCounters::ProcessServer() {
  static RpcByteCounters* const counters = new RpcByteCounters();
  return *counters;
}

RpcBytes Sum(const std::map<std::string, RpcBytes>& snapshot, absl::string_view selector) {
  RpcBytes total;
  const bool prefix = selector.empty() || absl::EndsWith(selector, "/");
  for (const auto& [method, b] : snapshot) {
    if (prefix ? !absl::StartsWith(method, selector) : method != selector) continue;
    total.sent += b.sent;
    total.received += b.received;
    total.calls += b.calls;
    total.received_unsized += b.received_unsized;
  }
  return total;
}

std::map<std::string, RpcBytes> Difference(const std::map<std::string, RpcBytes>& after,
                                           const std::map<std::string, RpcBytes>& before) {
  std::map<std::string, RpcBytes> delta;
  for (const auto& [method, a] : after) {
    RpcBytes d = a;
    auto it = before.find(method);
    if (it != before.end()) {
      d.sent -= it->second.sent;
      d.received -= it->second.received;
      d.calls -= it->second.calls;
      d.received_unsized -= it->second.received_unsized;
    }
    delta[method] = d;
  }
  return delta;
}

namespace {

// The first pointer-sized word of an object: the vtable pointer of a polymorphic class without
// virtual bases (Itanium C++ ABI), such as every generated protobuf message.
const void* FirstWord(const void* object) {
  const void* word = nullptr;
  std::memcpy(&word, object, sizeof(word));
  return word;
}

// The generated default instance of the response type of `method` ("/pkg.Service/Method"), or
// null when the method is not in the generated descriptor pool.
const google::protobuf::Message* ResponsePrototype(absl::string_view method) {
  if (!absl::ConsumePrefix(&method, "/")) return nullptr;
  const size_t slash = method.rfind('/');
  if (slash == absl::string_view::npos) return nullptr;
  const std::string name = absl::StrCat(method.substr(0, slash), ".", method.substr(slash + 1));
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(name);
  if (descriptor == nullptr) return nullptr;
  return google::protobuf::MessageFactory::generated_factory()->GetPrototype(
      descriptor->output_type());
}

// What a channel's interceptors need of one method.
struct ClientMethod {
  RpcMethodCounters* counters = nullptr;
  // The vtable pointer of the method's protobuf response type; null when unknown.
  const void* response_vtable = nullptr;
};

// gRPC hands an interceptor a received message as void*: a protobuf message for the generated
// stubs, a grpc::ByteBuffer or proto::LookupRowsSink for generic ones. It is sized only when its
// first word is the response type's vtable pointer, which the others' first word (a heap pointer
// or null) cannot be. Every response type used on a channel must be at least a pointer wide.
class RpcBytesInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RpcBytesInterceptor(const ClientMethod* method) : method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    RpcMethodCounters& counters = *method_->counters;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      counters.AddCall();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      // Serializes the message now; gRPC then sends this buffer instead of serializing again.
      const grpc::ByteBuffer* message = methods->GetSerializedSendMessage();
      if (message != nullptr && message->Valid()) {
        counters.AddSent(GrpcMessageBytes(static_cast<int64_t>(message->Length())));
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Null when no message arrived or it did not parse.
      const void* message = methods->GetRecvMessage();
      if (message != nullptr) {
        if (method_->response_vtable != nullptr && FirstWord(message) == method_->response_vtable) {
          const auto* proto = static_cast<const google::protobuf::MessageLite*>(message);
          counters.AddReceived(GrpcMessageBytes(static_cast<int64_t>(proto->ByteSizeLong())));
        } else {
          counters.AddReceivedUnsized();
        }
      }
    }
    methods->Proceed();
  }

 private:
  const ClientMethod* const method_;
};

class RpcBytesInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit RpcBytesInterceptorFactory(RpcByteCounters* counters) : counters_(counters) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    const char* method = info->method();
    return new RpcBytesInterceptor(Find(method != nullptr ? method : ""));
  }

 private:
  const ClientMethod* Find(absl::string_view method) {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = methods_.find(method);
      if (it != methods_.end()) return it->second.get();
    }
    auto entry = std::make_unique<ClientMethod>();
    entry->counters = &counters_->ForMethod(method);
    if (const google::protobuf::Message* prototype = ResponsePrototype(method)) {
      entry->response_vtable = FirstWord(prototype);
    }
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = methods_.try_emplace(method, std::move(entry));
    return it->second.get();
  }

  RpcByteCounters* const counters_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<ClientMethod>> methods_ ABSL_GUARDED_BY(mu_);
};

// Raises `counter` to `value`.
void RaiseTo(prometheus::Counter& counter, int64_t value) {
  const double missing = static_cast<double>(value) - counter.Value();
  if (missing > 0) counter.Increment(missing);
}

ABSL_CONST_INIT absl::Mutex export_mu(absl::kConstInit);

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeRpcBytesInterceptorFactory(RpcByteCounters* counters) {
  return std::make_unique<RpcBytesInterceptorFactory>(counters);
}

void ExportRpcBytes(MetricsRegistry* registry) {
  const std::pair<const char*, RpcByteCounters*> sides[] = {
      {"client", &RpcByteCounters::ProcessClient()}, {"server", &RpcByteCounters::ProcessServer()}};
  absl::MutexLock lock(&export_mu);
  for (const auto& [side, counters] : sides) {
    for (const auto& [method, bytes] : counters->Snapshot()) {
      const MetricLabels labels = {{"side", side}, {"method", method}};
      RaiseTo(registry->Counter("rpc_sent_bytes_total",
                                "gRPC message bytes sent (serialized messages plus their 5-byte "
                                "prefix; no HTTP/2, TLS or TCP/IP overhead), by side and method.",
                                labels),
              bytes.sent);
      RaiseTo(registry->Counter("rpc_received_bytes_total",
                                "gRPC message bytes received (serialized messages plus their "
                                "5-byte prefix; no HTTP/2, TLS or TCP/IP overhead), by side and "
                                "method.",
                                labels),
              bytes.received);
    }
  }
}

absl::StatusOr<TcpBytes> OpenTcpSocketBytes() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot read /proc/self/fd: ", std::strerror(errno)));
  }
  const int own_fd = dirfd(dir);
  constexpr socklen_t kNeeded =
      offsetof(tcp_info, tcpi_bytes_received) + sizeof(tcp_info::tcpi_bytes_received);
  TcpBytes total;
  bool too_old = false;
  while (const dirent* entry = readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == own_fd) continue;
    int listening = 0;
    socklen_t length = sizeof(listening);
    // Fails for anything that is not a socket.
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || listening != 0) {
      continue;
    }
    tcp_info info;
    std::memset(&info, 0, sizeof(info));
    length = sizeof(info);
    // Fails for sockets that are not TCP.
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) continue;
    if (length < kNeeded) {
      too_old = true;
      break;
    }
    total.sent += static_cast<int64_t>(info.tcpi_bytes_acked);
    total.received += static_cast<int64_t>(info.tcpi_bytes_received);
    ++total.sockets;
  }
  closedir(dir);
  if (too_old) {
    return absl::FailedPreconditionError(
        "the kernel's TCP_INFO has no tcpi_bytes_acked / tcpi_bytes_received (Linux older than "
        "4.1)");
  }
  return total;
}

}  // namespace dlrm::common
