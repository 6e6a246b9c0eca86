// Bounds on what one HTTP message may make Sluice hold, shared by the client
// session and the upstream exchange (both parsers) and the parser fuzz test.
#pragma once

#include <cstddef>
#include <cstdint>

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice {

// Chunk extensions are accepted and ignored up to this length; the whole
// chunk-size line is bounded by the read buffer's limit in any case.
inline constexpr std::size_t kMaxChunkExtensionBytes = 4096;

// A response head, and everything the response parser must hold at once
// (a chunk-size line, the trailer section), fits in this much.
inline constexpr std::size_t kMaxResponseHeadBytes = 64 * 1024;

// Set as a parser's on_chunk_header callback: refuses chunk extensions longer
// than kMaxChunkExtensionBytes.
struct ChunkExtensionLimit {
  void operator()(std::uint64_t, boost::beast::string_view extensions,
                  boost::beast::error_code& ec) const {
    if (extensions.size() > kMaxChunkExtensionBytes) {
      ec = boost::beast::http::error::bad_chunk_extension;
    }
  }
};

}  // namespace sluice
