// `kiln serve` through the real binary on a free loopback port, serving a model trained in the
// test: answers equal to `kiln predict`'s for the same images (raw bytes, JSON base64 and
// multipart, from concurrent clients, so batches form), bad requests answered 4xx with a message,
// the bearer token, /metrics and the access log; a full queue answered 503 with Retry-After; and
// SIGTERM answering what is queued, then exit 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/serve/tiny_model.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ReadFile;
using testing::TempDir;

// A `kiln serve` process; killed by the destructor if the test did not stop it.
class Server {
 public:
  Server(const std::string& dir, const std::string& run_dir, std::vector<std::string> options)
      : port_(testing::FreeLoopbackPort()) {
    std::vector<std::string> argv = {KILN_BINARY, "serve", "run_dir=" + run_dir,
                                     "serve.port=" + std::to_string(port_), "hydra.run.dir=" + dir};
    argv.insert(argv.end(), options.begin(), options.end());
    pid_ = testing::StartInOwnGroup(argv);
  }
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::unique_ptr<httplib::Client> Client(const std::string& token = "") const {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client->set_connection_timeout(5);
    client->set_read_timeout(120);
    if (!token.empty()) client->set_bearer_token_auth(token.c_str());
    return client;
  }
  // Waits (at most ~60 s on a loaded machine) until /readyz says ready.
  bool WaitReady() const {
    auto client = Client();
    for (int i = 0; i < 600; ++i) {
      auto res = client->Get("/readyz");
      if (res && res->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // SIGTERM, then the exit status (-1 if it did not end within ~60 s).
  int Terminate() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

// A socket connected to the loopback address's `port`, or -1.
int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A client that sends `head`, then one more byte of its request every 200 ms (each inside the
// server's read timeout) for at most `max_seconds`; what the server sent back before it closed
// the connection, or nullopt if it was still open when the client gave up.
std::optional<std::string> DripUntilClosed(int port, const std::string& head, int max_seconds) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return std::nullopt;
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  std::string reply;
  for (int i = 0; i < max_seconds * 5; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buffer[4096];
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        ::close(fd);
        return reply;
      }
      reply.append(buffer, static_cast<size_t>(n));
      continue;
    }
    ::send(fd, "x", 1, MSG_NOSIGNAL);
  }
  ::close(fd);
  return std::nullopt;
}

// The niceness of each of a process's threads, by thread id (/proc/PID/task/TID/stat, field 19).
std::map<int, int> ThreadNiceness(pid_t pid) {
  std::map<int, int> out;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), error)) {
    std::string stat = ReadFile(task.path().string() + "/stat");
    size_t end = stat.rfind(')');
    if (end == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(end + 2), ' ');
    if (fields.size() > 16) out[std::stoi(task.path().filename().string())] = std::stoi(fields[16]);
  }
  return out;
}

nlohmann::json Json(const httplib::Result& res) {
  return nlohmann::json::parse(res->body, nullptr, false);
}

// The answer equals kiln predict's row: the same class, and probabilities equal up to the float
// rounding of another batch composition.
void ExpectSameAnswer(const nlohmann::json& served, const nlohmann::json& predicted,
                      const std::string& what, size_t classes = 10) {
  EXPECT_EQ(served["class_index"], predicted["class_index"]) << what;
  EXPECT_EQ(served["class"], predicted["class"]) << what;
  EXPECT_NEAR(served["probability"].get<double>(), predicted["probability"].get<double>(), 1e-5)
      << what;
  ASSERT_EQ(served["probabilities"].size(), classes) << what;
  EXPECT_NEAR(served["probabilities"][predicted["class_index"].get<int>()].get<double>(),
              predicted["probability"].get<double>(), 1e-5)
      << what;
}

int MetricValue(const std::string& metrics, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, name + " "))
      return std::stoi(std::string(line.substr(name.size() + 1)));
  }
  return -1;
}

