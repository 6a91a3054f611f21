// Owning handles for every libibverbs / librdmacm object the verbs provider
// creates. Each is a unique_ptr whose deleter calls the matching destroy
// function and reports (never throws) a failed destroy on stderr: a failing
// destroy means a leak or a bug in our teardown order, not a recoverable error.
//
// Owners declare these members in creation order so that destruction runs
// QP, CQ, cm_id, event channel, MR, PD, device context.
#pragma once

#include <infiniband/verbs.h>
#include <memory>
#include <rdma/rdma_cma.h>
#include <string>

namespace catena::fabric::verbs {

// Prints "catena/verbs: <what> failed: <strerror(err)>" to stderr.
void report_destroy_failure(const char* what, int err) noexcept;
// "<strerror(err)> (errno <err>)", for error messages.
std::string errno_text(int err);

struct DeviceListDeleter {
  void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* ctx) const noexcept;
};
struct PdDeleter {
  void operator()(ibv_pd* pd) const noexcept;
};
struct MrDeleter {
  void operator()(ibv_mr* mr) const noexcept;
};
struct CqDeleter {
  void operator()(ibv_cq* cq) const noexcept;
};
struct QpDeleter {
  void operator()(ibv_qp* qp) const noexcept;
};
struct EventChannelDeleter {
  void operator()(rdma_event_channel* ch) const noexcept { rdma_destroy_event_channel(ch); }
};
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const noexcept;
};
// A cm event must be acknowledged exactly once; rdma_destroy_id blocks until
// every event reported for the id has been.
struct CmEventAcker {
  void operator()(rdma_cm_event* ev) const noexcept;
};
// Page-aligned memory from std::aligned_alloc.
struct AlignedFree {
  void operator()(std::byte* p) const noexcept;
};

using DeviceListHandle = std::unique_ptr<ibv_device*, DeviceListDeleter>;
using ContextHandle = std::unique_ptr<ibv_context, ContextDeleter>;
using PdHandle = std::unique_ptr<ibv_pd, PdDeleter>;
using MrHandle = std::unique_ptr<ibv_mr, MrDeleter>;
using CqHandle = std::unique_ptr<ibv_cq, CqDeleter>;
using QpHandle = std::unique_ptr<ibv_qp, QpDeleter>;
using EventChannelHandle = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmIdHandle = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using CmEventHandle = std::unique_ptr<rdma_cm_event, CmEventAcker>;
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;

}  // namespace catena::fabric::verbs
