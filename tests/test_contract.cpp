// The golden frames of tests/fixtures/frames, written by the worker's Python (the pytest
// worker/tests/test_contract.py decodes the same files): each decodes here to the values it holds
// and encodes back to the same bytes, so the two sides of the contract agree on the wire.

#include "messages/errors.hpp"
#include "messages/wire.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

using namespace opforge;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in{std::string{OPFORGE_SOURCE_DIR} + "/tests/fixtures/frames/" + name + ".msgpack",
                   std::ios::binary};
  EXPECT_TRUE(in) << name;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

template <class Message>
Message worker_frame(const std::string& name) {
  auto bytes = fixture(name);
  auto decoded = wire::decode_worker_message(bytes, wire::default_max_frame_bytes);
  EXPECT_TRUE(decoded) << name << ": " << render(decoded.error());
  EXPECT_TRUE(std::holds_alternative<Message>(*decoded)) << name;
  auto msg = std::get<Message>(*decoded);
  EXPECT_EQ(wire::encode(msg), bytes) << name << " does not encode back to its bytes";
  return msg;
}

template <class Message>
Message daemon_frame(const std::string& name) {
  auto bytes = fixture(name);
  auto decoded = wire::decode_daemon_message(bytes, wire::default_max_frame_bytes);
  EXPECT_TRUE(decoded) << name << ": " << render(decoded.error());
  EXPECT_TRUE(std::holds_alternative<Message>(*decoded)) << name;
  auto msg = std::get<Message>(*decoded);
  EXPECT_EQ(wire::encode(msg), bytes) << name << " does not encode back to its bytes";
  return msg;
}

} // namespace

TEST(Contract, WorkerGoldenFramesDecodeAndEncodeBack) {
  auto hello = worker_frame<wire::hello>("hello");
  EXPECT_EQ(hello.worker_id, "gpu7:4242:9f3a");
  EXPECT_EQ(hello.role, contract::worker_role::device);
  EXPECT_EQ(hello.device_kind, "cuda");
  EXPECT_EQ(hello.slots, 2);
  EXPECT_EQ(hello.jobs, (std::vector{contract::job_kind::test, contract::job_kind::catalog}));
  EXPECT_EQ(hello.toolchain.at("triton"), "3.6.0");
  EXPECT_EQ(hello.pid, 4242);
  EXPECT_EQ(worker_frame<wire::worker_heartbeat>("worker_heartbeat").busy, 1);
  auto result = worker_frame<wire::result>("result");
  EXPECT_EQ(result.job_id, "s1:test:7");
  EXPECT_EQ(result.status, contract::job_status::done);
  EXPECT_EQ(result.elapsed_ms, 1534);
  EXPECT_EQ(worker_frame<wire::goodbye>("worker_goodbye").reason, "SIGTERM");
}

TEST(Contract, DaemonGoldenFramesDecodeAndEncodeBack) {
  EXPECT_EQ(daemon_frame<wire::welcome>("welcome"), (wire::welcome{1000, 3}));
  daemon_frame<wire::daemon_heartbeat>("daemon_heartbeat");
  auto job = daemon_frame<wire::job>("job");
  EXPECT_EQ(job.kind, contract::job_kind::test);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(job.deadline_ms, 600000);
  EXPECT_EQ(daemon_frame<wire::cancel>("cancel").job_id, "s1:test:7");
  daemon_frame<wire::hello_required>("hello_required");
  EXPECT_EQ(daemon_frame<wire::goodbye>("daemon_goodbye").reason, "daemon shutting down");
}

