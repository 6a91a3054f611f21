// Controller::alter_retention (alterRetention in catena.thrift): a channel's
// ttl_ms changed live. One metadata record holds the new config; the acks of
// its routes are forgotten, so run_pushes() sends every replica (chain,
// joining, sealed ranges) its assignment again at the same route epoch with
// the new ttl_ms (a broker takes only the ttl from a push at its epoch), and
// retries a node out of reach from tick() until it confirms. A push built
// before the change does not count as a confirmation (run_pushes() compares
// the ttl it carried). Clients see no new epoch. Tenant quotas do not depend
// on the ttl (max_segment_bytes counts one slot per replica): nothing to
// check there. Serialised with partition alters (alter_mu_): both rewrite the
// channel's record.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catena/control/controller.hpp>
#include <catena/control/validation.hpp>

namespace catena::control {

Result<idl::ChannelInfo> Controller::alter_retention(const std::string& name, std::int64_t ttl_ms) {
  MutexLock alter_lock(alter_mu_);
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto found = channel_locked(name);
    if (!found) return found.error();
    meta::ChannelRecord ch = **found;
    if (auto r = validate_ttl_ms(ttl_ms); !r) return r.error();
    for (const auto& g : ch.generations) {
      if (!g.complete) {
        return make_error(idl::ErrorCode::UNAVAILABLE,
                          fmt::format("'{}' is being altered (generation {}): change its retention once the "
                                      "alter is done",
                                      name, g.generation));
      }
    }
    if (ch.config.ttl_ms == ttl_ms) {
      return invalid_argument(fmt::format("channel '{}' already has ttl_ms {}", name, ttl_ms));
    }
    const std::int64_t before = ch.config.ttl_ms;
    ch.config.__set_ttl_ms(ttl_ms);
    meta::MetaRecord record;
    record.__set_put_channel(ch);
    if (auto r = store_->commit(record); !r) return r.error();
    for (const auto& route : ch.routes) acks_.erase(RouteId{route.channel, route.partition});
    spdlog::info("channel '{}': ttl {} ms -> {} ms; pushing it to every replica of its {} partition(s)", name,
                 before, ttl_ms, ch.routes.size());
  }
  // Durable first, then pushed; what is not confirmed now is retried by tick().
  run_pushes();
  await_channel_pushes(name);
  return describe_channel(name);
}

}  // namespace catena::control
