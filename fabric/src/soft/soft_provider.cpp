#include <catena/fabric/fabric.hpp>

namespace catena::fabric {

Result<std::unique_ptr<Provider>> open_soft_provider(std::string_view options) {
  return make_error(Errc::no_device, "soft provider under construction: " + std::string(options));
}

}  // namespace catena::fabric
