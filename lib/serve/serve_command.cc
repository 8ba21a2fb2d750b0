// `kiln serve`: a trained model behind an HTTP/1.1 server (cpp-httplib). libkiln_serve holds
// it, loaded by `kiln` for this command only; loading registers the command.
//
//   POST /v1/predict   JSON {"inputs": [...]} / {"input": ...} (a string is a text or a prompt,
//                      {"b64": "..."} a file's bytes), a multipart form (each file part one input),
//                      or any other body as one input's raw bytes (image/png, audio/wav,
//                      text/plain)
//   GET  /healthz      200 while the process runs
//   GET  /readyz       200 once the model is loaded and warmed up, 503 before
//   GET  /metrics      Prometheus text: requests by code, latency and batch-size histograms, queue
//
// Requests wait for a batch (batcher.h); a full queue is 503 with Retry-After; a request not
// answered in request_timeout_ms is 504; a body over max_body_bytes is 413; bad input, or a request
// not sent whole within request_read_timeout_s (http_server.h), is 400 with
// {"error": "..."}. SIGTERM, SIGINT or SIGUSR1: stop accepting, answer what is in flight, exit 0.
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/base/status_macros.h"
#include "lib/inference/predictor.h"
#include "lib/logging/logger.h"
#include "lib/registry/options.h"
#include "lib/run/command.h"
#include "lib/run/internal/http_thread_pool.h"
#include "lib/serve/batcher.h"
#include "lib/serve/completions.h"
#include "lib/serve/http_server.h"
#include "lib/serve/request_inputs.h"
#include "lib/serve/serve_metrics.h"
#include "lib/serve/serve_options.h"
#include "lib/trainer/prediction_json.h"
#include "lib/trainer/process_settings.h"

namespace kiln::serve {
namespace {

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost";
}

// When the request this worker thread handles was read (httplib runs a request's routing and its
// logger on one thread, and tells the logger no start time).
thread_local std::optional<std::chrono::steady_clock::time_point> t_request_start;

// httplib's thread pool, whose threads lower their own scheduling priority (Linux's nice is per
// thread) before their first connection. At high concurrency dozens of connection threads are
// runnable at once, and the batch worker, which every request waits for, got the CPU only in
// turn with them: each answer it handed out could preempt it (measured on 2 cores at concurrency
// 64: ~1.3 ms per batch of ~40 spent outside the forward pass, ~0.2 ms with the connection
// threads at nice 10). Lowering one's own priority needs no privilege.
// httplib's worker threads, each lowered by `nice` (serve.http_nice) when it starts.
HttpThreadPool* NicedThreadPool(size_t threads, int nice) {
  return new HttpThreadPool(threads, [nice] {
    if (nice <= 0) return;
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, tid);
    if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(19, now + nice));
  });
}

std::string ErrorJson(const std::string& message) {
  nlohmann::ordered_json body;
  body["error"] = message;
  return body.dump();
}

// One JSON object per answer: the task's fields (class_index, class, probability; or text) and
// the probability of every class.
absl::StatusOr<std::string> AnswerJson(const std::string& model, const BatchAnswer& answer) {
  nlohmann::ordered_json body;
  body["model"] = model;
  body["predictions"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < answer.predictions.size(); ++i) {
    const auto& p = answer.predictions[i];
    if (!p.ok()) {
      std::string where = answer.predictions.size() > 1 ? absl::StrCat("inputs[", i, "]: ") : "";
      return absl::Status(p.status().code(), absl::StrCat(where, p.status().message()));
    }
    nlohmann::ordered_json one;
    AddPredictionFields(p->fields, one);
    if (!p->probabilities.empty()) one["probabilities"] = p->probabilities;
    body["predictions"].push_back(std::move(one));
  }
  for (size_t i = 0; i < answer.generated.size(); ++i) {
    const auto& g = answer.generated[i];
    if (!g.ok()) {
      std::string where = answer.generated.size() > 1 ? absl::StrCat("inputs[", i, "]: ") : "";
      return absl::Status(g.status().code(), absl::StrCat(where, g.status().message()));
    }
    nlohmann::ordered_json one;
    one["text"] = *g;
    body["predictions"].push_back(std::move(one));
  }
  return body.dump();
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:  // a prompt to a classifier, an input to a generator
      return 400;
    default: return 500;
  }
}

