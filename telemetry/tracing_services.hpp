// Tracing composed around the other worker services: every worker's chain
// gains an observer that writes a recorded request's spans (otlp_json.hpp)
// and hands them to the process's one exporter (span_exporter.hpp). Worker 0
// keeps the exporter's settings current, reports its counts in
// sluice_tracing_spans_total and sluice_tracing_queue_spans, and sends what
// is queued at shutdown.
#pragma once

#include <memory>

#include "gateway/worker_services.hpp"

namespace sluice {

std::shared_ptr<WorkerServicesFactory> with_tracing(std::shared_ptr<WorkerServicesFactory> inner);

}  // namespace sluice
