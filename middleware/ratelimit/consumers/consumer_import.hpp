// POST /consumers/import: NDJSON, one consumer a line (a PUT body plus "id"),
// read as it streams in (one piece and one line at a time, never the whole
// body) and written to the store by one worker, at most kImportInFlight
// lines at once on its connection (in order, so a later line for the same id
// wins). A bad line fails alone, with its 1-based number and why; a line over
// 1 MiB fails without being held; a blank line is skipped. The answer:
// {"created", "replaced", "unchanged", "failed": [{"line", "reason"}] (the
// first kMaxListedFailures), "failed_count"}. A body cut short (the
// connection lost) ends the import where it was: every whole line before was
// applied, the partial one was not.
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