TEST(ServeTest, AnswersAsKilnPredictDoesAndRefusesBadRequestsWithAMessage) {
  TempDir dir;
  testing::TinyModel model = testing::TrainTinyModel(KILN_BINARY, dir.path(), 8);
  ASSERT_EQ(model.kiln_predict.size(), 8u);
  Server server(dir.path() + "/serve", model.run_dir,
                {"serve.token=s3cret", "serve.max_body_bytes=200000", "serve.max_delay_ms=20"});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  std::vector<std::string> png;
  for (const auto& path : model.pngs) png.push_back(ReadFile(path));

  // Eight clients at once, raw PNG bodies.
  std::vector<std::future<httplib::Result>> pending;
  for (int i = 0; i < 8; ++i) {
    pending.push_back(std::async(std::launch::async, [&, i] {
      return server.Client("s3cret")->Post("/v1/predict", png[static_cast<size_t>(i)], "image/png");
    }));
  }
  for (int i = 0; i < 8; ++i) {
    httplib::Result res = pending[static_cast<size_t>(i)].get();
    ASSERT_TRUE(res) << "request " << i << " got no answer";
    ASSERT_EQ(res->status, 200) << res->body;
    nlohmann::json body = Json(res);
    EXPECT_EQ(body["model"], "mlp");
    ASSERT_EQ(body["predictions"].size(), 1u);
    ExpectSameAnswer(body["predictions"][0], model.kiln_predict[static_cast<size_t>(i)],
                     absl::StrCat("image ", i));
  }
  auto client = server.Client("s3cret");
  // JSON with base64 images, three in one request.
  nlohmann::json request = {{"inputs",
                             {{{"b64", absl::Base64Escape(png[3])}},
                              {{"b64", absl::Base64Escape(png[4])}},
                              {{"b64", absl::Base64Escape(png[5])}}}}};
  auto res = client->Post("/v1/predict", request.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ASSERT_EQ(Json(res)["predictions"].size(), 3u);
  for (int i = 0; i < 3; ++i)
    ExpectSameAnswer(Json(res)["predictions"][i], model.kiln_predict[3 + i], "json");
  // A multipart form with two files, answered in order.
  httplib::MultipartFormDataItems form = {{"file", png[6], "img6.png", "image/png"},
                                          {"file", png[7], "img7.png", "image/png"}};
  res = client->Post("/v1/predict", form);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ExpectSameAnswer(Json(res)["predictions"][0], model.kiln_predict[6], "multipart 0");
  ExpectSameAnswer(Json(res)["predictions"][1], model.kiln_predict[7], "multipart 1");

  // Bad requests: a 4xx with one message saying what is wrong.
  struct Bad {
    std::string body, type;
    int status;
    std::string says;
  };
  std::string not_png = png[0];
  not_png.replace(1, 3, "GIF");  // the magic number lies
  std::vector<Bad> bad = {
      {"{\"inputs\": [", "application/json", 400, "malformed JSON"},
      {"{\"inputs\": [5]}", "application/json", 400, "inputs[0] must be a string"},
      {"{\"inputs\": \"x\"}", "application/json", 400, "\"inputs\" must be a list"},
      {"{\"inputs\": [{\"b64\": \"***\"}]}", "application/json", 400,
       "inputs[0].b64 is not valid base64"},
      {"{\"wrong\": 1}", "application/json", 400, "with \"inputs\""},
      {"this is not an image", "image/png", 400, "cannot decode image"},
      {not_png, "image/png", 400, "cannot decode image"},
      {png[0].substr(0, png[0].size() / 2), "image/png", 400,
       "cannot decode PNG: the file ends before the image does"},
      {std::string(300000, 'x'), "image/png", 413, "larger than serve.max_body_bytes"},
  };
  for (const Bad& b : bad) {
    res = client->Post("/v1/predict", b.body, b.type.c_str());
    ASSERT_TRUE(res) << b.says;
    EXPECT_EQ(res->status, b.status) << b.says << ": " << res->body;
    EXPECT_TRUE(absl::StrContains(Json(res).value("error", ""), b.says)) << res->body;
  }
  // The token: none or a wrong one is 401; the probes need none.
  EXPECT_EQ(server.Client()->Post("/v1/predict", png[0], "image/png")->status, 401);
  EXPECT_EQ(server.Client("wrong")->Post("/v1/predict", png[0], "image/png")->status, 401);
  EXPECT_EQ(server.Client()->Get("/healthz")->status, 200);
  EXPECT_EQ(client->Get("/nothing/here")->status, 404);

  // The server counts a request in httplib's logger, which runs after the answer is written: a
  // client can read its answer before the count moves. Read /metrics once the refused requests
  // are counted (or give up after 10 s and let the assertions below say what is missing).
  for (int attempt = 0; attempt < 500; ++attempt) {
    res = client->Get("/metrics");
    if (res && MetricValue(res->body, "kiln_requests_total{code=\"413\"}") == 1 &&
        MetricValue(res->body, "kiln_requests_total{code=\"400\"}") == 8)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_TRUE(absl::StrContains(res->body, "kiln_requests_total{code=\"200\"}")) << res->body;
  EXPECT_EQ(MetricValue(res->body, "kiln_requests_total{code=\"400\"}"), 8) << res->body;
  EXPECT_EQ(MetricValue(res->body, "kiln_requests_total{code=\"413\"}"), 1) << res->body;
  EXPECT_GE(MetricValue(res->body, "kiln_batch_size_count"), 1);
  EXPECT_EQ(MetricValue(res->body, "kiln_queue_depth"), 0);
  // 8 + 3 + 2 images were batched (in however many batches); the 2 bodies that are no image were
  // refused before the queue.
  EXPECT_EQ(MetricValue(res->body, "kiln_batch_size_sum"), 13) << res->body;

  EXPECT_EQ(server.Terminate(), 0);
  // One JSON line per request: the 10 predictions, the 9 refused, 2 unauthorized, 2 more, metrics.
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(dir.path() + "/serve/access.jsonl"), '\n', absl::SkipEmpty());
  int predict_200 = 0, with_error = 0;
  for (const auto& line : lines) {
    nlohmann::json entry = nlohmann::json::parse(line);
    if (entry["path"] == "/v1/predict" && entry["status"] == 200) {
      ++predict_200;
      EXPECT_GE(entry["batch"].get<int>(), 1) << line;
    }
    if (entry.contains("error")) ++with_error;
  }
  EXPECT_EQ(predict_200, 10);
  EXPECT_EQ(with_error, 9 + 2 + 1);  // the bad requests, the refused tokens, the 404

  // The token given on the command line is in no file of the run folder (`.hydra/` shows ***), and
  // libpng's complaint about the truncated upload is a line of kiln's log.
  std::string log;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path() + "/serve")) {
    if (!entry.is_regular_file()) continue;
    std::string text = ReadFile(entry.path().string());
    EXPECT_EQ(text.find("s3cret"), std::string::npos) << entry.path() << " holds the token";
    if (entry.path().extension() == ".log") log += text;
  }
  EXPECT_TRUE(
      absl::StrContains(ReadFile(dir.path() + "/serve/.hydra/overrides.yaml"), "serve.token=***"));
  EXPECT_TRUE(absl::StrContains(log, "][kiln][WARNING] - ")) << log;
  EXPECT_TRUE(absl::StrContains(log, "cannot decode PNG: the file ends before the image does"))
      << log;
  EXPECT_FALSE(absl::StrContains(log, "libpng")) << log;
}

