// sluice-wsbench: the WebSocket echo server and load client of scripts/bench
// (rows 17-20: WebSocket echo directly and through Sluice). One thread each,
// async Beast, plain TCP (ws://) only.
//
//   sluice-wsbench echo --listen HOST:PORT [--quiet]          (PORT 0 = ephemeral)
//   sluice-wsbench client --url ws://HOST:PORT/PATH --connections N --size BYTES
//                         --seconds S
//
// echo: the first stdout line is "listening HOST:PORT". Accepts a WebSocket
// handshake on any path and echoes every message as it came: text as text,
// binary as binary, in one frame (auto-fragment off), up to 1 GiB; pings are
// answered (Beast), a close frame is answered with a close frame. No compression.
//
// client: opens N connections (TCP connect + handshake, all within 10 s); once
// every one is open, each sends one binary message of BYTES, waits for its echo,
// checks it (binary, exactly BYTES long, the message's stamp in its first bytes,
// the pattern at its middle and last byte), and repeats until S seconds have
// passed; then sends a close frame (1000) and waits for the close handshake and
// the server's TCP close. Bounded: 10 s after the end of the load, connections
// still open are counted as errors and the client stops. Prints one JSON line:
//   {"connections":N,"size":BYTES,"seconds":measured,"messages":echoes received,
//    "bytes":payload bytes both ways (2 x BYTES x messages),"msgs_per_s":..,
//    "mib_per_s":bytes / 2^20 / seconds,"p50_us":..,"p99_us":..,"p999_us":..,
//    "max_us":..,"errors":..}
// where the percentiles are of the round trip of one message (write of the
// message to the echo fully read), and seconds runs from the first message sent
// to the last echo received. Exit status 1 on any error (a refused connect, a
// failed handshake, a short, long or altered echo, a failed close, a timeout),
// the JSON line printed all the same; 2 on bad arguments.
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "accept_loop.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMessageMax = 1ull << 30;  // the echo's read_message_max
constexpr std::size_t kSizeMax = 256u << 20;       // the client's largest --size
constexpr std::size_t kWriteBuffer = 64 * 1024;    // the client's masking buffer
constexpr auto kSetupTimeout = std::chrono::seconds(10);
constexpr auto kGrace = std::chrono::seconds(10);  // after the load: close handshakes
constexpr int kMaxErrorLines = 20;                 // error lines printed on stderr

template <class T>
bool parse_number(std::string_view text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size() && !text.empty();
}

// "HOST:PORT" or "[V6]:PORT".
bool split_host_port(std::string_view text, std::string& host, std::uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  unsigned value = 0;
  if (!parse_number(text.substr(colon + 1), value) || value > 65535) return false;
  host = std::string(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  port = static_cast<std::uint16_t>(value);
  return !host.empty();
}

// ---------------------------------------------------------------- echo server

class EchoSession : public std::enable_shared_from_this<EchoSession> {
 public:
  explicit EchoSession(tcp::socket socket) : ws_(std::move(socket)) {}

  void start() {
    ws_.auto_fragment(false);
    ws_.read_message_max(kMessageMax);
    ws_.set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
      res.set(beast::http::field::server, "sluice-wsbench");
    }));
    ws_.async_accept(beast::bind_front_handler(&EchoSession::on_accept, shared_from_this()));
  }

 private:
  void on_accept(beast::error_code ec) {
    if (ec) return;  // not a WebSocket handshake, or the peer went away
    do_read();
  }

  void do_read() {
    ws_.async_read(buffer_, beast::bind_front_handler(&EchoSession::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec) return;  // closed (close handshake done by Beast), reset or a protocol error
    ws_.text(ws_.got_text());
    ws_.async_write(buffer_.data(),
                    beast::bind_front_handler(&EchoSession::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    if (ec) return;
    buffer_.consume(buffer_.size());
    do_read();
  }

  websocket::stream<tcp::socket> ws_;
  beast::flat_buffer buffer_;
};

int run_echo(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  bool quiet = false;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      listen = argv[++i];
    } else if (arg == "--quiet") {
      quiet = true;
    } else {
      std::cerr << "sluice-wsbench echo: unknown argument " << arg << "\n";
      return 2;
    }
  }
  std::string host;
  std::uint16_t port = 0;
  if (!split_host_port(listen, host, port)) {
    std::cerr << "sluice-wsbench echo: --listen HOST:PORT expected, got " << listen << "\n";
    return 2;
  }
  beast::error_code addr_ec;
  const auto address = asio::ip::make_address(host, addr_ec);
  if (addr_ec) {
    std::cerr << "sluice-wsbench echo: bad address " << host << "\n";
    return 2;
  }

  asio::io_context ioc{1};
  test::AcceptLoop listener(ioc, tcp::endpoint(address, port), [](tcp::socket socket) {
    std::make_shared<EchoSession>(std::move(socket))->start();
  });
  const auto bound = listener.local_endpoint();
  std::cout << "listening " << bound.address().to_string() << ":" << bound.port() << std::endl;
  if (!quiet) {
    std::cout << "WebSocket echo on any path: every message back as it came" << std::endl;
  }
  listener.do_accept();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&ioc](beast::error_code, int) { ioc.stop(); });
  ioc.run();
  return 0;
}

