// Incremental output text of one request: stop strings (also when they straddle tokens) and
// UTF-8-safe deltas. Pure logic, no libllama; not thread-safe (one per request, on the decode thread).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops = {});

  // Appends the bytes of one token. Returns true when the text now contains a stop string: the
  // text is cut just before it and nothing after it is ever emitted.
  bool append(std::string_view piece);

  // The text that can be emitted now and was not before: it never ends inside a UTF-8 sequence
  // nor inside what could still become a stop string.
  std::string take_ready();

  // At the end of generation: everything not yet emitted except an incomplete UTF-8 sequence
  // at the very end (dropped: it can never be completed).
  std::string take_rest();

  // The stop string that ended the text; "" while none did.
  const std::string& matched_stop() const { return matched_; }

  // Everything emitted so far.
  std::string_view emitted() const { return std::string_view(text_).substr(0, sent_); }

 private:
  size_t safe_end() const;

  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string text_;  // all text so far, cut at a stop string
  size_t sent_ = 0;   // bytes of text_ already handed out
  bool stopped_ = false;
  std::string matched_;
};

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace tandem::engine