// The job's payload is the test request the daemon builds; typed, it packs to the same bytes.
TEST(Contract, TestRequestPayloadIsTyped) {
  auto job = daemon_frame<wire::job>("job");
  auto request = wire::decode_as<contract::test_request>(job.payload, "test_request");
  ASSERT_TRUE(request) << render(request.error());
  EXPECT_EQ(request->op, "exp");
  EXPECT_EQ(request->wrapper, "exp_wrapper");
  EXPECT_EQ(request->dtypes, (std::vector{contract::dtype::float32, contract::dtype::bfloat16}));
  EXPECT_EQ(request->mode, contract::test_mode::first_failure);
  EXPECT_FALSE(request->sample_sets); // absent: every set
  EXPECT_DOUBLE_EQ(request->timeout_s, 30.0);
  EXPECT_EQ(contract::codec::to_bytes(*request), job.payload);
}

// Sample set names are the generated sets' and model:<name>; each is bounded like a device kind.
TEST(Contract, SampleSetNamesAreBoundedStrings) {
  contract::test_request request{.op = "neg",
                                 .wrapper = "w",
                                 .dtypes = {contract::dtype::float32},
                                 .sample_sets = std::vector<std::string>{"layouts", "model:gpt2"},
                                 .timeout_s = 1};
  auto taken = wire::decode_as<contract::test_request>(contract::codec::to_bytes(request), "r");
  ASSERT_TRUE(taken) << render(taken.error());
  EXPECT_EQ(taken->sample_sets, request.sample_sets);
  request.sample_sets->push_back("model:Llama 3");
  auto refused = wire::decode_as<contract::test_request>(contract::codec::to_bytes(request), "r");
  EXPECT_EQ(render(refused.error()),
            "frame_malformed: bad_key: r: key 'sample_sets': must be of the characters a-z0-9_.:-");
}

TEST(Contract, TestResultPayloadIsTyped) {
  auto result = worker_frame<wire::result>("result");
  auto verdict = wire::decode_as<contract::test_result>(result.payload, "test_result");
  ASSERT_TRUE(verdict) << render(verdict.error());
  EXPECT_EQ(verdict->outcome, contract::outcome::accuracy_error);
  EXPECT_EQ(verdict->tests_run, 3);
  EXPECT_EQ(verdict->per_dtype.at("float32").sets.at("sample_inputs").passed, 2);
  EXPECT_EQ(verdict->per_dtype.at("bfloat16").outcome, contract::dtype_outcome::skipped);
  ASSERT_TRUE(verdict->failure);
  EXPECT_EQ(verdict->failure->sample_index, 2);
  EXPECT_EQ(verdict->failure->exit_code, std::nullopt);
  // The open map that workers sent before the diff was typed reads as no diff.
  EXPECT_FALSE(verdict->failure->diff);
  EXPECT_EQ(verdict->sandbox.at("namespaces"), "on");
}

