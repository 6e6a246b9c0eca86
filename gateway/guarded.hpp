// Exceptions on the data path: see gateway/common/guarded.hpp, where it lives
// so that upstream/ can use it too.
#pragma once

#include "gateway/common/guarded.hpp"
