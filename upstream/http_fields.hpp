// The fields of every HTTP head Sluice parses or builds (requests and
// responses, both protocols, trailers), and where their memory comes from.
//
// Beast allocates each field on its own (a node with the name and value
// beside it) and frees it when the head is done with, so every request cost
// one malloc and free per field of its head and of its response's. The
// fields' allocator is the per-thread block cache (upstream/
// block_allocator.hpp): a request on a warm worker allocates none. The
// allocator has no state, so any two heads' fields are the same type and may
// be copied, moved and swapped.
#pragma once

#include <boost/beast/http/fields.hpp>

#include "upstream/block_allocator.hpp"

namespace sluice {

template <class T>
using FieldAllocator = BlockAllocator<T>;

using HttpFields = boost::beast::http::basic_fields<FieldAllocator<char>>;

}  // namespace sluice
