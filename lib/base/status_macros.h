// Early-return helpers for absl::Status / absl::StatusOr, used across kiln's layers:
//   KILN_RETURN_IF_ERROR(file.Write(...));
//   KILN_ASSIGN_OR_RETURN(int epochs, cfg.Get<int>("trainer.max_epochs"));
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KILN_STATUS_CONCAT_INNER(a, b) a##b
#define KILN_STATUS_CONCAT(a, b) KILN_STATUS_CONCAT_INNER(a, b)

#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (false)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = *std::move(tmp)

#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_STATUS_CONCAT(kiln_statusor_, __LINE__), lhs, expr)
