#include "middleware/ratelimit/usage/inflater.hpp"

#include <zlib.h>

#include "common/ascii.hpp"

namespace sluice::usage {

struct Inflater::Stream {
  z_stream z{};
  bool open = false;
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
  const int rc = inflate(&z, Z_NO_FLUSH);
  in.remove_prefix(in.size() - z.avail_in);
  const std::size_t n = kOutputBytes - z.avail_out;
  if (rc == Z_STREAM_END) {
    ended_ = true;
  } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
    failed_ = true;  // Z_DATA_ERROR, Z_NEED_DICT, Z_MEM_ERROR
  }
  return {stream_->out, n};
}

}  // namespace sluice::usage