// ---------------------------------------------------------------- load client

struct ClientOptions {
  std::string host;
  std::uint16_t port = 0;
  std::string path = "/";
  std::size_t connections = 0;
  std::size_t size = 0;
  double seconds = 0;
};

class ClientConn;

// What every connection shares; one thread, so no locking.
struct Run {
  explicit Run(asio::io_context& ioc, const ClientOptions& options)
      : ioc(ioc), options(options), watchdog(ioc) {}

  asio::io_context& ioc;
  const ClientOptions& options;
  asio::steady_timer watchdog;
  tcp::resolver::results_type endpoints;
  std::vector<std::shared_ptr<ClientConn>> conns;
  std::size_t setting_up = 0;  // connections not yet open (or failed)
  std::size_t open = 0;        // connections not yet finished
  bool loading = false;
  Clock::time_point load_start{};
  Clock::time_point load_end{};  // the newest echo received
  Clock::time_point deadline{};
  std::vector<std::uint32_t> rtt_us;
  std::uint64_t messages = 0;
  std::uint64_t errors = 0;

  void error(std::size_t conn, std::string_view what, std::string_view detail) {
    if (errors++ < kMaxErrorLines) {
      std::cerr << "sluice-wsbench client: connection " << conn << ": " << what << ": " << detail
                << "\n";
    }
  }
};

// The byte at offset i of connection c's messages (its stamp aside).
char pattern_byte(std::size_t conn, std::size_t i) {
  return static_cast<char>((i + conn * 7) % 251);
}

class ClientConn : public std::enable_shared_from_this<ClientConn> {
 public:
  ClientConn(Run& run, std::size_t id)
      : run_(run), id_(id), ws_(run.ioc), payload_(run.options.size, '\0') {
    for (std::size_t i = 0; i < payload_.size(); ++i) payload_[i] = pattern_byte(id_, i);
  }

  void start() {
    asio::async_connect(beast::get_lowest_layer(ws_), run_.endpoints,
                        beast::bind_front_handler(&ClientConn::on_connect, shared_from_this()));
  }

  // Called once every connection is open: the first message.
  void begin() {
    if (ok_) send();
  }

  // The watchdog fired: whatever is still pending is abandoned.
  bool finished() const { return finished_; }

