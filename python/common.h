// What the files of kiln's Python extension share: kiln's failed Status as kiln.KilnError.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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

}  // namespace kiln::python
