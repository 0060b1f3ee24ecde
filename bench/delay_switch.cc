// delay_switch: a userspace IPv4 switch that emulates the links of bench/netem_cluster.sh on
// kernels without sch_netem (bench/netem_lib.sh runs it in "userspace" mode).
//
// For each --link NS=ADDR it enters the network namespace /run/netns/NS, creates a TUN device
// (--dev, default eth0; IFF_TUN | IFF_NO_PI, not persistent: it goes when this process exits) and
// returns to its own namespace, keeping the device's fd. Once every device exists it prints
// `ready` on stdout; whoever started it then gives each device its address and brings it up
// (`ip -n NS addr add ADDR/24 dev eth0; ip -n NS link set eth0 up mtu 65000`). It does not
// configure the devices itself.
//
// It forwards every IPv4 packet a namespace sends into its device to the device of the
// namespace that owns the destination address. Each namespace is a host on a full-duplex switch
// port: its uplink serialises what it sends at --rate, the packet then takes --delay (one way,
// process to process), and the destination's downlink serialises it at --rate, so traffic from
// several senders to one receiver queues at the receiver's port:
//   depart  = max(now, uplink_free[src]) + bits / rate;       uplink_free[src] = depart
//   arrive  = depart + delay
//   deliver = max(arrive, downlink_free[dst]) + bits / rate;  downlink_free[dst] = deliver
// The downlink step runs when the packet arrives (a heap event at `arrive`), so packets take a
// downlink in the order they reach it. bits: the IP packet's length (no Ethernet framing) x 8.
// Drop-tail: a packet that would wait more than --queue on either link is dropped. --rate 0:
// links without a rate limit (only the delay). Packets to addresses no --link names, and packets
// that are not IPv4, are dropped and counted.
//
// One thread: epoll over the devices (non-blocking; read until EAGAIN or 64 packets), a timerfd and
// a signalfd. Pending packets wait in a min-heap by time; their buffers come from free lists and go
// back to them (no allocation per packet once the pool has grown to the traffic's peak). The
// timerfd (timer slack 1 ns) is set for the earliest pending time less the mean lateness of its
// past wake-ups (at most --max-spin; a VM's timers wake 20-150 us late); from there the loop
// polls epoll with timeout 0 (and sched_yield) until that time, so packets leave close to their
// time at the cost of some spinning.
//
// SIGUSR1 prints one JSON line of counters to stdout and goes on; SIGTERM or SIGINT prints it
// and exits 0 (the devices vanish with the process). SIGINT is left ignored when it was ignored
// on entry (a background job of a shell script).
//
//   delay_switch --link NS1=10.213.5.1 --link NS2=10.213.5.2 --rate 1gbit --delay 1ms
//                [--queue 100ms] [--max-spin 200us] [--dev eth0]   (--rate, --delay: default 0)
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"

namespace dlrm::bench {
namespace {

constexpr int64_t kNsPerSec = 1'000'000'000;
constexpr size_t kLargeBuffer = 65536;  // any IPv4 packet (at most 65535 bytes)
constexpr size_t kSmallBuffer = 2048;   // ACKs and other small packets are copied into these
constexpr int64_t kMaxPendingBytes = int64_t{1} << 30;  // packets held at once, all links
constexpr int kReadBurst = 64;                          // reads from one device in a row

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * kNsPerSec + ts.tv_nsec;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// SplitNumber: "2.5ms" -> (2.5, "ms"); nullopt when it does not start with a plain number.
std::optional<std::pair<double, std::string>> SplitNumber(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return std::nullopt;
  const std::string num = text.substr(0, i);
  if (std::count(num.begin(), num.end(), '.') > 1 || num.front() == '.' || num.back() == '.') {
    return std::nullopt;
  }
  if (i > 18) return std::nullopt;  // no rate or duration here needs more digits
  return std::make_pair(std::stod(num), Lower(text.substr(i)));
}

// ParseRate: tc's rate syntax (1gbit, 100mbit, 125mbps, 1000000bit; a bare number is bits/s) in
// bits/s; 0 means no limit.
std::optional<int64_t> ParseRate(const std::string& text) {
  auto split = SplitNumber(text);
  if (!split) return std::nullopt;
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},        {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9},
      {"tbit", 1e12}, {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}};
  for (const auto& [unit, mult] : kUnits) {
    if (split->second == unit) {
      const double bits = split->first * mult;
      if (bits > 1e15) return std::nullopt;
      return static_cast<int64_t>(std::llround(bits));
    }
  }
  return std::nullopt;
}

