#include "messages/errors.hpp"
#include "messages/wire.hpp"

#include <gtest/gtest.h>
#include <msgpack.hpp>

using namespace opforge;

namespace {

constexpr size_t max_frame = 1 << 20;

using fields = std::map<std::string, msgpack::type::variant>;

std::string pack(const fields& map) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, map);
  return {buffer.data(), buffer.size()};
}

std::string payload_of(const fields& map) {
  return pack(map);
}

wire::hello sample_hello() {
  return {.worker_id = "gpu7:4242:9f3a",
          .role = contract::worker_role::device,
          .device_kind = "cuda",
          .device_name = "NVIDIA H100 80GB HBM3",
          .slots = 2,
          .jobs = {contract::job_kind::test, contract::job_kind::catalog},
          .toolchain = {{"python", "3.12.3"}, {"torch", "2.11.0"}, {"triton", "3.6.0"}},
          .fingerprint = "0123456789abcdef",
          .host = "gpu7",
          .pid = 4242};
}

fields hello_fields() {
  return {{"v", int64_t{1}},
          {"type", std::string{"hello"}},
          {"worker_id", std::string{"w1"}},
          {"role", std::string{"device"}},
          {"device_kind", std::string{"interpreter"}},
          {"device_name", std::string{"cpu"}},
          {"slots", int64_t{1}},
          {"jobs", std::vector<msgpack::type::variant>{std::string{"test"}}},
          {"toolchain", std::multimap<msgpack::type::variant, msgpack::type::variant>{}},
          {"fingerprint", std::string{"00"}},
          {"host", std::string{"h"}},
          {"pid", int64_t{7}}};
}

template <class Message>
Message worker_round_trip(const Message& msg) {
  auto decoded = wire::decode_worker_message(wire::encode(msg), max_frame);
  EXPECT_TRUE(decoded) << render(decoded.error());
  EXPECT_TRUE(std::holds_alternative<Message>(*decoded));
  return std::get<Message>(*decoded);
}

template <class Message>
Message daemon_round_trip(const Message& msg) {
  auto decoded = wire::decode_daemon_message(wire::encode(msg), max_frame);
  EXPECT_TRUE(decoded) << render(decoded.error());
  EXPECT_TRUE(std::holds_alternative<Message>(*decoded));
  return std::get<Message>(*decoded);
}

// The reason a worker frame is dropped for, and the message that says why.
std::pair<std::string, std::string> rejection(std::string_view frame, size_t limit = max_frame) {
  auto decoded = wire::decode_worker_message(frame, limit);
  if (decoded)
    return {"accepted", ""};
  return {wire::malformed_reason(decoded.error()), render(decoded.error())};
}

} // namespace

TEST(Wire, WorkerMessagesRoundTrip) {
  EXPECT_EQ(worker_round_trip(sample_hello()), sample_hello());
  EXPECT_EQ(worker_round_trip(wire::worker_heartbeat{3}).busy, 3);
  wire::result result{
      .job_id = "t-17",
      .status = contract::job_status::done,
      .payload = payload_of({{"outcome", std::string{"pass"}}, {"tests_run", int64_t{12}}}),
      .error = "",
      .elapsed_ms = 1534};
  EXPECT_EQ(worker_round_trip(result), result);
  EXPECT_EQ(worker_round_trip(wire::goodbye{"SIGTERM"}).reason, "SIGTERM");
}

TEST(Wire, DaemonMessagesRoundTrip) {
  EXPECT_EQ(daemon_round_trip(wire::welcome{250, 4}), (wire::welcome{250, 4}));
  daemon_round_trip(wire::daemon_heartbeat{});
  wire::job job{.job_id = "t-17",
                .kind = contract::job_kind::test,
                .attempt = 2,
                .deadline_ms = 60000,
                .payload = payload_of({{"op", std::string{"exp"}}, {"seed", int64_t{0}}})};
  EXPECT_EQ(daemon_round_trip(job), job);
  EXPECT_EQ(daemon_round_trip(wire::cancel{"t-17"}).job_id, "t-17");
  daemon_round_trip(wire::hello_required{});
  EXPECT_EQ(daemon_round_trip(wire::goodbye{"daemon shutting down"}).reason,
            "daemon shutting down");
}

// An empty payload is sent as `{}`, which comes back as the one-byte empty map.
TEST(Wire, EmptyPayloadTravelsAsAnEmptyMap) {
  auto job = daemon_round_trip(
      wire::job{.job_id = "c-1", .kind = contract::job_kind::catalog, .deadline_ms = 1});
  EXPECT_EQ(job.payload, std::string(1, '\x80'));
}

TEST(Wire, AHelloCarriesItsToolchainsConformanceReportAndOneWithoutItStillRegisters) {
  auto hello = sample_hello();
  hello.conformance = contract::conformance_report{
      .fingerprint = hello.fingerprint,
      .device_kind = "cuda",
      .probes_run = 31,
      .defects = {{.probe = "negate_bfloat16",
                   .primitive = "negation",
                   .dtype = "bfloat16",
                   .expression = "-x",
                   .inputs = "x=[0.5], y=[0.5]",
                   .expected = "[-0.5]",
                   .actual = "[-8.0]",
                   .known = false,
                   .workaround = "(-x.to(tl.float32)).to(tl.bfloat16)",
                   .patch = "negation_sign_flip",
                   .reproducer = "probe[(1,)](x, y, out, 1, BLOCK=1)"}}};
  auto decoded = worker_round_trip(hello);
  EXPECT_EQ(decoded, hello);
  ASSERT_TRUE(decoded.conformance);
  EXPECT_EQ(decoded.conformance->defects.at(0).actual, "[-8.0]");
  // A worker of an earlier build sends no report: the key is absent, the hello is whole.
  auto without = wire::decode_worker_message(pack(hello_fields()), max_frame);
  ASSERT_TRUE(without) << render(without.error());
  EXPECT_FALSE(std::get<wire::hello>(*without).conformance);
  // A report that is not one is refused, naming the field.
  auto map = hello_fields();
  map["conformance"] = std::string{"none found"};
  auto [reason, what] = rejection(pack(map));
  EXPECT_EQ(reason, "bad_key");
  EXPECT_NE(what.find("conformance"), std::string::npos) << what;
}

