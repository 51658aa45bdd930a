// Host memory available to this process (see host_memory.h).
#include "core/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace vt {

namespace {

// The first integer of a file ("max" or a missing file: -1).
int64_t read_number(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return -1;
  try {
    return std::stoll(s);
  } catch (...) {
    return -1;
  }
}

int64_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream in(line.substr(13));
      int64_t kib = -1;
      in >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
  }
  return -1;
}

// Room left under this process's cgroup limit, -1 when there is none.
int64_t cgroup_room() {
  // v2: /sys/fs/cgroup is this process's cgroup inside a container (cgroup namespace);
  // otherwise /proc/self/cgroup names it.
  std::string rel, rel_v1;
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("0::", 0) == 0) rel = line.substr(3);
      const size_t m = line.find(":memory:");
      if (m != std::string::npos) rel_v1 = line.substr(m + 8);
    }
  }
  for (const std::string& dir : {std::string("/sys/fs/cgroup") + rel, std::string("/sys/fs/cgroup")}) {
    const int64_t limit = read_number((dir + "/memory.max").c_str());
    const int64_t used = read_number((dir + "/memory.current").c_str());
    if (limit > 0 && used >= 0) return std::max<int64_t>(0, limit - used);
  }
  for (const std::string& dir : {"/sys/fs/cgroup/memory" + rel_v1, std::string("/sys/fs/cgroup/memory")}) {
    const int64_t limit = read_number((dir + "/memory.limit_in_bytes").c_str());
    const int64_t used = read_number((dir + "/memory.usage_in_bytes").c_str());
    if (limit > 0 && limit < (int64_t{1} << 60) && used >= 0) return std::max<int64_t>(0, limit - used);
  }
  return -1;
}

}  // namespace

int64_t host_available_bytes() {
  const int64_t avail = meminfo_available(), room = cgroup_room();
  if (avail < 0) return room;
  if (room < 0) return avail;
  return std::min(avail, room);
}

}  // namespace vt