// ParseDuration: 1ms, 100us, 2.5ms, 1s, 0 -> nanoseconds.
std::optional<int64_t> ParseDuration(const std::string& text) {
  auto split = SplitNumber(text);
  if (!split) return std::nullopt;
  static const std::pair<const char*, double> kUnits[] = {
      {"ns", 1}, {"us", 1e3}, {"usec", 1e3}, {"ms", 1e6}, {"msec", 1e6}, {"s", 1e9}, {"sec", 1e9}};
  if (split->second.empty()) {
    if (split->first != 0) return std::nullopt;  // a bare number is ambiguous unless it is 0
    return 0;
  }
  for (const auto& [unit, mult] : kUnits) {
    if (split->second == unit) {
      const double ns = split->first * mult;
      if (ns > 3600e9) return std::nullopt;
      return static_cast<int64_t>(std::llround(ns));
    }
  }
  return std::nullopt;
}

// One namespace's port on the switch.
struct Port {
  std::string ns;
  std::string address;
  int fd = -1;
  int64_t uplink_free = 0;    // when its uplink has serialised everything it was given
  int64_t downlink_free = 0;  // the same for its downlink
  uint64_t sent_packets = 0, sent_bytes = 0;            // read from its device (what it sent)
  uint64_t delivered_packets = 0, delivered_bytes = 0;  // written to its device
};

enum Drop { kUnknownDestination, kNotIpv4, kUplinkQueue, kDownlinkQueue, kMemory, kWriteError };
constexpr const char* kDropNames[] = {"unknown_destination", "not_ipv4",     "uplink_queue",
                                      "downlink_queue",      "memory_limit", "write_error"};
constexpr int kDropKinds = sizeof(kDropNames) / sizeof(kDropNames[0]);

// A pending packet: it reaches the destination's downlink at `time` (arrived == false), or is
// written to the destination's device at `time` (arrived == true).
struct Event {
  int64_t time;
  uint64_t seq;  // FIFO among equal times: packets of one flow keep their order
  uint8_t* data;
  uint32_t len;
  uint16_t src, dst;
  bool arrived;
  bool small;  // data is a kSmallBuffer (else a kLargeBuffer)
};
struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

// Fixed-size buffers in two sizes, reused through free lists.
class BufferPool {
 public:
  uint8_t* Get(bool small) {
    auto& free = small ? free_small_ : free_large_;
    if (free.empty()) {
      owned_.push_back(std::make_unique<uint8_t[]>(small ? kSmallBuffer : kLargeBuffer));
      return owned_.back().get();
    }
    uint8_t* b = free.back();
    free.pop_back();
    return b;
  }
  void Put(uint8_t* b, bool small) { (small ? free_small_ : free_large_).push_back(b); }
  size_t allocated() const { return owned_.size(); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  std::vector<uint8_t*> free_small_, free_large_;
};

class Switch {
 public:
  Switch(std::vector<Port> ports, int64_t rate_bits, int64_t delay_ns, int64_t queue_ns,
         int64_t max_spin_ns)
      : ports_(std::move(ports)),
        rate_bits_(rate_bits),
        delay_ns_(delay_ns),
        queue_ns_(queue_ns),
        max_spin_ns_(max_spin_ns) {
    for (size_t i = 0; i < ports_.size(); ++i) {
      in_addr a{};
      inet_pton(AF_INET, ports_[i].address.c_str(), &a);
      by_address_[a.s_addr] = static_cast<uint16_t>(i);
    }
  }
  ~Switch() {
    for (int fd : {epoll_fd_, timer_fd_, signal_fd_}) {
      if (fd >= 0) close(fd);
    }
    for (const Port& p : ports_) {
      if (p.fd >= 0) close(p.fd);
    }
  }

