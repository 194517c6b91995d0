#include "plan/gguf_file.h"

#include <algorithm>
#include <mutex>

#include "ggml.h"
#include "gguf.h"

namespace tandem::plan {
namespace {

// ggml reports why a GGUF is rejected only through its global log callback, so the callback is
// swapped while one file is opened; the mutex keeps concurrent opens from mixing messages.
std::mutex log_mutex;

struct LogCapture {
  std::string first_error;
  static void callback(ggml_log_level level, const char* text, void* user) {
    if (level != GGML_LOG_LEVEL_ERROR) return;
    auto* self = static_cast<LogCapture*>(user);
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    // "gguf_init_from_file_impl: invalid magic ..." -> "invalid magic ..."
    if (auto colon = line.find(": "); colon != std::string::npos && line.compare(0, 5, "gguf_") == 0) {
      line = line.substr(colon + 2);
    }
    // The first error is the specific one; ggml follows it with generic ones ("failed to read header").
    if (!line.empty() && self->first_error.empty()) self->first_error = line;
  }
};

}  // namespace

void GgufDeleter::operator()(gguf_context* ctx) const { gguf_free(ctx); }

Result<GgufPtr> open_gguf_header(const std::string& path) {
  LogCapture capture;
  gguf_context* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    ggml_log_callback prev_cb = nullptr;
    void* prev_ud = nullptr;
    ggml_log_get(&prev_cb, &prev_ud);
    ggml_log_set(&LogCapture::callback, &capture);
    gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
    ctx = gguf_init_from_file(path.c_str(), params);
    ggml_log_set(prev_cb, prev_ud);
  }
  if (ctx == nullptr) {
    std::string why = capture.first_error.empty() ? "not a valid GGUF file" : capture.first_error;
    return Status::invalid_argument(path + ": " + why);
  }
  return GgufPtr(ctx);
}

Result<uint64_t> gguf_get_uint(const gguf_context* ctx, const std::string& key, uint64_t fallback) {
  const int64_t id = gguf_find_key(ctx, key.c_str());
  if (id < 0) return fallback;
  enum gguf_type type = gguf_get_kv_type(ctx, id);
  const void* data = nullptr;
  if (type == GGUF_TYPE_ARRAY) {
    // Per-layer arrays (e.g. feed_forward_length): the largest entry sizes the model.
    type = gguf_get_arr_type(ctx, id);
    const size_t n = gguf_get_arr_n(ctx, id);
    if (n == 0 || type == GGUF_TYPE_STRING || type == GGUF_TYPE_ARRAY) {
      return Status::invalid_argument("key '" + key + "' is an array that holds no numbers");
    }
    uint64_t best = 0;
    const auto* base = static_cast<const uint8_t*>(gguf_get_arr_data(ctx, id));
    for (size_t i = 0; i < n; ++i) {
      uint64_t v = 0;
      switch (type) {
        case GGUF_TYPE_UINT8:
          v = base[i];
          break;
        case GGUF_TYPE_INT8:
          v = static_cast<uint64_t>(std::max<int8_t>(0, reinterpret_cast<const int8_t*>(base)[i]));
          break;
        case GGUF_TYPE_UINT16:
          v = reinterpret_cast<const uint16_t*>(base)[i];
          break;
        case GGUF_TYPE_INT16:
          v = static_cast<uint64_t>(std::max<int16_t>(0, reinterpret_cast<const int16_t*>(base)[i]));
          break;
        case GGUF_TYPE_UINT32:
          v = reinterpret_cast<const uint32_t*>(base)[i];
          break;
        case GGUF_TYPE_INT32:
          v = static_cast<uint64_t>(std::max<int32_t>(0, reinterpret_cast<const int32_t*>(base)[i]));
          break;
        case GGUF_TYPE_UINT64:
          v = reinterpret_cast<const uint64_t*>(base)[i];
          break;
        case GGUF_TYPE_INT64:
          v = static_cast<uint64_t>(std::max<int64_t>(0, reinterpret_cast<const int64_t*>(base)[i]));
          break;
        default:
          return Status::invalid_argument("key '" + key + "' holds an array of non-integers");
      }
      best = std::max(best, v);
    }
    return best;
  }
  data = gguf_get_val_data(ctx, id);
  switch (type) {
    case GGUF_TYPE_UINT8:
      return uint64_t{*static_cast<const uint8_t*>(data)};
    case GGUF_TYPE_UINT16:
      return uint64_t{*static_cast<const uint16_t*>(data)};
    case GGUF_TYPE_UINT32:
      return uint64_t{*static_cast<const uint32_t*>(data)};
    case GGUF_TYPE_UINT64:
      return *static_cast<const uint64_t*>(data);
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: {
      int64_t v = type == GGUF_TYPE_INT8    ? *static_cast<const int8_t*>(data)
                  : type == GGUF_TYPE_INT16 ? *static_cast<const int16_t*>(data)
                  : type == GGUF_TYPE_INT32 ? *static_cast<const int32_t*>(data)
                                            : *static_cast<const int64_t*>(data);
      if (v < 0) return Status::invalid_argument("key '" + key + "' is negative (" + std::to_string(v) + ")");
      return static_cast<uint64_t>(v);
    }
    default:
      return Status::invalid_argument("key '" + key + "' has type " + gguf_type_name(type) + ", expected an integer");
  }
}

Result<double> gguf_get_float(const gguf_context* ctx, const std::string& key, double fallback) {
  const int64_t id = gguf_find_key(ctx, key.c_str());
  if (id < 0) return fallback;
  switch (gguf_get_kv_type(ctx, id)) {
    case GGUF_TYPE_FLOAT32:
      return double{gguf_get_val_f32(ctx, id)};
    case GGUF_TYPE_FLOAT64:
      return gguf_get_val_f64(ctx, id);
    default: {
      auto v = gguf_get_uint(ctx, key, 0);
      if (!v.is_ok()) return Status::invalid_argument("key '" + key + "' is not a number");
      return static_cast<double>(v.value());
    }
  }
}

std::string gguf_get_string(const gguf_context* ctx, const std::string& key) {
  const int64_t id = gguf_find_key(ctx, key.c_str());
  if (id < 0 || gguf_get_kv_type(ctx, id) != GGUF_TYPE_STRING) return "";
  return gguf_get_val_str(ctx, id);
}

bool gguf_get_flag(const gguf_context* ctx, const std::string& key) {
  const int64_t id = gguf_find_key(ctx, key.c_str());
  return id >= 0 && gguf_get_kv_type(ctx, id) == GGUF_TYPE_BOOL && gguf_get_val_bool(ctx, id);
}

}  // namespace tandem::plan
