#include "engine/text_stream.h"

#include <algorithm>

namespace tandem::engine {

size_t utf8_complete_prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  size_t i = s.size();
  int back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++back;
  }
  if (i == 0) return back == 0 ? 0 : s.size();  // only continuation bytes: invalid, pass through
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  int need = 1;
  if ((lead & 0xE0) == 0xC0)
    need = 2;
  else if ((lead & 0xF0) == 0xE0)
    need = 3;
  else if ((lead & 0xF8) == 0xF0)
    need = 4;
  // An ASCII or invalid lead byte never waits for more.
  if (need == 1) return s.size();
  return back + 1 >= need ? s.size() : i - 1;
}

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

bool TextStream::append(std::string_view piece) {
  if (stopped_) return true;
  // A stop string can only complete inside the new bytes plus the max_stop_-1 bytes before them.
  const size_t from = text_.size() > max_stop_ ? text_.size() - max_stop_ : 0;
  text_.append(piece);
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut == std::string::npos) return false;
  text_.resize(std::max(cut, sent_));
  stopped_ = true;
  return true;
}

size_t TextStream::safe_end() const {
  size_t end = text_.size();
  if (!stopped_) {
    // Hold back the longest tail that is a proper prefix of some stop string.
    for (const auto& s : stops_) {
      for (size_t n = std::min(s.size() - 1, text_.size()); n > 0; --n) {
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          end = std::min(end, text_.size() - n);
          break;
        }
      }
    }
  }
  end = utf8_complete_prefix(std::string_view(text_).substr(0, end));
  return std::max(end, sent_);
}

std::string TextStream::take_ready() {
  const size_t end = safe_end();
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string TextStream::take_rest() {
  const size_t end = std::max(utf8_complete_prefix(text_), sent_);
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

}  // namespace tandem::engine
