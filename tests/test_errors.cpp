#include "messages/errors.hpp"

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
