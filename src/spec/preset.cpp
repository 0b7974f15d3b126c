// Preset lookup: names resolve to files under the preset roots, paths are taken as given.
#include "commscope/spec/preset.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

namespace commscope {

namespace fs = std::filesystem;

std::string_view preset_folder(PresetKind kind) {
  switch (kind) {
    case PresetKind::model:
      return "models";
    case PresetKind::system:
      return "systems";
    case PresetKind::network:
      return "networks";
  }
  return "";
}

static std::string_view kind_word(PresetKind kind) {
  switch (kind) {
    case PresetKind::model:
      return "model";
    case PresetKind::system:
      return "system";
    case PresetKind::network:
      return "network";
  }
  return "";
}

// The installed presets beside the binary that holds this code: <prefix>/share/commscope/presets
// for a program in <prefix>/bin or a Python module in <prefix>/lib/python3/dist-packages/commscope
// (found by walking up at most four folders); empty when there is none. The binary is the file
// dladdr names (the module's path); for the main program that is only the name it was started
// by ("commscope", found through PATH), so the kernel's /proc/self/exe is asked next.
fs::path installed_preset_root() {
  std::vector<fs::path> binaries;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&installed_preset_root), &info) != 0 &&
      info.dli_fname != nullptr && std::string_view(info.dli_fname).find('/') != std::string::npos)
    binaries.emplace_back(info.dli_fname);
  binaries.emplace_back("/proc/self/exe");
  for (const auto& binary : binaries) {
    std::error_code ec;
    fs::path dir = fs::canonical(binary, ec);
    if (ec) continue;
    dir = dir.parent_path();
    for (int up = 0; up < 4 && dir.has_relative_path(); ++up) {
      dir = dir.parent_path();
      fs::path candidate = dir / "share" / "commscope" / "presets";
      if (fs::is_directory(candidate, ec)) return candidate;
    }
  }
  return {};
}

std::vector<fs::path> preset_roots() {
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("COMMSCOPE_PRESETS"); env && *env) roots.emplace_back(env);
  if (fs::path installed = installed_preset_root(); !installed.empty())
    roots.push_back(std::move(installed));
  roots.emplace_back(COMMSCOPE_PRESET_DIR);
  roots.emplace_back(COMMSCOPE_INSTALL_PRESET_DIR);
  return roots;
}

std::vector<std::string> list_presets(PresetKind kind) {
  std::set<std::string> names;
  for (const auto& root : preset_roots()) {
    std::error_code ec;
    fs::path dir = root / preset_folder(kind);
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".json") names.insert(e.path().stem().string());
  }
  return {names.begin(), names.end()};
}

Result<fs::path> find_preset(PresetKind kind, const std::string& name_or_path) {
  if (name_or_path.empty())
    return Error{
        fmt::format("--{}: expected a preset name or a JSON file, got ''", kind_word(kind))};
  std::error_code ec;
  bool looks_like_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (looks_like_path) {
    if (!fs::is_regular_file(name_or_path, ec))
      return Error{fmt::format("--{}: file '{}' does not exist or is not a regular file",
                               kind_word(kind), name_or_path)};
    return fs::path(name_or_path);
  }
  for (const auto& root : preset_roots()) {
    fs::path p = root / preset_folder(kind) / (name_or_path + ".json");
    if (fs::is_regular_file(p, ec)) return p;
  }
  auto names = list_presets(kind);
  if (names.empty()) {
    std::vector<std::string> looked;
    for (const auto& root : preset_roots()) looked.push_back((root / preset_folder(kind)).string());
    return Error{fmt::format(
        "--{}: unknown {} preset '{}': no {} presets could be read in {} (set COMMSCOPE_PRESETS "
        "to commscope's presets/ folder, or give a path to a JSON file)",
        kind_word(kind), kind_word(kind), name_or_path, kind_word(kind), fmt::join(looked, ", "))};
  }
  return Error{
      fmt::format("--{}: unknown {} preset '{}'; expected one of: {} (or a path to a JSON file)",
                  kind_word(kind), kind_word(kind), name_or_path, fmt::join(names, ", "))};
}

}  // namespace commscope
