#include "lib/serve/serve_options.h"

namespace kiln::serve {

const OptionBinding<ServeOptions>& ServeBinding() {
  using O = ServeOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("host", &O::host, "address to listen on (anything but loopback needs a token)",
                 NonEmpty())
          .Field("port", &O::port, "TCP port (0: any free port, printed at start)",
                 InRange(0, 65535))
          .Field(
              "token", &O::token,
              "bearer token clients must send (null: $KILN_SERVE_TOKEN, or none; shown as *** in "
              "stored and printed configs, and a command line is visible to other users: prefer "
              "$KILN_SERVE_TOKEN)")
          .Secret()
          .Field("max_batch", &O::max_batch, "inputs per forward pass at most (1: no batching)",
                 AtLeast(1))
          .Field("max_delay_ms", &O::max_delay_ms,
                 "how long a request waits for others to batch with (0: none; batches take what "
                 "queued meanwhile)",
                 AtLeast(0))
          .Field("max_queue", &O::max_queue, "requests waiting at most; more get 503", AtLeast(1))
          .Field("request_timeout_ms", &O::request_timeout_ms,
                 "a request not answered by then gets 504", AtLeast(1))
          .Field("max_body_bytes", &O::max_body_bytes, "larger request bodies get 413", AtLeast(1))
          .Field("read_timeout_s", &O::read_timeout_s, "a client silent this long is disconnected",
                 GreaterThan(0))
          .Field("request_read_timeout_s", &O::request_read_timeout_s,
                 "a client that has not sent a whole request (headers and body) this long after "
                 "its first byte gets 400 and is disconnected",
                 GreaterThan(0))
          .Field("http_threads", &O::http_threads, "connections served at once", AtLeast(1))
          .Field("max_connections_per_client", &O::max_connections_per_client,
                 "connections one client address may have open; more get 429 at once (0: no limit)",
                 AtLeast(0))
          .Field("http_nice", &O::http_nice,
                 "niceness the connection threads add to their own (Linux): the model's thread "
                 "runs first when both wait for a core (0: same priority)",
                 InRange(0, 19))
          .Field("threads", &O::threads, "LibTorch intra-op threads (0: every core)", AtLeast(0))
          .Field("quantize", &O::quantize,
                 "dynamic_int8: Linear layers run as int8, as kiln export quantize=dynamic_int8 "
                 "(null: float)",
                 OneOf({"dynamic_int8"}))
          .Field("device", &O::device,
                 "where the model runs and batches: cpu, cuda or auto (null: the run's "
                 "trainer.accelerator, as the command line sets it)",
                 OneOf({"cpu", "cuda", "auto"}))
          .Field("access_log", &O::access_log,
                 "JSONL access log (relative: in the run directory; -: stdout; null: none)")
          .Field("warmup_input", &O::warmup_input,
                 "a file answered before /readyz says ready (null: none)")
          .Field("warmup_runs", &O::warmup_runs, "how many times", AtLeast(0)));
  return *binding;
}

namespace {

// serve.token is stored and printed as *** (`.hydra/`, --cfg, --info) by every kiln command, so
// this declaration lives in kiln_core, which every kiln loads: libkiln_serve loads for serving
// only.
const bool kServeSecretsRegistered = [] {
  RegisterSecretOptions("serve", ServeBinding().schema());
  return true;
}();

}  // namespace

}  // namespace kiln::serve
