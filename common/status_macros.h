// Early-return helpers for absl::Status and absl::StatusOr (Abseil 20220623
// ships none).
#ifndef PSYNC_COMMON_STATUS_MACROS_H_
#define PSYNC_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PSYNC_CONCAT_INNER_(a, b) a##b
#define PSYNC_CONCAT_(a, b) PSYNC_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define PSYNC_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::absl::Status psync_status_ = (expr);       \
    if (!psync_status_.ok()) return psync_status_; \
  } while (0)

// `lhs = value of expr`, or returns its status if it is not OK.
#define PSYNC_ASSIGN_OR_RETURN(lhs, expr) \
  PSYNC_ASSIGN_OR_RETURN_IMPL_(PSYNC_CONCAT_(psync_statusor_, __LINE__), lhs, expr)

#define PSYNC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // PSYNC_COMMON_STATUS_MACROS_H_
