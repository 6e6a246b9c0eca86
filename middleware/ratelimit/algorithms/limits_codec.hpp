// The Lua script that decides all limits of one request atomically in Redis
// (token buckets, sliding windows and quotas, mixed), and its SHA1 for
// EVALSHA. middleware/ratelimit/algorithms/limits.hpp holds its pure C++
// twin; the two must stay in step (a component test checks).
//
// Numbers cross the wire as raw little-endian IEEE doubles (struct.pack in the
// script, memcpy here): exact, and far cheaper for Redis than decimal text.
// Call: EVALSHA sha N key_1..key_N numbers ttl_1..ttl_N deadline, where `numbers` is
// the doubles cost, then per key kind, capacity and the three numbers of its
// algorithm (AlgorithmRow::script_numbers: a token bucket's refill per second,
// lease want and max wait in seconds; a sliding window's length in seconds, 0
// and max wait; a quota's period start, end and the next period's end in
// microseconds), 8 bytes each, and ttl_i the key's decimal expiry in ms
// (AlgorithmRow::key_ttl_ms; a quota's key expires a second after the period
// that Redis' clock picks) and `deadline` the decimal Redis time in us past which the
// call changes nothing and fails (set_deadline_after). kind: the row's script_kind (0 token bucket,
// 2 sliding window, 4 quota), plus 1 when the key is shadow (decided, and debited when it fits
// `cost`, but never denying). Reply: a flat array {allowed, then per key: sufficient, numbers}:
// allowed and sufficient are integers 0/1, numbers a 40-byte string holding the doubles remaining,
// seconds_to_cost, seconds_to_full (+infinity for a wait that never ends: cost > capacity, or a
// refill rate of 0; a quota: to the period's end), leased and wait (seconds the request waits for a
// reserved key; 0 otherwise). One enforced key (the hot path) replies with one 48-byte string
// instead, which Redis returns for less than a table: the double
// allowed + 2 * sufficient, then its numbers.
// Time is Redis' TIME. A token bucket is stored as one 16-byte string, two
// little-endian IEEE doubles (tokens, timestamp in microseconds); a sliding
// window as a 24-byte string, three doubles (window index, its count, the
// previous window's count); a quota as 16 bytes, its period's end in
// microseconds and the units used in it. A key is written only when the
// request is allowed, with its expiry in the same SET. A value of another
// shape counts as absent.
//
// The refund script (refund_limits.lua) takes the same KEYS and ttls,
// with `numbers` holding per key kind, units, capacity and the algorithm's
// first number. It gives the units back to each token bucket that exists,
// refilled to now and capped at capacity; takes them off a window's latest
// count (never below 0) while that window is the current or the previous
// one, and off a quota's count while its period lasts: a lease's unspent
// rest, what a Redis Cluster decision debited in a slot for a request another
// slot denied, or a reservation whose client left. Reply: an integer, the
// limits refunded.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

// The bytes of decide_limits.lua, refund_limits.lua and renew_slots.lua.
extern const std::string_view kDecideLimitsScript;
extern const std::string_view kRefundLimitsScript;
extern const std::string_view kRenewSlotsScript;

// One element of the script's reply as the Redis client decoded it: an
// integer reply, or a string reply (`text`).
struct ScriptReplyValue {
  bool is_string = false;
  long long integer = 0;
  std::string_view text;
};

// One request of a batch call: its one enforced key and its cost.
struct BatchRequest {
  const LimitDescriptor* bucket = nullptr;
  double cost = 1;
};

class LimitsCodec {
 public:
  std::string_view script() const { return kDecideLimitsScript; }
  std::string_view refund_script() const { return kRefundLimitsScript; }
  std::string_view renew_script() const { return kRenewSlotsScript; }

  // A decision call's last ARGV is its deadline in Redis' time: the estimate
  // of Redis' time when it is encoded (redis_clock.hpp) plus this. The script
  // changes nothing when it runs later. The limiter sets it a little below its
  // command timeout, so that an answer Redis gives before the deadline is
  // back before the gateway stops waiting.
  void set_deadline_after(std::chrono::microseconds after) { deadline_after_us_ = after.count(); }

