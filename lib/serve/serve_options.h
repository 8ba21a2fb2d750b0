// kiln serve's options (`serve.*`, configs/serve.yaml), declared once. In kiln_core, not in
// libkiln_serve (which `kiln` loads for that command only), so that serve.token, a secret, is
// known to every command that stores or prints a config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lib/registry/options.h"

namespace kiln::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int64_t port = 8080;
  std::optional<std::string> token;
  int64_t max_batch = 64;
  double max_delay_ms = 0;
  int64_t max_queue = 256;
  int64_t request_timeout_ms = 10000;
  int64_t max_body_bytes = 10 << 20;
  double read_timeout_s = 5;
  double request_read_timeout_s = 60;
  int64_t http_threads = 96;
  int64_t max_connections_per_client = 32;
  int64_t http_nice = 10;
  int64_t threads = 0;
  std::optional<std::string> quantize;
  std::optional<std::string> device;
  std::optional<std::string> access_log = "access.jsonl";
  std::optional<std::string> warmup_input;
  int64_t warmup_runs = 3;
};

const OptionBinding<ServeOptions>& ServeBinding();

}  // namespace kiln::serve
