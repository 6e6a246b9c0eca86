// sluice-echo: the demo and test upstream. One thread, async Beast, HTTP/1.1
// keep-alive and pipelining (requests on a connection are answered in order).
//
//   sluice-echo --listen 127.0.0.1:PORT [--quiet] [--delay-ms MS] [--status NNN]
//   (PORT 0 = ephemeral)
//
// --delay-ms makes every echo reply wait MS milliseconds, as /__slow/MS does
// (a slow server for the balancing bench); --status gives every echo reply
// that status (200-599) instead of 200 (a failing server for the retry bench).
//
// The first stdout line is "listening HOST:PORT". Endpoints (by path prefix):
//   GET /__stats         {"connections": accepted, "requests": request heads read,
//                        "bad_requests": connections ended by a parse error,
//                        "slow_peak": the most /__slow/ requests waiting at once}
//   /__download/N        N bytes, byte i = i % 251, in 64 KiB pieces
//                        (Content-Length; chunked with ?chunked=1; no length,
//                        ended by closing the connection, with ?eof=1)
//   /__sse/N             a text/event-stream of about N bytes shaped as an
//                        OpenAI streamed chat completion: content chunks of
//                        ~200 bytes, then a chunk whose usage.total_tokens is
//                        the content chunks' count + 10, then "data: [DONE]";
//                        with ?pace_us=U chunked instead, each event its own
//                        chunk, written U microseconds after the one before
//                        (a model server streaming)
//   /__slow/MS           waits MS milliseconds, then the echo reply
//   /__status/NNN        that status (200-999) with a small JSON body (none for 204/304)
//   /__close             reads the request, closes without any response
//   /__hop               the echo reply plus hop-by-hop response headers
//   anything else        200 application/json: method, target, version,
//                        headers ([[name, value], ...] in received order),
//                        body_length, body_sha256 (the body is hashed while it
//                        streams in, never held). HEAD gets the head only.
// Bytes >= 0x80 in JSON strings are written as \u00XX (latin-1), so the
// output is ASCII and round-trips exactly. A request carrying X-Echo-Usage
// gets its value back as X-Usage-Tokens (a usage report for settlements).
#include <openssl/evp.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "accept_loop.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kPiece = 64 * 1024;

// /__sse/N's body (see the header comment), made once per size.
std::string completion_stream(std::size_t bytes) {
  static thread_local std::size_t made_for = 0;
  static thread_local std::string made;
  if (made_for == bytes && !made.empty()) return made;
  static constexpr std::string_view kChunk =
      "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
      "1700000000,\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
      "\" token token token\"},\"finish_reason\":null}],\"usage\":null}\n\n";
  std::string out;
  std::size_t chunks = 0;
  while (out.size() + kChunk.size() + 200 < bytes) {
    out += kChunk;
    ++chunks;
  }
  out += "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
         "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":" +
         std::to_string(chunks) + ",\"total_tokens\":" + std::to_string(chunks + 10) +
         "}}\n\ndata: [DONE]\n\n";
  made_for = bytes;
  made = out;
  return out;
}
constexpr std::size_t kPatternPeriod = 251;

// Byte i of every download is i % 251; a piece starting at offset o is
// pattern_table() + o % 251, so no piece is ever copied.
const std::array<char, kPiece + kPatternPeriod>& pattern_table() {
  static const auto table = [] {
    std::array<char, kPiece + kPatternPeriod> t{};
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>(i % kPatternPeriod);
    return t;
  }();
  return table;
}

struct Stats {
  std::uint64_t connections = 0;
  std::uint64_t requests = 0;
  std::uint64_t bad_requests = 0;  // connections ended by an HTTP parse error
  std::uint64_t slow_now = 0;      // /__slow/ requests waiting now
  std::uint64_t slow_peak = 0;     // the most of them at once
  std::uint64_t delay_ms = 0;      // --delay-ms: every echo reply waits this long
  unsigned status = 200;           // --status: every echo reply's status
};

// Incremental SHA-256 (OpenSSL EVP).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void update(const void* data, std::size_t size) { EVP_DigestUpdate(ctx_.get(), data, size); }
  std::string hex_digest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &len);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += kHex[md[i] >> 4];
      out += kHex[md[i] & 0xf];
    }
    return out;
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

// A Beast body that keeps only the length and a running hash of what it reads.
struct HashBody {
  struct value_type {
    Sha256 sha;
    std::uint64_t length = 0;
  };

