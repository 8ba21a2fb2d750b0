// libFuzzer target: the HTTP request path of `kiln serve`: any bytes as a client's request through
// httplib's own request processing (request line, headers, chunked and multipart bodies; kiln's
// body limit) to the /v1/predict handler, which decodes the inputs as kiln serve does
// (RequestInputs in lib/serve/request_inputs.cc: multipart parts, JSON texts and base64, raw
// bodies), and to the /v1/completions handler, which reads OpenAI's completions request
// (ParseCompletionsRequest in lib/serve/completions.cc) and writes an answer from its prompts. The
// answer is written to a stream that keeps nothing.
#include <httplib.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "lib/serve/completions.h"
#include "lib/serve/request_inputs.h"

namespace {

// The fuzz input as a connection: reads give its bytes, writes are dropped.
class BytesStream : public httplib::Stream {
 public:
  BytesStream(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, size_ - at_);
    std::memcpy(ptr, data_ + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char*, size_t size) override { return static_cast<ssize_t>(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return 0; }

 private:
  const char* data_;
  size_t size_, at_ = 0;
};

class FuzzServer : public httplib::Server {
 public:
  FuzzServer() {
    set_payload_max_length(10 << 20);  // serve.max_body_bytes' default
    Post("/v1/predict", [](const httplib::Request& req, httplib::Response& res) {
      auto inputs = kiln::serve::RequestInputs(req);
      if (!inputs.ok()) {
        res.status = 400;
        return;
      }
      size_t total = 0;
      for (const auto& input : *inputs) total += input.size();
      if (total > req.body.size() + 64) __builtin_trap();  // inputs come from the body
      res.set_content("{}", "application/json");
    });
    Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      auto call = kiln::serve::ParseCompletionsRequest(req.body);
      if (!call.ok()) {
        res.status = 400;
        res.set_content(kiln::serve::OpenAiErrorJson(std::string(call.status().message()),
                                                     "invalid_request_error"),
                        "application/json");
        return;
      }
      if (call->request.prompts.empty()) __builtin_trap();  // a prompt is required
      // The prompts echoed back as their completions: any bytes through the JSON writers.
      std::vector<kiln::Completion> done;
      for (const std::string& prompt : call->request.prompts)
        done.push_back({prompt, "stop", 1, 1});
      res.set_content(kiln::serve::CompletionJson("cmpl-x", 0, "m", done) +
                          kiln::serve::CompletionEvent("cmpl-x", 0, "m", 0, done[0].text, "") +
                          kiln::serve::UsageEvent("cmpl-x", 0, "m", done),
                      "application/json");
    });
  }
  bool Process(BytesStream& stream) {
    bool closed = false;
    return process_request(stream, /*close_connection=*/true, closed, nullptr);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzServer* server = new FuzzServer;
  BytesStream stream(data, size);
  server->Process(stream);
  return 0;
}
