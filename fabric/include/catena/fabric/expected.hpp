// catena::Expected, where the fabric's code has always included it from:
// the template itself is <catena/expected.hpp> (standard library only, so
// the client SDK's public headers include it too).
#pragma once

#include <catena/expected.hpp>
