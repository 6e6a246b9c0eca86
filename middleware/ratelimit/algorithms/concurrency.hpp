// A concurrency limit: at most `capacity` requests in progress at once
// across the fleet. Each admitted request takes one slot, whatever its cost,
// and gives it back when its exchange ends; a slot lives `lease_ms` unless
// its instance renews it, so a crashed instance's slots come back. In Redis a
// sorted set per key, one member per slot (its fleet-unique number) scored by
// the end of its lease. Never reserved, never cached as a denial.
//
// The pure C++ twin of the concurrency section of decide_limits.lua (the
// same arithmetic, checked bit for bit by a component test), and the slot
// numbers the gateway hands out.
#pragma once

#include <cstdint>
#include <string>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"

namespace sluice {

// A new slot number: unique in this process (until 2^32 of them), and across
// the fleet unless two processes draw the same random prefix of 21 bits
// (2^-21 a pair) and their counters of 32 bits, started at random, come
// within the numbers they hand out of each other; below 2^53 so that a
// double holds it exactly. A sliding
// log's request takes one too, to name its units.
double next_slot_number();

// A slot's member in its sorted set: its number in decimal digits, as the
// decision script writes it (appended to `out`: the release command builds it
// in a spare string).
std::string slot_member(double slot);
void append_slot_member(std::string& out, double slot);

// Drops the slots of `state` (their lease ends, in `log`) whose lease has
// ended at `now_us`.
void drop_ended_slots(BucketState& state, std::int64_t now_us);

// The expiry of a concurrency key in milliseconds, set with each slot: its
// lease and a second.
std::int64_t slots_ttl_ms(double lease_ms);

}  // namespace sluice