TEST(Contract, ATypedDiffReadsFromItsGoldenFrame) {
  auto result = worker_frame<wire::result>("result_diff");
  auto verdict = wire::decode_as<contract::test_result>(result.payload, "test_result");
  ASSERT_TRUE(verdict) << render(verdict.error());
  ASSERT_TRUE(verdict->failure && verdict->failure->diff);
  const auto& diff = *verdict->failure->diff;
  EXPECT_EQ(diff.reason, "values differ");
  EXPECT_EQ(diff.actual_shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(diff.expected_dtype, "float32");
  EXPECT_EQ(diff.atol, 1e-5);
  EXPECT_EQ(diff.max_abs_error, 0.5);
  EXPECT_EQ(diff.max_rel_error, 0.25);
  EXPECT_EQ(diff.nan_inf_mismatches, 1);
  EXPECT_EQ(diff.signed_zero_mismatches, 1);
  EXPECT_EQ(diff.mismatched, 3);
  EXPECT_EQ(diff.total, 4);
  ASSERT_EQ(diff.first_mismatches.size(), 3u);
  EXPECT_EQ(diff.first_mismatches[1],
            (contract::element_mismatch{.index = {1, 0}, .actual = "nan", .expected = "1.0"}));
  EXPECT_FALSE(diff.first_mismatches[2].precise);
  // The daemon writes the worker's diff back as it came.
  auto again = wire::decode_as<contract::test_result>(contract::codec::to_bytes(*verdict), "r");
  ASSERT_TRUE(again) << render(again.error());
  EXPECT_EQ(*again, *verdict);
}

TEST(Contract, PayloadsThatBreakTheContractAreNamed) {
  contract::test_request request{.op = "exp", .wrapper = "w", .timeout_s = 1};
  auto bytes = contract::codec::to_bytes(request);
  EXPECT_EQ(render(wire::decode_as<contract::test_request>(bytes, "test_request").error()),
            "frame_malformed: bad_key: test_request: key 'dtypes': must not be empty");
  auto result = wire::decode_as<contract::test_result>("\x81\xa7outcome\xa4nope", "test_result");
  EXPECT_EQ(render(result.error()),
            "frame_malformed: bad_key: test_result: key 'outcome': expected pass, compile_error, "
            "runtime_error, crash, timeout, accuracy_error, cheat_detected, lint_violation, "
            "harness_error or device_defect, got 'nope'");
  auto missing = wire::decode_as<contract::lint_result>("\x81\xa2ok\xc3", "lint_result");
  EXPECT_EQ(render(missing.error()),
            "frame_malformed: missing_key: lint_result: missing key 'violations'");
}

TEST(Contract, EnumsHaveOneWireName) {
  EXPECT_EQ(to_string(contract::session_state::generate), "GENERATE");
  EXPECT_EQ(to_string(contract::dtype::bool_), "bool");
  EXPECT_EQ(contract::from_string<contract::campaign_state>("interrupted"),
            contract::campaign_state::interrupted);
  EXPECT_EQ(contract::from_string<contract::job_kind>("profile"), std::nullopt);
  EXPECT_EQ(contract::one_of<contract::worker_role>(), "device or lint");
}

// A worker newer than the daemon may announce job kinds the daemon does not know: they are
// dropped, and the worker still registers for the ones it knows.
TEST(Contract, UnknownJobKindsInHelloAreDropped) {
  auto hello = worker_frame<wire::hello>("hello");
  hello.jobs.clear();
  msgpack::sbuffer buffer;
  contract::codec::packer p{buffer};
  // The fixture with `jobs` swapped for a list naming a kind from the future.
  auto bytes = wire::encode(hello);
  auto handle = wire::unpack(bytes);
  ASSERT_TRUE(handle);
  auto& map = handle->get().via.map;
  p.pack_map(map.size);
  for (uint32_t i = 0; i < map.size; ++i) {
    p.pack(map.ptr[i].key);
    if (map.ptr[i].key.as<std::string>() == "jobs")
      p.pack(std::vector<std::string>{"profile", "test"});
    else
      p.pack(map.ptr[i].val);
  }
  auto decoded = wire::decode_worker_message({buffer.data(), buffer.size()}, 1 << 20);
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(std::get<wire::hello>(*decoded).jobs, std::vector{contract::job_kind::test});
}

// Device kinds are open (the worker's registry names them) but bounded.
TEST(Contract, DeviceKindsAreBoundedNotEnumerated) {
  auto hello = worker_frame<wire::hello>("hello");
  hello.device_kind = "npu_v2";
  auto decoded = wire::decode_worker_message(wire::encode(hello), 1 << 20);
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(std::get<wire::hello>(*decoded).device_kind, "npu_v2");
  hello.device_kind = "CUDA!";
  EXPECT_EQ(render(wire::decode_worker_message(wire::encode(hello), 1 << 20).error()),
            "frame_malformed: bad_key: hello: key 'device_kind': must be of the characters "
            "a-z0-9_-");
  hello.device_kind = std::string(33, 'x');
  EXPECT_EQ(render(wire::decode_worker_message(wire::encode(hello), 1 << 20).error()),
            "frame_malformed: bad_key: hello: key 'device_kind': longer than 32 characters");
}
