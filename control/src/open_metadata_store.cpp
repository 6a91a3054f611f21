// open_metadata_store(): which MetadataStore a location names.
#include <catena/control/metadata_store.hpp>
#include <catena/control/zk_metadata_store.hpp>

namespace catena::control {

Result<std::unique_ptr<MetadataStore>> open_metadata_store(std::string_view location,
                                                           DirMetadataStore::Options dir,
                                                           std::chrono::milliseconds zk_session_timeout,
                                                           std::chrono::milliseconds zk_connect_timeout) {
  if (location.empty()) {
    auto store = DirMetadataStore::open(std::move(dir));
    if (!store) return store.error();
    return std::unique_ptr<MetadataStore>(std::move(*store));
  }
  auto zk = parse_zk_location(location);
  if (!zk) return zk.error();
  ZkMetadataStore::Options options;
  options.location = std::move(*zk);
  options.session_timeout = zk_session_timeout;
  options.connect_timeout = zk_connect_timeout;
  auto store = ZkMetadataStore::open(std::move(options));
  if (!store) return store.error();
  return std::unique_ptr<MetadataStore>(std::move(*store));
}

}  // namespace catena::control