TEST(Wire, UnknownKeysAreIgnored) {
  auto map = hello_fields();
  map["gpu_count"] = int64_t{8};
  auto decoded = wire::decode_worker_message(pack(map), max_frame);
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(std::get<wire::hello>(*decoded).worker_id, "w1");
}

TEST(Wire, OversizedFramesAreRejectedBeforeParsing) {
  auto frame = wire::encode(sample_hello());
  auto [reason, what] = rejection(frame, frame.size() - 1);
  EXPECT_EQ(reason, "oversized");
  EXPECT_EQ(what.rfind("frame_oversized: oversized: ", 0), 0u) << what;
}

// msgpack-c #1013: five bytes announcing a 4-billion-element array must not allocate it.
TEST(Wire, HugeContainerHeadersAreRejected) {
  EXPECT_EQ(rejection(std::string{"\xdd\xff\xff\xff\xff", 5}).first, "oversized");
  EXPECT_EQ(rejection(std::string{"\xdf\xff\xff\xff\xff", 5}).first, "oversized");
}

TEST(Wire, GarbageIsNotMsgpack) {
  EXPECT_EQ(rejection(std::string{"\xc1\x00garbage", 9}).first, "not_msgpack");
  EXPECT_EQ(rejection("").first, "not_msgpack");
  auto trailing = wire::encode(wire::worker_heartbeat{}) + "x";
  EXPECT_EQ(rejection(trailing).first, "not_msgpack");
}

TEST(Wire, NonMapsAreRejected) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, std::vector<int>{1, 2, 3});
  auto [reason, what] = rejection({buffer.data(), buffer.size()});
  EXPECT_EQ(reason, "not_map");
  EXPECT_EQ(what, "frame_malformed: not_map: expected a map, got array");
}

TEST(Wire, OtherVersionsAreRejected) {
  auto map = hello_fields();
  map["v"] = int64_t{2};
  auto [reason, what] = rejection(pack(map));
  EXPECT_EQ(reason, "version_mismatch");
  EXPECT_EQ(what, "frame_version_mismatch: version_mismatch: protocol version 2, expected 1");
}

TEST(Wire, UnknownTypesAreRejected) {
  auto [reason, what] =
      rejection(pack({{"v", int64_t{1}}, {"type", std::string{"welcome"}}, {"x", int64_t{1}}}));
  EXPECT_EQ(reason, "unknown_type"); // welcome goes daemon -> worker only
  EXPECT_EQ(what, "frame_unknown_type: unknown_type: unknown message type 'welcome'");
}

TEST(Wire, MissingKeysAreNamed) {
  auto map = hello_fields();
  map.erase("slots");
  EXPECT_EQ(rejection(pack(map)).second,
            "frame_malformed: missing_key: hello: missing key 'slots'");
  EXPECT_EQ(rejection(pack({{"type", std::string{"heartbeat"}}})).second,
            "frame_malformed: missing_key: frame: missing key 'v'");
  EXPECT_EQ(rejection(pack({{"v", int64_t{1}}, {"type", std::string{"heartbeat"}}})).first,
            "missing_key");
}

TEST(Wire, MistypedAndOutOfRangeKeysAreNamed) {
  auto map = hello_fields();
  map["slots"] = std::string{"two"};
  EXPECT_EQ(rejection(pack(map)).second,
            "frame_malformed: bad_key: hello: key 'slots': expected an integer, got str");
  map = hello_fields();
  map["slots"] = int64_t{0};
  EXPECT_EQ(rejection(pack(map)).second,
            "frame_malformed: bad_key: hello: key 'slots': must be at least 1");
  map = hello_fields();
  map["jobs"] = std::vector<msgpack::type::variant>{std::string{"test"}, int64_t{3}};
  EXPECT_EQ(rejection(pack(map)).second,
            "frame_malformed: bad_key: hello: key 'jobs': expected an array of strings, got int");
  map = hello_fields();
  map["role"] = std::string{"judge"};
  EXPECT_EQ(rejection(pack(map)).first, "bad_key");
  auto result = pack({{"v", int64_t{1}},
                      {"type", std::string{"result"}},
                      {"job_id", std::string{"t-1"}},
                      {"status", std::string{"done"}},
                      {"payload", std::string{"not a map"}},
                      {"elapsed_ms", int64_t{1}}});
  EXPECT_EQ(rejection(result).second,
            "frame_malformed: bad_key: result: key 'payload': expected a map, got str");
}

TEST(Wire, PayloadsMustBeOneMap) {
  EXPECT_FALSE(wire::check_payload("", max_frame));
  EXPECT_FALSE(wire::check_payload(payload_of({{"op", std::string{"exp"}}}), max_frame));
  EXPECT_EQ(render(wire::check_payload("\x93\x01\x02\x03", max_frame)),
            "request_invalid: payload: expected a msgpack map, got array");
  EXPECT_EQ(wire::check_payload("\xc1", max_frame), errc::request_invalid);
}
