// The load-and-faults client of bench/serve_soak.sh: CONCURRENCY threads send mixed valid and
// invalid requests to two `kiln serve` processes (an image classifier and a keyword spotter) for
// SECONDS seconds, while three more threads send a 100 MB body now and then, keep connections
// whose body never ends, and fire bursts over the keyword spotter's serve.max_queue. Every valid
// answer is checked against `kiln predict`'s (class and probability); every invalid request must
// get its 4xx (or 503 with Retry-After) with a JSON {"error": "..."} message. The servers' RSS is
// sampled every few seconds. Prints counts by class and the RSS figures; exits 1 when any answer
// was wrong, a request got no answer, RSS grew by 10% or more after warm-up, or a server stopped
// answering /healthz.
//   serve_soak cnn_port=P kws_port=P cnn_pid=PID kws_pid=PID expected=FILE lies=DIR
//              [seconds=600] [concurrency=64] [warmup_s=60] [burst=48] [rss_log=FILE]
// FILE: one line per input, "cnn|kws<TAB>path<TAB>class_index<TAB>probability" (kiln predict's).
// In C++ rather than Python: at concurrency 64 on 2 cores a Python client's own CPU time and GIL
// would be the bottleneck.
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "serve_soak: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string Base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

struct Input {
  std::string bytes;
  int64_t class_index;
  double probability;
};

// Counts by request class and outcome, and the first few wrong answers.
class Tally {
 public:
  void Count(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[what];
  }
  void Wrong(const std::string& what, const std::string& detail) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[what];
    if (examples_.size() < 20) examples_.push_back(what + ": " + detail.substr(0, 300));
  }
  std::map<std::string, int64_t> counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  std::vector<std::string> examples() const {
    std::lock_guard<std::mutex> lock(mu_);
    return examples_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> counts_;
  std::vector<std::string> examples_;
};

// The server's error message, or "" when the body is not {"error": "<non-empty>"}.
std::string ErrorMessage(const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_object() || !json.contains("error") || !json["error"].is_string()) return "";
  return json["error"].get<std::string>();
}

// A valid request's answer: 200 with one prediction per input equal to kiln predict's.
std::string CheckAnswer(const httplib::Result& res, const std::vector<const Input*>& inputs) {
  if (!res) return "no answer: " + httplib::to_string(res.error());
  if (res->status != 200) return "HTTP " + std::to_string(res->status) + " " + res->body;
  auto json = nlohmann::json::parse(res->body, nullptr, false);
  if (!json.is_object() || !json["predictions"].is_array() ||
      json["predictions"].size() != inputs.size()) {
    return "not one prediction per input: " + res->body;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& p = json["predictions"][i];
    if (!p["class_index"].is_number_integer() ||
        p["class_index"].get<int64_t>() != inputs[i]->class_index ||
        !p["probability"].is_number() ||
        std::fabs(p["probability"].get<double>() - inputs[i]->probability) > 1e-4) {
      std::ostringstream want;
      want << "expected class " << inputs[i]->class_index << " p=" << inputs[i]->probability
           << ", got " << p.dump();
      return want.str();
    }
  }
  return "";
}

// An invalid request's answer: `status` with a message containing `says`.
std::string CheckRefusal(const httplib::Result& res, int status, const std::string& says) {
  if (!res) return "no answer: " + httplib::to_string(res.error());
  if (res->status != status)
    return "HTTP " + std::to_string(res->status) + " (want " + std::to_string(status) + ") " +
           res->body;
  std::string message = ErrorMessage(res->body);
  if (message.empty() || message.find(says) == std::string::npos)
    return "message lacks '" + says + "': " + res->body;
  if (status == 503 && res->get_header_value("Retry-After").empty())
    return "503 without Retry-After";
  return "";
}