// The access log: one JSON line per request, appended under a mutex.
class AccessLog {
 public:
  absl::Status Open(const std::optional<std::string>& where, const std::string& run_dir) {
    if (!where.has_value()) return absl::OkStatus();
    if (*where == "-") {
      stdout_ = true;
      return absl::OkStatus();
    }
    std::string path =
        !where->empty() && (*where)[0] == '/' ? *where : absl::StrCat(run_dir, "/", *where);
    file_.open(path, std::ios::app);
    if (!file_)
      return absl::InvalidArgumentError(absl::StrCat("serve.access_log: cannot open ", path));
    return absl::OkStatus();
  }
  void Write(const httplib::Request& req, const httplib::Response& res, double seconds) {
    if (!stdout_ && !file_.is_open()) return;
    nlohmann::ordered_json line;
    line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
    line["remote"] = req.remote_addr;
    line["method"] = req.method;
    line["path"] = req.path;
    line["status"] = res.status;
    line["bytes_in"] = req.body.size();
    line["bytes_out"] = res.body.size();
    line["ms"] = seconds * 1000.0;
    std::string batch = res.get_header_value("X-Kiln-Batch-Size");
    if (!batch.empty()) line["batch"] = std::atoll(batch.c_str());
    if (res.status >= 400) {
      auto body = nlohmann::json::parse(res.body, nullptr, false);
      if (body.is_object() && body.contains("error")) line["error"] = body["error"];
    }
    std::string text = line.dump() + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (stdout_) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    } else {
      file_ << text << std::flush;
    }
  }

 private:
  std::mutex mu_;
  std::ofstream file_;
  bool stdout_ = false;
};

// What serve reads before anything starts: the options, the bearer token, the checkpoint and
// the warm-up input.
struct ServeSetup {
  ServeOptions o;
  std::string token;  // empty: no authentication (loopback only)
  std::string ckpt;
  std::optional<std::string> warmup;
};

absl::StatusOr<ServeSetup> ReadSetup(const config::Config& cfg) {
  ServeSetup setup;
  config::NodePtr node =
      cfg.Has("serve") ? cfg.Get<config::NodePtr>("serve").value() : config::Node::Map();
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled,
                        ServeBinding().schema().Apply(*node, "serve", "command 'serve'"));
  setup.o = ServeBinding().Fill(config::Config(filled, "serve"));
  const ServeOptions& o = setup.o;
  setup.token = o.token.value_or("");
  if (setup.token.empty()) {
    const char* env = std::getenv("KILN_SERVE_TOKEN");
    if (env != nullptr) setup.token = env;
  }
  if (!IsLoopback(o.host) && setup.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("serve.host=", o.host,
                     " is not loopback: set a bearer token (serve.token=... or "
                     "KILN_SERVE_TOKEN) so that not anyone who reaches it can use it"));
  }
  auto ckpt = cfg.Get<config::NodePtr>("ckpt_path");
  if (ckpt.ok() && !(*ckpt)->is_null()) {
    KILN_ASSIGN_OR_RETURN(setup.ckpt, cfg.Get<std::string>("ckpt_path"));
  } else if (cfg.Get<std::string>("model.pretrained").value_or("").empty()) {
    // (with model.pretrained=DIR, the weights are that folder's)
    return absl::InvalidArgumentError(
        "kiln serve needs a model: ckpt_path=RUN/checkpoints/NAME.ckpt, run_dir=RUN, or "
        "model.pretrained=DIR (a Hugging Face folder)");
  }
  if (o.warmup_input.has_value()) {
    std::ifstream in(*o.warmup_input, std::ios::binary);
    if (!in)
      return absl::NotFoundError(absl::StrCat("serve.warmup_input: cannot read ", *o.warmup_input));
    setup.warmup =
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return setup;
}