  // CreateDevices: a TUN device named `dev` in each port's namespace. On failure says why in
  // *error and returns false.
  bool CreateDevices(const std::string& dev, std::string* error) {
    const int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) {
      *error = std::string("cannot open /proc/self/ns/net: ") + std::strerror(errno);
      return false;
    }
    bool ok = true;
    for (Port& p : ports_) {
      ok = CreateDevice(self, dev, p, error);
      if (!ok) break;
    }
    close(self);
    return ok;
  }

  // Run: forwards until one of `signals` other than SIGUSR1 comes (they are blocked, and read
  // from a signalfd); returns the exit code.
  int Run(const sigset_t& signals) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    signal_fd_ = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (epoll_fd_ < 0 || timer_fd_ < 0 || signal_fd_ < 0) {
      std::cerr << "delay_switch: epoll/timerfd/signalfd: " << std::strerror(errno) << "\n";
      return 1;
    }
    const uint32_t timer_key = static_cast<uint32_t>(ports_.size());
    const uint32_t signal_key = timer_key + 1;
    for (uint32_t i = 0; i <= signal_key; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = i;
      const int fd = i < timer_key ? ports_[i].fd : i == timer_key ? timer_fd_ : signal_fd_;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        std::cerr << "delay_switch: epoll_ctl: " << std::strerror(errno) << "\n";
        return 1;
      }
    }
    scratch_ = pool_.Get(false);
    std::cout << "ready" << std::endl;

    epoll_event events[64];
    for (;;) {
      const int n = epoll_wait(epoll_fd_, events, 64, Timeout());
      const int64_t woke = NowNs();
      if (n < 0) {
        if (errno == EINTR) continue;
        std::cerr << "delay_switch: epoll_wait: " << std::strerror(errno) << "\n";
        return 1;
      }
      for (int e = 0; e < n; ++e) {
        const uint32_t key = events[e].data.u32;
        if (key < timer_key) {
          ReadPort(key);
        } else if (key == timer_key) {
          uint64_t expirations;
          [[maybe_unused]] ssize_t r = read(timer_fd_, &expirations, sizeof expirations);
          if (armed_for_ >= 0) {
            // advance: a running mean of how late the timer wakes this process, at most
            // --max-spin.
            const int64_t late = woke - armed_at_;
            advance_ns_ =
                std::clamp(advance_ns_ + (late - advance_ns_) / 8, int64_t{0}, max_spin_ns_);
          }
          armed_for_ = -1;
        } else {
          signalfd_siginfo info;
          while (read(signal_fd_, &info, sizeof info) == sizeof info) {
            PrintCounters();
            if (info.ssi_signo != SIGUSR1) return 0;
          }
        }
      }
      RunDue();
    }
  }

 private:
  bool CreateDevice(int self, const std::string& dev, Port& p, std::string* error) {
    const std::string path = "/run/netns/" + p.ns;
    const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
      *error = "--link " + p.ns + "=" + p.address + ": no network namespace " + p.ns + " (" + path +
               ": " + std::strerror(errno) + "; `ip netns add` makes one)";
      return false;
    }
    if (setns(ns, CLONE_NEWNET) != 0) {
      *error = "cannot enter network namespace " + p.ns + " (setns " + path +
               "): " + std::strerror(errno);
      close(ns);
      return false;
    }
    close(ns);
    p.fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (p.fd < 0) {
      *error = "cannot open /dev/net/tun (in namespace " + p.ns + "): " + std::strerror(errno) +
               " (no TUN support in this kernel, or not root/CAP_NET_ADMIN)";
    } else {
      ifreq ifr{};
      ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
      std::strncpy(ifr.ifr_name, dev.c_str(), IFNAMSIZ - 1);
      if (ioctl(p.fd, TUNSETIFF, &ifr) != 0) {
        *error = "cannot create TUN device " + dev + " in namespace " + p.ns +
                 " (TUNSETIFF): " + std::strerror(errno) +
                 (errno == EINVAL || errno == EBUSY ? " (a device of that name exists?)" : "");
        close(p.fd);
        p.fd = -1;
      }
    }
    if (setns(self, CLONE_NEWNET) != 0) {
      *error = std::string("cannot return to its own network namespace: ") + std::strerror(errno);
      return false;
    }
    return p.fd >= 0;
  }

  int64_t SerialiseNs(uint32_t len) const {  // rounded up: the rate is never exceeded
    return (int64_t{len} * 8 * kNsPerSec + rate_bits_ - 1) / rate_bits_;
  }

  void Push(const Event& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  void Release(const Event& e) {
    pending_bytes_ -= e.len;
    pool_.Put(e.data, e.small);
  }

  // ReadPort: the packets waiting on port i's device, each scheduled or dropped: until EAGAIN, or
  // kReadBurst of them, so that a sender that keeps its device full does not hold up deliveries
  // (seen: 240 ms without a delivery under a 2 Gbit/s UDP flood); epoll reports the rest.
  void ReadPort(uint16_t i) {
    Port& p = ports_[i];
    for (int burst = 0; burst < kReadBurst; ++burst) {
      const ssize_t n = read(p.fd, scratch_, kLargeBuffer);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
          std::cerr << "delay_switch: read from " << p.ns << ": " << std::strerror(errno) << "\n";
        }
        return;
      }
      const uint32_t len = static_cast<uint32_t>(n);
      ++p.sent_packets;
      p.sent_bytes += len;
      if (len < 20 || (scratch_[0] >> 4) != 4) {
        ++drops_[kNotIpv4];
        continue;
      }
      uint32_t dst_addr;
      std::memcpy(&dst_addr, scratch_ + 16, 4);
      const auto it = by_address_.find(dst_addr);
      if (it == by_address_.end()) {
        ++drops_[kUnknownDestination];
        continue;
      }
      if (pending_bytes_ + len > kMaxPendingBytes) {
        ++drops_[kMemory];
        continue;
      }
      const int64_t now = NowNs();
      Event e{now + delay_ns_, seq_++, scratch_, len, i, it->second, true, false};
      if (rate_bits_ > 0) {
        const int64_t start = std::max(now, p.uplink_free);
        if (start - now > queue_ns_) {
          ++drops_[kUplinkQueue];
          continue;
        }
        if (start > now) ++queued_packets_;
        p.uplink_free = start + SerialiseNs(len);
        e.time = p.uplink_free + delay_ns_;
        e.arrived = false;
      }
      if (len <= kSmallBuffer) {
        e.data = pool_.Get(true);
        e.small = true;
        std::memcpy(e.data, scratch_, len);
      } else {
        scratch_ = pool_.Get(false);
      }
      pending_bytes_ += len;
      Push(e);
    }
  }

  // RunDue: every event whose time has come: a packet reaching its downlink is scheduled on it
  // (or dropped), a packet due for delivery is written to its destination's device.
  void RunDue() {
    int64_t now = NowNs();
    while (!heap_.empty() && heap_.front().time <= now) {
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      Event e = heap_.back();
      heap_.pop_back();
      Port& dst = ports_[e.dst];
      if (!e.arrived) {
        const int64_t start = std::max(e.time, dst.downlink_free);
        if (start - e.time > queue_ns_) {
          ++drops_[kDownlinkQueue];
          Release(e);
          continue;
        }
        if (start > e.time) ++queued_packets_;
        dst.downlink_free = start + SerialiseNs(e.len);
        e.time = dst.downlink_free;
        e.arrived = true;
        Push(e);
        continue;
      }
      const int64_t late = now - e.time;
      late_sum_ns_ += late;
      late_max_ns_ = std::max(late_max_ns_, late);
      ++delivered_;
      if (write(dst.fd, e.data, e.len) == static_cast<ssize_t>(e.len)) {
        ++dst.delivered_packets;
        dst.delivered_bytes += e.len;
      } else {
        ++drops_[kWriteError];
      }
      Release(e);
      if (heap_.empty() || heap_.front().time > now) now = NowNs();
    }
  }

  // Timeout: epoll_wait's timeout. 0 (poll) when the next packet is due within advance_ns_ (the
  // timer's usual lateness), after a sched_yield so that the spin gives way to other runnable
  // threads on this CPU; else -1, with the timer set advance_ns_ before that packet's time.
  int Timeout() {
    if (heap_.empty()) return -1;
    const int64_t next = heap_.front().time;
    if (next - NowNs() <= advance_ns_) {
      sched_yield();
      return 0;
    }
    if (next != armed_for_) {
      armed_for_ = next;
      armed_at_ = next - advance_ns_;
      itimerspec spec{};
      spec.it_value.tv_sec = armed_at_ / kNsPerSec;
      spec.it_value.tv_nsec = armed_at_ % kNsPerSec;
      timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
    }
    return -1;
  }

  void PrintCounters() const {
    nlohmann::ordered_json j;
    j["delay_switch"] = "counters";
    j["rate_bits"] = rate_bits_;
    j["delay_us"] = delay_ns_ / 1e3;
    j["queue_us"] = queue_ns_ / 1e3;
    uint64_t packets = 0, bytes = 0, dropped = 0;
    for (const Port& p : ports_) {
      j["ports"][p.ns] = {{"address", p.address},
                          {"sent_packets", p.sent_packets},
                          {"sent_bytes", p.sent_bytes},
                          {"delivered_packets", p.delivered_packets},
                          {"delivered_bytes", p.delivered_bytes}};
      packets += p.delivered_packets;
      bytes += p.delivered_bytes;
    }
    j["forwarded_packets"] = packets;
    j["forwarded_bytes"] = bytes;
    for (int d = 0; d < kDropKinds; ++d) {
      j["drops"][kDropNames[d]] = drops_[d];
      dropped += drops_[d];
    }
    j["dropped_packets"] = dropped;
    j["queued_packets"] = queued_packets_;
    j["pending_packets"] = heap_.size();
    j["late_us_mean"] = delivered_ ? std::round(late_sum_ns_ / 1e2 / delivered_) / 10 : 0.0;
    j["late_us_max"] = std::round(late_max_ns_ / 1e2) / 10;
    j["timer_advance_us"] = std::round(advance_ns_ / 1e2) / 10;
    j["buffers"] = pool_.allocated();
    std::cout << j.dump() << std::endl;
  }

  std::vector<Port> ports_;
  std::unordered_map<uint32_t, uint16_t> by_address_;  // IPv4 address (network order) -> port
  const int64_t rate_bits_, delay_ns_, queue_ns_;
  int epoll_fd_ = -1, timer_fd_ = -1, signal_fd_ = -1;
  const int64_t max_spin_ns_;
  int64_t armed_for_ = -1;  // the packet time the timerfd is set for (-1: none since it fired)
  int64_t armed_at_ = 0;    // the time it is set to: armed_for_ - advance_ns_ then
  int64_t advance_ns_ = 0;  // how early the timer is set (mean wake-up lateness, <= max_spin)
  std::vector<Event> heap_;
  BufferPool pool_;
  uint8_t* scratch_ = nullptr;  // the large buffer the next read goes into
  int64_t pending_bytes_ = 0;
  uint64_t seq_ = 0;
  uint64_t drops_[kDropKinds] = {};
  uint64_t queued_packets_ = 0;                // packets that waited for a busy link (either one)
  uint64_t delivered_ = 0;                     // written, successfully or not
  int64_t late_sum_ns_ = 0, late_max_ns_ = 0;  // written after their time, by how much
};

