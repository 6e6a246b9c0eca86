#include "upstream/redis/reply.hpp"

#include <hiredis/hiredis.h>

namespace sluice::redis {
namespace {

Reply convert(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(convert(*r.element[i]));
      break;
    default:
      out.type = Reply::Type::kNil;
      break;
  }
  return out;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

}  // namespace

ReplyReader::ReplyReader() : reader_(redisReaderCreate()) {}

ReplyReader::~ReplyReader() {
  if (reader_) redisReaderFree(reader_);
}

bool ReplyReader::feed(const char* data, std::size_t size) {
  return redisReaderFeed(reader_, data, size) == REDIS_OK;
}

ReplyReader::Result ReplyReader::next(Reply& out) {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) return Result::kError;
  if (raw == nullptr) return Result::kNeedMore;
  const std::unique_ptr<redisReply, ReplyDeleter> reply(static_cast<redisReply*>(raw));
  out = convert(*reply);
  return Result::kReply;
}

std::string ReplyReader::error() const {
  return reader_->errstr;
}

}  // namespace sluice::redis
