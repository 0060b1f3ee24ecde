// A plain-socket HTTP/1.0 GET on loopback for tests of the metrics endpoints: no HTTP library,
// so the server is checked by an independent client.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlrm::testing {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET `path` from 127.0.0.1:port with a plain socket (HTTP/1.0: the server closes when done).
inline bool HttpGet(int port, const std::string& path, HttpReply* reply) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return false;
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return false;
  }
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) raw.append(buf, n);
  close(fd);
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos) return false;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, header_end), "\r\n");
  std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &reply->status)) return false;
  for (const std::string& line : lines) {
    if (absl::StartsWithIgnoreCase(line, "content-type:")) {
      reply->content_type = std::string(absl::StripAsciiWhitespace(line.substr(13)));
    }
  }
  reply->body = raw.substr(header_end + 4);
  return true;
}

}  // namespace dlrm::testing
