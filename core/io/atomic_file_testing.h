// Test seam of AtomicFile (atomic_file.h): not part of fjit's API, for tests only.
//
// With set_fail_save_after_bytes(K), every AtomicFile made afterwards stores the first K bytes
// and then fails as a full disk would (ENOSPC), so tests can check that a failed save (a
// checkpoint's, say) leaves the previous file intact and no temporary file behind.
#pragma once

#include <cstdint>
#include <optional>

namespace fjit::testing {

// Process-wide; std::nullopt (the default) turns the failure off. Thread-safe.
void set_fail_save_after_bytes(std::optional<uint64_t> bytes);

}  // namespace fjit::testing
