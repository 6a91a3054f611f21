#include <algorithm>
#include <cstring>
#include <thread>

#include <catena/chain/link.hpp>

namespace catena::chain {

fabric::Result<Link::Buffers> Link::Buffers::allocate(fabric::Provider& provider, std::uint32_t recv_depth,
                                                      fabric::DomainId domain) {
  Buffers b;
  auto rb = provider.allocate(std::size_t{recv_depth} * wire::kMaxMessage, fabric::kLocalWrite, domain);
  if (!rb) return rb.error();
  auto sb = provider.allocate(std::size_t{kSendSlots} * wire::kMaxMessage, fabric::kLocalWrite, domain);
  if (!sb) return sb.error();
  b.recv = std::move(rb.value());
  b.send = std::move(sb.value());
  b.recv_depth = recv_depth;
  b.domain = domain;
  return b;
}

fabric::Errc Link::post_receives(fabric::Endpoint& ep, const fabric::MemoryRegion* buf, std::uint32_t depth) {
  for (std::uint32_t i = 0; i < depth; ++i) {
    if (fabric::Errc e = post_receive(ep, buf, i); e != fabric::Errc::ok) return e;
  }
  return fabric::Errc::ok;
}

fabric::Result<std::unique_ptr<Link>> Link::create(fabric::Provider& provider,
                                                   std::unique_ptr<fabric::Endpoint> ep,
                                                   std::uint32_t recv_depth) {
  recv_depth = std::min(recv_depth, ep->caps().recv_queue_depth);
  auto b = Buffers::allocate(provider, recv_depth, ep->domain());
  if (!b) return b.error();
  if (fabric::Errc e = post_receives(*ep, b.value().recv.get(), recv_depth); e != fabric::Errc::ok) {
    return fabric::make_error(e, "cannot post receives: " + std::string(fabric::to_string(e)));
  }
  std::unique_ptr<Link> link(new Link());
  link->recv_buf_ = std::move(b.value().recv);
  link->send_buf_ = std::move(b.value().send);
  link->ep_ = std::move(ep);
  link->recv_depth_ = recv_depth;
  return link;
}

fabric::Result<std::unique_ptr<Link>> Link::accept(fabric::Provider& provider, fabric::Listener& listener,
                                                   Buffers& buffers, std::chrono::milliseconds timeout) {
  if (!buffers.ready())
    return fabric::make_error(fabric::Errc::invalid_argument, "Link::accept without buffers");
  std::uint32_t depth = 0;
  auto ep = listener.accept(timeout, [&](fabric::Endpoint& e) {
    if (e.domain() != buffers.domain) {
      auto own = Buffers::allocate(provider, buffers.recv_depth, e.domain());
      if (!own) return own.code();
      buffers = std::move(own.value());
    }
    depth = std::min(buffers.recv_depth, e.caps().recv_queue_depth);
    return post_receives(e, buffers.recv.get(), depth);
  });
  if (!ep) return ep.error();
  std::unique_ptr<Link> link(new Link());
  link->recv_buf_ = std::move(buffers.recv);
  link->send_buf_ = std::move(buffers.send);
  link->ep_ = std::move(ep.value());
  link->recv_depth_ = depth;
  return link;
}

std::uint32_t Link::poll_message(std::byte* out, bool* gone) {
  std::uint32_t got = 0;
  auto poll_once = [&] {
    poll_send();
    return poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          if (got == 0) {
            std::memcpy(out, msg, std::min(len, wire::kMaxMessage));
            got = len;
          }
        },
        [&](std::uint32_t imm, std::uint32_t len) { early_imms_.emplace_back(imm, len); });
  };
  *gone = false;
  const int n = poll_once();
  if (got > 0) return got;
  if (n < 0) {
    *gone = true;
  } else if (broken()) {
    // A refusal arrives just before the peer hangs up, and the hang-up can
    // be seen between an empty poll and this check: the answer is already
    // in the completion queue, so drain it once more before giving up.
    poll_once();
    *gone = got == 0;
  }
  return got;
}

std::uint32_t Link::wait_message(std::byte* out, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool gone = false;
    const std::uint32_t got = poll_message(out, &gone);
    if (got > 0 || gone || std::chrono::steady_clock::now() >= deadline) return got;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace catena::chain
