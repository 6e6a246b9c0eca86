// Component tests of the Redis client against a real redis-server.
// Each test runs its own io_context in bounded slices and
// polls for conditions; nothing sleeps to wait for a result.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "support/io_loop.hpp"
#include "support/redis_server_fixture.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace {

using namespace std::chrono_literals;
using RedisClient = sluice::redis::SingleNodeClient;
using RedisError = sluice::redis::Error;
using RedisOptions = sluice::redis::Options;
using RedisReply = sluice::redis::Reply;
using RedisScript = sluice::redis::Script;
using RedisState = sluice::redis::State;
using sluice::test::RedisServerFixture;
using sluice::test::RedisServerOptions;
using sluice::test::TempDir;
using Clock = std::chrono::steady_clock;

using sluice::test::Loop;

struct Result {
  bool done = false;
  std::error_code ec;
  RedisReply reply;
  Clock::duration elapsed{};
};

RedisOptions options_for(std::uint16_t port) {
  RedisOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.command_timeout = 500ms;  // generous: the test machine is shared
  o.connect_timeout = 2000ms;
  return o;
}

std::error_code connect(Loop& loop, RedisClient& client) {
  std::optional<std::error_code> result;
  client.connect([&](std::error_code ec) { result = ec; });
  REQUIRE(loop.run_until([&] { return result.has_value(); }));
  return *result;
}

Result run_command(Loop& loop, RedisClient& client, std::vector<std::string> args) {
  Result r;
  const auto start = Clock::now();
  client.command(std::move(args), [&](std::error_code ec, RedisReply reply) {
    r.done = true;
    r.ec = ec;
    r.reply = std::move(reply);
    r.elapsed = Clock::now() - start;
  });
  REQUIRE(loop.run_until([&] { return r.done; }));
  return r;
}

Result run_evalsha(Loop& loop, RedisClient& client, const RedisScript& script,
                   std::vector<std::string> keys, std::vector<std::string> args) {
  Result r;
  client.evalsha(script, std::move(keys), std::move(args),
                 [&](std::error_code ec, RedisReply reply) {
                   r.done = true;
                   r.ec = ec;
                   r.reply = std::move(reply);
                 });
  REQUIRE(loop.run_until([&] { return r.done; }));
  return r;
}

long long ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

