// One fabric provider per spec in a process, shared by its clients.
//
// Every Publisher and Subscriber (and so every GroupSubscriber partition and
// Mirror) used to open a provider of its own: on verbs a device context and
// protection domains each, on the soft provider an arena, its connection
// manager and prefault threads each, and with `soft:huge=<MiB>` a whole
// arena of reserved huge pages each. A provider may be used from several
// threads for setup (fabric.hpp), and each client's endpoints stay its own,
// so clients of one process that name the same spec share one. It lives as
// long as the last client (or region, or endpoint) holding it.
//
// A child forked after a provider opened does not reuse it: the parent's
// background threads do not exist in the child.
#pragma once

#include <memory>
#include <string_view>

#include <catena/fabric/fabric.hpp>

namespace catena::client_detail {

// The process's provider for `spec`, opened on first use.
fabric::Result<std::shared_ptr<fabric::Provider>> shared_provider(std::string_view spec);

}  // namespace catena::client_detail
