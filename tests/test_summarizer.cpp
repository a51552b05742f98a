// The summarizer: deterministic pre-processing on real-looking Triton, MLIR and CUDA-fault logs,
// then the LLM step through a real llm_endpoint against the replay server, and its fallback.

#include "actors/llm/summarizer.hpp"
#include "test_llm_endpoint_support.hpp"

using namespace opforge;
using namespace opforge::testing;
using namespace std::chrono_literals;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in{std::string{OPFORGE_SOURCE_DIR} + "/tests/fixtures/summarizer/" + name};
  EXPECT_TRUE(in) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(CondenseLog, TritonCompileErrorKeepsOneTracebackWithTheCaret) {
  auto log = fixture("triton_compile_error.log");
  auto out = condense_log(log);
  EXPECT_LE(out.size(), 6000u);
  EXPECT_LT(out.size(), log.size() / 2);
  EXPECT_FALSE(has(out, "\x1b")) << "ANSI codes survived";
  EXPECT_EQ(count(out, "\nTraceback (most recent call last):"), 1u) << out;
  EXPECT_TRUE(has(out, "triton.compiler.errors.CompilationError: at 9:12:")) << out;
  EXPECT_TRUE(has(out, "    out = tl.cast(acc, out_ptr.dtype)\n            ^\n")) << out;
  EXPECT_TRUE(has(out, "AttributeError(\"'pointer_type' object has no attribute")) << out;
  EXPECT_EQ(count(out, "[repeat of the "), 2u) << out; // bfloat16 and float32 said the same
  EXPECT_TRUE(has(out, "FAILED dtype=torch.float32: compile_error")) << out;
  EXPECT_TRUE(has(out, "3 of 3 dtypes failed")) << out;
  // Thirty warnings (two lines each) differing only in the sample number become one and a count.
  EXPECT_EQ(count(out, "UserWarning: sample input"), 1u) << out;
  EXPECT_TRUE(has(out, "[the previous 2 lines repeat 29 more times with other numbers]")) << out;
}

TEST(CondenseLog, MlirFailureKeepsTheFirstErrorAndDropsTheIrDump) {
  auto log = fixture("mlir_pass_failure.log");
  condense_options options;
  options.max_chars = 4000;
  auto out = condense_log(log, options);
  EXPECT_LE(out.size(), 4000u);
  EXPECT_TRUE(has(out, "kernel.py:18:20: error: 'tt.dot' op expected both operands to have the "
                       "same element type, got 'f16' and 'f32'"))
      << out;
  EXPECT_TRUE(has(out, "        acc += tl.dot(a, b)\n               ^\n")) << out;
  EXPECT_TRUE(has(out, "lines omitted ...]")) << out;
  EXPECT_TRUE(has(out, "RuntimeError: PassManager::run failed")) << out;
  EXPECT_TRUE(has(out, "[candidate] FAILED dtype=torch.float16: compile_error")) << out;
  EXPECT_LT(count(out, "loc(#loc"), 40u) << "the IR dump was kept";
}

TEST(CondenseLog, RuntimeFaultDropsProgressAndKeepsBothChainedExceptions) {
  auto log = fixture("runtime_cuda_fault.log");
  auto out = condense_log(log);
  EXPECT_LE(out.size(), 6000u);
  EXPECT_FALSE(has(out, "%|")) << "progress output survived";
  EXPECT_FALSE(has(out, "\r"));
  EXPECT_TRUE(has(out, "RuntimeError: Triton Error [CUDA]: an illegal memory access")) << out;
  EXPECT_TRUE(has(out, "torch.AcceleratorError: CUDA error: an illegal memory access")) << out;
  EXPECT_TRUE(has(out, "kernel.py\", line 40, in softmax")) << out;
  EXPECT_TRUE(has(out, "crash after 3.07 s (sample 180 of 240)")) << out;
  // 180 per-sample lines of one shape become the first and a count.
  EXPECT_TRUE(has(out, "[... 179 more lines like the previous]")) << out;
}

TEST(CondenseLog, ShortLogsOnlyLoseNoise) {
  EXPECT_EQ(condense_log("\x1b[31merror:\x1b[0m bad  \r\nnext\n\n\n"), "error: bad\nnext\n");
  EXPECT_EQ(condense_log("same\nsame\nsame\n"), "same\n[previous line repeated 2 more times]\n");
  EXPECT_EQ(condense_log(""), "");
}

TEST(CondenseLog, NeverExceedsTheBudgetEvenWithoutLineBreaks) {
  std::string log(100000, 'x');
  log += "\nerror: the end\n";
  condense_options options;
  options.max_chars = 1000;
  auto out = condense_log(log, options);
  EXPECT_LE(out.size(), 1000u);
  EXPECT_TRUE(has(out, "error: the end")) << out;
}

