#include "sim_log.hpp"

#include <stdlib.h>

#include <cstring>

#include <catena/chain/record.hpp>

namespace catena::sim {

TempDir::TempDir() {
  const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/catena-sim-XXXXXX";
  if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::map<std::uint64_t, Stored> read_log(const chain::PartitionLog& log, std::vector<std::string>* errors) {
  std::map<std::uint64_t, Stored> out;
  for (std::uint32_t s : log.slots_in_order()) {
    const auto mem = log.slot_memory(s);
    const auto& info = log.slot_info(s);
    std::size_t pos = sizeof(chain::SegmentHeader);
    while (pos < info.valid_end) {
      chain::RecordHeader h;
      if (chain::check_frame(mem.data() + pos, info.valid_end - pos, &h) != chain::FrameCheck::ok) {
        errors->push_back("slot " + std::to_string(s) + " has a bad frame at " + std::to_string(pos));
        break;
      }
      if ((h.flags & chain::kFlagSeal) != 0) break;
      Stored r;
      std::memcpy(&r.id, mem.data() + pos + sizeof(chain::RecordHeader), sizeof r.id);
      r.producer_id = h.producer_id;
      r.sequence = h.sequence;
      if (!out.emplace(h.offset, r).second)
        errors->push_back("offset " + std::to_string(h.offset) + " twice");
      pos += chain::frame_size(h.length);
    }
  }
  return out;
}

}  // namespace catena::sim
