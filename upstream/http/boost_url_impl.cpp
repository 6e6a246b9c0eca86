// Boost.URL compiled once, into the upstream library (Debian ships its headers only).
#include <boost/url/src.hpp>
