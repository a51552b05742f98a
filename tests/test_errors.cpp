#include "messages/errors.hpp"

#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <gtest/gtest.h>

using namespace opforge;

TEST(Errors, RenderNamesTheCodeAndContext) {
  auto err = caf::make_error(errc::config_invalid, std::string{"serve.threads"},
                             std::string{"expected an integer, got 'many'"});
  EXPECT_EQ(render(err), "config_invalid: serve.threads: expected an integer, got 'many'");
}

TEST(Errors, RenderWithoutContextIsTheName) {
  EXPECT_EQ(render(caf::make_error(errc::worker_lost)), "worker_lost");
  EXPECT_EQ(render(caf::error{}), "no error");
}

TEST(Errors, ActorSystemRendersThroughTheRegisteredCategory) {
  caf::actor_system_config cfg;
  register_error_category(cfg);
  caf::actor_system sys{cfg};
  auto err = caf::make_error(errc::frame_oversized, std::string{"17 MiB > 16 MiB"});
  EXPECT_EQ(sys.render(err), "frame_oversized: 17 MiB > 16 MiB");
}

// Codes start at 1 (0 is CAF's "no error"): the names table is offset by its `first`.
TEST(Errors, EveryCodeHasItsOwnNameAndReadsBack) {
  EXPECT_EQ(to_string(errc::unspecified), "unspecified");
  EXPECT_EQ(to_string(errc::cancelled), "cancelled");
  EXPECT_EQ(to_string(errc::endpoint_fault), "endpoint_fault");
  std::set<std::string> names;
  for (auto code = static_cast<uint8_t>(errc::unspecified);
       code <= static_cast<uint8_t>(errc::endpoint_fault); ++code) {
    auto name = to_string(static_cast<errc>(code));
    EXPECT_TRUE(names.insert(name).second) << name << " names two codes";
    EXPECT_EQ(from_string<errc>(name), static_cast<errc>(code)) << name;
  }
  EXPECT_EQ(names.size(), 20u);
  EXPECT_EQ(from_string<errc>("no_such_code"), std::nullopt);
}