// The model side of the server: the predictor and its batcher, set once loaded and warmed up
// (the HTTP side answers /healthz meanwhile), and the metrics both sides count into.
class ModelSlot {
 public:
  // Loads the checkpoint, answers the warm-up input, and starts the batcher; then ready().
  absl::Status Load(const config::Config& cfg, const ServeSetup& setup) {
    const ServeOptions& o = setup.o;
    PredictorOptions predictor_options;
    predictor_options.quantize = o.quantize;
    predictor_options.device = o.device;
    KILN_ASSIGN_OR_RETURN(predictor_, Predictor::FromConfig(cfg, setup.ckpt, predictor_options));
    if (setup.warmup.has_value()) {
      for (int64_t i = 0; i < o.warmup_runs; ++i) {
        if (predictor_->generates()) {
          KILN_RETURN_IF_ERROR(predictor_->Generate(*setup.warmup).status());
        } else {
          KILN_RETURN_IF_ERROR(predictor_->Predict(*setup.warmup).status());
        }
      }
    }
    BatcherOptions batching{o.max_batch, o.max_delay_ms, o.max_queue};
    std::lock_guard<std::mutex> lock(mu_);
    batcher_ = std::make_unique<Batcher>(*predictor_, batching,
                                         [this](int64_t n) { metrics_.CountBatch(n); });
    ready_.store(true);
    return absl::OkStatus();
  }
  bool ready() const { return ready_.load(); }
  // The batcher once ready, else nullptr.
  Batcher* batcher() {
    std::lock_guard<std::mutex> lock(mu_);
    return ready_.load() ? batcher_.get() : nullptr;
  }
  const Predictor& predictor() const { return *predictor_; }
  ServeMetrics& metrics() { return metrics_; }
  std::string MetricsText() {
    std::lock_guard<std::mutex> lock(mu_);
    return metrics_.Text(batcher_ ? batcher_->queue_depth() : 0);
  }
  // The batcher runs what is queued at once (before the HTTP side stops) ...
  void BeginStop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (batcher_) batcher_->BeginStop();
  }
  // ... and ends once no request thread can reach it.
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    batcher_.reset();
  }

 private:
  ServeMetrics metrics_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<Predictor> predictor_;
  std::mutex mu_;  // guards batcher_ while it is set after start-up
  std::unique_ptr<Batcher> batcher_;
};

// POST /v1/predict: the inputs decoded and prepared in the request's thread, then one place in
// the batcher's queue, then the answer as JSON.
void Predict(ModelSlot& model, const ServeOptions& o, const httplib::Request& req,
             httplib::Response& res) {
  auto fail = [&res](int status, const std::string& message) {
    res.status = status;
    res.set_content(ErrorJson(message), "application/json");
  };
  Batcher* b = model.batcher();
  if (b == nullptr) {
    res.set_header("Retry-After", "1");
    return fail(503, "the model is loading; try again shortly (GET /readyz says when)");
  }
  absl::StatusOr<std::vector<std::string>> inputs = RequestInputs(req);
  if (!inputs.ok()) return fail(400, std::string(inputs.status().message()));
  // Decoding and preprocessing run here, in the request's thread, concurrently with other
  // requests and the batch running now; an input the pipeline refuses never takes a place in
  // the queue.
  const Predictor& predictor = model.predictor();
  BatchRequest work;
  if (predictor.generates()) {
    work.prompts = *std::move(inputs);
  } else {
    for (size_t i = 0; i < inputs->size(); ++i) {
      absl::StatusOr<data::Example> example = predictor.Prepare((*inputs)[i]);
      if (!example.ok()) {
        std::string where = inputs->size() > 1 ? absl::StrCat("inputs[", i, "]: ") : "";
        return fail(HttpStatusOf(example.status()),
                    absl::StrCat(where, example.status().message()));
      }
      work.examples.push_back(*std::move(example));
    }
  }
  auto abandoned = std::make_shared<std::atomic<bool>>(false);
  std::optional<std::future<BatchAnswer>> future = b->Submit(std::move(work), abandoned);
  if (!future.has_value()) {
    res.set_header("Retry-After", "1");
    return fail(503, "the queue is full; try again shortly");
  }
  if (future->wait_for(std::chrono::milliseconds(o.request_timeout_ms)) !=
      std::future_status::ready) {
    abandoned->store(true);
    return fail(504,
                absl::StrCat("no answer within serve.request_timeout_ms=", o.request_timeout_ms));
  }
  BatchAnswer answer = future->get();
  res.set_header("X-Kiln-Batch-Size", std::to_string(answer.batch_size));
  absl::StatusOr<std::string> body = AnswerJson(predictor.model_name(), answer);
  if (!body.ok()) return fail(HttpStatusOf(body.status()), std::string(body.status().message()));
  res.set_content(*body, "application/json");
}

