// Zero-copy publish (Publisher::try_claim, commit, abort): a frame reserved
// in a partition's staging ring (chain::PublishClient::reserve) that the
// application fills in place, then made a record exactly as stage_st makes
// one of a copied payload. Nothing is placed, numbered or sent before the
// commit, so an abort has nothing to undo.
#include <xxhash.h>

#include <catena/broker/record_views.hpp>
#include <catena/chain/key_map.hpp>
#include <catena/chain/publish.hpp>
#include <catena/fabric/clock.hpp>

#include "publisher_impl.hpp"

namespace catena {

fabric::Errc Publisher::Impl::claim_st(std::uint32_t partition, const PendingRecord& how, std::size_t length,
                                       const chain::Attributes* attrs, std::span<std::byte>* buffer,
                                       std::uint64_t* ticket) {
  CATENA_ST_CHECK(owner_);
  using fabric::Errc;
  if (partition >= partitions_) return Errc::invalid_argument;
  if (const Errc e = may_publish_st(partition); e != Errc::ok) return e;
  PartitionSession& s = *sessions_[partition];
  if (s.claim_ticket != 0) return Errc::invalid_argument;  // one claim per partition at a time
  std::size_t block = 0;
  if (attrs != nullptr && chain::attributes_size(*attrs, &block) != chain::AttributesCheck::ok)
    return Errc::invalid_argument;
  if (length > max_record_ || block + length > max_record_) return Errc::too_large;
  // As stage_st: the ring comes with the first record, and grows for one
  // that does not fit (the claim answers backpressure meanwhile).
  if (const Errc e = room_for_st(s, block + length); e != Errc::ok) return e;
  const auto region = static_cast<std::uint32_t>(block + length);
  const Errc e = s.head.reserve(region, &s.claim);
  if (e == Errc::backpressure) ring_was_full_st(s);
  if (e != Errc::ok) return e;  // backpressure: wait for credit
  std::byte* at = s.head.region_at(s.claim);
  if (attrs != nullptr) chain::encode_attributes(at, *attrs);
  s.claim_flags = attrs != nullptr ? chain::kFlagAttributes : 0;
  s.claim_how = PendingRecord{{}, 0, how.key_hash, how.placement};
  s.claim_ticket = next_ticket_++;
  ++claims_open_;
  *buffer = std::span<std::byte>(at + block, length);
  *ticket = s.claim_ticket;
  return Errc::ok;
}

fabric::Errc Publisher::Impl::commit_claim_st(std::uint32_t partition, std::uint64_t ticket,
                                              PublishCallback& cb) {
  CATENA_ST_CHECK(owner_);
  using fabric::Errc;
  if (partition >= sessions_.size() || ticket == 0 || sessions_[partition]->claim_ticket != ticket)
    return Errc::invalid_argument;
  PartitionSession& s = *sessions_[partition];
  s.claim_ticket = 0;
  --claims_open_;
  // As stage_st: past the retry timeout the partition takes no record.
  if (s.down && Clock::now() - s.down_since > opts_.retry_timeout) return Errc::disconnected;
  // A batch lingers from its first record, however many earlier ones
  // still await their acks (under load a partition is never idle).
  const bool opens_batch = s.head.unflushed() == 0;
  const bool was_idle = s.head.pending() == 0 && opens_batch;
  // The reservation kept its room and the window its place: nothing else
  // was staged here while the claim was open, and acks only free more.
  const Errc e = s.head.commit_reserved(record_header_st(s.claim_flags, 0), s.claim);
  if (e != Errc::ok) return e;
  staged_st(s, opens_batch, was_idle,
            PendingRecord{std::move(cb), next_order_++, s.claim_how.key_hash, s.claim_how.placement});
  return Errc::ok;
}

void Publisher::Impl::abort_claim_st(std::uint32_t partition, std::uint64_t ticket) noexcept {
  CATENA_ST_CHECK(owner_);
  if (partition >= sessions_.size() || ticket == 0 || sessions_[partition]->claim_ticket != ticket) return;
  sessions_[partition]->claim_ticket = 0;
  --claims_open_;
}

// --- the API ------------------------------------------------------------------

Claim& Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    if (pub_ != nullptr) pub_->abort(*this);
    pub_ = std::exchange(other.pub_, nullptr);
    buffer_ = std::exchange(other.buffer_, {});
    partition_ = other.partition_;
    ticket_ = std::exchange(other.ticket_, 0);
    error_ = other.error_;
  }
  return *this;
}

Claim::~Claim() {
  if (pub_ != nullptr) pub_->abort(*this);
}

Claim Publisher::try_claim(std::uint32_t partition, std::size_t length) {
  Claim c;
  c.partition_ = partition;
  const PendingRecord how{{}, 0, 0, PendingRecord::Placement::explicit_};
  const fabric::Errc e = impl_->claim_st(partition, how, length, nullptr, &c.buffer_, &c.ticket_);
  c.error_ = client::from(e);
  if (e == fabric::Errc::ok) c.pub_ = this;
  return c;
}

Claim Publisher::try_claim(std::span<const std::byte> key, std::span<const HeaderField> headers,
                           std::size_t length) {
  Impl& im = *impl_;
  Claim c;
  if (im.remapping_) {
    c.error_ = client::ErrorCode::backpressure;  // the alter's switch decides where keys go
    return c;
  }
  PendingRecord how{{}, 0, 0, PendingRecord::Placement::any};
  if (key.empty()) {
    // Round-robin over the partitions without an open claim, as publish().
    for (std::uint32_t i = 0; i + 1 < im.partitions_ && im.claim_open_st(im.rr_ % im.partitions_); ++i)
      ++im.rr_;
    c.partition_ = im.rr_ % im.partitions_;
  } else {
    how.placement = PendingRecord::Placement::keyed;
    how.key_hash = XXH64(key.data(), key.size(), 0);
    c.partition_ = chain::partition_of_hash(how.key_hash, im.partitions_);
  }
  const chain::Attributes attrs{key, chain_headers(headers)};
  const fabric::Errc e = im.claim_st(c.partition_, how, length, &attrs, &c.buffer_, &c.ticket_);
  c.error_ = client::from(e);
  if (e == fabric::Errc::ok) {
    c.pub_ = this;
    if (key.empty()) ++im.rr_;
  }
  return c;
}

client::ErrorCode Publisher::commit(Claim& claim, PublishCallback cb) {
  if (claim.pub_ != this) return client::ErrorCode::invalid_argument;
  const fabric::Errc e = impl_->commit_claim_st(claim.partition_, claim.ticket_, cb);
  claim.pub_ = nullptr;
  claim.buffer_ = {};
  claim.ticket_ = 0;
  claim.error_ = client::from(e);
  return claim.error_;
}

void Publisher::abort(Claim& claim) noexcept {
  if (claim.pub_ != this) return;
  impl_->abort_claim_st(claim.partition_, claim.ticket_);
  claim.pub_ = nullptr;
  claim.buffer_ = {};
  claim.ticket_ = 0;
}

}  // namespace catena