TEST(CondenseLog, PromptTemplateIsFilled) {
  EXPECT_EQ(render_summary_prompt("op {{operator}}:\n{{log}}-{{other}}", "add", "L"),
            "op add:\nL-{{other}}");
  auto shipped = read_prompt_file(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts/summary.md");
  ASSERT_TRUE(shipped);
  EXPECT_TRUE(has(*shipped, "{{operator}}"));
  EXPECT_TRUE(has(*shipped, "{{log}}"));
}

class Summarizer : public LlmFixture {
protected:
  summarizer_actor spawn_summarizer(summarizer_config config, llm_endpoint_actor endpoint = {}) {
    auto prompt = read_prompt_file(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts/summary.md");
    EXPECT_TRUE(prompt);
    auto actor = sys.spawn(summarizer, std::move(config), *prompt, endpoint, metrics_ptr);
    summarizers.push_back(actor);
    return actor;
  }

  summary_result summarize(const summarizer_actor& actor, const std::string& log) {
    return ask<summary_result>(actor, atom::summarize_v, summary_request{"s1", "add", log});
  }

  void TearDown() override {
    for (const auto& actor : summarizers)
      stop(actor);
    LlmFixture::TearDown();
  }

  std::vector<summarizer_actor> summarizers;
};

TEST_F(Summarizer, OffPassesTheLogThrough) {
  summarizer_config cfg;
  cfg.mode = summarizer_mode::off;
  auto log = fixture("triton_compile_error.log");
  auto result = summarize(spawn_summarizer(cfg), log);
  EXPECT_EQ(result.method, summary_method::raw);
  EXPECT_EQ(result.text, log);
  EXPECT_EQ(result.original_chars, log.size());
}

TEST_F(Summarizer, DeterministicModeNeverAsksAnEndpoint) {
  summarizer_config cfg;
  cfg.mode = summarizer_mode::deterministic;
  auto log = fixture("mlir_pass_failure.log");
  auto result = summarize(spawn_summarizer(cfg), log);
  EXPECT_EQ(result.method, summary_method::deterministic);
  condense_options options;
  EXPECT_EQ(result.text, condense_log(log, options));
  EXPECT_EQ(metrics_ptr->summaries("deterministic").Value(), 1);
}

TEST_F(Summarizer, LongLogGoesToTheEndpointWithTheSummaryPrompt) {
  start_server({answer("add", "1. error: 'tt.dot' op expected both operands ...")});
  auto endpoint_cfg = config("summary");
  endpoint_cfg.record_to = (dir / "summary.jsonl").string();
  auto endpoint = spawn_endpoint(endpoint_cfg);
  summarizer_config cfg;
  cfg.mode = summarizer_mode::llm;
  cfg.endpoint = "summary";
  cfg.llm_threshold_chars = 1000;
  auto result = summarize(spawn_summarizer(cfg, endpoint), fixture("mlir_pass_failure.log"));
  EXPECT_EQ(result.method, summary_method::llm) << result.error;
  EXPECT_EQ(result.text, "1. error: 'tt.dot' op expected both operands ...");
  EXPECT_EQ(result.usage.prompt, 20u);

  // Short logs stay deterministic even in llm mode.
  auto short_result = summarize(summarizers.back(), "error: x\n");
  EXPECT_EQ(short_result.method, summary_method::deterministic);
  EXPECT_EQ(hits().size(), 1u);

  stop_endpoints();
  auto recorded = nlohmann::json::parse(read_file(dir / "summary.jsonl"));
  auto prompt = recorded["request"]["messages"][0]["content"].get<std::string>();
  EXPECT_TRUE(has(prompt, "Triton kernel for the PyTorch operator `add`")) << prompt;
  EXPECT_TRUE(has(prompt, "error: 'tt.dot' op expected both operands")) << prompt;
  EXPECT_FALSE(has(prompt, "{{log}}"));
  EXPECT_EQ(recorded["request"]["max_tokens"], 1024);
}

TEST_F(Summarizer, FailingEndpointFallsBackToTheDeterministicSummary) {
  start_server({fault("add", "500"), fault("add", "500"), fault("add", "500")});
  auto endpoint = spawn_endpoint(config("summary"));
  summarizer_config cfg;
  cfg.mode = summarizer_mode::llm;
  cfg.endpoint = "summary";
  cfg.llm_threshold_chars = 1000;
  auto log = fixture("runtime_cuda_fault.log");
  auto result = summarize(spawn_summarizer(cfg, endpoint), log);
  EXPECT_EQ(result.method, summary_method::deterministic_fallback);
  EXPECT_EQ(result.text, condense_log(log));
  EXPECT_TRUE(has(result.error, "endpoint_fault")) << result.error;
  EXPECT_EQ(hits().size(), 3u);
  EXPECT_EQ(metrics_ptr->summaries("deterministic_fallback").Value(), 1);
}

TEST_F(Summarizer, DeadEndpointFallsBackToo) {
  start_server({});
  auto endpoint = spawn_endpoint(config("summary"));
  stop_endpoints();
  summarizer_config cfg;
  cfg.mode = summarizer_mode::llm;
  cfg.endpoint = "summary";
  cfg.llm_threshold_chars = 1000;
  auto result = summarize(spawn_summarizer(cfg, endpoint), fixture("mlir_pass_failure.log"));
  EXPECT_EQ(result.method, summary_method::deterministic_fallback);
  EXPECT_FALSE(result.error.empty());
}

} // namespace
