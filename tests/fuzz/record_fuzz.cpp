// Record frames and attributes blocks (chain/src/record.cpp), as a replica,
// a head or a subscriber reads them from memory a peer wrote.
//
// Each input is one of:
//   raw        the bytes are a frame: check_frame(), then decode_record()
//              and decode_marker() on what it accepts;
//   checksummed a header and a payload region from the input, with the
//              checksums a writer computes (or one of them broken), in a
//              buffer cut short at an input-chosen length;
//   round trip a key, headers and a payload from the input, written with
//              write_frame(): read back, they must be what was written.
// The frame sits at the end of a heap buffer of exactly `valid` bytes, so
// AddressSanitizer catches a read past what the reader was told is there.
//
// Properties: a frame check_frame() accepts lies within `valid`; a decoded
// record's key, headers and payload lie within the payload region and add
// up to it; a frame written from attributes that fit reads back equal.
#include <cstdint>
#include <cstring>
#include <fuzzer/FuzzedDataProvider.h>
#include <string>
#include <vector>

#include <catena/chain/record.hpp>

#include "fuzz_check.hpp"

namespace {

using namespace catena::chain;
using namespace catena::chain::limits;

// What a reader does with a frame that claims to be one; returns the check.
FrameCheck read_frame(const std::byte* at, std::size_t valid) {
  RecordHeader h{};
  const FrameCheck c = check_frame(at, valid, &h);
  if (c != FrameCheck::ok) return c;
  FUZZ_CHECK(frame_size(h.length) <= valid);
  FUZZ_CHECK((h.flags & ~kKnownFlags) == 0);
  if (h.flags & kFlagPad) return c;
  const std::span<const std::byte> region{at + sizeof(RecordHeader), h.length};
  DecodedRecord d;
  if (decode_record(h, region, &d) == AttributesCheck::ok) {
    const std::byte* lo = region.data();
    const std::byte* hi = region.data() + region.size();
    auto inside = [&](std::span<const std::byte> s) {
      return s.empty() || (s.data() >= lo && s.data() + s.size() <= hi);
    };
    FUZZ_CHECK(inside(d.key));
    FUZZ_CHECK(inside(d.payload));
    FUZZ_CHECK(d.key.size() <= kMaxRecordKeyBytes);
    FUZZ_CHECK(d.headers.size() <= kMaxRecordHeaders);
    std::size_t block = (h.flags & kFlagAttributes) ? kAttributesFixedBytes + d.key.size() : 0;
    for (const HeaderField& f : d.headers) {
      FUZZ_CHECK(!f.name.empty() && f.name.size() <= kMaxHeaderNameBytes);
      FUZZ_CHECK(f.value.size() <= kMaxHeaderValueBytes);
      FUZZ_CHECK(inside(std::as_bytes(std::span(f.name))));
      FUZZ_CHECK(inside(std::as_bytes(std::span(f.value))));
      block += kHeaderFieldFixedBytes + f.name.size() + f.value.size();
    }
    FUZZ_CHECK(block + d.payload.size() == region.size());
    FUZZ_CHECK(d.payload.empty() || d.payload.data() + d.payload.size() == hi);
  }
  MarkerSpec m;
  if (decode_marker(h, region, &m)) {
    FUZZ_CHECK(m.from_partitions > 0 && m.to_partitions > 0);
  }
  return c;
}

RecordHeader header_from(FuzzedDataProvider& in) {
  RecordHeader h{};
  h.flags = in.ConsumeBool() ? in.ConsumeIntegral<std::uint32_t>()
                             : in.ConsumeIntegralInRange<std::uint32_t>(0, kKnownFlags);
  h.offset = in.ConsumeIntegral<std::uint64_t>();
  h.producer_id = in.ConsumeIntegral<std::uint64_t>();
  h.producer_epoch = in.ConsumeIntegral<std::uint64_t>();
  h.sequence = in.ConsumeIntegral<std::uint64_t>();
  h.timestamp_ns = in.ConsumeIntegral<std::uint64_t>();
  return h;
}

void checksummed(FuzzedDataProvider& in) {
  RecordHeader h = header_from(in);
  const int broken = in.ConsumeIntegralInRange(0, 3);  // 0-1: none, 2: header, 3: payload
  const bool lie_about_length = in.ConsumeBool();
  const std::uint32_t claimed = in.ConsumeIntegral<std::uint32_t>();
  const std::size_t cut = in.ConsumeIntegralInRange<std::size_t>(0, 64);
  std::vector<std::uint8_t> payload = in.ConsumeRemainingBytes<std::uint8_t>();
  h.length = lie_about_length ? claimed : static_cast<std::uint32_t>(payload.size());
  h.payload_crc = payload_checksum(std::as_bytes(std::span(payload)));
  if (broken == 3) h.payload_crc ^= 1;
  h.header_crc = header_checksum(h);
  if (broken == 2) h.header_crc ^= 0x100;
  std::vector<std::byte> image(frame_size(static_cast<std::uint32_t>(payload.size())));
  std::memcpy(image.data(), &h, sizeof h);
  if (!payload.empty()) std::memcpy(image.data() + sizeof h, payload.data(), payload.size());
  const std::size_t valid = image.size() > cut ? image.size() - cut : 0;
  std::vector<std::byte> frame(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(valid));
  const FrameCheck c = read_frame(frame.data(), frame.size());
  if (broken < 2 && !lie_about_length && cut == 0 && (h.flags & ~kKnownFlags) == 0) {
    FUZZ_CHECK(c == FrameCheck::ok);
  }
  if (broken == 2) FUZZ_CHECK(c != FrameCheck::ok);
  if (broken == 3 && !lie_about_length && (h.flags & kFlagPad) == 0) FUZZ_CHECK(c != FrameCheck::ok);
}

void round_trip(FuzzedDataProvider& in) {
  RecordHeader h = header_from(in);
  h.flags &= kFlagSeal | kFlagMarker | kFlagTrace;
  std::vector<std::string> text;
  const std::string key = in.ConsumeRandomLengthString(kMaxRecordKeyBytes + 8);
  const int count = in.ConsumeIntegralInRange(0, static_cast<int>(kMaxRecordHeaders) + 2);
  for (int i = 0; i < 2 * count; ++i) text.push_back(in.ConsumeRandomLengthString(300));
  std::vector<HeaderField> fields;
  for (int i = 0; i < count; ++i) fields.push_back({text[2 * i], text[2 * i + 1]});
  const std::vector<std::uint8_t> payload = in.ConsumeRemainingBytes<std::uint8_t>();
  const Attributes a{std::as_bytes(std::span(key)), fields};
  std::size_t block = 0;
  const AttributesCheck sized = attributes_size(a, &block);
  // What attributes_size() refuses is what a reader would refuse.
  bool fits = key.size() <= kMaxRecordKeyBytes && fields.size() <= kMaxRecordHeaders;
  for (const HeaderField& f : fields) {
    fits = fits && !f.name.empty() && f.name.size() <= kMaxHeaderNameBytes &&
           f.value.size() <= kMaxHeaderValueBytes;
  }
  FUZZ_CHECK((sized == AttributesCheck::ok) == fits);
  if (!fits || block + payload.size() > kMaxRecordPayload) return;
  std::vector<std::byte> frame(frame_size_with(block, payload.size()));
  const std::size_t n = write_frame(frame.data(), h, a, std::as_bytes(std::span(payload)));
  FUZZ_CHECK(n == frame.size());
  RecordHeader got{};
  FUZZ_CHECK(check_frame(frame.data(), frame.size(), &got) == FrameCheck::ok);
  FUZZ_CHECK((got.flags & kFlagAttributes) != 0);
  FUZZ_CHECK(got.sequence == h.sequence && got.producer_id == h.producer_id && got.offset == h.offset);
  DecodedRecord d;
  FUZZ_CHECK(decode_record(got, {frame.data() + sizeof got, got.length}, &d) == AttributesCheck::ok);
  FUZZ_CHECK(d.key.size() == key.size() && std::memcmp(d.key.data(), key.data(), key.size()) == 0);
  FUZZ_CHECK(d.headers.size() == fields.size());
  std::size_t i = 0;
  for (const HeaderField& f : d.headers) FUZZ_CHECK(f == fields[i++]);
  FUZZ_CHECK(d.payload.size() == payload.size());
  FUZZ_CHECK(payload.empty() || std::memcmp(d.payload.data(), payload.data(), payload.size()) == 0);
  (void)read_frame(frame.data(), frame.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: {
      const std::vector<std::uint8_t> raw = in.ConsumeRemainingBytes<std::uint8_t>();
      std::vector<std::byte> frame(raw.size());
      if (!raw.empty()) std::memcpy(frame.data(), raw.data(), raw.size());
      (void)read_frame(frame.data(), frame.size());
      break;
    }
    case 1:
      checksummed(in);
      break;
    default:
      round_trip(in);
      break;
  }
  return 0;
}