  class reader {
   public:
    template <bool IsRequest, class Fields>
    reader(http::header<IsRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>&, beast::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      std::size_t n = 0;
      for (auto b : beast::buffers_range_ref(buffers)) {
        body_.sha.update(b.data(), b.size());
        n += b.size();
      }
      body_.length += n;
      ec = {};
      return n;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

using Request = http::request<HashBody>;

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// The echo document for a fully read request.
std::string echo_json(Request& req) {
  std::string out = "{\"method\":";
  append_json_string(out, req.method_string());
  out += ",\"target\":";
  append_json_string(out, req.target());
  out += ",\"version\":";
  append_json_string(out, req.version() == 10 ? "1.0" : "1.1");
  out += ",\"headers\":[";
  bool first = true;
  for (const auto& f : req) {
    if (!first) out += ',';
    first = false;
    out += '[';
    append_json_string(out, f.name_string());
    out += ',';
    append_json_string(out, f.value());
    out += ']';
  }
  out += "],\"body_length\":";
  out += std::to_string(req.body().length);
  out += ",\"body_sha256\":\"";
  out += req.body().sha.hex_digest();
  out += "\"}";
  return out;
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

// The unsigned number after `prefix` at the start of the path, if any.
std::optional<std::uint64_t> number_after(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return std::nullopt;
  std::uint64_t n = 0;
  const char* first = path.data() + prefix.size();
  auto [ptr, ec] = std::from_chars(first, path.data() + path.size(), n);
  if (ec != std::errc{} || ptr == first) return std::nullopt;
  return n;
}

// The number after `prefix` ("pace_us=") in the target's query; none when absent.
std::optional<std::uint64_t> query_number(std::string_view target, std::string_view prefix) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    if (item.starts_with(prefix)) {
      std::uint64_t n = 0;
      const auto digits = item.substr(prefix.size());
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (ec == std::errc{} && end == digits.data() + digits.size()) return n;
      return std::nullopt;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

bool query_has(std::string_view target, std::string_view item) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return false;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    if (query.substr(0, amp) == item) return true;
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return false;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Stats& stats)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), stats_(stats) {}

  void start() { do_read_header(); }

 private:
  void do_read_header() {
    parser_.emplace();
    parser_->header_limit(1024 * 1024);
    parser_->body_limit(boost::none);
    http::async_read_header(
        socket_, buffer_, *parser_,
        beast::bind_front_handler(&Session::on_read_header, shared_from_this()));
  }

  void on_read_header(beast::error_code ec, std::size_t) {
    if (ec) return fail(ec);
    ++stats_.requests;
    auto& req = parser_->get();
    if (req.version() >= 11 && beast::iequals(req[http::field::expect], "100-continue")) {
      // Answer the expectation so clients that wait for it send the body at once.
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->do_read_body();
                        });
      return;
    }
    do_read_body();
  }

