#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catena/control/address.hpp>
#include <catena/control/controller_candidate.hpp>

namespace catena::control {

ControllerCandidate::ControllerCandidate(Options options, const Clock& clock, BrokerAdminClient& brokers)
    : options_(std::move(options)), clock_(clock), brokers_(brokers) {}

Result<std::unique_ptr<ControllerCandidate>> ControllerCandidate::start(Options options, const Clock& clock,
                                                                        BrokerAdminClient& brokers) {
  auto location = parse_zk_location(options.controller.metadata);
  if (!location) {
    return invalid_argument(
        fmt::format("leader election needs the metadata on ZooKeeper: {}", location.error().message));
  }
  if (!options.advertise.empty()) {
    if (auto r = parse_host_port(options.advertise); !r) return r.error();
  }
  std::unique_ptr<ControllerCandidate> c(new ControllerCandidate(std::move(options), clock, brokers));
  c->server_ = std::make_unique<ControllerServer>(c->role_, c->options_.server);
  if (auto r = c->server_->start(); !r) return r.error();
  c->address_ = c->options_.advertise.empty() ? c->server_->address() : c->options_.advertise;

  ZkElection::Options eo;
  eo.location = std::move(*location);
  eo.address = c->address_;
  eo.session_timeout = c->options_.session_timeout;
  eo.connect_timeout = c->options_.connect_timeout;
  ZkElection::Callbacks cb;
  auto* self = c.get();
  cb.elected = [self] { self->elected(); };
  cb.follow = [self](const std::string& leader) {
    self->role_->follow(leader);
    if (!leader.empty()) self->decided();
  };
  cb.lost = [self](const ControlError& why) {
    self->role_->halt(why.message);
    spdlog::critical("controller {} halts: {}", self->address_, why.message);
    self->decided();
    if (self->options_.on_lost) self->options_.on_lost(why);
  };
  // A leader whose metadata store failed (a commit whose outcome it could
  // not learn while ZooKeeper was away, a fence) can commit nothing more:
  // it stops serving and goes to the end of the election, so another
  // candidate (or this one, later, with the metadata read afresh) leads.
  cb.must_resign = [self] {
    auto c = self->role_->leading();
    return c != nullptr && c->metadata_failed();
  };
  cb.resign = [self] {
    spdlog::warn("controller {} resigns: its metadata store failed; another candidate leads", self->address_);
    self->role_->follow({});
  };
  auto election = ZkElection::join(std::move(eo), std::move(cb));
  if (!election) return election.error();
  c->election_ = std::move(*election);
  // Bounded: electing may open the metadata (a connect timeout); a
  // candidate still undecided after that goes on answering NOT_LEADER.
  UniqueLock lock(c->mu_);
  lock.wait_for(c->cv_, 2 * c->options_.connect_timeout, [&] {
    c->mu_.assert_held();  // the wait holds it when it asks
    return c->decided_;
  });
  return c;
}

ControllerCandidate::~ControllerCandidate() {
  stop();
}

void ControllerCandidate::elected() {
  // While the metadata loads, name no one (the old leader is gone): a
  // client tries its next address rather than a dead one.
  role_->follow({});
  auto controller = Controller::open(options_.controller, clock_, brokers_);
  if (!controller) {
    role_->halt(controller.error().message);
    spdlog::critical("controller {} was elected but cannot open the metadata: {}", address_,
                     controller.error().describe());
    decided();
    if (options_.on_lost) options_.on_lost(controller.error());
    return;
  }
  role_->lead(std::shared_ptr<Controller>(std::move(*controller)));
  spdlog::info("controller {} leads ({})", address_, options_.controller.metadata);
  decided();
}

void ControllerCandidate::decided() {
  {
    MutexLock lock(mu_);
    decided_ = true;
  }
  cv_.notify_all();
}

void ControllerCandidate::stop() {
  election_.reset();  // leaves the election: the next candidate's watch fires now
  role_->halt("stopped");
  if (server_) server_->stop();
}

}  // namespace catena::control