TEST_CASE("redis: error category, messages and metric kinds", "[redis]") {
  const std::error_code ec = RedisError::kTimeout;
  CHECK(ec.category().name() == std::string("redis"));
  CHECK(ec.message() == "redis command timed out");
  CHECK(sluice::redis::error_kind(RedisError::kTimeout) == "timeout");
  CHECK(sluice::redis::error_kind(RedisError::kServer) == "server");
  CHECK(sluice::redis::error_kind(RedisError::kNoScript) == "noscript");
  CHECK(sluice::redis::error_kind(RedisError::kProtocol) == "protocol");
  CHECK(sluice::redis::error_kind(RedisError::kNotConnected) == "connect");
  CHECK(sluice::redis::error_kind(RedisError::kTls) == "connect");
  CHECK(sluice::redis::to_string(RedisState::kBackoff) == "backoff");
  // SHA1 of the empty string.
  CHECK(RedisScript("").sha1() == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

TEST_CASE("redis: GET/SET, reply types and error replies", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  RedisClient client(loop.io.get_executor(), options_for(server.port()));
  CHECK(client.state() == RedisState::kDisconnected);
  REQUIRE_FALSE(connect(loop, client));
  CHECK(client.is_ready());

  auto r = run_command(loop, client, {"SET", "greeting", "hello world"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.type == RedisReply::Type::kStatus);
  CHECK(r.reply.str == "OK");

  r = run_command(loop, client, {"GET", "greeting"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.type == RedisReply::Type::kString);
  CHECK(r.reply.str == "hello world");

  // Binary-safe values.
  const std::string binary("a\0b\r\nc", 6);
  CHECK_FALSE(run_command(loop, client, {"SET", "bin", binary}).ec);
  CHECK(run_command(loop, client, {"GET", "bin"}).reply.str == binary);

  r = run_command(loop, client, {"GET", "missing"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.is_nil());

  r = run_command(loop, client, {"INCRBY", "n", "5"});
  CHECK(r.reply.type == RedisReply::Type::kInteger);
  CHECK(r.reply.integer == 5);

  run_command(loop, client, {"RPUSH", "list", "a", "b"});
  r = run_command(loop, client, {"LRANGE", "list", "0", "-1"});
  REQUIRE(r.reply.type == RedisReply::Type::kArray);
  REQUIRE(r.reply.elements.size() == 2);
  CHECK(r.reply.elements[1].str == "b");

  r = run_command(loop, client, {"NOSUCHCOMMAND"});
  CHECK(r.ec == RedisError::kServer);
  CHECK(r.reply.is_error());
  CHECK(r.reply.str.rfind("ERR", 0) == 0);
  CHECK(client.is_ready());  // an error reply is not a connection problem

  CHECK(run_command(loop, client, {}).ec == RedisError::kProtocol);

  // Completions are posted, never run inside command().
  bool done = false;
  client.command({"PING"}, [&](std::error_code, RedisReply) { done = true; });
  CHECK_FALSE(done);
  REQUIRE(loop.run_until([&] { return done; }));

  // A second connect() on a ready client completes at once, with success.
  CHECK_FALSE(connect(loop, client));
  CHECK(client.stats().connects == 1);
}

TEST_CASE("redis: commands issued together are pipelined into few writes", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  RedisClient client(loop.io.get_executor(), options_for(server.port()));
  REQUIRE_FALSE(connect(loop, client));

  const auto before = client.stats();
  std::vector<long long> values;
  int errors = 0;
  for (int i = 0; i < 100; ++i) {
    client.command({"INCR", "counter"}, [&](std::error_code ec, RedisReply reply) {
      if (ec) ++errors;
      values.push_back(reply.integer);
    });
  }
  REQUIRE(loop.run_until([&] { return values.size() == 100; }));
  CHECK(errors == 0);
  for (int i = 0; i < 100; ++i) CHECK(values[i] == i + 1);  // matched in order

  const auto after = client.stats();
  CHECK(after.commands_sent - before.commands_sent == 100);
  CHECK(after.replies - before.replies == 100);
  CHECK(after.writes - before.writes <= 2);

  // Commands issued while a write is in flight go out together in the next.
  const auto before2 = client.stats();
  int done = 0;
  for (int burst = 0; burst < 10; ++burst) {
    for (int i = 0; i < 10; ++i) {
      client.command({"PING"}, [&](std::error_code ec, RedisReply) { done += ec ? 0 : 1; });
    }
    loop.io.poll_one();  // lets at most one handler (e.g. a flush) run between bursts
  }
  REQUIRE(loop.run_until([&] { return done == 100; }));
  const auto after2 = client.stats();
  CHECK(after2.commands_sent - before2.commands_sent == 100);
  CHECK(after2.writes - before2.writes <= 20);
  INFO("writes for 100 commands in 10 bursts: " << after2.writes - before2.writes);
}

TEST_CASE("redis: command deadline while the server is stopped", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  auto opts = options_for(server.port());
  opts.command_timeout = 200ms;
  opts.stuck_timeout = 10000ms;  // keep the connection: this test is about late replies
  RedisClient client(loop.io.get_executor(), opts);
  REQUIRE_FALSE(connect(loop, client));
  REQUIRE_FALSE(run_command(loop, client, {"SET", "a", "1"}).ec);

  server.pause();
  auto r = run_command(loop, client, {"GET", "a"});
  CHECK(r.ec == RedisError::kTimeout);
  CHECK(ms(r.elapsed) >= 200);
  CHECK(ms(r.elapsed) < 200 + 500);
  r = run_command(loop, client, {"SET", "b", "2"});
  CHECK(r.ec == RedisError::kTimeout);
  r = run_command(loop, client, {"INCR", "c"});
  CHECK(r.ec == RedisError::kTimeout);
  CHECK(client.is_ready());
  server.resume();

  // The three late replies are read and dropped; later commands get their own.
  r = run_command(loop, client, {"GET", "a"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.str == "1");
  CHECK(run_command(loop, client, {"GET", "b"}).reply.str == "2");
  CHECK(run_command(loop, client, {"GET", "c"}).reply.str == "1");
  const auto stats = client.stats();
  CHECK(stats.timeouts == 3);
  CHECK(stats.late_replies == 3);
  CHECK(stats.reconnects == 0);
}

TEST_CASE("redis: a stuck connection is replaced", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  auto opts = options_for(server.port());
  opts.command_timeout = 200ms;
  opts.stuck_timeout = 400ms;
  opts.connect_timeout = 200ms;
  RedisClient client(loop.io.get_executor(), opts);
  REQUIRE_FALSE(connect(loop, client));

  server.pause();
  CHECK(run_command(loop, client, {"PING"}).ec == RedisError::kTimeout);
  REQUIRE(loop.run_until([&] { return client.stats().reconnects == 1; }, 2000ms));
  CHECK_FALSE(client.is_ready());
  CHECK(client.last_error() == RedisError::kConnectionLost);
  // While the server stays stopped, commands fail fast instead of queueing.
  auto r = run_command(loop, client, {"PING"});
  CHECK(r.ec == RedisError::kNotConnected);
  CHECK(ms(r.elapsed) < 50);

  server.resume();
  REQUIRE(loop.run_until([&] { return client.is_ready(); }));
  r = run_command(loop, client, {"PING"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.str == "PONG");
}

TEST_CASE("redis: commands fail fast while redis is down", "[redis]") {
  Loop loop;

  SECTION("never reachable") {
    auto opts = options_for(sluice::test::pick_free_port());  // nothing listens there
    RedisClient client(loop.io.get_executor(), opts);
    auto r = run_command(loop, client, {"PING"});
    CHECK(r.ec == RedisError::kNotConnected);
    CHECK(ms(r.elapsed) < 50);
    CHECK(connect(loop, client) == RedisError::kConnect);
    CHECK(client.last_error() == RedisError::kConnect);
    CHECK_FALSE(client.last_error_message().empty());

    // Many callers do not make many connect attempts: one at a time, with backoff.
    const auto start = Clock::now();
    int failed_fast = 0;
    while (Clock::now() - start < 300ms) {
      for (int i = 0; i < 10; ++i) {
        client.command({"PING"}, [&](std::error_code ec, RedisReply) {
          if (ec == RedisError::kNotConnected) ++failed_fast;
        });
      }
      loop.io.run_for(10ms);
    }
    loop.io.run_for(10ms);
    CHECK(failed_fast > 100);
    // 300 ms of 50 ms doubling backoff (with jitter) allows only a handful of attempts.
    CHECK(client.stats().connect_failures <= 8);
  }

  SECTION("lost after connecting") {
    RedisServerFixture server;
    RedisClient client(loop.io.get_executor(), options_for(server.port()));
    REQUIRE_FALSE(connect(loop, client));
    server.stop();
    REQUIRE(loop.run_until([&] { return !client.is_ready(); }));
    CHECK(client.stats().reconnects == 1);
    for (int i = 0; i < 5; ++i) {
      auto r = run_command(loop, client, {"PING"});
      CHECK(r.ec == RedisError::kNotConnected);
      CHECK(ms(r.elapsed) < 50);
    }
  }
}

TEST_CASE("redis: reconnects after a restart", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  RedisClient client(loop.io.get_executor(), options_for(server.port()));
  REQUIRE_FALSE(connect(loop, client));
  REQUIRE_FALSE(run_command(loop, client, {"SET", "k", "v"}).ec);

  server.restart();  // same port, empty data set
  REQUIRE(loop.run_until(
      [&] { return client.stats().reconnects == 1 && client.stats().connects == 2; }));
  CHECK(client.is_ready());
  auto r = run_command(loop, client, {"GET", "k"});
  CHECK_FALSE(r.ec);
  CHECK(r.reply.is_nil());  // a new server indeed
  CHECK_FALSE(run_command(loop, client, {"SET", "k", "v2"}).ec);
  CHECK(run_command(loop, client, {"GET", "k"}).reply.str == "v2");
}

TEST_CASE("redis: evalsha survives SCRIPT FLUSH and restarts", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  RedisClient client(loop.io.get_executor(), options_for(server.port()));
  const RedisScript script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  REQUIRE_FALSE(connect(loop, client));

  // First use: SCRIPT LOAD goes out in the same write, no NOSCRIPT round trip.
  auto r = run_evalsha(loop, client, script, {"bucket"}, {"2"});
  REQUIRE_FALSE(r.ec);
  CHECK(r.reply.integer == 2);
  CHECK(client.stats().noscript_retries == 0);
  CHECK(server.command({"SCRIPT", "EXISTS", script.sha1()}) == "[(integer) 1]");

  // The cache is flushed behind our back: retried once, invisibly.
  CHECK(server.command({"SCRIPT", "FLUSH"}) == "OK");
  r = run_evalsha(loop, client, script, {"bucket"}, {"2"});
  REQUIRE_FALSE(r.ec);
  CHECK(r.reply.integer == 4);
  CHECK(client.stats().noscript_retries == 1);
  r = run_evalsha(loop, client, script, {"bucket"}, {"2"});
  CHECK(r.reply.integer == 6);
  CHECK(client.stats().noscript_retries == 1);  // EVAL cached it again

  // A restarted server gets the script in the handshake: no failure, no retry.
  server.restart();
  REQUIRE(loop.run_until([&] { return client.stats().connects == 2 && client.is_ready(); }));
  r = run_evalsha(loop, client, script, {"bucket"}, {"3"});
  REQUIRE_FALSE(r.ec);
  CHECK(r.reply.integer == 3);
  CHECK(client.stats().noscript_retries == 1);

  // A plain EVALSHA of an unknown script reports kNoScript.
  r = run_command(loop, client, {"EVALSHA", std::string(40, '0'), "0"});
  CHECK(r.ec == RedisError::kNoScript);

  // Script errors are server errors, not retried.
  const RedisScript bad("return redis.call('NOSUCHCOMMAND')");
  r = run_evalsha(loop, client, bad, {}, {});
  CHECK(r.ec == RedisError::kServer);
  CHECK(r.reply.is_error());
}

TEST_CASE("redis: AUTH with an ACL user; a wrong password is an auth error", "[redis]") {
  RedisServerFixture server;
  REQUIRE(server.command({"ACL", "SETUSER", "sluice", "on", ">secret", "~*", "+get", "+set",
                          "+evalsha", "+eval", "+script", "+ping", "+select"}) == "OK");
  Loop loop;

  SECTION("right password") {
    auto opts = options_for(server.port());
    opts.user = "sluice";
    opts.password = "secret";
    RedisClient client(loop.io.get_executor(), opts);
    REQUIRE_FALSE(connect(loop, client));
    CHECK_FALSE(run_command(loop, client, {"SET", "k", "v"}).ec);
    CHECK(run_command(loop, client, {"GET", "k"}).reply.str == "v");
    auto r = run_command(loop, client, {"FLUSHALL"});
    CHECK(r.ec == RedisError::kServer);
    CHECK(r.reply.str.rfind("NOPERM", 0) == 0);
  }

  SECTION("wrong password") {
    auto opts = options_for(server.port());
    opts.user = "sluice";
    opts.password = "wrong";
    RedisClient client(loop.io.get_executor(), opts);
    CHECK(connect(loop, client) == RedisError::kAuth);
    CHECK(client.last_error() == RedisError::kAuth);
    CHECK(run_command(loop, client, {"PING"}).ec == RedisError::kNotConnected);
  }
}

TEST_CASE("redis: requirepass for the default user", "[redis]") {
  RedisServerFixture server(RedisServerOptions{false, {"--requirepass", "pw"}});
  Loop loop;

  auto opts = options_for(server.port());
  RedisClient without(loop.io.get_executor(), opts);
  CHECK(connect(loop, without) == RedisError::kAuth);  // NOAUTH on the handshake PING

  opts.password = "pw";
  RedisClient with(loop.io.get_executor(), opts);
  REQUIRE_FALSE(connect(loop, with));
  CHECK(run_command(loop, with, {"PING"}).reply.str == "PONG");
}

TEST_CASE("redis: SELECT db during the handshake", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  auto opts = options_for(server.port());
  opts.db = 3;
  RedisClient db3(loop.io.get_executor(), opts);
  REQUIRE_FALSE(connect(loop, db3));
  CHECK_FALSE(run_command(loop, db3, {"SET", "k", "in-3"}).ec);

  RedisClient db0(loop.io.get_executor(), options_for(server.port()));
  REQUIRE_FALSE(connect(loop, db0));
  CHECK(run_command(loop, db0, {"GET", "k"}).reply.is_nil());
  CHECK(server.commands({{"SELECT", "3"}, {"GET", "k"}}).back() == "in-3");

  opts.db = 99;  // out of range: the handshake fails, it is not an auth problem
  RedisClient bad(loop.io.get_executor(), opts);
  CHECK(connect(loop, bad) == RedisError::kServer);
}

namespace {

// A throwaway CA, a server certificate for 127.0.0.1 / localhost, a client
// certificate, and an unrelated CA; made with the openssl command.
void make_certificates(const TempDir& dir) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "cd '" + dir.path() + "' && (" + "openssl req -x509 " + ec +
      " -keyout ca.key -out ca.crt -days 2 -subj /CN=sluice-test-ca" + " && openssl req -x509 " +
      ec + " -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca" +
      " && openssl req " + ec + " -keyout server.key -out server.csr -subj /CN=localhost" +
      " && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext" +
      " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial" +
      " -out server.crt -days 2 -extfile server.ext" + " && openssl req " + ec +
      " -keyout client.key -out client.csr -subj /CN=sluice-client" +
      " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial" +
      " -out client.crt -days 2) > openssl.log 2>&1";
  REQUIRE(std::system(script.c_str()) == 0);
}

RedisServerOptions tls_server_options(const TempDir& certs, bool auth_clients) {
  return RedisServerOptions{true,
                            {"--tls-cert-file", certs.file("server.crt"), "--tls-key-file",
                             certs.file("server.key"), "--tls-ca-cert-file", certs.file("ca.crt"),
                             "--tls-auth-clients", auth_clients ? "yes" : "no"}};
}

}  // namespace

TEST_CASE("redis: TLS with a verified server certificate", "[redis]") {
  TempDir certs;
  make_certificates(certs);
  RedisServerFixture server(tls_server_options(certs, false));
  Loop loop;
  auto opts = options_for(server.port());
  opts.tls = true;
  opts.ca_file = certs.file("ca.crt");

  SECTION("verified by IP address") {
    RedisClient client(loop.io.get_executor(), opts);
    REQUIRE_FALSE(connect(loop, client));
    CHECK_FALSE(run_command(loop, client, {"SET", "k", "over tls"}).ec);
    CHECK(run_command(loop, client, {"GET", "k"}).reply.str == "over tls");
  }

  SECTION("verified by server name") {
    opts.server_name = "localhost";
    RedisClient client(loop.io.get_executor(), opts);
    REQUIRE_FALSE(connect(loop, client));
    CHECK(run_command(loop, client, {"PING"}).reply.str == "PONG");
  }

  SECTION("wrong CA") {
    opts.ca_file = certs.file("other-ca.crt");
    RedisClient client(loop.io.get_executor(), opts);
    CHECK(connect(loop, client) == RedisError::kTls);
    INFO(client.last_error_message());
    CHECK(client.last_error_message().find("certificate verify failed") != std::string::npos);
    CHECK(run_command(loop, client, {"PING"}).ec == RedisError::kNotConnected);
  }

  SECTION("name mismatch") {
    opts.server_name = "redis.example.com";
    RedisClient client(loop.io.get_executor(), opts);
    CHECK(connect(loop, client) == RedisError::kTls);
  }

  SECTION("missing CA file") {
    opts.ca_file = certs.file("no-such-ca.crt");
    RedisClient client(loop.io.get_executor(), opts);
    CHECK(connect(loop, client) == RedisError::kTls);
  }

  SECTION("plain TCP to a TLS port fails") {
    opts.tls = false;
    opts.connect_timeout = 300ms;
    RedisClient client(loop.io.get_executor(), opts);
    CHECK(connect(loop, client));
  }
}

TEST_CASE("redis: TLS with a client certificate", "[redis]") {
  TempDir certs;
  make_certificates(certs);
  RedisServerFixture server(tls_server_options(certs, true));
  Loop loop;
  auto opts = options_for(server.port());
  opts.tls = true;
  opts.ca_file = certs.file("ca.crt");
  opts.connect_timeout = 1000ms;

  SECTION("with a certificate") {
    opts.cert_file = certs.file("client.crt");
    opts.key_file = certs.file("client.key");
    RedisClient client(loop.io.get_executor(), opts);
    REQUIRE_FALSE(connect(loop, client));
    CHECK(run_command(loop, client, {"PING"}).reply.str == "PONG");
  }

  SECTION("without a certificate") {
    RedisClient client(loop.io.get_executor(), opts);
    const auto ec = connect(loop, client);
    INFO(client.last_error_message());
    CHECK((ec == RedisError::kTls || ec == RedisError::kConnect));
  }
}

TEST_CASE("redis: close completes pending work and stops reconnecting", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  RedisClient client(loop.io.get_executor(), options_for(server.port()));
  REQUIRE_FALSE(connect(loop, client));

  Result pending;
  client.command({"PING"}, [&](std::error_code ec, RedisReply) {
    pending.done = true;
    pending.ec = ec;
  });
  client.close();
  CHECK(client.state() == RedisState::kClosed);
  REQUIRE(loop.run_until([&] { return pending.done; }));
  CHECK(pending.ec == RedisError::kClosed);
  CHECK(run_command(loop, client, {"PING"}).ec == RedisError::kClosed);
  CHECK(connect(loop, client) == RedisError::kClosed);
  client.close();  // idempotent
  loop.io.run_for(100ms);
  CHECK(client.stats().connects == 1);
}

TEST_CASE("redis: connect_now cuts a reconnect backoff short; connect waits it out", "[redis]") {
  RedisServerFixture server;
  Loop loop;
  auto opts = options_for(server.port());
  opts.backoff_initial = 5000ms;  // far longer than the test waits
  opts.backoff_max = 5000ms;
  RedisClient client(loop.io.get_executor(), opts);
  REQUIRE_FALSE(connect(loop, client));
  server.stop();
  REQUIRE(loop.run_until([&] { return client.state() == RedisState::kBackoff; }));
  server.start();

  // connect(): the answer waits for the next attempt, after the backoff.
  bool waited_done = false;
  client.connect([&](std::error_code) { waited_done = true; });
  loop.io.run_for(300ms);
  CHECK_FALSE(waited_done);
  CHECK_FALSE(client.is_ready());

  // connect_now(): tries at once, and every waiter gets its answer.
  std::optional<std::error_code> now;
  const auto start = Clock::now();
  client.connect_now([&](std::error_code ec) { now = ec; });
  REQUIRE(loop.run_until([&] { return now.has_value() && waited_done; }, 2000ms));
  CHECK_FALSE(*now);
  CHECK(client.is_ready());
  CHECK(Clock::now() - start < 2000ms);
  CHECK_FALSE(run_command(loop, client, {"PING"}).ec);
}
