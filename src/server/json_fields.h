// Reading a request body's fields, shared by the OpenAI and Anthropic
// shapes: each error is an ApiError (400) naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "sampling/setting_limits.h"
#include "server/openai_api.h"

namespace nt::server {

[[noreturn]] void bad_field(const std::string& param, const std::string& message);
// The value as the body wrote it, cut short when long.
std::string shown(const nlohmann::json& value);
// The body as JSON, nested at most 64 levels; malformed JSON is a 400 saying where.
nlohmann::json parse_body(const std::string& body);
// A field of the shared range table, checked as the flags and batch's lines check it.
double setting_field(const nlohmann::json& value, const SettingLimit& limit, const std::string& param);
std::string text_field(const nlohmann::json& value, const std::string& param);
bool bool_field(const nlohmann::json& value, const std::string& param);
// "model" must name the served model when given (404 otherwise); the name to answer with.
std::string served_model(const nlohmann::json& body, const std::string& model_id);

}  // namespace nt::server