// POST /v1/completions (OpenAI's completions API): the prompts continued in the request's thread
// (the model taking one request at a time), answered as one JSON object or, with "stream": true,
// as server-sent events while the tokens come; a client that goes away stops the generation.
void Completions(ModelSlot& model, const httplib::Request& req, httplib::Response& res) {
  auto fail = [&res](int status, const std::string& message) {
    res.status = status;
    res.set_content(OpenAiErrorJson(message, status == 400   ? "invalid_request_error"
                                             : status == 503 ? "unavailable"
                                                             : "server_error"),
                    "application/json");
  };
  if (!model.ready()) {
    res.set_header("Retry-After", "1");
    return fail(503, "the model is loading; try again shortly (GET /readyz says when)");
  }
  const Predictor& predictor = model.predictor();
  if (!predictor.generates()) {
    return fail(400, absl::StrCat("the model ", predictor.model_name(),
                                  " does not generate text: POST its inputs to /v1/predict"));
  }
  absl::StatusOr<CompletionsCall> call = ParseCompletionsRequest(req.body);
  if (!call.ok()) return fail(400, std::string(call.status().message()));
  const std::string id = NewCompletionId();
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  const std::string name = predictor.model_name();
  if (!call->stream) {
    absl::StatusOr<std::vector<Completion>> done = predictor.Complete(call->request);
    if (!done.ok()) return fail(HttpStatusOf(done.status()), std::string(done.status().message()));
    model.metrics().CountBatch(static_cast<int64_t>(done->size()));
    res.set_content(CompletionJson(id, created, name, *done), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [&model, &predictor, call = *std::move(call), id, created, name](
                               size_t, httplib::DataSink& sink) {
        auto write = [&sink](const std::string& event) {
          return sink.is_writable() && sink.write(event.data(), event.size());
        };
        absl::StatusOr<std::vector<Completion>> done =
            predictor.Complete(call.request, [&](size_t index, const std::string& text) {
              return write(CompletionEvent(id, created, name, index, text, ""));
            });
        if (absl::IsCancelled(done.status())) return false;  // the client is gone
        if (!done.ok()) {
          write(ErrorEvent(std::string(done.status().message())));
        } else {
          model.metrics().CountBatch(static_cast<int64_t>(done->size()));
          for (size_t i = 0; i < done->size(); ++i)
            write(CompletionEvent(id, created, name, i, "", (*done)[i].finish_reason));
          if (call.include_usage) write(UsageEvent(id, created, name, *done));
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      });
}

// The server's connection handling: timeouts, body limit, niced worker threads, no Nagle, and
// the listening socket handed to `listen_socket` (to raise its backlog after the bind).
void ConfigureConnections(HttpServer& server, const ServeOptions& o, const HttpTimeouts& timeouts,
                          int* listen_socket) {
  server.new_task_queue = [n = o.http_threads, nice = o.http_nice] {
    return NicedThreadPool(static_cast<size_t>(n), static_cast<int>(nice));
  };
  server.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  // HttpServer runs the connections with `timeouts`; httplib also sets them on each accepted
  // socket.
  server.set_read_timeout(timeouts.read);
  server.set_write_timeout(timeouts.write);
  // Small answers go out at once (with Nagle's algorithm, the client's delayed ACK adds ~40 ms).
  server.set_tcp_nodelay(true);
  // Debian's libcpp-httplib is compiled with a listen backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG):
  // when dozens of clients connect at once, the kernel drops the handshakes beyond it and clients
  // wait a second or more to retry. httplib hands its listening socket to this callback before
  // listen(); listening again after the bind raises the backlog (Linux allows it).
  server.set_socket_options([listen_socket](socket_t sock) {
    httplib::default_socket_options(sock);
    *listen_socket = sock;
  });
}

// The endpoints, the bearer-token check before them, the error bodies of what httplib answers
// itself, and the per-request metrics and access log after them.
void AddRoutes(HttpServer& server, ModelSlot& model, const ServeSetup& setup,
               AccessLog& access_log) {
  server.set_pre_routing_handler([&setup](const httplib::Request& req, httplib::Response& res) {
    t_request_start = std::chrono::steady_clock::now();
    const std::string& token = setup.token;
    if (token.empty() || req.path == "/healthz" || req.path == "/readyz")
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + token)
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(ErrorJson("missing or wrong bearer token (Authorization: Bearer TOKEN)"),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [&model](const httplib::Request&, httplib::Response& res) {
    bool ready = model.ready();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "loading\n", "text/plain");
  });
  server.Get("/metrics", [&model](const httplib::Request&, httplib::Response& res) {
    res.set_content(model.MetricsText(), "text/plain; version=0.0.4");
  });
  server.Post("/v1/predict", [&model, &setup](const httplib::Request& req, httplib::Response& res) {
    Predict(model, setup.o, req, res);
  });
  server.Post("/v1/completions", [&model](const httplib::Request& req, httplib::Response& res) {
    Completions(model, req, res);
  });
  // Statuses httplib answers itself (413, 404, 400 of an unparsable request) get a message too.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message =
        res.status == 413   ? "the request body is larger than serve.max_body_bytes"
        : res.status == 404 ? absl::StrCat("no such endpoint: ", req.method, " ", req.path)
        : res.status == 400 ? "the request could not be read (malformed HTTP, a client silent for "
                              "serve.read_timeout_s, or a request not sent whole within "
                              "serve.request_read_timeout_s)"
                            : absl::StrCat("HTTP ", res.status);
    res.set_content(ErrorJson(message), "application/json");
  });
  server.set_logger([&model, &access_log](const httplib::Request& req,
                                          const httplib::Response& res) {
    double seconds = 0;  // a request httplib refused before routing (413) took no time of ours
    if (t_request_start.has_value()) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - *t_request_start)
                    .count();
      t_request_start.reset();
    }
    model.metrics().CountRequest(res.status, seconds);
    access_log.Write(req, res, seconds);
  });
}

