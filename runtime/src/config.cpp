// Reads the environment once: which cores are visible, how much memory each
// has, and whether launches block. Parsing is strict so that a typo fails
// loudly (nrtErrorInvalidConfiguration) instead of silently using defaults.
#include "config.hpp"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "testing.hpp"

namespace neuronrt::detail {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool is_blank(const char* value) { return value == nullptr || trim(value).empty(); }

// Whole non-negative decimal number below 1e6 (core ids and counts).
bool parse_small_uint(const std::string& s, long* out) {
  if (s.empty() || s.size() > 6) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool parse_visible_cores(const std::string& text, std::vector<int>* cores,
                         std::string* why) {
  cores->clear();
  std::set<long> seen;
  size_t start = 0;
  const std::string s = trim(text);
  if (s.empty()) {
    *why = "the list is empty";
    return false;
  }
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = trim(s.substr(start, comma - start));
    long lo = 0, hi = 0;
    const size_t dash = item.find('-');
    bool ok;
    if (dash == std::string::npos) {
      ok = parse_small_uint(item, &lo);
      hi = lo;
    } else {
      ok = parse_small_uint(trim(item.substr(0, dash)), &lo) &&
           parse_small_uint(trim(item.substr(dash + 1)), &hi);
    }
    if (!ok) {
      *why = "'" + item + "' is not a core index or range";
      return false;
    }
    if (hi < lo) {
      *why = "range '" + item + "' is descending";
      return false;
    }
    for (long c = lo; c <= hi; ++c) {
      if (!seen.insert(c).second) {
        *why = "core " + std::to_string(c) + " is listed twice";
        return false;
      }
      if (static_cast<int>(seen.size()) > kMaxCores) {
        *why = "more than " + std::to_string(kMaxCores) + " cores";
        return false;
      }
      cores->push_back(static_cast<int>(c));
    }
    start = comma + 1;
  }
  return true;
}

bool parse_core_count(const std::string& text, int* count) {
  long v = 0;
  if (!parse_small_uint(trim(text), &v) || v < 1 || v > kMaxCores) return false;
  *count = static_cast<int>(v);
  return true;
}

bool parse_memory_size(const std::string& text, size_t* bytes) {
  const std::string s = trim(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  const std::string unit = lower(trim(s.substr(i)));
  if (number.empty() || number == "." ||
      number.find('.') != number.rfind('.')) {
    return false;
  }
  int shift;
  if (unit.empty() || unit == "b") shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
  else return false;

  if (number.find('.') == std::string::npos) {
    // Exact integer arithmetic for whole numbers.
    if (number.size() > 19) return false;
    errno = 0;
    const unsigned long long v = std::strtoull(number.c_str(), nullptr, 10);
    if (errno != 0 || v == 0) return false;
    if (shift > 0 && v > (UINT64_MAX >> shift)) return false;
    *bytes = static_cast<size_t>(v << shift);
    return true;
  }
  const double v = std::strtod(number.c_str(), nullptr) * std::ldexp(1.0, shift);
  if (!(v >= 1.0) || v >= 1.8e19) return false;
  *bytes = static_cast<size_t>(v);
  return true;
}

size_t read_mem_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t result = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      result = static_cast<size_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return result;
}

size_t capped_capacity(size_t requested, size_t mem_available, int cores) {
  if (mem_available == 0 || cores <= 0) return requested;
  size_t cap = static_cast<size_t>(static_cast<double>(mem_available) * 0.9) /
               static_cast<size_t>(cores);
  cap -= cap % kCapacityGranule;
  if (cap < kCapacityGranule) cap = kCapacityGranule;  // keep the device usable
  return requested < cap ? requested : cap;
}

Config make_config(const char* visible_cores, const char* num_cores,
                   const char* device_memory, const char* launch_blocking,
                   size_t mem_available, const char* kernel_threads,
                   const char* local_world_size, const char* local_rank) {
  Config c;
  int local_processes = 0;
  if (!is_blank(local_world_size) && parse_core_count(local_world_size, &local_processes)) {
    c.local_processes = local_processes;
  }
  auto fail = [&c](const std::string& message) {
    c.ok = false;
    c.error = message;
    c.physical_cores.clear();
    return c;
  };
  if (!is_blank(visible_cores)) {
    // NEURON_RT_VISIBLE_CORES wins over NEURON_RT_NUM_CORES.
    std::string why;
    if (!parse_visible_cores(visible_cores, &c.physical_cores, &why)) {
      return fail(std::string("NEURON_RT_VISIBLE_CORES='") + visible_cores +
                  "' is invalid (" + why +
                  "): expected a core index ('1'), a range ('0-3') or a "
                  "comma-separated list of them ('0,2'), at most " +
                  std::to_string(kMaxCores) + " cores");
    }
  } else if (!is_blank(num_cores)) {
    int n = 0;
    if (!parse_core_count(num_cores, &n)) {
      return fail(std::string("NEURON_RT_NUM_CORES='") + num_cores +
                  "' is invalid: expected a whole number of cores from 1 to " +
                  std::to_string(kMaxCores));
    }
    for (int i = 0; i < n; ++i) c.physical_cores.push_back(i);
  } else {
    const int n = c.local_processes > 2 ? c.local_processes : 2;
    for (int i = 0; i < n; ++i) c.physical_cores.push_back(i);
  }
  int rank = 0;
  // LOCAL_RANK 0 parses as a count of 0, which parse_core_count refuses.
  if (!is_blank(local_rank) && (trim(local_rank) == "0" || parse_core_count(local_rank, &rank)) &&
      rank < c.core_count()) {
    c.default_device = rank;
  }
  if (!is_blank(device_memory)) {
    if (!parse_memory_size(device_memory, &c.requested_memory)) {
      return fail(std::string("TORCHNEURON_DEVICE_MEMORY='") + device_memory +
                  "' is invalid: expected a positive size per core such as "
                  "'512MiB', '2GiB' or a byte count like '1048576' (units B, "
                  "KiB, MiB, GiB, TiB; KB, MB, GB, TB mean the same powers of "
                  "1024; case-insensitive)");
    }
  }
  if (!is_blank(kernel_threads) && !parse_core_count(kernel_threads, &c.kernel_threads)) {
    return fail(std::string("TORCHNEURON_KERNEL_THREADS='") + kernel_threads +
                "' is invalid: expected a whole number of threads from 1 to " +
                std::to_string(kMaxCores));
  }
  // Every local process may fill all of its cores.
  c.capacity = capped_capacity(c.requested_memory, mem_available,
                               c.core_count() * c.local_processes);
  c.capped = c.capacity < c.requested_memory;
  if (launch_blocking) {
    const std::string v = lower(trim(launch_blocking));
    c.launch_blocking = v == "1" || v == "true" || v == "yes" || v == "on";
  }
  return c;
}

namespace {

// The current configuration. Replaced only by the test hook; replaced
// configurations are kept (never freed) so references stay valid.
std::atomic<const Config*> g_config{nullptr};
std::mutex g_config_mu;

const Config* load_from_environment() {
  return new Config(make_config(std::getenv("NEURON_RT_VISIBLE_CORES"),
                                std::getenv("NEURON_RT_NUM_CORES"),
                                std::getenv("TORCHNEURON_DEVICE_MEMORY"),
                                std::getenv("NEURON_LAUNCH_BLOCKING"),
                                read_mem_available(),
                                std::getenv("TORCHNEURON_KERNEL_THREADS"),
                                std::getenv("LOCAL_WORLD_SIZE"), std::getenv("LOCAL_RANK")));
}

std::vector<const Config*>& retired_configs() {
  static auto* retired = new std::vector<const Config*>();
  return *retired;
}

}  // namespace

const Config& config() {
  const Config* c = g_config.load(std::memory_order_acquire);
  if (c != nullptr) [[likely]] return *c;
  std::lock_guard<std::mutex> lock(g_config_mu);
  c = g_config.load(std::memory_order_acquire);
  if (c == nullptr) {
    c = load_from_environment();
    g_config.store(c, std::memory_order_release);
  }
  return *c;
}

}  // namespace neuronrt::detail

namespace neuronrt::testing {

void reload_config() {
  using namespace neuronrt::detail;
  std::lock_guard<std::mutex> lock(g_config_mu);
  const Config* old = g_config.exchange(load_from_environment(), std::memory_order_acq_rel);
  if (old) retired_configs().push_back(old);
}

}  // namespace neuronrt::testing
