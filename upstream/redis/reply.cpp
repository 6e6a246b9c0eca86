#include "upstream/redis/reply.hpp"

#include <hiredis/hiredis.h>

namespace sluice::redis {
namespace {

// hiredis parses; these build the Reply tree straight from its tasks, so that
// no redisReply is made, copied and freed per element. A root goes into the
// reader's own Reply (the task's privdata), an element into its slot of the
// parent's `elements` (sized when the array's header came, so a slot never
// moves while its children are read). What they return is only hiredis'
// handle on the slot: the reader owns it, so freeObject has nothing to free.
Reply& slot(const redisReadTask* task, Reply::Type type) {
  Reply* out;
  if (task->parent == nullptr) {
    out = static_cast<Reply*>(task->privdata);
    out->str.clear();
    out->integer = 0;
    out->elements.clear();
  } else {
    out = &static_cast<Reply*>(task->parent->obj)->elements[static_cast<std::size_t>(task->idx)];
  }
  out->type = type;
  return *out;
}

// An allocation that fails inside hiredis' parse is its out-of-memory error
// (a null object), never an exception through its C frames.
template <class Fill>
void* build(const redisReadTask* task, Reply::Type type, Fill fill) noexcept {
  try {
    Reply& out = slot(task, type);
    fill(out);
    return &out;
  } catch (...) {
    return nullptr;
  }
}

void* create_string(const redisReadTask* task, char* str, std::size_t len) {
  Reply::Type type = Reply::Type::kString;
  if (task->type == REDIS_REPLY_STATUS) type = Reply::Type::kStatus;
  if (task->type == REDIS_REPLY_ERROR) type = Reply::Type::kError;
  return build(task, type, [&](Reply& out) { out.str.assign(str, len); });
}

void* create_array(const redisReadTask* task, int elements) {
  return build(task, Reply::Type::kArray,
               [&](Reply& out) { out.elements.resize(static_cast<std::size_t>(elements)); });
}

void* create_integer(const redisReadTask* task, long long value) {
  return build(task, Reply::Type::kInteger, [&](Reply& out) { out.integer = value; });
}

void* create_nil(const redisReadTask* task) {
  return build(task, Reply::Type::kNil, [](Reply&) {});
}

void free_object(void*) {}

redisReplyObjectFunctions kBuildReply = {create_string, create_array, create_integer, create_nil,
                                         free_object};

}  // namespace

ReplyReader::ReplyReader() : reader_(redisReaderCreateWithFunctions(&kBuildReply)) {
  if (reader_) reader_->privdata = &building_;
}

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
  out = std::move(building_);
  return Result::kReply;
}

std::string ReplyReader::error() const {
  return reader_->errstr;
}

}  // namespace sluice::redis
