#include "db/chrome_trace.hpp"
