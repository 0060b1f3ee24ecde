// TcpProxy: a loopback TCP forwarder for tests of network faults between a client and a server.
// It listens on a port of its own (fixed for its life, so that Down then Up is "the same address
// comes back") and forwards every connection to the target port. Faults:
//   Down()  stops listening and resets every connection (a peer that is gone);
//   Up()    listens again;
//   Stall() stops moving bytes in both directions (a stopped peer or a stalled network: the
//           kernel still accepts connections), HoldReplies() only from the server to the client
//           (requests arrive and are served, their answers do not come back); Resume() ends both.
//
//   TcpProxy proxy(ps->port());
//   proxy.Up();
//   client options: ps_addresses = {proxy.address()}
//
// Thread-safe. Every thread is joined by Down (and the destructor).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace dlrm::testing {

// A loopback port nobody listens on right now (bound to port 0, read, closed).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_port_(target_port), port_(FreeLoopbackPort()) {}
  ~TcpProxy() { Down(); }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void Up() {
    absl::MutexLock lock(&mu_);
    if (listen_fd_ >= 0) return;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr = Loopback(port_);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << "port " << port_ << ": errno " << errno;
    ASSERT_EQ(::listen(fd, 64), 0);
    listen_fd_ = fd;
    running_ = true;
    threads_.emplace_back([this, fd] { Accept(fd); });
  }

  void Down() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    absl::MutexLock lock(&mu_);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  void Stall() { stalled_ = true; }
  void HoldReplies() { holding_replies_ = true; }
  void Resume() {
    stalled_ = false;
    holding_replies_ = false;
  }
  // Connections accepted so far.
  int connections() const { return connections_.load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }
  bool running() const {
    absl::MutexLock lock(&mu_);
    return running_;
  }

  void Accept(int listen_fd) {
    std::vector<std::thread> pumps;
    while (running()) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int client = ::accept(listen_fd, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr = Loopback(target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        Reset(client);
        ::close(server);
        continue;
      }
      ++connections_;
      pumps.emplace_back([this, client, server] { Pump(client, server); });
    }
    for (std::thread& t : pumps) t.join();
  }

  // Moves bytes both ways until either side closes or the proxy goes down (then resets both).
  void Pump(int client, int server) {
    char buffer[1 << 16];
    bool open = true;
    while (open && running()) {
      if (stalled_) {
        ::usleep(5000);
        continue;
      }
      pollfd p[2] = {{client, POLLIN, 0},
                     {server, static_cast<short>(holding_replies_ ? 0 : POLLIN), 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::read(p[i].fd, buffer, sizeof(buffer));
        if (n <= 0) {
          open = false;
          break;
        }
        const int to = i == 0 ? server : client;
        for (ssize_t sent = 0; sent < n && open;) {
          const ssize_t m = ::send(to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
          if (m <= 0) open = false;
          sent += m;
        }
      }
    }
    Reset(client);
    Reset(server);
  }

  // Closes with a RST (SO_LINGER 0), as a peer that is gone.
  static void Reset(int fd) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd);
  }

  const int target_port_;
  const int port_;
  std::atomic<bool> stalled_{false};
  std::atomic<bool> holding_replies_{false};
  std::atomic<int> connections_{0};
  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  int listen_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlrm::testing