TEST(ServeTest, AFullQueueIs503AndSigtermAnswersWhatIsQueuedThenExitsZero) {
  TempDir dir;
  testing::TinyModel model = testing::TrainTinyModel(KILN_BINARY, dir.path(), 3);
  ASSERT_EQ(model.kiln_predict.size(), 3u);
  // Batches wait a minute for 64 inputs: two requests stay queued, filling the queue of 2.
  Server server(dir.path() + "/serve", model.run_dir,
                {"serve.max_batch=64", "serve.max_delay_ms=60000", "serve.max_queue=2"});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  std::vector<std::future<httplib::Result>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::async(std::launch::async, [&, i] {
      return server.Client()->Post("/v1/predict", ReadFile(model.pngs[static_cast<size_t>(i)]),
                                   "image/png");
    }));
  }
  auto client = server.Client();
  int depth = -1;
  for (int i = 0; i < 600 && depth != 2; ++i) {
    auto metrics = client->Get("/metrics");
    depth = metrics ? MetricValue(metrics->body, "kiln_queue_depth") : -1;
    if (depth != 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(depth, 2);
  auto res = client->Post("/v1/predict", ReadFile(model.pngs[2]), "image/png");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_TRUE(absl::StrContains(Json(res).value("error", ""), "queue is full")) << res->body;
  // SIGTERM: the two queued requests are answered (without waiting out the delay), then exit 0.
  EXPECT_EQ(server.Terminate(), 0);
  for (int i = 0; i < 2; ++i) {
    httplib::Result answer = queued[static_cast<size_t>(i)].get();
    ASSERT_TRUE(answer) << "queued request " << i << " got no answer";
    ASSERT_EQ(answer->status, 200) << answer->body;
    ExpectSameAnswer(Json(answer)["predictions"][0], model.kiln_predict[static_cast<size_t>(i)],
                     "queued");
  }
}

// A model that fails to load at once (no such file, a corrupt one) ends the server with one line
// and exit 2, every time: it used to race httplib's listener and, when it won, wait forever.
TEST(ServeTest, AMissingOrCorruptCheckpointIsOneLineAndExitTwo) {
  TempDir tmp;
  tmp.Write("corrupt.ckpt", "not a checkpoint");
  const std::string dir = tmp.path(), corrupt = dir + "/corrupt.ckpt";
  for (int i = 0; i < 5; ++i) {
    for (const std::string& ckpt : {dir + "/missing.ckpt", corrupt}) {
      testing::ProcessResult r =
          testing::RunProcess({KILN_BINARY, "serve", "ckpt_path=" + ckpt, "serve.port=0"});
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_TRUE(absl::StrContains(r.err, "kiln: error: " + ckpt)) << r.err;
      EXPECT_EQ(r.err.find("kiln: error:"), r.err.rfind("kiln: error:")) << r.err;
    }
  }
}

// A 1 s, 16-bit mono WAV at `rate`: a tone of `hz` from `offset` s to `offset` + 0.4 s.
std::string ToneWav(double hz, double offset, int rate) {
  std::string pcm;
  for (int i = 0; i < rate; ++i) {
    double t = static_cast<double>(i) / rate;
    double x = t >= offset && t < offset + 0.4 ? 0.4 * std::sin(2 * M_PI * hz * t)
                                               : 0.001 * ((i * 7919) % 13 - 6) / 6.0;
    int16_t v = static_cast<int16_t>(std::lround(x * 32767));
    pcm.push_back(static_cast<char>(v & 0xff));
    pcm.push_back(static_cast<char>((v >> 8) & 0xff));
  }
  auto le = [](uint32_t v, int bytes) {
    std::string out;
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return out;
  };
  const uint32_t size = static_cast<uint32_t>(pcm.size());
  return "RIFF" + le(36 + size, 4) + "WAVEfmt " + le(16, 4) + le(1, 2) + le(1, 2) +
         le(static_cast<uint32_t>(rate), 4) + le(static_cast<uint32_t>(rate) * 2, 4) + le(2, 2) +
         le(16, 2) + "data" + le(size, 4) + pcm;
}

// kiln predict's jsonl rows, in order.
std::vector<nlohmann::json> PredictRows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// kiln predict's rows for `input` with the run in `d`/run, written under `d`/predict.
std::vector<nlohmann::json> KilnPredict(const std::string& d, const std::string& input) {
  auto predict =
      testing::RunProcess({KILN_BINARY, "predict", "run_dir=" + d + "/run", "data.predict=" + input,
                           "+prediction_writer=jsonl", "hydra.run.dir=" + d + "/predict"});
  EXPECT_EQ(predict.exit_code, 0) << predict.err;
  return PredictRows(d + "/predict/predictions.jsonl");
}

// A click model (experiment=clicks_dlrm, small) answers raw Criteo lines, as text or JSON, with the
// probability kiln predict gives the same lines; a line of the wrong shape is 400 with a message.
TEST(ServeTest, AClickModelAnswersCriteoLinesAsKilnPredict) {
  TempDir dir;
  const std::string d = dir.path();
  auto made = testing::RunProcess(
      {KILN_PYTHON_EXE, std::string(KILN_SOURCE_DIR) + "/scripts/make_clicks_data.py", "--out",
       d + "/clicks", "--rows", "4000", "--test-rows", "20", "--vocab-scale", "0.01"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto train = testing::RunProcess(
      {KILN_BINARY, "train", "experiment=clicks_dlrm", "paths.data_dir=" + d,
       "data.num_embeddings_per_feature=500", "trainer.num_threads=1", "test=false",
       "trainer.enable_progress_bar=false", "hydra.run.dir=" + d + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(d + "/clicks/test.tsv"), '\n', absl::SkipEmpty());
  lines.resize(4);
  dir.Write("new.tsv", absl::StrJoin(lines, "\n") + "\n");
  std::vector<nlohmann::json> expected = KilnPredict(d, d + "/new.tsv");
  ASSERT_EQ(expected.size(), lines.size());

  Server server(d + "/serve", d + "/run", {});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  auto client = server.Client();
  for (size_t i = 0; i < lines.size(); ++i) {
    auto res = client->Post("/v1/predict", lines[i], "text/plain");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_NEAR(Json(res)["predictions"][0]["probability"].get<double>(),
                expected[i]["probability"].get<double>(), 1e-6)
        << lines[i];
  }
  nlohmann::json request = {{"inputs", lines}};
  auto res = client->Post("/v1/predict", request.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ASSERT_EQ(Json(res)["predictions"].size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_NEAR(Json(res)["predictions"][i]["probability"].get<double>(),
                expected[i]["probability"].get<double>(), 1e-6);
  }
  res = client->Post("/v1/predict", "1\t2\t3", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("the input line has 3 fields, expected 40"), std::string::npos)
      << res->body;
  EXPECT_EQ(server.Terminate(), 0);
}

// The data lines of a server-sent event stream, in order (without "data: ").
std::vector<std::string> EventData(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::StartsWith(event, "data: ")) out.emplace_back(event.substr(6));
  }
  return out;
}

// A small language model answers OpenAI's /v1/completions as `kiln predict` generates: whole or
// streamed (server-sent events whose pieces add up to the whole), with the prompt echoed, several
// prompts together, stop strings and token counts; requests it cannot take are 400 with OpenAI's
// error object, and a client that leaves mid-stream leaves the server answering.
TEST(ServeTest, ALanguageModelAnswersOpenAiCompletionsWholeAndStreamed) {
  TempDir dir;
  const std::string d = dir.path();
  std::string book;
  for (int i = 0; i < 60; ++i) book += "Call me Ishmael. Some years ago, never mind how long.\n";
  dir.Write("book/train.txt", book);
  dir.Write("book/val.txt", "Call me Ishmael. Some years ago.\n");
  const std::vector<std::string> lm = {"experiment=mobydick_gpt",
                                       "data.train=[" + d + "/book/train.txt]",
                                       "data.val=[" + d + "/book/val.txt]",
                                       "data.test=[" + d + "/book/val.txt]",
                                       "data.block_size=16",
                                       "data.batch_size=8",
                                       "model.dim=16",
                                       "model.depth=1",
                                       "model.heads=2",
                                       "model.mlp_dim=32",
                                       "trainer.num_threads=1"};
  auto command = [&](std::vector<std::string> argv, const std::vector<std::string>& more) {
    argv.insert(argv.end(), lm.begin(), lm.end());
    argv.insert(argv.end(), more.begin(), more.end());
    return testing::RunProcess(argv);
  };
  auto train = command({KILN_BINARY, "train"},
                       {"trainer.max_steps=40", "test=false", "trainer.enable_progress_bar=false",
                        "hydra.run.dir=" + d + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  auto greedy =
      command({KILN_BINARY, "predict"},
              {"ckpt_path=" + d + "/run/checkpoints/last.ckpt", "task.prompt=Call me",
               "task.max_tokens=12", "task.temperature=0", "hydra.run.dir=" + d + "/predict"});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  ASSERT_EQ(greedy.out.rfind("Call me", 0), 0u) << greedy.out;
  const std::string continuation =
      greedy.out.substr(7, greedy.out.size() - 8);  // without the prompt and kiln's newline
  ASSERT_GE(continuation.size(), 3u) << greedy.out;

  Server server(d + "/serve", d + "/run", {});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  auto client = server.Client();
  auto post = [&](const nlohmann::json& body) {
    auto res = client->Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(res);
    return res;
  };
  const nlohmann::json ask = {
      {"model", "anything"}, {"prompt", "Call me"}, {"max_tokens", 12}, {"temperature", 0}};
  auto res = post(ask);
  ASSERT_EQ(res->status, 200) << res->body;
  nlohmann::json whole = Json(res);
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(whole["choices"].size(), 1u);
  EXPECT_EQ(whole["choices"][0]["text"], continuation);
  EXPECT_EQ(whole["choices"][0]["index"], 0);
  const std::string finish = whole["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  EXPECT_GT(whole["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_LE(whole["usage"]["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(
      whole["usage"]["total_tokens"].get<int>(),
      whole["usage"]["prompt_tokens"].get<int>() + whole["usage"]["completion_tokens"].get<int>());
  nlohmann::json echo = ask;
  echo["echo"] = true;
  res = post(echo);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json(res)["choices"][0]["text"], "Call me" + continuation);

  // Streamed: the pieces, in order, are the whole text; then each choice's finish_reason, the
  // usage chunk asked for, and [DONE].
  nlohmann::json stream = ask;
  stream["stream"] = true;
  stream["stream_options"] = {{"include_usage", true}};
  res = post(stream);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  std::vector<std::string> events = EventData(res->body);
  ASSERT_GE(events.size(), 4u) << res->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  size_t pieces = 0;
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    nlohmann::json chunk = nlohmann::json::parse(events[i]);
    EXPECT_EQ(chunk["id"], nlohmann::json::parse(events[0])["id"]);  // one id for the stream
    ASSERT_EQ(chunk["choices"].size(), 1u) << events[i];
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null()) << events[i];
    streamed += chunk["choices"][0]["text"].get<std::string>();
    ++pieces;
  }
  EXPECT_EQ(streamed, continuation);
  EXPECT_GE(pieces, 2u) << "the text came in one piece, not as it was generated";
  nlohmann::json last = nlohmann::json::parse(events[events.size() - 3]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], finish);
  nlohmann::json usage = nlohmann::json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole["usage"]);

  // A stop string taken from the continuation: the text ends before it, finish_reason "stop".
  const std::string stop(1, continuation[1]);
  nlohmann::json stopped = ask;
  stopped["stop"] = stop;
  res = post(stopped);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json(res)["choices"][0]["text"], continuation.substr(0, continuation.find(stop)));
  EXPECT_EQ(Json(res)["choices"][0]["finish_reason"], "stop");
  stopped["stream"] = true;
  res = post(stopped);
  ASSERT_EQ(res->status, 200) << res->body;
  streamed.clear();
  for (const std::string& e : EventData(res->body)) {
    if (e == "[DONE]") break;
    streamed += nlohmann::json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, continuation.substr(0, continuation.find(stop)));

  // Several prompts at once: one choice each, in order; sampling with a seed repeats.
  nlohmann::json many = {{"prompt", {"Call me", "Some years ago"}},
                         {"max_tokens", 6},
                         {"temperature", 0.8},
                         {"top_p", 0.9},
                         {"seed", 5}};
  res = post(many);
  ASSERT_EQ(res->status, 200) << res->body;
  nlohmann::json first = Json(res);
  ASSERT_EQ(first["choices"].size(), 2u);
  EXPECT_EQ(first["choices"][1]["index"], 1);
  res = post(many);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json(res)["choices"], first["choices"]);

  // What it cannot take: 400 with OpenAI's error object naming the field.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "Call me", "n": 2})", "\"n\" is not supported"},
      {R"({"prompt": "Call me", "colour": 1})", "unknown field \"colour\""},
      {R"({"max_tokens": 3})", "\"prompt\" is missing"},
      {R"({"prompt": [1, 2, 3]})", "token ids"},
      {R"({"prompt": "Call me", "top_p": 0})", "\"top_p\" must be in (0, 1]"},
      {R"({"prompt": "Call me", "max_tokens": "ten"})", "\"max_tokens\" must be an integer"},
      {"{\"prompt\": ", "not JSON"},
  };
  for (const auto& [body, message] : bad) {
    res = client->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    nlohmann::json error = Json(res);
    ASSERT_TRUE(error.contains("error")) << res->body;
    EXPECT_NE(error["error"]["message"].get<std::string>().find(message), std::string::npos)
        << body << " -> " << res->body;
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  }

  // A client that leaves after the first event: the server goes on answering others.
  {
    const std::string body = R"({"prompt": "Call me", "max_tokens": 200, "stream": true})";
    int fd = ConnectLoopback(server.port());
    ASSERT_GE(fd, 0);
    const std::string request = absl::StrCat(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: ",
        body.size(), "\r\n\r\n", body);
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string got;
    char buffer[512];
    while (got.find("data: ") == std::string::npos) {
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      got.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    EXPECT_NE(got.find("data: "), std::string::npos) << got;
  }
  res = post(ask);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json(res)["choices"][0]["text"], continuation);
  EXPECT_EQ(server.Terminate(), 0);
}

