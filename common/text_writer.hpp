// Text appended to a string in one step, for text written on every request
// (header values): room for at most `bound` bytes is made once, the pieces
// are copied in through a pointer, and the string is cut to what was written
// when the writer goes. Each std::string append would check and grow on its
// own. The caller's bound must cover everything it puts.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/decimal.hpp"

namespace sluice {

class TextWriter {
 public:
  // The most bytes decimal() writes.
  static constexpr std::size_t kDecimalBound = 20;

  TextWriter(std::string& out, std::size_t bound) : out_(out) {
    const std::size_t at = out.size();
    out.resize(at + bound);
    p_ = out.data() + at;
    end_ = p_ + bound;
  }
  ~TextWriter() { out_.resize(static_cast<std::size_t>(p_ - out_.data())); }
  TextWriter(const TextWriter&) = delete;
  TextWriter& operator=(const TextWriter&) = delete;

  void put(std::string_view text) {
    assert(text.size() <= static_cast<std::size_t>(end_ - p_));
    std::memcpy(p_, text.data(), text.size());
    p_ += text.size();
  }
  void put(char c) {
    assert(p_ < end_);
    *p_++ = c;
  }
  void decimal(std::uint64_t value) {
    const std::size_t digits = decimal_digits(value);
    assert(digits <= static_cast<std::size_t>(end_ - p_));
    p_ += digits;
    put_decimal_before(p_, value);
  }

 private:
  std::string& out_;
  char* p_;
  char* end_;
};

}  // namespace sluice
