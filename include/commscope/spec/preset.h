// Finding preset data files by name or by path. Not their parsing: each spec loads its own.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "commscope/util/result.h"

namespace commscope {

enum class PresetKind { model, system, network };

// "models", "systems", "networks".
std::string_view preset_folder(PresetKind kind);

// Folders searched, in order: $COMMSCOPE_PRESETS, the installed presets beside the binary
// (installed_preset_root), the source tree's presets/, the configured install tree's
// share/commscope/presets.
std::vector<std::filesystem::path> preset_roots();

// <prefix>/share/commscope/presets of the program or Python module that holds this code, found
// relative to its file (<prefix>/bin/commscope, <prefix>/lib/python3/dist-packages/commscope/),
// so that an installed or unpacked copy finds its presets wherever it lies; empty when absent.
std::filesystem::path installed_preset_root();

// A name_or_path that contains '/' or ends in ".json" is a path; anything else is a preset
// name looked up as <root>/<folder>/<name>.json. Error: "unknown model preset 'x'; known:
// a, b, c" or "cannot open <path>".
Result<std::filesystem::path> find_preset(PresetKind kind, const std::string& name_or_path);

// The names of all presets of a kind, sorted.
std::vector<std::string> list_presets(PresetKind kind);

}  // namespace commscope