 private:
  void on_connect(beast::error_code ec, const tcp::endpoint&) {
    if (ec) return setup_failed("connect", ec);
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).set_option(tcp::no_delay(true), ignored);
    ws_.auto_fragment(false);
    ws_.binary(true);
    ws_.write_buffer_bytes(kWriteBuffer);
    ws_.read_message_max(2 * run_.options.size + 64);  // a longer echo is read, then reported
    ws_.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
      req.set(beast::http::field::user_agent, "sluice-wsbench");
    }));
    const std::string host =
        (run_.options.host.find(':') != std::string::npos ? "[" + run_.options.host + "]"
                                                          : run_.options.host) +
        ":" + std::to_string(run_.options.port);
    ws_.async_handshake(host, run_.options.path,
                        beast::bind_front_handler(&ClientConn::on_handshake, shared_from_this()));
  }

  void on_handshake(beast::error_code ec) {
    if (ec) return setup_failed("handshake", ec);
    ok_ = true;
    setup_done();
  }

  void setup_failed(std::string_view what, beast::error_code ec) {
    run_.error(id_, what, ec.message());
    finish();
    setup_done();
  }

  void setup_done();  // below: needs start_load()

  void send() {
    ++sequence_;
    stamp_.resize(std::min<std::size_t>(sizeof(sequence_), payload_.size()));
    const std::uint64_t seq = (static_cast<std::uint64_t>(id_) << 40) ^ sequence_;
    std::memcpy(stamp_.data(), &seq, stamp_.size());
    std::memcpy(payload_.data(), stamp_.data(), stamp_.size());
    sent_at_ = Clock::now();
    ws_.async_write(asio::buffer(payload_),
                    beast::bind_front_handler(&ClientConn::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    if (ec) return fail("write", ec);
    ws_.async_read(buffer_, beast::bind_front_handler(&ClientConn::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec) return fail("read", ec);
    const auto now = Clock::now();
    const std::string problem = check_echo();
    buffer_.consume(buffer_.size());
    if (!problem.empty()) {
      run_.error(id_, "bad echo", problem);
      return close();
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - sent_at_).count();
    run_.rtt_us.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(us, UINT32_MAX)));
    ++run_.messages;
    run_.load_end = std::max(run_.load_end, now);
    if (now >= run_.deadline) return close();
    send();
  }

  // Empty when the echo is the message sent.
  std::string check_echo() const {
    const std::size_t size = run_.options.size;
    if (!ws_.got_binary()) return "a text message";
    if (buffer_.size() != size) {
      return (buffer_.size() < size ? "short: " : "long: ") + std::to_string(buffer_.size()) +
             " bytes, sent " + std::to_string(size);
    }
    const auto* data = static_cast<const char*>(buffer_.data().data());
    if (std::memcmp(data, stamp_.data(), stamp_.size()) != 0) return "not the message sent";
    for (std::size_t i : {size / 2, size - 1}) {
      if (size > i && i >= stamp_.size() && data[i] != pattern_byte(id_, i)) {
        return "byte " + std::to_string(i) + " altered";
      }
    }
    return {};
  }

  void close() {
    ws_.async_close(websocket::close_code::normal,
                    beast::bind_front_handler(&ClientConn::on_close, shared_from_this()));
  }

  void on_close(beast::error_code ec) {
    if (ec) run_.error(id_, "close", ec.message());
    finish();
  }

  void fail(std::string_view what, beast::error_code ec) {
    run_.error(id_, what, ec.message());
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).close(ignored);
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    if (--run_.open == 0) run_.watchdog.cancel();
  }

  Run& run_;
  std::size_t id_;
  websocket::stream<tcp::socket> ws_;
  std::string payload_;
  std::string stamp_;
  beast::flat_buffer buffer_;
  std::uint64_t sequence_ = 0;
  Clock::time_point sent_at_{};
  bool ok_ = false;
  bool finished_ = false;
};

void start_load(Run& run) {
  run.loading = true;
  if (run.open == 0) return;  // every connection failed to open
  run.load_start = Clock::now();
  run.load_end = run.load_start;
  run.deadline = run.load_start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(run.options.seconds));
  run.watchdog.expires_at(run.deadline + kGrace);
  run.watchdog.async_wait([&run](beast::error_code ec) {
    if (ec) return;  // cancelled: every connection finished
    for (std::size_t i = 0; i < run.conns.size(); ++i) {
      if (!run.conns[i]->finished()) run.error(i, "timeout", "still open 10 s after the load");
    }
    run.ioc.stop();
  });
  for (auto& conn : run.conns) conn->begin();
}

void ClientConn::setup_done() {
  if (--run_.setting_up == 0) start_load(run_);
}

bool parse_url(std::string_view url, ClientOptions& options) {
  constexpr std::string_view kScheme = "ws://";
  if (!url.starts_with(kScheme)) return false;
  url.remove_prefix(kScheme.size());
  const auto slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  options.path = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  return split_host_port(authority, options.host, options.port);
}