// A keyword spotter (commands_kws's DS-CNN, tiny) serves WAV bodies as kiln predict labels the same
// files, from concurrent clients; WAVs whose header lies are 400 with a message.
TEST(ServeTest, AKeywordSpotterAnswersWavsAsKilnPredictAndRefusesLyingHeaders) {
  TempDir dir;
  const std::string d = dir.path();
  for (const auto& [name, hz] :
       std::vector<std::pair<std::string, double>>{{"go", 400}, {"stop", 2500}}) {
    for (int i = 0; i < 6; ++i)
      dir.Write("train/" + name + "/" + std::to_string(i) + ".wav",
                ToneWav(hz, 0.1 + 0.05 * i, 16000));
    dir.Write("val/" + name + "/0.wav", ToneWav(hz, 0.3, 16000));
  }
  // New files: other offsets and sample rates (the pipeline resamples to 16 kHz).
  std::vector<std::string> wavs = {ToneWav(400, 0.2, 22050), ToneWav(2500, 0.05, 8000),
                                   ToneWav(2500, 0.4, 16000), ToneWav(400, 0.5, 44100)};
  for (size_t i = 0; i < wavs.size(); ++i) dir.Write("new/" + std::to_string(i) + ".wav", wavs[i]);
  auto train = testing::RunProcess(
      {KILN_BINARY, "train", "experiment=commands_kws", "data.train=" + d + "/train",
       "data.val=" + d + "/val", "data.test=" + d + "/val", "data.classes=[go,stop]",
       "task.num_classes=2", "task.filler_classes=[]", "data.batch_size=4",
       "data.waveform_transforms=null", "data.feature_transforms=null", "model.channels=8",
       "model.blocks=1", "trainer.max_epochs=2", "trainer.num_threads=1", "test=false",
       "hydra.run.dir=" + d + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  auto predict = testing::RunProcess({KILN_BINARY, "predict", "run_dir=" + d + "/run",
                                      "data.predict=" + d + "/new", "+prediction_writer=jsonl",
                                      "hydra.run.dir=" + d + "/predict"});
  ASSERT_EQ(predict.exit_code, 0) << predict.err;
  std::map<std::string, nlohmann::json> expected;
  for (const auto& row : PredictRows(d + "/predict/predictions.jsonl")) expected[row["path"]] = row;
  ASSERT_EQ(expected.size(), wavs.size());

  Server server(d + "/serve", d + "/run", {"serve.max_delay_ms=20"});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  std::vector<std::future<httplib::Result>> pending;
  for (size_t i = 0; i < wavs.size(); ++i) {
    pending.push_back(std::async(std::launch::async, [&, i] {
      return server.Client()->Post("/v1/predict", wavs[i], "audio/wav");
    }));
  }
  for (size_t i = 0; i < wavs.size(); ++i) {
    httplib::Result res = pending[i].get();
    ASSERT_TRUE(res) << "wav " << i << " got no answer";
    ASSERT_EQ(res->status, 200) << res->body;
    ExpectSameAnswer(Json(res)["predictions"][0],
                     expected[d + "/new/" + std::to_string(i) + ".wav"], absl::StrCat("wav ", i),
                     2);
  }
  const std::string& wav = wavs[2];
  const size_t data = wav.find("data");
  std::string data_too_long = wav;
  data_too_long.replace(data + 4, 4, std::string("\xff\xff\xff\x0f", 4));
  std::string no_channels = wav;
  no_channels.replace(22, 2, std::string("\0\0", 2));
  struct Bad {
    std::string body, says;
  };
  std::vector<Bad> bad = {
      {data_too_long, "the audio: the WAV header says its data chunk holds 268435455 bytes"},
      {wav.substr(0, wav.size() / 2), "(truncated, or a header that lies)"},
      {no_channels, "the audio: cannot read audio"},
      {"RIFF1234WAVE", "the audio"},
      {"not audio at all", "the audio is not a WAV, FLAC or Ogg file"}};
  auto client = server.Client();
  for (const Bad& b : bad) {
    auto res = client->Post("/v1/predict", b.body, "audio/wav");
    ASSERT_TRUE(res) << b.says;
    EXPECT_EQ(res->status, 400) << b.says << ": " << res->body;
    EXPECT_TRUE(absl::StrContains(Json(res).value("error", ""), b.says)) << res->body;
  }
  EXPECT_EQ(server.Terminate(), 0);
}

// A text classifier (spam_bow, tiny) serves text bodies and JSON strings as kiln predict labels the
// same lines; a body that is not UTF-8 is 400.
TEST(ServeTest, ATextClassifierAnswersTextsAsKilnPredict) {
  TempDir dir;
  const std::string d = dir.path();
  auto jsonl = [](int n, int offset) {
    std::string out;
    for (int i = offset; i < offset + n; ++i) {
      out += i % 2 ? absl::StrCat("{\"text\": \"buy cheap pills now offer ", i % 5,
                                  "\", \"label\": \"spam\"}\n")
                   : absl::StrCat("{\"text\": \"meeting notes for the team ", i % 5,
                                  "\", \"label\": \"ham\"}\n");
    }
    return out;
  };
  dir.Write("train.jsonl", jsonl(40, 0));
  dir.Write("val.jsonl", jsonl(6, 40));
  const std::vector<std::string> texts = {"buy cheap pills now", "meeting notes for the team",
                                          "cheap team offer", "notes"};
  dir.Write("new.txt", absl::StrJoin(texts, "\n") + "\n");
  auto train = testing::RunProcess(
      {KILN_BINARY, "train", "experiment=spam_bow", "data.train=" + d + "/train.jsonl",
       "data.val=" + d + "/val.jsonl", "data.test=" + d + "/val.jsonl",
       "data.tokenizer.min_frequency=1", "data.batch_size=8", "model.dim=8",
       "model.ngram_buckets=64", "trainer.max_epochs=2", "trainer.num_threads=1", "test=false",
       "hydra.run.dir=" + d + "/run"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  std::vector<nlohmann::json> expected = KilnPredict(d, d + "/new.txt");
  ASSERT_EQ(expected.size(), texts.size());

  Server server(d + "/serve", d + "/run",
                {"serve.http_nice=7", "serve.read_timeout_s=1", "serve.request_read_timeout_s=2",
                 "serve.max_connections_per_client=5"});
  ASSERT_TRUE(server.WaitReady()) << "kiln serve did not become ready";
  auto client = server.Client();
  for (size_t i = 0; i < texts.size(); ++i) {
    auto res = client->Post("/v1/predict", texts[i], "text/plain");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    ExpectSameAnswer(Json(res)["predictions"][0], expected[i], absl::StrCat("text ", i), 2);
  }
  // The connection threads that answered run at serve.http_nice above the process's niceness; the
  // main thread (and the batch worker) stay at it.
  std::map<int, int> niceness = ThreadNiceness(server.pid());
  ASSERT_EQ(niceness.count(server.pid()), 1u);
  const int base = niceness[server.pid()];
  int lowered = 0;
  for (const auto& [tid, nice] : niceness) {
    EXPECT_TRUE(nice == base || nice == std::min(19, base + 7))
        << "thread " << tid << " at nice " << nice;
    lowered += nice == std::min(19, base + 7) && nice != base;
  }
  EXPECT_GE(lowered, 1) << "no connection thread lowered its priority";
  auto not_lm = client->Post("/v1/completions", R"({"prompt": "buy"})", "application/json");
  ASSERT_TRUE(not_lm);
  EXPECT_EQ(not_lm->status, 400);
  EXPECT_NE(not_lm->body.find("does not generate text: POST its inputs to /v1/predict"),
            std::string::npos)
      << not_lm->body;
  nlohmann::json request = {{"inputs", texts}};
  auto res = client->Post("/v1/predict", request.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ASSERT_EQ(Json(res)["predictions"].size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    ExpectSameAnswer(Json(res)["predictions"][i], expected[i], "json", 2);
  // Clients that send their headers or their body one byte at a time, each byte inside
  // serve.read_timeout_s, get 400 and are disconnected after serve.request_read_timeout_s (well
  // before the 30 s they would go on for); the server answers others meanwhile.
  const std::vector<std::string> drips = {"POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                                          "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                          "text/plain\r\nContent-Length: 100000\r\n\r\n"};
  std::vector<std::future<std::optional<std::string>>> dripping;
  for (const std::string& head : drips)
    dripping.push_back(std::async(std::launch::async,
                                  [&, head] { return DripUntilClosed(server.port(), head, 30); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  res = server.Client()->Post("/v1/predict", texts[0], "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  for (size_t i = 0; i < drips.size(); ++i) {
    std::optional<std::string> reply = dripping[i].get();
    ASSERT_TRUE(reply.has_value()) << "dripping client " << i << " was never disconnected";
    EXPECT_TRUE(absl::StartsWith(*reply, "HTTP/1.1 400")) << *reply;
    EXPECT_TRUE(absl::StrContains(*reply, "serve.request_read_timeout_s")) << *reply;
  }
  // Connections that send nothing hold connection threads: the client's sixth open connection at
  // most (serve.max_connections_per_client=5; the HTTP client may hold one or two already) is
  // answered 429 at once and closed, and once they close the client is served again.
  std::vector<int> idle;
  std::string refused;
  for (int i = 0; i < 6 && refused.empty(); ++i) {
    int fd = ConnectLoopback(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 300) > 0) {
      char buffer[1024];
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) refused.assign(buffer, static_cast<size_t>(n));
    }
  }
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 429")) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "too many connections from 127.0.0.1")) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "Retry-After: 1")) << refused;
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  res = server.Client()->Post("/v1/predict", texts[0], "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  res = client->Post("/v1/predict", std::string("caf\xc3", 4), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_FALSE(Json(res).value("error", "").empty()) << res->body;
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace kiln
