// Where libnghttp2's sessions (client connections and HTTP/2 upstreams) get
// their memory: a stream's state, each frame queued, the buffers of the
// header fields it decodes. nghttp2 allocates and frees a few dozen of these
// per stream; from the heap, under hundreds of streams in flight, most missed
// malloc's per-thread cache. Here blocks of up to 4 KiB (the 16-byte header
// included) come from the thread's block cache (upstream/block_allocator.hpp),
// each with a 16-byte header that keeps its size (nghttp2 frees without
// one); larger ones from the heap. Under AddressSanitizer the cache keeps nothing, so every block
// is the heap's and checked as such.
#pragma once

#include <nghttp2/nghttp2.h>

namespace sluice {

// For nghttp2_session_{client,server}_new3 (static; no state of its own).
nghttp2_mem* nghttp2_block_memory();

}  // namespace sluice
