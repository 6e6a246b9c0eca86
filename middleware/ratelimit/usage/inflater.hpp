// A gzip or deflate body decoded as it passes, with zlib: a bounded state
// (zlib's, and an output buffer of kOutputBytes) whatever the body's length
// or its ratio. A response's Content-Encoding of gzip, x-gzip or deflate is
// read this way: gzip members one after the other, deflate with its zlib
// header or without (raw, as some servers send it); br and zstd have no
// decoder here.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace sluice::usage {

class Inflater {
 public:
  static constexpr std::size_t kOutputBytes = 16 * 1024;

  // For a Content-Encoding value: gzip, x-gzip or deflate (any case); null
  // for anything else (identity is not decoded at all).
  static std::unique_ptr<Inflater> for_encoding(std::string_view content_encoding);

  Inflater();
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Decodes from the front of `in` (what it used is removed): the bytes
  // decoded, at most kOutputBytes; empty once `in` is used up and nothing is
  // pending, or when the stream ended or failed. Call again until empty.
  std::string_view decode(std::string_view& in);
  // The data is not gzip or zlib, or is corrupt.
  bool failed() const { return failed_; }
  // The compressed stream ended (bytes after it are ignored).
  bool ended() const { return ended_; }

 private:
  struct Stream;
  std::unique_ptr<Stream> stream_;
  bool failed_ = false;
  bool ended_ = false;
};

}  // namespace sluice::usage
