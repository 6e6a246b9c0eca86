#pragma once
// Fields of a head found by one pass over them. Beast's own lookup by a known
// field turns its enum back into a name and walks a tree of names compared
// without case, some 250 instructions a lookup; the parser has tagged each
// field it read with its enum, and a head holds a handful of fields, so a pass
// comparing tags costs a fraction of that. A name Beast does not know
// (X-Forwarded-For) is compared as text, only with fields it does not know
// either. Pure code.

#include <cstddef>
#include <string_view>

#include <boost/beast/http/field.hpp>

#include "common/ascii.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

// A field's name as a pass compares it: its enum, or for a name Beast does not
// know, its text. Made once (a static) per name a caller looks for.
struct FieldName {
  boost::beast::http::field id;
  std::string_view text;

  explicit FieldName(boost::beast::http::field known) : id(known) {}
  explicit FieldName(std::string_view name)
      : id(boost::beast::http::string_to_field(name)), text(name) {}

  bool names(const HttpFields::value_type& f) const {
    if (id != boost::beast::http::field::unknown) return f.name() == id;
    return f.name() == boost::beast::http::field::unknown && ascii::iequals(f.name_string(), text);
  }
};

// Calls fn(value) for each line of `name`, in the order they came.
template <class Fn>
void for_each_field(const HttpFields& fields, const FieldName& name, Fn&& fn) {
  for (const auto& f : fields) {
    if (name.names(f)) fn(std::string_view(f.value()));
  }
}

inline std::size_t count_field(const HttpFields& fields, const FieldName& name) {
  std::size_t n = 0;
  for (const auto& f : fields) n += name.names(f) ? 1 : 0;
  return n;
}

// The first line's value, or an empty view when there is none.
inline std::string_view field_value(const HttpFields& fields,
                                    const FieldName& name) {
  for (const auto& f : fields) {
    if (name.names(f)) return f.value();
  }
  return {};
}

inline std::size_t count_field(const HttpFields& fields,
                               boost::beast::http::field name) {
  return count_field(fields, FieldName(name));
}

inline std::string_view field_value(const HttpFields& fields,
                                    boost::beast::http::field name) {
  return field_value(fields, FieldName(name));
}

}  // namespace sluice
