// What the files of kiln's Python extension share: kiln's failed Status as kiln.KilnError, and
// kiln's code run without the GIL with LibTorch's exceptions made KilnErrors too.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"

namespace kiln::python {

// A failed absl::Status, raised in Python as kiln.KilnError (a ValueError) with the same message.
struct StatusError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void Check(const absl::Status& status) {
  if (!status.ok()) throw StatusError(std::string(status.message()));
}
template <typename T>
T Take(absl::StatusOr<T> value) {
  Check(value.status());
  return *std::move(value);
}

// Runs kiln's code without the GIL (other Python threads run meanwhile). A KilnError it raises
// passes as it is; any other C++ exception (LibTorch's c10::Error: a tensor of the wrong shape,
// ...) becomes a KilnError saying `what` and the exception's first line, never a RuntimeError
// with a C++ backtrace.
template <typename F>
auto Released(const std::string& what, F&& body) {
  try {
    pybind11::gil_scoped_release release;
    return body();
  } catch (const StatusError&) {
    throw;
  } catch (const std::exception& e) {
    throw StatusError(absl::StrCat(what, ": ", ErrorLine(e.what())));
  }
}

}  // namespace kiln::python
