// Integers read from JSON that came from a file, a checkpoint or a peer rank. nlohmann's
// get<int64_t>() converts a float number with a plain cast (undefined behaviour for 1e75, found by
// fuzz.parsers) and wraps an integer the target type cannot hold; json_integer<T> accepts only an
// integer number that T holds exactly and otherwise throws nlohmann's own type_error (not an
// integer) or out_of_range (too large or negative for T), so every reader's existing
// `catch (const nlohmann::json::exception&)` reports it as malformed input, by the value's name.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace vt {

template <std::integral T>
[[noreturn]] void json_integer_out_of_range(const nlohmann::json& v, const std::string& value) {
  throw nlohmann::json::out_of_range::create(
      406, "integer " + value + " does not fit in " + std::to_string(sizeof(T) * 8) +
               (std::is_signed_v<T> ? "-bit signed" : "-bit unsigned") + " range",
      &v);
}

template <std::integral T>
T json_integer(const nlohmann::json& v) {
  if (!v.is_number_integer()) {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    throw nlohmann::json::type_error::create(
        302, "expected an integer, found " + std::string(v.type_name()) + " " + shown, &v);
  }
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
    json_integer_out_of_range<T>(v, std::to_string(u));
  }
  const int64_t s = v.get<int64_t>();
  if (std::in_range<T>(s)) return static_cast<T>(s);
  json_integer_out_of_range<T>(v, std::to_string(s));
}

// The same check without throwing: the integer, or nothing when v is not one T holds.
template <std::integral T>
std::optional<T> json_integer_if(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (std::in_range<T>(s)) return static_cast<T>(s);
  }
  return std::nullopt;
}

}  // namespace vt
