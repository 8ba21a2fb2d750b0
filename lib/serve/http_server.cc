#include "lib/serve/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <string>

namespace kiln::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until `sock` is ready for `events` (true) or `timeout` passed (false).
bool WaitFor(int sock, short events, std::chrono::milliseconds timeout) {
  pollfd p{sock, events, 0};
  int n = 0;
  do {
    n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

// Waits until `sock` has data (true) or `timeout` passed (false).
bool WaitReadable(int sock, std::chrono::milliseconds timeout) {
  return WaitFor(sock, POLLIN, timeout);
}

void IpAndPort(const sockaddr_storage& address, socklen_t length, std::string& ip, int& port) {
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host),
                    nullptr, 0, NI_NUMERICHOST) == 0) {
    ip = host;
  }
  if (address.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  } else if (address.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
}

// httplib's SocketStream (a read buffer, per-read and per-write timeouts), whose reads also end
// at the request's deadline.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, const HttpTimeouts& timeouts)
      : sock_(sock), timeouts_(timeouts), deadline_(Clock::now() + timeouts.request_read) {}

  bool is_readable() const override {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) return false;
    return WaitReadable(
        sock_,
        std::min(left, std::chrono::duration_cast<std::chrono::milliseconds>(timeouts_.read)));
  }
  bool is_writable() const override {
    return WaitFor(sock_, POLLOUT,
                   std::chrono::duration_cast<std::chrono::milliseconds>(timeouts_.write));
  }
  ssize_t read(char* ptr, size_t size) override {
    size = std::min(size, static_cast<size_t>(std::numeric_limits<ssize_t>::max()));
    if (offset_ < filled_) return Take(ptr, size);
    if (!is_readable()) return -1;
    offset_ = filled_ = 0;
    if (size <
        sizeof(
            buffer_)) {  // small reads (httplib reads headers byte by byte) go through the buffer
      ssize_t n = Receive(buffer_, sizeof(buffer_));
      if (n <= 0) return n;
      filled_ = static_cast<size_t>(n);
      return Take(ptr, size);
    }
    return Receive(ptr, size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n = 0;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      IpAndPort(address, length, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      IpAndPort(address, length, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t Take(char* ptr, size_t size) {
    size_t n = std::min(size, filled_ - offset_);
    std::copy(buffer_ + offset_, buffer_ + offset_ + n, ptr);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t Receive(char* ptr, size_t size) {
    ssize_t n = 0;
    do {
      n = ::recv(sock_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  int sock_;
  const HttpTimeouts& timeouts_;
  Clock::time_point deadline_;
  char buffer_[4096];
  size_t offset_ = 0, filled_ = 0;
};

}  // namespace

HttpServer::HttpServer(HttpTimeouts timeouts) : timeouts_(timeouts) {}

bool HttpServer::Admit(const std::string& ip) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  size_t& open = open_[ip];
  if (timeouts_.max_per_client > 0 && open >= timeouts_.max_per_client) return false;
  ++open;
  return true;
}

void HttpServer::Release(const std::string& ip) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = open_.find(ip);
  if (it != open_.end() && --it->second == 0) open_.erase(it);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  std::string ip;
  int port = 0;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(sock, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    IpAndPort(address, length, ip, port);
  if (!Admit(ip)) {
    // Answered before reading anything: the client's request is not looked at.
    const std::string body =
        "{\"error\": \"too many connections from " + ip +
        " (serve.max_connections_per_client=" + std::to_string(timeouts_.max_per_client) + ")\"}\n";
    const std::string answer =
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    if (WaitFor(sock, POLLOUT,
                std::chrono::duration_cast<std::chrono::milliseconds>(timeouts_.write))) {
      ssize_t sent = 0;
      do {
        sent = ::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL);
      } while (sent < 0 && errno == EINTR);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  // httplib's process_server_socket_core: requests while the server listens, the connection
  // sends one within the keep-alive timeout, and fewer than keep_alive_max_count were answered.
  bool ret = false;
  for (size_t count = timeouts_.keep_alive_max_count;
       svr_sock_ != INVALID_SOCKET && count > 0 && WaitReadable(sock, timeouts_.keep_alive);
       --count) {
    DeadlineStream stream(sock, timeouts_);  // the request's time runs from its first byte
    bool connection_closed = false;
    ret = process_request(stream, count == 1, connection_closed, nullptr);
    if (!ret || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  Release(ip);
  return ret;
}

}  // namespace kiln::serve
