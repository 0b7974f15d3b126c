// Checkpoint files (checkpoint.h).
#include "commscope/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
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

namespace {
// A manifest field: its key, this run's value, whether only a model-parallel run (the pipeline
// trainer) writes it, and what a manifest without it was written with (null: it is required).
// In the order check_manifest names the first that differs.
struct Field {
  const char* key;
  nlohmann::json value;
  bool model_parallel;
  nlohmann::json unset;
};
std::vector<Field> run_fields(const TrainOptions& o, int world) {
  return {{"ranks", world, false, nullptr},
          {"strategy", to_string(o.strategy), false, nullptr},
          {"tensor_model_parallel_size", o.tp, true, nullptr},
          {"pipeline_model_parallel_size", o.pp, true, nullptr},
          {"virtual_pipeline_stages", o.vpp, true, nullptr},
          {"rank_order", to_string(o.rank_order), true, nullptr},
          {"sequence_parallel", o.sequence_parallel, true, nullptr},
          {"seed", o.seed, false, nullptr},
          {"layers", o.model.layers, false, nullptr},
          {"hidden", o.model.hidden, false, nullptr},
          {"heads", o.model.heads, false, nullptr},
          {"vocab", o.model.vocab, false, nullptr},
          {"seq", o.model.seq, false, nullptr},
          {"global_batch", global_batch(o, world), false, nullptr},
          // Later fields: a manifest without them was written with their defaults.
          {"context_parallel_size", std::max(o.cp, 1), true, 1},
          {"expert_model_parallel_size", std::max(o.ep, 1), true, 1},
          {"experts", o.model.experts, true, 0},
          {"experts_per_token", o.model.experts_per_token, true, 0}};
}
}  // namespace

nlohmann::json run_manifest(const TrainOptions& o, int world, std::int64_t step) {
  nlohmann::json j = {{"step", step}, {"data_position", step * global_batch(o, world)}};
  const bool mp = model_parallel(o);
  for (const Field& f : run_fields(o, world))
    if (mp || !f.model_parallel) j[f.key] = f.value;
  return j;
}

Status check_manifest(const nlohmann::json& j, const TrainOptions& o, int world,
                      const std::string& where) {
  const bool mp = model_parallel(o);
  for (const Field& f : run_fields(o, world)) {
    const nlohmann::json have = j.contains(f.key) ? j[f.key] : f.unset;
    // A field this run does not write (a data-parallel run's TP, PP, ...) is compared where the
    // manifest has it or a default for it: a model-parallel run's checkpoint holds its shards.
    if (!mp && f.model_parallel && have.is_null()) continue;
    if (have != f.value)
      return Error{fmt::format("--resume: {}: {} is {}, this run has {}", where, f.key, have.dump(),
                               f.value.dump())};
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
