#include "datapath/self_check.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "datapath/interpose.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

constexpr uint32_t bit(Interposed w) { return 1u << static_cast<uint32_t>(w); }

// The calls ggml makes from inside its own libraries, on a CPU backend. Returns the bits seen.
uint32_t calls_through_ggml(std::string* why) {
  ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
  if (cpu == nullptr) {
    *why = "ggml offers no CPU backend to run the check on";
    return 0;
  }
  ggml_init_params params{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
  ggml_tensor* b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
  ggml_tensor* sum = ggml_add(ctx, a, a);
  ggml_set_input(a);
  ggml_set_output(sum);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
  // The scheduler's graph: its result is left for the scheduler to allocate (and free).
  ggml_context* sched_ctx = ggml_init(params);
  ggml_tensor* product = ggml_mul(sched_ctx, a, a);
  ggml_set_output(product);
  uint32_t seen = 0;
  if (buf == nullptr) {
    *why = "cannot allocate a CPU buffer for the check";
  } else {
    const float in[4] = {1, 2, 3, 4};
    float out[4] = {};
    set_interposer_canary(true);
    ggml_backend_tensor_set_async(cpu, a, in, 0, sizeof in);    // -> synchronize, tensor_set
    ggml_backend_tensor_copy_async(cpu, cpu, a, b);             // -> synchronize, tensor_copy
    ggml_backend_tensor_get_async(cpu, b, out, 0, sizeof out);  // -> tensor_get
    ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, sum);
    ggml_cgraph* sched_graph = ggml_new_graph(sched_ctx);
    ggml_build_forward_expand(sched_graph, product);
    seen |= interposer_calls_seen();
    set_interposer_canary(false);
    ggml_backend_sched_t sched = ggml_backend_sched_new(&cpu, nullptr, 1, 16, false, false);
    set_interposer_canary(true);
    // The scheduler: its run, each split's launch, then the compute buffer freed with it.
    const ggml_status st = sched != nullptr ? ggml_backend_sched_graph_compute(sched, sched_graph) : GGML_STATUS_FAILED;
    if (sched != nullptr) ggml_backend_sched_free(sched);
    seen |= interposer_calls_seen();
    ggml_backend_graph_compute(cpu, graph);  // -> graph_compute_async
    seen |= interposer_calls_seen();
    set_interposer_canary(false);
    if (st != GGML_STATUS_SUCCESS) *why = "ggml's scheduler failed the check's graph";
    if (out[3] != 4) *why = "the check's copy did not arrive (read " + std::to_string(out[3]) + ", wrote 4)";
    ggml_backend_buffer_free(buf);
  }
  ggml_free(sched_ctx);
  ggml_free(ctx);
  ggml_backend_free(cpu);
  return seen;
}

Status run_check() {
  std::vector<std::string> wrong;
  for (uint32_t i = 0; i < static_cast<uint32_t>(Interposed::count); ++i) {
    const char* name = kInterposedNames[i];
    void* resolved = ::dlsym(RTLD_DEFAULT, name);
    if (resolved != interposer_address(static_cast<Interposed>(i))) {
      Dl_info info{};
      const bool named = resolved != nullptr && ::dladdr(resolved, &info) != 0 && info.dli_fname != nullptr;
      wrong.push_back(std::string(name) + " resolves to " +
                      (resolved == nullptr ? std::string("nothing")
                       : named             ? std::string("the definition in ") + info.dli_fname
                                           : std::string("another definition")));
    } else if (::dlsym(RTLD_NEXT, name) == nullptr) {
      wrong.push_back(std::string(name) + " has no definition in ggml's libraries to forward to");
    }
  }
  std::string why;
  const uint32_t seen = calls_through_ggml(&why);
  if (!why.empty()) return Status::internal("ggml interposition self-check: " + why);
  const Interposed through_ggml[] = {Interposed::tensor_set,    Interposed::tensor_get,
                                     Interposed::tensor_copy,   Interposed::buffer_free,
                                     Interposed::graph_compute, Interposed::graph_compute_async,
                                     Interposed::synchronize,   Interposed::sched_graph_compute_async};
  for (Interposed w : through_ggml) {
    if ((seen & bit(w)) == 0) {
      wrong.push_back(std::string(kInterposedNames[static_cast<uint32_t>(w)]) + " is not reached by ggml's own calls");
    }
  }
  if (wrong.empty()) return Status::ok();
  std::string list;
  for (const std::string& w : wrong) list += (list.empty() ? "" : "; ") + w;
  return Status::internal(
      "ggml interposition self-check failed: " + list +
      ". tandem's split data path would be bypassed (inputs never written, or written twice); this "
      "build of tandem or of ggml does not let the executable replace ggml's functions (built with "
      "-Bsymbolic, LTO or hidden visibility?). Rebuild against the pinned llama.cpp as the README does");
}

}  // namespace

Status check_interposition() {
  // Once per process: its own calls pass through the hooks installed after it (a later component's
  // check would be counted as the work of a step).
  static const Status checked = run_check();
  return checked;
}

}  // namespace tandem::datapath
