// vt::json_integer / json_integer_if (core/json_integer.h): integers from JSON that came from
// disk are accepted only when the target type holds them exactly. Before this, get<int64_t>() cast
// 2.44e75 with undefined behaviour (fuzz.parsers' finding in a tokenizer file).
#include "core/json_integer.h"

#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

namespace vt {
namespace {

using nlohmann::json;

TEST(JsonInteger, AcceptsIntegersTheTypeHolds) {
  EXPECT_EQ(json_integer<int64_t>(json::parse("-5")), -5);
  EXPECT_EQ(json_integer<int64_t>(json::parse("9223372036854775807")),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(json_integer<int64_t>(json::parse("-9223372036854775808")),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(json_integer<uint64_t>(json::parse("18446744073709551615")),
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(json_integer<int32_t>(json::parse("2147483647")), 2147483647);
  EXPECT_EQ(json_integer<int32_t>(json::parse("-2147483648")), -2147483648LL);
}

TEST(JsonInteger, RefusesFloatsWithTheirValue) {
  for (const char* text : {"2.44444e+75", "1.0", "0.5", "-1e300"}) {
    try {
      (void)json_integer<int64_t>(json::parse(text));
      ADD_FAILURE() << text << " was accepted";
    } catch (const json::type_error& e) {
      EXPECT_NE(std::string(e.what()).find("expected an integer, found number"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW((void)json_integer<int64_t>(json::parse("\"7\"")), json::type_error);
  EXPECT_THROW((void)json_integer<int64_t>(json::parse("true")), json::type_error);
  EXPECT_THROW((void)json_integer<int64_t>(json::parse("null")), json::type_error);
}

TEST(JsonInteger, RefusesIntegersOutsideTheType) {
  EXPECT_THROW((void)json_integer<int64_t>(json::parse("9223372036854775808")), json::out_of_range);
  EXPECT_THROW((void)json_integer<uint64_t>(json::parse("-1")), json::out_of_range);
  EXPECT_THROW((void)json_integer<int32_t>(json::parse("2147483648")), json::out_of_range);
  EXPECT_THROW((void)json_integer<int32_t>(json::parse("-2147483649")), json::out_of_range);
  try {
    (void)json_integer<int32_t>(json::parse("4294967296"));
    ADD_FAILURE();
  } catch (const json::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("4294967296 does not fit in 32-bit signed range"),
              std::string::npos) << e.what();
  }
}

TEST(JsonInteger, NonThrowingFormAgrees) {
  EXPECT_EQ(json_integer_if<int64_t>(json::parse("12")), 12);
  EXPECT_EQ(json_integer_if<int64_t>(json::parse("-12")), -12);
  EXPECT_FALSE(json_integer_if<int64_t>(json::parse("2.44444e+75")));
  EXPECT_FALSE(json_integer_if<int64_t>(json::parse("9223372036854775808")));
  EXPECT_FALSE(json_integer_if<uint64_t>(json::parse("-1")));
  EXPECT_FALSE(json_integer_if<int64_t>(json::parse("\"12\"")));
  EXPECT_FALSE(json_integer_if<int64_t>(json::parse("[12]")));
}

}  // namespace
}  // namespace vt
