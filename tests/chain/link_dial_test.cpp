// Link::Dialing: the handshake as polled states, so one thread can dial and
// answer (a simulation that steps both ends, a data-plane loop without a
// connector thread).
#include <chrono>
#include <gtest/gtest.h>

#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/wire.hpp>
#include <catena/fabric/fabric.hpp>

#include "session_test_support.hpp"

namespace catena::chain {
namespace {

using namespace std::chrono_literals;

struct Ends {
  std::unique_ptr<fabric::Provider> provider;
  std::unique_ptr<fabric::Listener> listener;
};

Ends open_ends() {
  Ends e;
  auto p = fabric::Provider::open("soft");
  EXPECT_TRUE(p) << p.error().message;
  e.provider = std::move(p.value());
  auto l = e.provider->listen("127.0.0.1:0");
  EXPECT_TRUE(l) << l.error().message;
  e.listener = std::move(l.value());
  return e;
}

// The peer's side, on the same thread: accept and read the hello.
std::unique_ptr<Link> accept_publisher(Ends& e, wire::PublisherHello* hello) {
  auto greeted = test_support::accept_hello<wire::PublisherHello>(*e.provider, *e.listener,
                                                                  std::chrono::steady_clock::now() + 2s);
  EXPECT_TRUE(greeted.hello);
  if (greeted.hello) *hello = *greeted.hello;
  return std::move(greeted.link);
}

TEST(LinkDialing, OneThreadDialsAndAnswers) {
  Ends e = open_ends();
  wire::PublisherHello hello{};
  hello.ref.set("c", 3, 7);
  hello.producer_id = 42;
  auto d = Link::Dialing<wire::PublisherWelcome>::start(*e.provider, e.listener->address(), hello, 2000ms);
  ASSERT_EQ(d.state(), Link::DialState::waiting);
  EXPECT_EQ(d.poll(), Link::DialState::waiting);  // nobody answered yet: no blocking, no answer

  wire::PublisherHello got{};
  auto server = accept_publisher(e, &got);
  EXPECT_EQ(got.producer_id, 42u);
  EXPECT_EQ(got.ref.partition, 3u);
  wire::PublisherWelcome w{};
  w.status = wire::Status::ok;
  w.next_sequence = 9;
  ASSERT_EQ(server->send(w), fabric::Errc::ok);

  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (d.poll() == Link::DialState::waiting && std::chrono::steady_clock::now() < deadline)
    server->poll_send();
  ASSERT_EQ(d.state(), Link::DialState::done);
  auto out = d.take();
  ASSERT_TRUE(out.welcome);
  EXPECT_EQ(out.welcome->next_sequence, 9u);
  EXPECT_TRUE(out.link);
}

TEST(LinkDialing, APeerThatHangsUpFailsTheDial) {
  Ends e = open_ends();
  wire::PublisherHello hello{};
  hello.ref.set("c", 0, 1);
  auto d = Link::Dialing<wire::PublisherWelcome>::start(*e.provider, e.listener->address(), hello, 2000ms);
  wire::PublisherHello got{};
  accept_publisher(e, &got).reset();  // reads the hello and hangs up
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (d.poll() == Link::DialState::waiting && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(d.state(), Link::DialState::failed);
  EXPECT_FALSE(d.unreachable());
  EXPECT_FALSE(d.take().welcome);
}

TEST(LinkDialing, NobodyListeningIsUnreachable) {
  Ends e = open_ends();
  const std::string addr = e.listener->address();
  e.listener.reset();
  wire::PublisherHello hello{};
  auto d = Link::Dialing<wire::PublisherWelcome>::start(*e.provider, addr, hello, 500ms);
  EXPECT_EQ(d.state(), Link::DialState::failed);
  EXPECT_TRUE(d.unreachable());
}

TEST(LinkDialing, TheCallerGivesUp) {
  Ends e = open_ends();
  wire::PublisherHello hello{};
  auto d = Link::Dialing<wire::PublisherWelcome>::start(*e.provider, e.listener->address(), hello, 2000ms);
  d.fail(fabric::make_error(fabric::Errc::timeout, "the caller's timeout"));
  EXPECT_EQ(d.poll(), Link::DialState::failed);
  EXPECT_EQ(d.take().error.code, fabric::Errc::timeout);
}

}  // namespace
}  // namespace catena::chain
