// Boolean environment variables of the distributed backend
// (TORCHNEURON_DIST_*; docs/env-vars.md).
#pragma once

#include <optional>

namespace torchneuron {

// `name`'s value: true for 1/true/yes/on, false for 0/false/no/off; nullopt
// when unset or empty, and, with a warning naming the accepted values, for
// anything else (the caller's default then applies).
std::optional<bool> env_flag(const char* name);

}  // namespace torchneuron
