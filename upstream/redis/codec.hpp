// Command encoding (RESP arrays of bulk strings, binary-safe) and the
// Lua script handle with its SHA-1, the only place a script's SHA-1 is
// computed. Pure: no I/O.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis {

// The lower-case hex SHA-1 of a script body: the name EVALSHA and SCRIPT LOAD use.
std::string script_sha1(std::string_view body);

// A Lua script with its SHA-1 (computed locally). Cheap to copy.
class Script {
 public:
  explicit Script(std::string body);
  const std::string& body() const { return *body_; }
  const std::string& sha1() const { return sha1_; }  // 40 lowercase hex digits
  // The body shared, for a client that keeps scripts beyond this handle.
  const std::shared_ptr<const std::string>& shared_body() const { return body_; }

 private:
  std::shared_ptr<const std::string> body_;
  std::string sha1_;
};

// Collects arguments (views; they must outlive append_to) and appends their
// RESP encoding to a buffer. Reused, so steady state does not allocate.
class CommandEncoder {
 public:
  void add(std::string_view arg) {
    argv_.push_back(arg.empty() ? "" : arg.data());
    lens_.push_back(arg.size());
  }
  // Appends the command built by add() and starts a new one; false (nothing
  // appended) when there were no arguments.
  bool append_to(std::string& out);

 private:
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

}  // namespace sluice::redis