double percentile(std::vector<std::uint32_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank.
  auto rank = static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

int client_usage(std::string_view why) {
  std::cerr << "sluice-wsbench client: " << why
            << "\nusage: sluice-wsbench client --url ws://HOST:PORT/PATH --connections N "
               "--size BYTES --seconds S\n";
  return 2;
}

int run_client(int argc, char** argv) {
  ClientOptions options;
  bool have_url = false;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) return client_usage("missing value after " + std::string(arg));
    const std::string_view value = argv[++i];
    if (arg == "--url") {
      if (!parse_url(value, options)) return client_usage("--url: ws://HOST:PORT[/PATH] expected");
      have_url = true;
    } else if (arg == "--connections") {
      if (!parse_number(value, options.connections) || options.connections < 1 ||
          options.connections > 10000) {
        return client_usage("--connections: 1 to 10000");
      }
    } else if (arg == "--size") {
      if (!parse_number(value, options.size) || options.size > kSizeMax) {
        return client_usage("--size: 0 to 268435456 bytes");
      }
    } else if (arg == "--seconds") {
      try {
        options.seconds = std::stod(std::string(value));
      } catch (const std::exception&) {
        options.seconds = 0;
      }
      if (!(options.seconds > 0 && options.seconds <= 3600)) {
        return client_usage("--seconds: more than 0, at most 3600");
      }
    } else {
      return client_usage("unknown argument " + std::string(arg));
    }
  }
  if (!have_url || options.connections == 0 || options.seconds == 0) {
    return client_usage("--url, --connections, --size and --seconds are required");
  }

  asio::io_context ioc{1};
  Run run(ioc, options);
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  run.endpoints = resolver.resolve(options.host, std::to_string(options.port), ec);
  if (ec) {
    std::cerr << "sluice-wsbench client: cannot resolve " << options.host << ": " << ec.message()
              << "\n";
    return 1;
  }
  run.rtt_us.reserve(1 << 20);
  run.setting_up = run.open = options.connections;
  for (std::size_t i = 0; i < options.connections; ++i) {
    run.conns.push_back(std::make_shared<ClientConn>(run, i));
  }
  run.watchdog.expires_after(kSetupTimeout);
  run.watchdog.async_wait([&run](beast::error_code ec) {
    if (ec || run.loading) return;  // cancelled (re-armed for the load, or all finished)
    run.errors += run.setting_up;
    std::cerr << "sluice-wsbench client: " << run.setting_up
              << " connection(s) not open after 10 s\n";
    run.ioc.stop();
  });
  for (auto& conn : run.conns) conn->start();
  ioc.run();

  const double seconds =
      run.messages ? std::chrono::duration<double>(run.load_end - run.load_start).count() : 0;
  std::sort(run.rtt_us.begin(), run.rtt_us.end());
  const double bytes = 2.0 * static_cast<double>(options.size) * static_cast<double>(run.messages);
  const double rate = seconds > 0 ? static_cast<double>(run.messages) / seconds : 0;
  const double mib = seconds > 0 ? bytes / (1024.0 * 1024.0) / seconds : 0;
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"connections\":%zu,\"size\":%zu,\"seconds\":%.3f,\"messages\":%" PRIu64
                ",\"bytes\":%.0f,\"msgs_per_s\":%.1f,\"mib_per_s\":%.2f,\"p50_us\":%.0f,"
                "\"p99_us\":%.0f,\"p999_us\":%.0f,\"max_us\":%.0f,\"errors\":%" PRIu64 "}",
                options.connections, options.size, seconds, run.messages, bytes, rate, mib,
                percentile(run.rtt_us, 50), percentile(run.rtt_us, 99),
                percentile(run.rtt_us, 99.9), percentile(run.rtt_us, 100), run.errors);
  std::cout << line << std::endl;
  return run.errors || run.messages == 0 ? 1 : 0;
}

int usage() {
  std::cerr << "usage: sluice-wsbench echo --listen HOST:PORT [--quiet]\n"
               "       sluice-wsbench client --url ws://HOST:PORT/PATH --connections N "
               "--size BYTES --seconds S\n";
  return 2;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  try {
    if (argc < 2) return sluice::usage();
    const std::string_view mode = argv[1];
    if (mode == "echo") return sluice::run_echo(argc, argv);
    if (mode == "client") return sluice::run_client(argc, argv);
    return sluice::usage();
  } catch (const std::exception& e) {
    std::cerr << "sluice-wsbench: " << e.what() << "\n";
    return 1;
  }
}
