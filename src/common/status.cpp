#include "common/status.h"

namespace tandem {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok:
      return "ok";
    case StatusCode::invalid_argument:
      return "invalid argument";
    case StatusCode::not_found:
      return "not found";
    case StatusCode::unavailable:
      return "unavailable";
    case StatusCode::resource_exhausted:
      return "resource exhausted";
    case StatusCode::cancelled:
      return "cancelled";
    case StatusCode::internal:
      return "internal error";
  }
  return "unknown";
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace tandem
