#include <catena/chain/link.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

namespace catena::chain {

fabric::Result<std::unique_ptr<Link>> Link::create(fabric::Provider& provider,
                                                   std::unique_ptr<fabric::Endpoint> ep,
                                                   std::uint32_t recv_depth) {
  std::unique_ptr<Link> link(new Link());
  recv_depth = std::min(recv_depth, ep->caps().recv_queue_depth);
  auto rb = provider.allocate(std::size_t{recv_depth} * wire::kMaxMessage, fabric::kLocalWrite);
  if (!rb) return rb.error();
  auto sb = provider.allocate(std::size_t{kSendSlots} * wire::kMaxMessage, fabric::kLocalWrite);
  if (!sb) return sb.error();
  link->recv_buf_ = std::move(rb.value());
  link->send_buf_ = std::move(sb.value());
  link->ep_ = std::move(ep);
  link->recv_depth_ = recv_depth;
  for (std::uint32_t i = 0; i < recv_depth; ++i) {
    fabric::Errc e = link->repost(i);
    if (e != fabric::Errc::ok) {
      return fabric::make_error(e, "cannot post receives: " + std::string(fabric::to_string(e)));
    }
  }
  return link;
}

std::uint32_t Link::wait_message(std::byte* out, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::uint32_t got = 0;
  while (got == 0 && std::chrono::steady_clock::now() < deadline) {
    poll_send();
    int n = poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          if (got == 0) {
            std::memcpy(out, msg, std::min(len, wire::kMaxMessage));
            got = len;
          }
        },
        [&](std::uint32_t imm, std::uint32_t len) { early_imms_.emplace_back(imm, len); });
    if (got > 0) break;  // a refusal may arrive just before the peer hangs up
    if (n < 0 || broken()) return 0;
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return got;
}

}  // namespace catena::chain
