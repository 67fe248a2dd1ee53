// How much memory this process may still take, so that work too large for the machine is refused
// up front with its estimate, instead of being killed (or swapping) minutes into it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace stretch {

// The bytes this process can still allocate: the kernel's estimate of memory available without
// swapping (MemAvailable in /proc/meminfo), or less when a cgroup v2 memory limit
// (/sys/fs/cgroup/memory.max minus memory.current) leaves less. nullopt when neither can be read
// (then nothing is refused). STRETCH_MEMORY_LIMIT=BYTES, when set, caps it further (for tests,
// and for users sharing a machine).
std::optional<int64_t> AvailableMemoryBytes();

// "1.50 GiB", "12.0 MiB", "512 B".
std::string HumanBytes(int64_t bytes);

}  // namespace stretch
