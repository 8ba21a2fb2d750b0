// cpp-httplib's server with a bound on the time a client takes to send one whole request.
// Debian's cpp-httplib 0.11 times out each read only: a client that sends one byte just inside
// serve.read_timeout_s, again and again, holds a connection thread as long as it likes. This
// server runs httplib's own request processing (parsing, routing, answering: process_request)
// on each connection, over a stream whose reads fail once the request has taken longer than
// `request_read_timeout` since its first byte; httplib then answers 400 (headers or body not
// read) and closes the connection. The connection loop around it (keep-alive, at most
// `keep_alive_max_count` requests) is httplib's, rewritten here because the library's is private.
// A client address with `max_per_client` connections open already is answered 429 (with
// Retry-After) at once and disconnected, so one client cannot hold every connection thread.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::serve {

struct HttpTimeouts {
  std::chrono::microseconds read{5'000'000};           // a silent client, per read
  std::chrono::microseconds write{10'000'000};         // a client that does not read, per write
  std::chrono::microseconds request_read{60'000'000};  // one whole request
  std::chrono::milliseconds keep_alive{5'000};         // waiting for a connection's next request
  size_t keep_alive_max_count = 1000;                  // requests per connection
  size_t max_per_client = 32;  // open connections per client address (0: any)
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HttpTimeouts timeouts);

 private:
  // httplib calls this (a private virtual of httplib::Server) on a worker thread per connection.
  bool process_and_close_socket(socket_t sock) override;

  // Counts a connection from `ip`; false when it already has max_per_client open.
  bool Admit(const std::string& ip);
  void Release(const std::string& ip);

  HttpTimeouts timeouts_;
  std::mutex clients_mu_;
  std::unordered_map<std::string, size_t> open_;  // connections per client address
};

}  // namespace kiln::serve
