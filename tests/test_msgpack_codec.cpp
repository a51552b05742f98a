#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"

#include <gtest/gtest.h>

using namespace opforge;

namespace {

template <class T>
std::string pack(const T& value) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, value);
  return {buf.data(), buf.size()};
}

} // namespace

TEST(MsgpackCodec, ReadsTypedFieldsOfAMap) {
  std::map<std::string, msgpack::type::variant> frame{
      {"type", std::string{"hello"}}, {"slots", int64_t{2}}, {"busy", false}};
  auto handle = wire::unpack(pack(frame));
  ASSERT_TRUE(handle) << render(handle.error());
  auto reader = wire::map_reader::of(handle->get());
  ASSERT_TRUE(reader);
  EXPECT_EQ(*reader->string("type"), "hello");
  EXPECT_EQ(*reader->integer("slots"), 2);
  EXPECT_EQ(*reader->boolean("busy"), false);
  EXPECT_EQ(*reader->integer_or("absent", 7), 7);
}

TEST(MsgpackCodec, ErrorsNameTheKeyAndTheTypes) {
  std::map<std::string, msgpack::type::variant> frame{{"slots", std::string{"two"}}};
  auto handle = wire::unpack(pack(frame));
  auto reader = wire::map_reader::of(handle->get());
  EXPECT_EQ(render(reader->integer("slots").error()),
            "frame_malformed: key 'slots': expected an integer, got str");
  EXPECT_EQ(render(reader->string("type").error()), "frame_malformed: missing key 'type'");
  EXPECT_EQ(render(reader->integer_or("slots", 1).error()),
            "frame_malformed: key 'slots': expected an integer, got str");
}

TEST(MsgpackCodec, HugeDeclaredContainerIsRefusedBeforeAllocating) {
  // array32 header claiming 2^32-1 elements in a 5-byte frame (msgpack-c #1013).
  std::string frame{"\xdd\xff\xff\xff\xff", 5};
  auto handle = wire::unpack(frame);
  ASSERT_FALSE(handle);
  EXPECT_EQ(handle.error(), errc::frame_oversized) << render(handle.error());
}

TEST(MsgpackCodec, RejectsOversizedTruncatedTrailingAndEmptyFrames) {
  EXPECT_EQ(wire::unpack(std::string(100, '\xc0'), {.max_bytes = 10}).error(),
            errc::frame_oversized);
  EXPECT_EQ(wire::unpack("").error(), errc::frame_malformed);
  auto full = pack(std::string{"hello world"});
  EXPECT_EQ(render(wire::unpack(full.substr(0, 4)).error()),
            "frame_malformed: truncated msgpack value");
  EXPECT_EQ(render(wire::unpack(full + '\xc0').error()),
            "frame_malformed: 1 trailing bytes after the value");
}

TEST(MsgpackCodec, DeepNestingIsRefused) {
  std::string frame(64, '\x91'); // 64 nested one-element arrays
  frame += '\xc0';
  EXPECT_EQ(wire::unpack(frame).error(), errc::frame_oversized);
}

TEST(MsgpackCodec, NonMapAndNonStringKeysAreMalformed) {
  auto arr = wire::unpack(pack(std::vector<int>{1, 2}));
  EXPECT_EQ(render(wire::map_reader::of(arr->get()).error()),
            "frame_malformed: expected a map, got array");
  auto intkeys = wire::unpack(pack(std::map<int, int>{{1, 2}}));
  EXPECT_EQ(render(wire::map_reader::of(intkeys->get()).error()),
            "frame_malformed: map key of type int");
}
