#include "middleware/ratelimit/usage/inflater.hpp"

#include <zlib.h>

#include "common/ascii.hpp"

namespace sluice::usage {

struct Inflater::Stream {
  z_stream z{};
  bool open = false;
  bool raw = false;  // deflate without its zlib header, as some servers send it
  bool between = false;  // a member ended; another may follow, or nothing
  bool fed = false;      // bytes came before this piece
  char out[kOutputBytes];
};

std::unique_ptr<Inflater> Inflater::for_encoding(std::string_view content_encoding) {
  const std::string_view coding = ascii::trim(content_encoding);
  if (ascii::iequals(coding, "gzip") || ascii::iequals(coding, "x-gzip") ||
      ascii::iequals(coding, "deflate")) {
    return std::make_unique<Inflater>();
  }
  return nullptr;
}

Inflater::Inflater() : stream_(std::make_unique<Stream>()) {
  // 15 + 32: the largest window, and a gzip or a zlib header, whichever comes.
  stream_->open = inflateInit2(&stream_->z, 15 + 32) == Z_OK;
  failed_ = !stream_->open;
}

Inflater::~Inflater() {
  if (stream_->open) inflateEnd(&stream_->z);
}

std::string_view Inflater::decode(std::string_view& in) {
  if (failed_ || ended_) return {};
  z_stream& z = stream_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(stream_->out);
  z.avail_out = static_cast<uInt>(kOutputBytes);
  int rc = inflate(&z, Z_NO_FLUSH);
  if (rc == Z_DATA_ERROR && !stream_->fed && !stream_->raw && !stream_->between) {
    // No gzip or zlib header: a raw deflate stream, read again from its start
    // (this piece is the body's first; a header cut after one byte is not
    // told apart, and fails).
    inflateEnd(&z);
    z = z_stream{};
    stream_->raw = true;
    stream_->open = inflateInit2(&z, -15) == Z_OK;
    if (!stream_->open) {
      failed_ = true;
      return {};
    }
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(stream_->out);
    z.avail_out = static_cast<uInt>(kOutputBytes);
    rc = inflate(&z, Z_NO_FLUSH);
  }
  if (in.size() != z.avail_in) stream_->fed = true;
  in.remove_prefix(in.size() - z.avail_in);
  const std::size_t n = kOutputBytes - z.avail_out;
  if (rc == Z_STREAM_END) {
    // Another gzip member may follow: concatenated members are one body.
    if (stream_->raw || inflateReset(&z) != Z_OK) {
      ended_ = true;
    } else {
      stream_->between = true;
    }
  } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
    // Bytes after a member that start no other: ignored, as gzip does.
    (stream_->between && n == 0 ? ended_ : failed_) = true;
  } else if (n > 0) {
    stream_->between = false;
  }
  return {stream_->out, n};
}

}  // namespace sluice::usage