int64_t RssKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// Connects to 127.0.0.1:port; -1 when it cannot.
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> arg = {{"seconds", "600"},
                                            {"concurrency", "64"},
                                            {"warmup_s", "60"},
                                            {"burst", "48"},
                                            {"rss_log", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "serve_soak: arguments are key=value, got %s\n", a.c_str());
      return 2;
    }
    arg[a.substr(0, eq)] = a.substr(eq + 1);
  }
  for (const char* key : {"cnn_port", "kws_port", "cnn_pid", "kws_pid", "expected", "lies"}) {
    if (arg.count(key) == 0) {
      std::fprintf(stderr, "serve_soak: missing %s=...\n", key);
      return 2;
    }
  }
  const int cnn_port = std::stoi(arg["cnn_port"]), kws_port = std::stoi(arg["kws_port"]);
  const int pids[2] = {std::stoi(arg["cnn_pid"]), std::stoi(arg["kws_pid"])};
  const double seconds = std::stod(arg["seconds"]), warmup_s = std::stod(arg["warmup_s"]);
  const int concurrency = std::stoi(arg["concurrency"]), burst = std::stoi(arg["burst"]);

  std::vector<Input> pngs, wavs;
  {
    std::ifstream in(arg["expected"]);
    std::string server, path;
    Input input;
    while (in >> server >> path >> input.class_index >> input.probability) {
      input.bytes = ReadFile(path);
      (server == "cnn" ? pngs : wavs).push_back(input);
    }
  }
  std::vector<std::string> lies;  // WAV files whose header lies
  if (DIR* dir = ::opendir(arg["lies"].c_str())) {
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] != '.') lies.push_back(ReadFile(arg["lies"] + "/" + e->d_name));
    }
    ::closedir(dir);
  }
  if (pngs.empty() || wavs.empty() || lies.empty()) {
    std::fprintf(stderr, "serve_soak: need expected PNG and WAV answers and lying WAVs\n");
    return 2;
  }
  std::string not_png = pngs[0].bytes;
  not_png.replace(1, 3, "GIF");
  const std::string truncated_png = pngs[1].bytes.substr(0, pngs[1].bytes.size() / 2);

  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<bool> done{false};
  Tally tally;

  // A worker's mix (per 1000): valid PNGs (raw and JSON base64, several per request) and WAVs,
  // and the invalid kinds: malformed JSON, wrong field types, a PNG that is not one, a WAV
  // whose header lies, an empty body, an unknown path.
  auto worker = [&](int t) {
    std::mt19937 rng(static_cast<uint32_t>(t) * 7919u + 1u);
    auto client_for = [](int port) {
      auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);
      c->set_connection_timeout(30);
      c->set_read_timeout(60);
      c->set_write_timeout(60);
      return c;
    };
    auto cnn = client_for(cnn_port), kws = client_for(kws_port);
    while (Clock::now() < end) {
      int roll = static_cast<int>(rng() % 1000);
      const Input& png = pngs[rng() % pngs.size()];
      const Input& wav = wavs[rng() % wavs.size()];
      if (roll < 560) {
        auto res = cnn->Post("/v1/predict", png.bytes, "image/png");
        std::string wrong = CheckAnswer(res, {&png});
        wrong.empty() ? tally.Count("valid png: right") : tally.Wrong("valid png: WRONG", wrong);
      } else if (roll < 660) {
        std::vector<const Input*> some = {&png, &pngs[rng() % pngs.size()],
                                          &pngs[rng() % pngs.size()]};
        nlohmann::json body = {{"inputs", nlohmann::json::array()}};
        for (const Input* i : some) body["inputs"].push_back({{"b64", Base64(i->bytes)}});
        auto res = cnn->Post("/v1/predict", body.dump(), "application/json");
        std::string wrong = CheckAnswer(res, some);
        wrong.empty() ? tally.Count("valid json (3 images): right")
                      : tally.Wrong("valid json (3 images): WRONG", wrong);
      } else if (roll < 810) {
        // The keyword spotter's queue is small: during a burst a valid request may be refused
        // with 503 and Retry-After, as a client would be; it retries after a moment.
        for (int attempt = 0;; ++attempt) {
          auto res = kws->Post("/v1/predict", wav.bytes, "audio/wav");
          if (res && res->status == 503 && CheckRefusal(res, 503, "queue is full").empty() &&
              attempt < 20) {
            tally.Count("valid wav: 503 queue full, retried");
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
          }
          std::string wrong = CheckAnswer(res, {&wav});
          wrong.empty() ? tally.Count("valid wav: right") : tally.Wrong("valid wav: WRONG", wrong);
          break;
        }
      } else {
        struct Bad {
          const char* name;
          bool kws;
          std::string body, type, says;
          int status;
        };
        static const std::vector<std::string> kMalformed = {
            "{\"inputs\": [", "{\"inputs\": [\"a\",]}", "not json", "{\"input\": \"\\x\"}"};
        static const std::vector<std::string> kWrongTypes = {"{\"inputs\": [5]}",
                                                             "{\"inputs\": \"x\"}",
                                                             "{\"input\": {\"b64\": 7}}",
                                                             "{\"inputs\": [{\"b64\": \"***\"}]}",
                                                             "{\"inputs\": []}",
                                                             "[1, 2]",
                                                             "{\"wrong\": 1}"};
        static const std::vector<std::string> kWrongSays = {
            "inputs[0] must be", "\"inputs\" must be a list",
            "input must be",     "not valid base64",
            "is empty",          "must be an object",
            "must be an object"};
        size_t w = rng() % kWrongTypes.size();
        Bad bad;
        int which = roll < 840   ? 0
                    : roll < 870 ? 1
                    : roll < 900 ? 2
                    : roll < 950 ? 3
                    : roll < 980 ? 4
                                 : 5;
        switch (which) {
          case 0:
            bad = {
                "malformed json", false, kMalformed[rng() % kMalformed.size()], "application/json",
                "malformed JSON", 400};
            break;
          case 1:
            bad = {"wrong field types", false,         kWrongTypes[w],
                   "application/json",  kWrongSays[w], 400};
            break;
          case 2:
            bad = {"png that is not a png", false, rng() % 2 ? not_png : truncated_png, "image/png",
                   "cannot decode image",   400};
            break;
          case 3:
            bad = {"wav with a lying header",
                   true,
                   lies[rng() % lies.size()],
                   "audio/wav",
                   "the audio",
                   400};
            break;
          case 4: bad = {"empty body", false, "", "image/png", "no body", 400}; break;
          default:
            bad = {"unknown path", false, png.bytes, "image/png", "no such endpoint", 404};
            break;
        }
        auto& client = bad.kws ? kws : cnn;
        auto res =
            client->Post(which == 5 ? "/v1/predicts" : "/v1/predict", bad.body, bad.type.c_str());
        std::string wrong = CheckRefusal(res, bad.status, bad.says);
        std::string name = std::string("invalid, ") + bad.name;
        wrong.empty() ? tally.Count(name + ": refused right")
                      : tally.Wrong(name + ": WRONG", wrong);
      }
    }
  };

  // A 100 MB body every 10 s (413 before the model sees it).
  auto huge = [&] {
    const std::string body(100u << 20, 'x');
    while (Clock::now() < end) {
      httplib::Client c("127.0.0.1", cnn_port);
      c.set_read_timeout(60);
      c.set_write_timeout(60);
      auto res = c.Post("/v1/predict", body, "image/png");
      std::string wrong = CheckRefusal(res, 413, "larger than serve.max_body_bytes");
      wrong.empty() ? tally.Count("invalid, 100 MB body: refused right")
                    : tally.Wrong("invalid, 100 MB body: WRONG", wrong);
      for (int i = 0; i < 100 && Clock::now() < end; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };

  // Four connections at a time that send the headers and part of the body, then nothing: each
  // must be answered or closed by the server's read timeout (serve.read_timeout_s), not held.
  auto slow = [&](int port, const std::string& type) {
    while (Clock::now() < end) {
      std::vector<int> fds;
      for (int i = 0; i < 4; ++i) {
        int fd = Connect(port);
        if (fd < 0) {
          tally.Wrong("invalid, body never finished: WRONG", "cannot connect");
          continue;
        }
        std::string head = "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + type +
                           "\r\nContent-Length: 100000\r\n\r\n" + std::string(100, 'x');
        if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(head.size())) {
          tally.Wrong("invalid, body never finished: WRONG", "cannot send");
        }
        fds.push_back(fd);
      }
      const auto sent = Clock::now();
      for (int fd : fds) {
        // Whatever the server says, then its close; at most 30 s.
        std::string reply;
        char buf[4096];
        bool closed = false;
        while (Clock::now() - sent < std::chrono::seconds(30)) {
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 200) <= 0) continue;
          ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
          if (n <= 0) {
            closed = true;
            break;
          }
          reply.append(buf, static_cast<size_t>(n));
        }
        double waited = std::chrono::duration<double>(Clock::now() - sent).count();
        ::close(fd);
        bool refused = reply.empty() || (reply.rfind("HTTP/1.1 4", 0) == 0 &&
                                         reply.find("\"error\"") != std::string::npos);
        if (closed && refused && waited < 20) {
          tally.Count(reply.empty() ? "invalid, body never finished: closed at read timeout"
                                    : "invalid, body never finished: 4xx at read timeout");
        } else {
          std::ostringstream d;
          d << (closed ? "closed" : "still open") << " after " << waited
            << " s: " << reply.substr(0, 200);
          tally.Wrong("invalid, body never finished: WRONG", d.str());
        }
      }
    }
  };

  // Every 15 s, `burst` new connections post a WAV at once: more than the keyword spotter's
  // serve.max_queue, so some are refused 503 with Retry-After; the others answered right.
  auto bursts = [&] {
    while (Clock::now() < end) {
      for (int i = 0; i < 150 && Clock::now() < end; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (Clock::now() >= end) break;
      std::atomic<int> waiting{burst};
      std::vector<std::thread> shots;
      for (int b = 0; b < burst; ++b) {
        shots.emplace_back([&, b] {
          const Input& wav = wavs[static_cast<size_t>(b) % wavs.size()];
          httplib::Client c("127.0.0.1", kws_port);
          c.set_read_timeout(60);
          --waiting;
          while (waiting.load() > 0) std::this_thread::yield();
          auto res = c.Post("/v1/predict", wav.bytes, "audio/wav");
          if (res && res->status == 503) {
            std::string wrong = CheckRefusal(res, 503, "queue is full");
            wrong.empty() ? tally.Count("burst over max_queue: 503 with Retry-After")
                          : tally.Wrong("burst over max_queue: WRONG", wrong);
            return;
          }
          std::string wrong = CheckAnswer(res, {&wav});
          wrong.empty() ? tally.Count("burst over max_queue: answered right")
                        : tally.Wrong("burst over max_queue: WRONG", wrong);
        });
      }
      for (auto& s : shots) s.join();
    }
  };

  // RSS of both servers every 5 s.
  std::vector<std::vector<std::pair<double, int64_t>>> rss(2);
  std::ofstream rss_log;
  if (!arg["rss_log"].empty()) rss_log.open(arg["rss_log"]);
  auto sampler = [&] {
    int tick = 0;
    while (!done.load()) {
      double t = std::chrono::duration<double>(Clock::now() - start).count();
      for (int s = 0; s < 2; ++s) rss[static_cast<size_t>(s)].push_back({t, RssKiB(pids[s])});
      if (rss_log.is_open())
        rss_log << t << "\t" << rss[0].back().second << "\t" << rss[1].back().second << std::endl;
      if (++tick % 12 == 0) {  // a progress line a minute
        int64_t valid = 0, all = 0;
        for (const auto& [what, n] : tally.counts()) {
          all += n;
          if (what.rfind("valid", 0) == 0) valid += n;
        }
        std::fprintf(
            stderr,
            "serve_soak: %4.0f s  %lld requests (%lld valid)  RSS cnn %lld KiB, kws %lld KiB\n", t,
            static_cast<long long>(all), static_cast<long long>(valid),
            static_cast<long long>(rss[0].back().second),
            static_cast<long long>(rss[1].back().second));
      }
      for (int i = 0; i < 50 && !done.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };

  std::thread sampling(sampler);
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) threads.emplace_back(worker, t);
  threads.emplace_back(huge);
  threads.emplace_back(slow, cnn_port, "image/png");
  threads.emplace_back(slow, kws_port, "audio/wav");
  threads.emplace_back(bursts);
  for (auto& t : threads) t.join();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  done.store(true);
  sampling.join();
  for (int s = 0; s < 2; ++s) rss[static_cast<size_t>(s)].push_back({took, RssKiB(pids[s])});

  bool ok = true;
  int64_t total = 0, wrong = 0;
  std::printf(
      "== requests by class (%.0f s, %d workers + 100 MB bodies, stalled bodies, bursts of %d)\n",
      took, concurrency, burst);
  for (const auto& [what, n] : tally.counts()) {
    std::printf("%10lld  %s\n", static_cast<long long>(n), what.c_str());
    total += n;
    if (what.find("WRONG") != std::string::npos) wrong += n;
  }
  std::printf("%10lld  in all; wrong or unanswered: %lld\n", static_cast<long long>(total),
              static_cast<long long>(wrong));
  for (const auto& e : tally.examples()) std::printf("  e.g. %s\n", e.c_str());
  if (wrong > 0) ok = false;
  std::printf("== RSS (KiB): after warm-up (%.0f s), at the end, the most; growth after warm-up\n",
              warmup_s);
  const char* names[2] = {"cnn", "kws"};
  for (int s = 0; s < 2; ++s) {
    const auto& samples = rss[static_cast<size_t>(s)];
    int64_t warm = -1, max = 0, last = samples.back().second;
    for (const auto& [t, kib] : samples) {
      if (warm < 0 && t >= warmup_s) warm = kib;
      if (t >= warmup_s) max = std::max(max, kib);
    }
    if (warm <= 0) warm = samples.front().second;
    double growth = 100.0 * static_cast<double>(last - warm) / static_cast<double>(warm);
    std::printf("%s  warm %lld  end %lld  max %lld  growth %+.1f%%\n", names[s],
                static_cast<long long>(warm), static_cast<long long>(last),
                static_cast<long long>(max), growth);
    if (last <= 0 || growth >= 10.0) ok = false;
  }
  for (int s = 0; s < 2; ++s) {
    httplib::Client c("127.0.0.1", s == 0 ? cnn_port : kws_port);
    auto res = c.Get("/healthz");
    bool healthy = res && res->status == 200;
    std::printf("%s /healthz at the end: %s\n", names[s], healthy ? "200" : "NO ANSWER");
    if (!healthy) ok = false;
  }
  std::printf("%s\n", ok ? "serve_soak: PASS" : "serve_soak: FAIL");
  return ok ? 0 : 1;
}
