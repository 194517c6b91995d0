// A timeline of a step's parts, for measurement only: with TANDEM_STEP_TRACE=FILE in the
// environment, every process that records appends "PID WHAT START_NS END_NS [BYTES]" lines to FILE, in
// CLOCK_MONOTONIC nanoseconds, which processes on one machine share, so that the head's waits and
// a worker's graphs on the same machine line up (bench/trace_summary.py reads them).
#pragma once

#include <cstdint>

namespace tandem {

// Appends one line; nothing when tracing is off (TANDEM_STEP_TRACE unset or not appendable, as
// found at the process's first call). `what` is one word; `bytes`, when not 0, follows
// the times as a fifth field (what a copy moved).
void step_trace(const char* what, uint64_t start_ns, uint64_t end_ns, uint64_t bytes = 0);
// Now on the clock step_trace's lines use.
uint64_t step_trace_now();

}  // namespace tandem
