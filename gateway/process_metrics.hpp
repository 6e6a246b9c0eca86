// The standard Prometheus process metrics (process_resident_memory_bytes,
// process_open_fds, process_max_fds, process_cpu_seconds_total,
// process_start_time_seconds), read from /proc/self when /metrics is scraped.
// Parsing is kept apart from reading so that it can be tested on fixed text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct ProcessStats {
  double resident_memory_bytes = 0;
  double cpu_seconds = 0;         // user + system
  double start_time_seconds = 0;  // since the Unix epoch
  double open_fds = 0;
  double max_fds = 0;  // the soft RLIMIT_NOFILE
};

// The fields of /proc/<pid>/stat that the metrics need, in clock ticks / pages.
struct ProcStat {
  unsigned long long utime_ticks = 0;  // field 14
  unsigned long long stime_ticks = 0;  // field 15
  unsigned long long start_ticks = 0;  // field 22, since boot
  long long rss_pages = 0;             // field 24
};

// Parses the text of /proc/<pid>/stat (the command name may hold spaces and parentheses).
std::optional<ProcStat> parse_proc_stat(std::string_view text);
// The boot time (the `btime` line of /proc/stat), seconds since the epoch.
std::optional<double> parse_boot_time(std::string_view proc_stat_text);

// Reads /proc/self/stat, /proc/stat, /proc/self/fd and the descriptor limit.
// Fields that cannot be read stay 0.
ProcessStats read_process_stats();

// The five families in Prometheus text format, with HELP and TYPE lines.
std::string render_process_metrics(const ProcessStats& stats);

}  // namespace sluice