int Main(int argc, char** argv) {
  // Blocked from the start (signalfd reads them), so one that comes during set-up waits. SIGINT
  // stays ignored when it was on entry (a background job of a script: Ctrl-C is for the script,
  // which stops this process with SIGTERM when it cleans up).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  struct sigaction on_entry {};
  if (sigaction(SIGINT, nullptr, &on_entry) != 0 || on_entry.sa_handler != SIG_IGN) {
    sigaddset(&signals, SIGINT);
  }
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  CLI::App app{"userspace IPv4 switch emulating rate-limited, delayed links between namespaces"};
  std::vector<std::string> links;
  std::string rate_text = "0", delay_text = "0", queue_text = "100ms", spin_text = "200us";
  std::string dev = "eth0";
  app.add_option("--link", links, "NS=ADDR: a TUN device in /run/netns/NS owning IPv4 ADDR")
      ->required();
  app.add_option("--rate", rate_text, "each link, each direction, tc syntax (default 0: no limit)");
  app.add_option("--delay", delay_text, "one-way delay between two namespaces (default 0)");
  app.add_option("--queue", queue_text,
                 "longest wait on a busy link before a drop (default 100ms)");
  app.add_option("--max-spin", spin_text,
                 "longest the loop polls before a packet's time, set from the timer's lateness "
                 "(default 200us; 0: never polls)");
  app.add_option("--dev", dev, "name of the TUN device in each namespace (default eth0)");
  CLI11_PARSE(app, argc, argv);

  auto usage = [](const std::string& what) {
    std::cerr << "delay_switch: " << what << "\n";
    return 2;
  };
  const auto rate = ParseRate(rate_text);
  if (!rate) return usage("--rate " + rate_text + ": not a rate (e.g. 1gbit, 100mbit, 0)");
  const auto delay = ParseDuration(delay_text);
  if (!delay) return usage("--delay " + delay_text + ": not a duration (e.g. 1ms, 100us, 0)");
  const auto queue = ParseDuration(queue_text);
  if (!queue) return usage("--queue " + queue_text + ": not a duration (e.g. 100ms)");
  const auto max_spin = ParseDuration(spin_text);
  if (!max_spin || *max_spin > 10'000'000) {
    return usage("--max-spin " + spin_text + ": not a duration up to 10ms (e.g. 200us, 0)");
  }
  if (dev.empty() || dev.size() >= IFNAMSIZ || dev.find('/') != std::string::npos) {
    return usage("--dev " + dev + ": not a device name (1 to 15 characters, no /)");
  }
  if (links.size() > 65535) return usage("too many --link");
  std::vector<Port> ports;
  for (const std::string& link : links) {
    const size_t eq = link.find('=');
    if (eq == std::string::npos) return usage("--link " + link + ": expected NS=ADDR");
    Port p;
    p.ns = link.substr(0, eq);
    p.address = link.substr(eq + 1);
    if (p.ns.empty() || p.ns.find('/') != std::string::npos || p.ns == "." || p.ns == "..") {
      return usage("--link " + link + ": " + p.ns + " is not a namespace name");
    }
    in_addr a{};
    if (inet_pton(AF_INET, p.address.c_str(), &a) != 1) {
      return usage("--link " + link + ": " + p.address + " is not an IPv4 address");
    }
    for (const Port& q : ports) {
      if (q.ns == p.ns) return usage("--link " + link + ": namespace " + p.ns + " given twice");
      if (q.address == p.address) {
        return usage("--link " + link + ": address " + p.address + " given twice");
      }
    }
    ports.push_back(std::move(p));
  }

  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // timerfd wake-ups on time, not up to 50 us late
  Switch sw(std::move(ports), *rate, *delay, *queue, *max_spin);
  std::string error;
  if (!sw.CreateDevices(dev, &error)) {
    std::cerr << "delay_switch: " << error << "\n";
    return 1;
  }
  return sw.Run(signals);
}

}  // namespace
}  // namespace dlrm::bench

int main(int argc, char** argv) { return dlrm::bench::Main(argc, argv); }
