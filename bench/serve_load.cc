// A closed-loop HTTP load client for bench/serve_speed.sh: CONCURRENCY connections (one thread
// each, keep-alive) POST the bodies of FILES in turn to http://127.0.0.1:PORT/v1/predict for
// SECONDS seconds (after a short warm-up), then one line: requests/s, p50 and p99 latency in ms,
// and how many answers were not 200.
//   serve_load PORT CONCURRENCY SECONDS CONTENT_TYPE FILE...
// Written in C++ (cpp-httplib's client) rather than Python: at concurrency 64 on a 2-core machine
// a Python client's own CPU time and GIL would limit the rate it measures.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: serve_load PORT CONCURRENCY SECONDS CONTENT_TYPE FILE...\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int concurrency = std::atoi(argv[2]);
  const double seconds = std::atof(argv[3]);
  const std::string type = argv[4];
  std::vector<std::string> bodies;
  for (int i = 5; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "serve_load: cannot read %s\n", argv[i]);
      return 2;
    }
    bodies.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  using Clock = std::chrono::steady_clock;
  const auto warm_until = Clock::now() + std::chrono::milliseconds(300);
  const auto end = warm_until + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(seconds));
  std::mutex mu;
  std::vector<double> latencies_ms;
  std::atomic<int64_t> failures{0};
  std::map<std::string, int64_t> why;  // failures by status code or client error
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(30);
      std::vector<double> mine;
      for (size_t i = static_cast<size_t>(t);; ++i) {
        auto start = Clock::now();
        if (start >= end) break;
        auto res = client.Post("/v1/predict", bodies[i % bodies.size()], type.c_str());
        auto done = Clock::now();
        if (start < warm_until) continue;
        if (!res || res->status != 200) {
          ++failures;
          std::lock_guard<std::mutex> lock(mu);
          ++why[res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error())];
          continue;
        }
        if (done <= end)
          mine.push_back(std::chrono::duration<double, std::milli>(done - start).count());
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& thread : threads) thread.join();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double q) {
    if (latencies_ms.empty()) return 0.0;
    return latencies_ms[std::min(
        latencies_ms.size() - 1,
        static_cast<size_t>(q * static_cast<double>(latencies_ms.size())))];
  };
  for (const auto& [what, n] : why)
    std::fprintf(stderr, "serve_load: %lld failed: %s\n", static_cast<long long>(n), what.c_str());
  std::printf("%.1f %.2f %.2f %lld\n", static_cast<double>(latencies_ms.size()) / seconds, pct(0.5),
              pct(0.99), static_cast<long long>(failures.load()));
  return 0;
}