// Binds host:port (port 0: any free one) and raises the listen backlog; the port bound.
absl::StatusOr<int> Bind(HttpServer& server, const ServeOptions& o, const int& listen_socket) {
  int port = static_cast<int>(o.port);
  if (port == 0) {
    port = server.bind_to_any_port(o.host.c_str());
  } else if (!server.bind_to_port(o.host.c_str(), port)) {
    port = -1;
  }
  if (port < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.host, ":", o.port, " (in use?)"));
  if (listen_socket >= 0 && ::listen(listen_socket, SOMAXCONN) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot raise the listen backlog: ", std::strerror(errno)));
  }
  return port;
}

// Until a stop signal (kiln::StopSignals: SIGINT, SIGTERM or SIGUSR1), handing freed memory back
// every 30 s: connection threads allocate from glibc's per-thread arenas, which keep what they
// free (KeepFreedMemoryForReuse), so RSS follows the live heap.
void WaitForStopSignal() {
  auto next_trim = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (StopSignals::Received() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() >= next_trim) {
      ReturnFreedMemory();
      next_trim = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
  }
}

absl::Status ServeCommand(run::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const ServeSetup setup, ReadSetup(ctx.cfg));
  const ServeOptions& o = setup.o;
  AccessLog access_log;
  KILN_RETURN_IF_ERROR(access_log.Open(o.access_log, ctx.output_dir));
  ConfigureProcess(static_cast<int>(o.threads), 1);

  ModelSlot model;
  HttpTimeouts timeouts;
  timeouts.read = std::chrono::microseconds(static_cast<int64_t>(o.read_timeout_s * 1e6));
  timeouts.request_read =
      std::chrono::microseconds(static_cast<int64_t>(o.request_read_timeout_s * 1e6));
  timeouts.max_per_client = static_cast<size_t>(o.max_connections_per_client);
  HttpServer server(timeouts);
  int listen_socket = -1;
  ConfigureConnections(server, o, timeouts, &listen_socket);
  AddRoutes(server, model, setup, access_log);
  KILN_ASSIGN_OR_RETURN(const int port, Bind(server, o, listen_socket));

  StopSignals signals;
  std::atomic<bool> listener_done{false};
  std::thread listener([&] {
    server.listen_after_bind();
    listener_done.store(true);
  });
  // httplib's stop() does nothing before the listener runs: a model that fails to load at once
  // would otherwise stop nothing and leave listen_after_bind() waiting forever.
  while (!server.is_running() && !listener_done.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("kiln serve: listening on http://%s:%d (model loading)\n", o.host.c_str(), port);
  std::fflush(stdout);

  // The model loads while /healthz already answers; /readyz says ready after the warm-up.
  absl::Status status = model.Load(ctx.cfg, setup);
  if (status.ok()) {
    Logger::Instance().Info(absl::StrCat("serving ", model.predictor().model_name(), " from ",
                                         model.predictor().weights(), " on http://", o.host, ":",
                                         port, " (max_batch ", o.max_batch, ", max_delay_ms ",
                                         o.max_delay_ms, ")"));
    std::printf("kiln serve: ready on http://%s:%d\n", o.host.c_str(), port);
    std::fflush(stdout);
    WaitForStopSignal();
    Logger::Instance().Info("stop signal: no new connections; answering the requests in flight");
  }
  // The batcher runs what is queued at once; httplib's stop closes the listening socket and lets
  // each worker finish its request.
  model.BeginStop();
  server.stop();
  listener.join();
  model.Stop();
  return status;
}

const bool kRegistered = [] {
  run::RegisterCommand("serve", ServeCommand);
  return true;
}();

}  // namespace
}  // namespace kiln::serve
