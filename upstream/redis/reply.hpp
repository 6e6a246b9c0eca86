// A Redis reply (RESP2) free of hiredis types, and the reader that decodes the
// byte stream of one connection into replies (hiredis' redisReader does the
// parsing and builds the Reply in place). Pure: no I/O; one reader per
// connection, used on its executor.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

struct redisReader;

namespace sluice::redis {

// A reply's string and elements come from this thread's spares when the
// reader builds it, and go back to them when it is destroyed (common/
// spares.hpp): a warm connection reads its replies without allocating.
struct Reply {
  enum class Type { kNil, kString, kStatus, kError, kInteger, kArray };

  Type type = Type::kNil;
  std::string str;              // kString, kStatus, kError
  long long integer = 0;        // kInteger
  std::vector<Reply> elements;  // kArray

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }

  Reply() = default;
  Reply(Type type, std::string str, long long integer, std::vector<Reply> elements)
      : type(type), str(std::move(str)), integer(integer), elements(std::move(elements)) {}
  Reply(const Reply&) = default;
  Reply(Reply&&) noexcept = default;
  Reply& operator=(const Reply&) = default;
  Reply& operator=(Reply&&) noexcept = default;
  ~Reply();
};

class ReplyReader {
 public:
  enum class Result { kReply, kNeedMore, kError };

  ReplyReader();
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  // False when the reader could not be created (out of memory).
  bool valid() const { return reader_ != nullptr; }

  // Appends bytes read from the connection; false when out of memory.
  bool feed(const char* data, std::size_t size);

  // The next complete reply into `out`, kNeedMore when the bytes fed so far
  // end inside one, kError on a malformed stream (see error()).
  Result next(Reply& out);
  std::string error() const;

 private:
  redisReader* reader_;
  Reply building_;  // the reply being read (hiredis fills it in place)
};

}  // namespace sluice::redis
