#include "upstream/redis/reply.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <hiredis/hiredis.h>

#include "common/spares.hpp"

namespace sluice::redis {
namespace {

// hiredis parses; these build the Reply tree straight from its tasks, so that
// no redisReply is made, copied and freed per element. A root goes into the
// reader's own Reply (the task's privdata), an element at the end of its
// parent's `elements` as it comes. hiredis reads depth first, so a parent's
// vector grows only once the element before is complete, and the pointer to
// an element (an array's, for its own elements) is used only until then.
// What they return is only hiredis' handle on the slot: the reader owns it,
// so freeObject has nothing to free.
Reply& slot(const redisReadTask* task, Reply::Type type) {
  Reply* out;
  if (task->parent == nullptr) {
    out = static_cast<Reply*>(task->privdata);
    out->str.clear();
    out->integer = 0;
    out->elements.clear();
  } else {
    std::vector<Reply>& siblings = static_cast<Reply*>(task->parent->obj)->elements;
    if (static_cast<std::size_t>(task->idx) != siblings.size()) {
      throw std::logic_error("redis reply elements out of order");
    }
    out = &siblings.emplace_back();
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
  return build(task, type, [&](Reply& out) {
    if (len > out.str.capacity()) out.str = Spares<std::string>::take();
    out.str.assign(str, len);
  });
}

void* create_array(const redisReadTask* task, int elements) {
  // Room for the first elements only: the rest as they come, so that a
  // length no bytes back up costs no memory.
  return build(task, Reply::Type::kArray, [&](Reply& out) {
    if (out.elements.capacity() == 0) out.elements = Spares<std::vector<Reply>>::take();
    out.elements.reserve(std::min<std::size_t>(static_cast<std::size_t>(elements), 64));
  });
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

Reply::~Reply() {
  keep_spare(std::move(str));
  keep_spare(std::move(elements));
}

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
