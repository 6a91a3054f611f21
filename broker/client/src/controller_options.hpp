// The controller client's options for a controller list a program gave
// (catena::connect, catena::Admin::connect): the list checked now, so that
// a typo is an invalid_argument at once rather than controller_unavailable
// on the first call.
#pragma once

#include <string>

#include <catena/client/connect.hpp>
#include <catena/client/error.hpp>
#include <catena/control/controller_client.hpp>

namespace catena::client_detail {

// `what` names the caller in the message ("connect", "admin").
client::Result<control::ControllerClient::Options> controller_options(const std::string& controllers,
                                                                      const ConnectOptions& options,
                                                                      const char* what);

}  // namespace catena::client_detail
