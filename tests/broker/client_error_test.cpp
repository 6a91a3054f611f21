// The client API's one error vocabulary (client_error.hpp): every code of
// the three below it (fabric::Errc, chain::wire::Status and the
// controller's ErrorCode) maps to a client::ErrorCode, and retriable() says
// "try again later" for the transient ones (controller or replicas
// unreachable, timeouts, reconfiguration) and "fix the call" for the
// caller's mistakes (bad argument, unknown channel). At the API, a
// controller that is down and a bad argument now read differently.
#include <gtest/gtest.h>
#include <set>
#include <string>

#include <catena/broker/client_error.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>

namespace catena {
namespace {

using client::ErrorCode;

TEST(ClientError, EveryCodeHasItsOwnName) {
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(ErrorCode::corrupt); ++c) {
    const auto name = client::to_string(static_cast<ErrorCode>(c));
    EXPECT_NE(name, "unknown") << c;
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_FALSE(client::retriable(ErrorCode::ok));
}

TEST(ClientError, FabricCodesMap) {
  using fabric::Errc;
  EXPECT_EQ(client::from(Errc::ok), ErrorCode::ok);
  for (int c = 1; c <= static_cast<int>(Errc::io_error); ++c) {
    EXPECT_NE(client::from(static_cast<Errc>(c)), ErrorCode::ok) << fabric::to_string(static_cast<Errc>(c));
  }
  for (Errc transient : {Errc::not_connected, Errc::disconnected, Errc::refused}) {
    EXPECT_EQ(client::from(transient), ErrorCode::unavailable) << fabric::to_string(transient);
  }
  EXPECT_EQ(client::from(Errc::timeout), ErrorCode::timeout);
  EXPECT_EQ(client::from(Errc::backpressure), ErrorCode::backpressure);
  EXPECT_EQ(client::from(Errc::invalid_argument), ErrorCode::invalid_argument);
  EXPECT_EQ(client::from(Errc::too_large), ErrorCode::too_large);
  EXPECT_EQ(client::from(Errc::no_device), ErrorCode::no_device);
  for (Errc e : {Errc::not_connected, Errc::disconnected, Errc::refused, Errc::timeout, Errc::backpressure,
                 Errc::resource_exhausted}) {
    EXPECT_TRUE(client::retriable(client::from(e))) << fabric::to_string(e);
  }
  for (Errc e : {Errc::invalid_argument, Errc::too_large, Errc::no_device, Errc::remote_access}) {
    EXPECT_FALSE(client::retriable(client::from(e))) << fabric::to_string(e);
  }
}

TEST(ClientError, WireStatusesMap) {
  using chain::wire::Status;
  EXPECT_EQ(client::from(Status::ok), ErrorCode::ok);
  for (int s = 1; s <= static_cast<int>(Status::unauthenticated); ++s) {
    EXPECT_NE(client::from(static_cast<Status>(s)), ErrorCode::ok)
        << chain::wire::to_string(static_cast<Status>(s));
  }
  EXPECT_EQ(client::from(Status::unknown_channel), ErrorCode::unknown_channel);
  EXPECT_EQ(client::from(Status::bad_request), ErrorCode::invalid_argument);
  EXPECT_EQ(client::from(Status::unavailable), ErrorCode::unavailable);
  EXPECT_EQ(client::from(Status::log_full), ErrorCode::backpressure);
  EXPECT_EQ(client::from(Status::producer_fenced), ErrorCode::producer_fenced);
  EXPECT_EQ(client::from(Status::data_lost), ErrorCode::data_lost);
  for (Status s : {Status::stale_epoch, Status::not_head, Status::not_ready, Status::not_tail,
                   Status::unavailable, Status::resource_exhausted, Status::log_full}) {
    EXPECT_TRUE(client::retriable(client::from(s))) << chain::wire::to_string(s);
  }
  for (Status s : {Status::unknown_channel, Status::bad_request, Status::too_large, Status::producer_fenced,
                   Status::position_expired, Status::data_lost, Status::unauthenticated}) {
    EXPECT_FALSE(client::retriable(client::from(s))) << chain::wire::to_string(s);
  }
  // A publish result carries the mapped code (the client vocabulary only).
  PublishResult r;
  r.status = client::from(Status::unavailable);
  EXPECT_EQ(r.status, ErrorCode::unavailable);
  EXPECT_EQ(r.error(), ErrorCode::unavailable);
  EXPECT_TRUE(client::retriable(r.error()));
}

TEST(ClientError, ControllerCodesMap) {
  namespace idl = control::idl;
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::OK), ErrorCode::ok);
  for (int c = 1; c <= static_cast<int>(idl::ErrorCode::NOT_OWNER); ++c) {
    EXPECT_NE(broker::client_error_of(static_cast<control::ErrorCode>(c)), ErrorCode::ok) << c;
  }
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::UNAVAILABLE), ErrorCode::controller_unavailable);
  EXPECT_TRUE(client::retriable(broker::client_error_of(idl::ErrorCode::UNAVAILABLE)));
  EXPECT_TRUE(client::retriable(broker::client_error_of(idl::ErrorCode::NOT_ENOUGH_NODES)));
  EXPECT_TRUE(client::retriable(broker::client_error_of(idl::ErrorCode::STALE_EPOCH)));
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::INVALID_ARGUMENT), ErrorCode::invalid_argument);
  EXPECT_FALSE(client::retriable(broker::client_error_of(idl::ErrorCode::INVALID_ARGUMENT)));
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::UNKNOWN_CHANNEL), ErrorCode::unknown_channel);
  EXPECT_FALSE(client::retriable(broker::client_error_of(idl::ErrorCode::UNKNOWN_CHANNEL)));
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::NO_OFFSET), ErrorCode::no_committed_offset);
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::UNKNOWN_MEMBER), ErrorCode::not_owner);
  EXPECT_EQ(broker::client_error_of(idl::ErrorCode::NOT_OWNER), ErrorCode::not_owner);
  EXPECT_FALSE(client::retriable(ErrorCode::not_owner));
}

// What a user sees: the controller down is retriable and says so; a bad
// argument and an unknown channel are not.
TEST(ClientError, ControllerDownReadsDifferentlyFromABadArgument) {
  control::ControllerClient::Options co;
  co.address = "127.0.0.1:1";  // nothing listens there
  broker::ControllerRoutes down(co);
  auto pub = Publisher::create(down, "orders");
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.code(), ErrorCode::controller_unavailable) << pub.error().describe();
  EXPECT_TRUE(pub.error().retriable());
  auto sub = Subscriber::create(down, "orders");
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.code(), ErrorCode::controller_unavailable) << sub.error().describe();

  StaticRoutes routes;
  auto unknown = Publisher::create(routes, "orders");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.code(), ErrorCode::unknown_channel) << unknown.error().describe();
  EXPECT_FALSE(unknown.error().retriable());
  auto bad = Subscriber::create(routes, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), ErrorCode::invalid_argument) << bad.error().describe();
  EXPECT_FALSE(bad.error().retriable());
  EXPECT_EQ(bad.error().describe().rfind("invalid_argument: ", 0), 0u) << bad.error().describe();
}

}  // namespace
}  // namespace catena
