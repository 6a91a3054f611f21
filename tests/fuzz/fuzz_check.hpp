// What every fuzz target shares: a check that stops the run with the
// broken property's text (libFuzzer then writes the input to crash-<sha1>,
// which replays with `catena-fuzz-<name> crash-<sha1>`).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
