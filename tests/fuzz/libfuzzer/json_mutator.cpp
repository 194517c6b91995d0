// A libFuzzer custom mutator for the targets whose input is a JSON request body. Byte mutations
// alone seldom turn `"role": "user"` into `"role": 5` (the bytes around it must change together)
// and mostly make the body invalid JSON; half of the mutations here parse the input and change its
// structure instead: a value replaced by one of another type, a member or element removed, a node
// copied over another, a key of the document added to an object. The other half, and any input
// that does not parse, get libFuzzer's own byte mutations. Linked into the libFuzzer build only
// (the replay test has no use for it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using nlohmann::json;

void collect(json& j, std::vector<json*>& nodes, std::vector<std::string>& keys) {
  nodes.push_back(&j);
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      keys.push_back(k);
      collect(v, nodes, keys);
    }
  } else if (j.is_array()) {
    for (json& v : j) collect(v, nodes, keys);
  }
}

// Replaces `j` by a value of some type: the values a field of the wrong type is likely to hold.
json other_value(std::minstd_rand& rng) {
  static const json kValues = json::parse(R"([null, true, false, 0, -1, 1.5, 1e300, "", "x", "text", "user",
                                               [], {}, [""], [{}]])");
  return kValues[rng() % kValues.size()];
}

bool mutate(json& doc, std::minstd_rand& rng) {
  std::vector<json*> nodes;
  std::vector<std::string> keys;
  collect(doc, nodes, keys);
  json& n = *nodes[rng() % nodes.size()];
  switch (rng() % 5) {
    case 0:
      n = other_value(rng);
      return true;
    case 1:  // remove a member or an element
      if (n.is_object() && !n.empty()) {
        auto it = n.begin();
        std::advance(it, rng() % n.size());
        n.erase(it);
        return true;
      }
      if (n.is_array() && !n.empty()) {
        n.erase(n.begin() + static_cast<std::ptrdiff_t>(rng() % n.size()));
        return true;
      }
      return false;
    case 2: {  // copy another node over this one (a block where a string was, a turn inside a turn)
      const json copy = *nodes[rng() % nodes.size()];
      n = copy;
      return true;
    }
    case 3:  // repeat an element of an array
      if (n.is_array() && !n.empty()) {
        const json copy = n[rng() % n.size()];
        n.insert(n.begin() + static_cast<std::ptrdiff_t>(rng() % (n.size() + 1)), copy);
        return true;
      }
      return false;
    default:  // give an object a key seen elsewhere in the document
      if (n.is_object() && !keys.empty()) {
        n[keys[rng() % keys.size()]] = rng() % 2 ? other_value(rng) : *nodes[rng() % nodes.size()];
        return true;
      }
      return false;
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  json doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  for (int tries = 0; tries < 4 && !mutate(doc, rng);) ++tries;
  const std::string out = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
