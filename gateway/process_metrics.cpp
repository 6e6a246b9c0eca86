// Process metrics read from /proc at scrape time (see process_metrics.hpp).
#include "gateway/process_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace sluice {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

template <class T>
bool parse_number(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size();
}

double count_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the descriptor of this listing
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid ...": the command name ends at the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::vector<std::string_view> fields;  // fields[0] is field 3 (state)
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty()) {
    const auto start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const auto end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  }
  auto field = [&](std::size_t number) { return fields[number - 3]; };
  if (fields.size() < 24 - 2) return std::nullopt;
  ProcStat stat;
  if (!parse_number(field(14), stat.utime_ticks) || !parse_number(field(15), stat.stime_ticks) ||
      !parse_number(field(22), stat.start_ticks) || !parse_number(field(24), stat.rss_pages)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<double> parse_boot_time(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (line.starts_with("btime ")) {
      long long seconds = 0;
      if (parse_number(line.substr(6), seconds)) return static_cast<double>(seconds);
      return std::nullopt;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

ProcessStats read_process_stats() {
  ProcessStats stats;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (auto stat = parse_proc_stat(read_file("/proc/self/stat")); stat && ticks > 0) {
    stats.cpu_seconds = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks;
    stats.resident_memory_bytes = static_cast<double>(stat->rss_pages) * page;
    if (auto boot = parse_boot_time(read_file("/proc/stat"))) {
      stats.start_time_seconds = *boot + static_cast<double>(stat->start_ticks) / ticks;
    }
  }
  stats.open_fds = count_open_fds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    stats.max_fds = limit.rlim_cur == RLIM_INFINITY ? 1e15 : static_cast<double>(limit.rlim_cur);
  }
  return stats;
}

std::string render_process_metrics(const ProcessStats& s) {
  std::string out;
  auto family = [&out](std::string_view name, std::string_view type, std::string_view help,
                       double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         s.cpu_seconds);
  family("process_open_fds", "gauge", "Number of open file descriptors.", s.open_fds);
  family("process_max_fds", "gauge", "Maximum number of open file descriptors.", s.max_fds);
  family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         s.resident_memory_bytes);
  family("process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.", s.start_time_seconds);
  return out;
}

}  // namespace sluice
