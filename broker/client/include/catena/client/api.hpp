// CATENA_API: what libcatena.so exports. The library is built with
// -fvisibility=hidden (broker/packaging/CMakeLists.txt), so a class or
// function of the client SDK's public headers (catena/client.hpp and what
// it includes) is visible to programs linked with it only when marked
// CATENA_API. Standard library only: this header is installed.
#pragma once

// CATENA_LOCAL: a class nested in a CATENA_API one that stays inside (its
// pimpl: `class CATENA_LOCAL Publisher::Impl {...}` where it is defined).
#if defined(__GNUC__) || defined(__clang__)
#define CATENA_API __attribute__((visibility("default")))
#define CATENA_LOCAL __attribute__((visibility("hidden")))
#else
#define CATENA_API
#define CATENA_LOCAL
#endif
