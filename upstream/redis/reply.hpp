// A Redis reply (RESP2) free of hiredis types, and the reader that decodes the
// byte stream of one connection into replies (hiredis' redisReader does the
// parsing and builds the Reply in place). Pure: no I/O; one reader per
// connection, used on its executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

struct redisReader;

namespace sluice::redis {

struct Reply {
  enum class Type { kNil, kString, kStatus, kError, kInteger, kArray };

  Type type = Type::kNil;
  std::string str;              // kString, kStatus, kError
  long long integer = 0;        // kInteger
  std::vector<Reply> elements;  // kArray

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }
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
