// Status and Result<T>: the one error type of tandem.
//
// A Status is either ok or carries a code and a message that says, in words, what went wrong
// and where ("tiny.gguf: truncated: tensor data needs 4.2 MB, the file has 1.0 MB"). Anything
// that comes from a file, the network, a peer or a user is reported through these, never by
// an assert or an exception across a component boundary.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tandem {

enum class StatusCode {
  ok = 0,
  invalid_argument,    // the caller's input is wrong (a flag, a request field, a file's content)
  not_found,           // a file, key, model or peer that should exist does not
  unavailable,         // a peer or resource is down or unreachable; retrying may help
  resource_exhausted,  // memory, slots, quota or disk ran out
  cancelled,           // the operation was cancelled by its caller
  internal,            // a bug or an unexpected failure of a dependency
};

const char* status_code_name(StatusCode code);

class Status {
 public:
  Status() = default;  // ok

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
  static Status not_found(std::string msg) { return {StatusCode::not_found, std::move(msg)}; }
  static Status unavailable(std::string msg) { return {StatusCode::unavailable, std::move(msg)}; }
  static Status resource_exhausted(std::string msg) { return {StatusCode::resource_exhausted, std::move(msg)}; }
  static Status cancelled(std::string msg) { return {StatusCode::cancelled, std::move(msg)}; }
  static Status internal(std::string msg) { return {StatusCode::internal, std::move(msg)}; }

  bool is_ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "context: message"; ok stays ok.
  Status with_context(const std::string& context) const;

  // "ok" or "<code name>: <message>".
  std::string to_string() const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

// Either a value or a non-ok Status. Accessing value() of an error is a programming error.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.is_ok() && "a Result built from a Status must hold an error");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(is_ok());
    return *value_;
  }
  const T& value() const& {
    assert(is_ok());
    return *value_;
  }
  T&& value() && {
    assert(is_ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tandem

// Returns early from the calling function when `expr` (a Status) is not ok.
#define TANDEM_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::tandem::Status tandem_status_ = (expr);           \
    if (!tandem_status_.is_ok()) return tandem_status_; \
  } while (0)
