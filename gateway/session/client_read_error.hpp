// What a failed read from an HTTP/1.1 client means, in one table for the
// request head and the request body: the client is gone (close quietly:
// it closed or reset the connection, or the read was cancelled), or it gets
// a local reply with this status and message before the connection closes.
// Pure. (A read cut off by a deadline is the session's to answer: 408.)
#pragma once

#include <string>

#include <boost/system/error_code.hpp>

namespace sluice {

enum class ReadPhase { kHead, kBody };

struct ClientReadError {
  unsigned status = 0;  // 0: the client is gone, nothing to send
  std::string message;
};

ClientReadError client_read_error(const boost::system::error_code& ec, ReadPhase phase);

}  // namespace sluice
