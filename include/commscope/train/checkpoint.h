// The trainer's checkpoints (no MPI here): one file per rank, step<s>.rank<r>.bin, holding
// that rank's parameters (all of them, or its ZeRO partition) and AdamW moments, then a CRC-32
// (zlib's) over all of it; and latest.json, the manifest rank 0 writes once every rank's file
// is on disk. Every file is written whole or not at all (util/atomic_file.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commscope/train/options.h"
#include "commscope/util/result.h"

namespace commscope::train {

std::string checkpoint_file(const std::string& dir, std::int64_t step, int rank);
std::string manifest_file(const std::string& dir);

// File layout: for each part, its element count (uint64, little-endian as the machine) and its
// floats; then the CRC-32 of everything before it (uint32) and the magic "CSCK".
Status write_checkpoint(const std::string& path,
                        const std::vector<const std::vector<float>*>& parts);
// Fills `parts`, whose sizes say what this run expects. Errors name the file and say whether
// it is missing, truncated, damaged (checksum), or from another model.
Status read_checkpoint(const std::string& path, const std::vector<std::vector<float>*>& parts);

// The manifest: {"step", "ranks", "strategy", "seed", "data_position", sizes, "global_batch"}
// (and a model-parallel run's plan: TP, PP, virtual stages, rank order, SP, CP, EP, experts).
Status write_manifest(const std::string& dir, const nlohmann::json& manifest);
Result<nlohmann::json> read_manifest(const std::string& dir);

// The manifest a run of o on `world` ranks writes at `step`: both trainers write it, and
// check_manifest compares against the same fields.
nlohmann::json run_manifest(const TrainOptions& o, int world, std::int64_t step);

// Whether manifest `j` (read from `where`) is a checkpoint of the run o on `world` ranks: the
// fields a run of o writes, each equal (a field a manifest lacks, written before it was, by the
// value it had then); a data-parallel run takes no model-parallel checkpoint. The one check both
// trainers make in the ranks and `commscope train` makes before it launches them (options.h's
// validate). The error names the field, the checkpoint's value and the run's.
Status check_manifest(const nlohmann::json& j, const TrainOptions& o, int world,
                      const std::string& where);

// Every rank file of the manifest's step in `dir` for `world` ranks is there, a regular file
// (their sizes depend on the sharding, which the ranks check as they read them).
Status check_rank_files(const std::string& dir, std::int64_t step, int world);

}  // namespace commscope::train