  // The ARGV of one call (KEYS, one per descriptor in the same order, are the
  // caller's). The numbers are the raw doubles, so the script computes with
  // exactly the doubles the gateway holds.
  std::vector<std::string> encode_args(std::span<const LimitDescriptor> limits, double cost) const;

  // The ARGV of a batch call, several requests of one enforced key (token
  // bucket or sliding window) each (KEYS: one per request, in the same order): an empty first
  // argument ("h" when a bucket comes more than once: the script then reads and
  // writes each such key once per call), then one argument of every request's
  // numbers (kBatchRequestSize bytes each: its cost, its key's five numbers and
  // the key's ttl in ms), then the deadline. The script decides them in
  // order, each as it would alone.
  std::vector<std::string> encode_batch_args(std::span<const BatchRequest> requests) const;
  // Whether `args` are a batch call's (encode_batch_args, or a node batch's).
  static bool is_batch(std::span<const std::string> args);

  // The ARGV of a node batch: requests of one enforced key each whose keys
  // are in several slots of one Redis Cluster node, `keys` in the requests'
  // order. As a batch's, with "n" first ("nh" when a bucket comes more than
  // once) and the keys between the numbers and the deadline; the call's one
  // KEYS entry is one of them, so that the cluster routes it to that node
  // (Redis lets a script read and write keys of other slots the node serves
  // without declaring them). The script answers '' for a request whose key
  // the node does not serve (a slot that moved), and writes nothing for it.
  std::vector<std::string> encode_node_batch_args(std::span<const BatchRequest> requests,
                                                  std::span<const std::string> keys) const;
  static bool is_node_batch(std::span<const std::string> args);
  // A node batch's keys (empty for other args).
  static std::span<const std::string> node_batch_keys(std::span<const std::string> args);

  // The ARGV of a refund call (KEYS: one per refund, in the same order).
  std::vector<std::string> encode_refund_args(std::span<const BucketRefund> refunds) const;

  // A decision call that Redis ran after its caller had stopped waiting (a
  // reply held back by Redis or the network past the timeout): the refund
  // call that gives back all it took. `keys` and `args` as the call was sent,
  // `decisions` what its reply held (one for a call of one request, one per
  // request of a batch). Each admitted request's cost (and lease) on every
  // key it debited, its slot released, its log entries removed. Empty keys
  // when it took nothing or the shapes do not match.
  struct UndoCall {
    std::vector<std::string> keys;
    std::vector<std::string> args;
    std::size_t requests = 0;  // admitted requests undone
  };
  UndoCall undo_call(std::span<const std::string> keys, std::span<const std::string> args,
                     std::span<const RateDecision> decisions) const;
  // The part of `undo` that gives back to its keys at `indexes` (on a Redis
  // Cluster, a refund call per slot); its `requests` is 0.
  static UndoCall undo_part(const UndoCall& undo, std::span<const std::size_t> indexes);

  // The ARGV of a renew_slots.lua call (KEYS: one per slot, in the same
  // order): per slot its number and its lease in ms.
  std::vector<std::string> encode_renew_args(std::span<const LimitDescriptor> slots) const;

  // The decision in a reply for `limit_count` buckets; nullopt when the reply
  // does not have that shape (a protocol error for the caller).
  std::optional<RateDecision> decode(std::span<const ScriptReplyValue> values,
                                     std::size_t limit_count) const;

  // The decisions in a batch call's reply, one per request in order; nullopt
  // when it is not one packed string per request.
  std::optional<std::vector<RateDecision>> decode_batch(std::span<const ScriptReplyValue> values,
                                                        std::size_t request_count) const;
  // A node batch's reply: as decode_batch's, with nullopt for each request
  // the node did not decide (its '').
  std::optional<std::vector<std::optional<RateDecision>>> decode_node_batch(
      std::span<const ScriptReplyValue> values, std::size_t request_count) const;

 private:
  std::optional<RateDecision> decode_one(std::string_view numbers) const;
  std::string deadline_arg() const;

  std::int64_t deadline_after_us_ = 60'000'000;
};

}  // namespace sluice
