// The server's read-only status endpoints as JSON. GET /props: the served
// model, its context and slots, the default sampling, and where its layers
// run (the runner's placement: VRAM, streamed from RAM or disk, or on the
// CPU) with the bytes a token reads. GET /slots: each sequence slot's
// request and progress. Field names follow llama-server's where they mean
// the same (id, id_task, n_ctx, is_processing, total_slots, next_token).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "engine/engine.h"

namespace nt::server {

struct ServerOptions;

// Built once the engine is open, on the engine's thread (the runner is not shared).
nlohmann::json props_json(const Engine& engine, const ServerOptions& options);

// From stats(): readable on any thread.
nlohmann::json slots_json(const EngineStats& stats, int64_t context);

}  // namespace nt::server
