#include "csrc/distributed/EnvFlag.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

namespace torchneuron {

std::optional<bool> env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string s(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  TORCH_WARN("torchneuron: ", name, "=", s,
             " is not one of 1, true, yes, on, 0, false, no, off; using the default");
  return std::nullopt;
}

}  // namespace torchneuron