  void do_read_body() {
    http::async_read(socket_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read_body, shared_from_this()));
  }

  void on_read_body(beast::error_code ec, std::size_t) {
    if (ec) return fail(ec);
    auto& req = parser_->get();
    const std::string_view target = req.target();
    const std::string_view path = path_of(target);

    if (path.starts_with("/__close")) return close();
    if (auto n = number_after(path, "/__download/")) {
      const auto framing = query_has(target, "chunked=1") ? Framing::kChunked
                           : query_has(target, "eof=1")   ? Framing::kEof
                                                          : Framing::kLength;
      return start_download(*n, framing);
    }
    if (auto n = number_after(path, "/__sse/")) {
      const bool paced_ok = req.method() != http::verb::head && req.version() >= 11;
      if (auto pace = query_number(target, "pace_us="); pace && paced_ok) {
        return start_stream(*n, *pace);
      }
      return reply(http::status::ok, "text/event-stream", completion_stream(*n));
    }
    auto ms = number_after(path, "/__slow/");
    if (!ms && stats_.delay_ms > 0 && !path.starts_with("/__")) ms = stats_.delay_ms;
    if (ms) {
      stats_.slow_peak = std::max(stats_.slow_peak, ++stats_.slow_now);
      timer_.expires_after(std::chrono::milliseconds(*ms));
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        --self->stats_.slow_now;
        if (ec) return self->close();
        self->reply(static_cast<http::status>(self->stats_.status), "application/json",
                    echo_json(self->parser_->get()));
      });
      return;
    }
    if (auto code = number_after(path, "/__status/"); code && *code >= 200 && *code <= 999) {
      return reply(static_cast<http::status>(*code), "application/json",
                   "{\"status\":" + std::to_string(*code) + "}");
    }
    if (path == "/__stats") {
      return reply(http::status::ok, "application/json",
                   "{\"connections\":" + std::to_string(stats_.connections) +
                       ",\"requests\":" + std::to_string(stats_.requests) +
                       ",\"bad_requests\":" + std::to_string(stats_.bad_requests) +
                       ",\"slow_peak\":" + std::to_string(stats_.slow_peak) + "}");
    }
    if (path.starts_with("/__hop")) {
      return reply(http::status::ok, "application/json", echo_json(req), true);
    }
    reply(static_cast<http::status>(stats_.status), "application/json", echo_json(req));
  }

  void reply(http::status status, std::string_view content_type, std::string body,
             bool hop_headers = false) {
    const auto& req = parser_->get();
    res_.emplace(status, req.version());
    res_->set(http::field::server, "sluice-echo");
    const unsigned code = static_cast<unsigned>(status);
    const bool bodiless = code == 204 || code == 304;
    if (!bodiless) {
      res_->set(http::field::content_type, content_type);
      res_->body() = std::move(body);
    }
    if (http::int_to_status(code) == http::status::unknown) res_->reason("Status");
    // A usage report on request (settlement benches and tests): the value of
    // X-Echo-Usage comes back as X-Usage-Tokens.
    if (auto usage = req.find("X-Echo-Usage"); usage != req.end()) {
      res_->set("X-Usage-Tokens", usage->value());
    }
    res_->keep_alive(req.keep_alive());
    res_->prepare_payload();
    if (bodiless) res_->erase(http::field::content_length);  // RFC 9110 8.6
    if (hop_headers) {
      res_->set(http::field::connection,
                req.keep_alive() ? "X-Secret, keep-alive" : "X-Secret, close");
      res_->set("X-Secret", "1");
      res_->set(http::field::keep_alive, "timeout=5");
      res_->set(http::field::proxy_authenticate, "x");
      res_->set(http::field::trailer, "X-T");
      res_->set(http::field::upgrade, "foo");
    }
    sr_.emplace(*res_);
    auto done = beast::bind_front_handler(&Session::on_write, shared_from_this());
    if (req.method() == http::verb::head) {
      http::async_write_header(socket_, *sr_, std::move(done));
    } else {
      http::async_write(socket_, *sr_, std::move(done));
    }
  }

  void on_write(beast::error_code ec, std::size_t) {
    if (ec) return close();
    next_or_close();
  }

  void next_or_close() {
    if (!parser_->get().keep_alive() || close_after_response_) {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      return;  // the peer closes; the socket is released with the session
    }
    do_read_header();
  }

  enum class Framing { kLength, kChunked, kEof };

  // Streams `size` pattern bytes: the head, then 64 KiB pieces straight from
  // the pattern table (beast "relay" style with buffer_body).
  void start_download(std::uint64_t size, Framing framing) {
    const auto& req = parser_->get();
    download_left_ = size;
    download_offset_ = 0;
    dres_.emplace(http::status::ok, req.version());
    dres_->set(http::field::server, "sluice-echo");
    dres_->set(http::field::content_type, "application/octet-stream");
    if (framing == Framing::kChunked && req.version() >= 11) {
      dres_->chunked(true);
    } else if (framing == Framing::kLength) {
      dres_->content_length(size);
    }
    // Without a length the body ends when the connection closes.
    close_after_response_ = framing == Framing::kEof;
    dres_->keep_alive(req.keep_alive() && !close_after_response_);
    dres_->body().data = nullptr;
    dres_->body().more = req.method() != http::verb::head;
    dsr_.emplace(*dres_);
    http::async_write_header(socket_, *dsr_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               if (ec) return self->close();
                               if (self->parser_->get().method() == http::verb::head) {
                                 return self->next_or_close();
                               }
                               self->write_piece();
                             });
  }

  // /__sse/N?pace_us=U: the completion stream, an event per chunk, paced.
  void start_stream(std::uint64_t size, std::uint64_t pace_us) {
    const auto& req = parser_->get();
    stream_ = completion_stream(static_cast<std::size_t>(size));
    stream_at_ = 0;
    pace_us_ = pace_us;
    dres_.emplace(http::status::ok, req.version());
    dres_->set(http::field::server, "sluice-echo");
    dres_->set(http::field::content_type, "text/event-stream");
    dres_->chunked(true);
    dres_->keep_alive(req.keep_alive());
    dres_->body().data = nullptr;
    dres_->body().more = true;
    dsr_.emplace(*dres_);
    http::async_write_header(socket_, *dsr_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               if (ec) return self->close();
                               self->write_event();
                             });
  }

  void write_event() {
    const std::size_t blank = stream_.find("\n\n", stream_at_);
    const std::size_t end = blank == std::string::npos ? stream_.size() : blank + 2;
    auto& body = dres_->body();
    body.data = end > stream_at_ ? stream_.data() + stream_at_ : nullptr;
    body.size = end - stream_at_;
    stream_at_ = end;
    body.more = stream_at_ < stream_.size();
    http::async_write(socket_, *dsr_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec == http::error::need_buffer) {
                          self->timer_.expires_after(std::chrono::microseconds(self->pace_us_));
                          self->timer_.async_wait([self](beast::error_code wait_ec) {
                            if (wait_ec) return self->close();
                            self->write_event();
                          });
                          return;
                        }
                        if (ec) return self->close();
                        self->next_or_close();
                      });
  }

  void write_piece() {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(download_left_, kPiece));
    auto& body = dres_->body();
    // A non-null empty buffer would be serialized as a zero-size (= last) chunk.
    body.data = n == 0
                    ? nullptr
                    : const_cast<char*>(pattern_table().data() + download_offset_ % kPatternPeriod);
    body.size = n;
    body.more = download_left_ > n;
    download_left_ -= n;
    download_offset_ += n;
    http::async_write(socket_, *dsr_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec == http::error::need_buffer) return self->write_piece();
                        if (ec) return self->close();
                        self->next_or_close();
                      });
  }

  // A read failed: count malformed input (a proxy sending stray bytes shows up
  // here), not a peer that went away, then close.
  void fail(beast::error_code ec) {
    if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      ++stats_.bad_requests;
    }
    close();
  }

  void close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  Stats& stats_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<HashBody>> parser_;
  std::optional<http::response<http::string_body>> res_;
  std::optional<http::response_serializer<http::string_body>> sr_;
  std::optional<http::response<http::buffer_body>> dres_;
  std::optional<http::response_serializer<http::buffer_body>> dsr_;
  std::uint64_t download_left_ = 0;
  std::uint64_t download_offset_ = 0;
  std::string stream_;  // /__sse/N?pace_us=U: the events, and how far they went
  std::size_t stream_at_ = 0;
  std::uint64_t pace_us_ = 0;
  bool close_after_response_ = false;
};

