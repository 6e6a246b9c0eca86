// Redis Cluster key slots: CRC16 (the XMODEM variant Redis uses) of a key's
// hash part, modulo 16384. The hash part is the text between the first '{'
// and the next '}' when that text is not empty, and the whole key otherwise,
// so keys sharing a hash tag ("{user}.a", "{user}.b") share a slot. Pure.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::redis::cluster {

inline constexpr std::uint16_t kSlotCount = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial value 0) of `bytes`.
std::uint16_t crc16(std::string_view bytes);

// The part of `key` that decides its slot: the hash tag, or the whole key.
std::string_view hash_part(std::string_view key);

// The slot of `key`, 0 to 16383.
std::uint16_t key_slot(std::string_view key);

}  // namespace sluice::redis::cluster
