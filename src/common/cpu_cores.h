// How many CPU threads compute should use by default.
#pragma once

namespace tandem {

// Physical cores this process may run on: one per (package, core) among the CPUs of its affinity
// mask, so that hyper-threads do not count twice (llama.cpp's own default). Falls back to the
// number of CPUs it may run on, and is at least 1.
int physical_cores();

}  // namespace tandem
