// POST /consumers/import: NDJSON, one consumer a line (a PUT body plus "id"),
// read as it streams in (one piece and one line at a time, never the whole
// body). The import runs on the admin listener's thread, never on a worker:
// it reads the configuration in force from its call, parses each line there,
// and writes through a Redis connection of its own, opened for the import
// and closed after it, at most kImportInFlight lines at once (in order, so a
// later line for the same id wins), and at most kImportInFlight lines taken
// in one turn of the admin thread (which also accepts every connection). The workers only forget the keys that
// changed. A bad line fails alone, with its 1-based number and why; a line
// over 1 MiB fails without being held; a blank line is skipped. A line whose
// write was sent but not answered (a timeout, the connection lost) is
// "unknown", not failed: Redis may have applied it, and importing it again is
// harmless (a line already in the store is "unchanged"). The answer:
// {"created", "replaced", "unchanged", "failed": [{"line", "reason"}],
// "failed_count", "unknown": [{"line", "reason"}], "unknown_count"} (each list
// the first kMaxListedFailures). A body cut short (the connection lost) ends
// the import where it was: every whole line before was applied, the partial
// one was not.
#pragma once

#include <memory>

#include "gateway/admin/admin_routes.hpp"
#include "middleware/ratelimit/consumers/consumer_worker.hpp"

namespace sluice {

inline constexpr std::size_t kImportInFlight = 64;
inline constexpr std::size_t kMaxImportLine = 1024 * 1024;
inline constexpr std::size_t kMaxListedFailures = 1000;

void add_consumer_import(AdminRoutes& routes, std::shared_ptr<ConsumerWorkers> workers);

}  // namespace sluice