int usage() {
  std::cerr << "usage: sluice-echo --listen HOST:PORT [--quiet] [--delay-ms MS] [--status NNN]\n";
  return 2;
}

int run(int argc, char** argv) {
  std::string listen = "127.0.0.1:9001";
  bool quiet = false;
  std::uint64_t delay_ms = 0;
  unsigned status = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      listen = argv[++i];
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (arg == "--delay-ms" && i + 1 < argc) {
      const std::string_view text = argv[++i];
      auto [end, parsed] = std::from_chars(text.data(), text.data() + text.size(), delay_ms);
      if (parsed != std::errc{} || end != text.data() + text.size()) return usage();
    } else if (arg == "--status" && i + 1 < argc) {
      const std::string_view text = argv[++i];
      auto [end, parsed] = std::from_chars(text.data(), text.data() + text.size(), status);
      if (parsed != std::errc{} || end != text.data() + text.size() || status < 200 ||
          status > 599) {
        return usage();
      }
    } else {
      return usage();
    }
  }
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return usage();
  unsigned port = 0;
  const std::string port_text = listen.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || ptr != port_text.data() + port_text.size() || port > 65535) {
    return usage();
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }

  asio::io_context ioc{1};
  beast::error_code addr_ec;
  const auto address = asio::ip::make_address(host, addr_ec);
  if (addr_ec) {
    std::cerr << "sluice-echo: bad address " << host << "\n";
    return 2;
  }
  Stats stats;
  stats.delay_ms = delay_ms;
  stats.status = status;
  test::AcceptLoop listener(ioc, tcp::endpoint(address, static_cast<std::uint16_t>(port)),
                            [&stats](tcp::socket socket) {
                              ++stats.connections;
                              std::make_shared<Session>(std::move(socket), stats)->start();
                            });
  const auto bound = listener.local_endpoint();
  std::cout << "listening " << bound.address().to_string() << ":" << bound.port() << std::endl;
  if (!quiet) {
    std::cout << "endpoints: /__stats /__download/N[?chunked=1|?eof=1] /__sse/N /__slow/MS /__status/NNN "
                 "/__close /__hop, anything else echoes the request as JSON"
              << std::endl;
  }
  listener.do_accept();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&ioc](beast::error_code, int) { ioc.stop(); });
  ioc.run();
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  try {
    return sluice::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sluice-echo: " << e.what() << "\n";
    return 1;
  }
}
