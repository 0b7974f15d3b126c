// Checkpoint files (checkpoint.h).
#include "commscope/train/checkpoint.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "commscope/util/atomic_file.h"

namespace commscope::train {

namespace {
constexpr char kMagic[4] = {'C', 'S', 'C', 'K'};

std::uint32_t crc_of(const char* data, std::size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {  // zlib takes uInt lengths
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    size -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}
}  // namespace

std::string checkpoint_file(const std::string& dir, std::int64_t step, int rank) {
  return fmt::format("{}/step{}.rank{}.bin", dir, step, rank);
}

std::string manifest_file(const std::string& dir) {
  return dir + "/latest.json";
}

Status write_checkpoint(const std::string& path,
                        const std::vector<const std::vector<float>*>& parts) {
  std::string blob;
  for (const std::vector<float>* v : parts) {
    const std::uint64_t n = v->size();
    blob.append(reinterpret_cast<const char*>(&n), sizeof(n));
    blob.append(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(float));
  }
  const std::uint32_t crc = crc_of(blob.data(), blob.size());
  blob.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  blob.append(kMagic, sizeof(kMagic));
  return write_file_atomic(path, blob);
}

Status read_checkpoint(const std::string& path, const std::vector<std::vector<float>*>& parts) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Error{fmt::format("--resume: {}: missing (the manifest names it)", path)};
  std::size_t expected = sizeof(std::uint32_t) + sizeof(kMagic);
  for (const std::vector<float>* v : parts) expected += sizeof(std::uint64_t) + v->size() * 4;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Error{fmt::format("--resume: {}: cannot read: {}", path, ec.message())};
  if (size < expected)
    return Error{fmt::format("--resume: {}: truncated ({} bytes, this model's checkpoint has {})",
                             path, size, expected)};
  if (size > expected)
    return Error{fmt::format("--resume: {}: from another model ({} bytes, this model's has {})",
                             path, size, expected)};
  std::ifstream f(path, std::ios::binary);
  std::string blob(expected, '\0');
  if (!f.read(blob.data(), static_cast<std::streamsize>(expected)))
    return Error{fmt::format("--resume: {}: cannot read", path)};
  const std::size_t payload = expected - sizeof(std::uint32_t) - sizeof(kMagic);
  std::uint32_t stored = 0;
  std::memcpy(&stored, blob.data() + payload, sizeof(stored));
  if (std::memcmp(blob.data() + payload + sizeof(stored), kMagic, sizeof(kMagic)) != 0)
    return Error{fmt::format("--resume: {}: not a commscope checkpoint (no CSCK trailer)", path)};
  const std::uint32_t crc = crc_of(blob.data(), payload);
  if (crc != stored)
    return Error{fmt::format("--resume: {}: damaged (CRC-32 {:08x}, the file says {:08x})", path,
                             crc, stored)};
  std::size_t at = 0;
  for (std::vector<float>* v : parts) {
    std::uint64_t n = 0;
    std::memcpy(&n, blob.data() + at, sizeof(n));
    at += sizeof(n);
    if (n != v->size())
      return Error{
          fmt::format("--resume: {}: from another model (a part of {} values, this "
                      "model's has {})",
                      path, n, v->size())};
    std::memcpy(v->data(), blob.data() + at, v->size() * sizeof(float));
    at += v->size() * sizeof(float);
  }
  return ok_status();
}

Status write_manifest(const std::string& dir, const nlohmann::json& manifest) {
  return write_file_atomic(manifest_file(dir), manifest.dump(2) + "\n");
}

Result<nlohmann::json> read_manifest(const std::string& dir) {
  const std::string path = manifest_file(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Error{fmt::format("--resume: {}: missing (no checkpoint in '{}')", path, dir)};
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
    return Error{fmt::format("--resume: {}: not a commscope checkpoint manifest", path)};
  return j;
}

Status check_manifest(const nlohmann::json& j, const TrainOptions& o, int world,
                      const std::string& where) {
  auto differs = [&](const char* key, const nlohmann::json& have,
                     const nlohmann::json& want) -> Status {
    if (have == want) return ok_status();
    return Error{fmt::format("--resume: {}: {} is {}, this run has {}", where, key, have.dump(),
                             want.dump())};
  };
  auto required = [&](const char* key, const nlohmann::json& want) {
    return differs(key, j.value(key, nlohmann::json()), want);
  };
  CS_RETURN_IF_ERROR(required("ranks", world));
  CS_RETURN_IF_ERROR(required("strategy", to_string(o.strategy)));
  if (!model_parallel(o)) {
    for (const char* key : {"tensor_model_parallel_size", "pipeline_model_parallel_size"})
      if (j.contains(key)) CS_RETURN_IF_ERROR(differs(key, j[key], 1));  // a model-parallel run's
  } else {
    CS_RETURN_IF_ERROR(required("tensor_model_parallel_size", o.tp));
    CS_RETURN_IF_ERROR(required("pipeline_model_parallel_size", o.pp));
    CS_RETURN_IF_ERROR(required("virtual_pipeline_stages", o.vpp));
    CS_RETURN_IF_ERROR(required("rank_order", to_string(o.rank_order)));
    CS_RETURN_IF_ERROR(required("sequence_parallel", o.sequence_parallel));
  }
  CS_RETURN_IF_ERROR(required("seed", o.seed));
  for (auto [key, want] : {std::pair{"layers", o.model.layers}, std::pair{"hidden", o.model.hidden},
                           std::pair{"heads", o.model.heads}, std::pair{"vocab", o.model.vocab},
                           std::pair{"seq", o.model.seq}})
    CS_RETURN_IF_ERROR(required(key, want));
  CS_RETURN_IF_ERROR(required("global_batch", global_batch(o, world)));
  {
    // Later fields: a manifest without them (the data-parallel trainer's, or one written before
    // them) was written with their defaults.
    for (auto [key, unset, want] : {std::tuple{"context_parallel_size", 1, std::max(o.cp, 1)},
                                    std::tuple{"expert_model_parallel_size", 1, std::max(o.ep, 1)},
                                    std::tuple{"experts", 0, o.model.experts},
                                    std::tuple{"experts_per_token", 0, o.model.experts_per_token}})
      CS_RETURN_IF_ERROR(differs(key, j.value(key, nlohmann::json(unset)), want));
  }
  return ok_status();
}

Status check_rank_files(const std::string& dir, std::int64_t step, int world) {
  for (int r = 0; r < world; ++r) {
    const std::string path = checkpoint_file(dir, step, r);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      return Error{
          fmt::format("--resume: {}: {} (the manifest names it)", path,
                      std::filesystem::exists(path, ec) ? "not a regular file" : "missing")};
  }
  return ok_status();
}

}  // namespace commscope::train
