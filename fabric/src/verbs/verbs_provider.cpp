#include <catena/fabric/fabric.hpp>

namespace catena::fabric {

Result<std::unique_ptr<Provider>> open_verbs_provider(std::string_view device) {
  return make_error(Errc::no_device, "verbs provider under construction: " + std::string(device));
}

}  // namespace catena::fabric
