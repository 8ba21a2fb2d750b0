// The inputs of one `kiln serve` prediction request, as httplib parsed it: each part of a
// multipart form, or a JSON body {"inputs": [...]} / {"input": ...} whose items are texts or
// {"b64": "..."} (a file's bytes), or else the raw body as one input. fuzz/serve_request_fuzzer.cc
// runs httplib's request parsing and this on any bytes.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::serve {

// The request's inputs, or an InvalidArgument error (a 400) saying what is wrong with it.
absl::StatusOr<std::vector<std::string>> RequestInputs(const httplib::Request& req);

}  // namespace kiln::serve
