// The second pass over a configuration its section readers have built: it
// resolves the names routes use into indexes of Config::upstreams and
// Config::limits and makes the checks that span sections (overlapping
// listeners, unknown plan names, a cost above a bucket's capacity). A check
// is skipped where the section it depends on could not be read, so that one
// mistake gives one error. Once the whole configuration is valid, it adds the
// warnings about setups that are valid but probably not what was meant.
#pragma once

#include "gateway/config/config.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/yaml_reader.hpp"

namespace sluice::config {

void resolve(YamlReader& r, const ReadNotes& notes, Config& c);

// Two listeners cannot share a port on overlapping addresses ("0.0.0.0" and
// "::" overlap with every address). Port 0 picks a free port: never a conflict.
bool listeners_overlap(const HostPort& a, const HostPort& b);

}  // namespace sluice::config
