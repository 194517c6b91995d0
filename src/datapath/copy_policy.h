// The head's policy for the scheduler's copies, as data: which mechanism may take a copy, in which
// order, from what is known about it before any mechanism runs.
//
// ggml's scheduler moves each split's inputs with `ggml_backend_tensor_copy`; the head's session
// (datapath/head_session.h) classifies each such copy once (`CopyFacts`) and offers it to the
// routes `kCopyPolicy` lists for those facts, in the table's order. A route's mechanism may still
// decline (a result that is no cast of a step input, an input that does not fit the slots, a
// mechanism the placement turned off); the next route then gets it, and ggml's own copy is always
// last. No ggml here: a test walks the table case by case (tests/datapath/copy_policy_test.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem::datapath {

// What the copy interposer knows about one copy.
struct CopyFacts {
  bool in_run = false;       // inside the session's run of the scheduler: a split's input
  bool from_worker = false;  // the source lies in an RPC server's buffer (a worker's result)
  bool to_worker = false;    // the destination does
  bool host_input = false;   // the source is host memory holding no weights (a step input)
};

enum class CopyRoute : uint8_t {
  cast_here,        // a worker's f32 cast of a step input, made from the head's own bytes (LocalCasts),
                    // then placed as the step input it is
  defer_to_launch,  // a worker's result into the head's GPU, read when the split launches (LocalInputs)
  relay,            // a worker's result into another worker, read once per run (RpcWrites::relay_result)
  worker_slot,      // a step input into a worker, pointed at the head's slot there (RpcWrites::redirect_input)
  local_queue,      // a step input into the head's GPU, queued or slotted (LocalInputs::copy)
  ggml,             // ggml's own copy; a step input's write to a worker may still be queued (RpcWrites::write)
};

// When a rule applies: each fact must be as given, or `any`.
enum class Need : uint8_t { any, yes, no };

struct CopyRule {
  CopyRoute route;
  Need in_run, from_worker, to_worker, host_input;
};

// The policy, in the order the routes are tried. ggml's own copy takes whatever is left.
inline constexpr CopyRule kCopyPolicy[] = {
    {CopyRoute::cast_here, Need::yes, Need::yes, Need::any, Need::any},
    {CopyRoute::defer_to_launch, Need::yes, Need::yes, Need::no, Need::any},
    {CopyRoute::relay, Need::yes, Need::yes, Need::yes, Need::any},
    {CopyRoute::worker_slot, Need::yes, Need::any, Need::yes, Need::yes},
    {CopyRoute::local_queue, Need::yes, Need::any, Need::any, Need::yes},
    {CopyRoute::ggml, Need::any, Need::any, Need::any, Need::any},
};
inline constexpr size_t kCopyRoutes = sizeof kCopyPolicy / sizeof kCopyPolicy[0];

constexpr bool meets(Need need, bool fact) { return need == Need::any || (need == Need::yes) == fact; }

constexpr bool applies(const CopyRule& r, const CopyFacts& f) {
  return meets(r.in_run, f.in_run) && meets(r.from_worker, f.from_worker) && meets(r.to_worker, f.to_worker) &&
         meets(r.host_input, f.host_input);
}

// The routes a copy with `facts` is offered, in order: `count` of `routes`, ggml's own last.
struct CopyRoutes {
  std::array<CopyRoute, kCopyRoutes> routes{};
  size_t count = 0;
  const CopyRoute* begin() const { return routes.data(); }
  const CopyRoute* end() const { return routes.data() + count; }
};

constexpr CopyRoutes classify(const CopyFacts& facts) {
  CopyRoutes out;
  for (const CopyRule& r : kCopyPolicy) {
    if (applies(r, facts)) out.routes[out.count++] = r.route;
  }
  return out;
}

}  // namespace tandem::datapath
