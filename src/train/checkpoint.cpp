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

}  // namespace commscope::train
