// libcatena.so's own symbol: the version the library was built as, for a
// program to compare with the headers it was compiled against
// (CATENA_VERSION in <catena/version.hpp>).
#include <catena/version.hpp>

extern "C" const char* catena_version() noexcept {
  return CATENA_VERSION;
}
