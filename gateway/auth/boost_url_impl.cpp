// Boost.URL compiled once, into the gateway library (Debian ships its headers only).
#include <boost/url/src.hpp>
