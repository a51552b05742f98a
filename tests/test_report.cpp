// opforge report's pure part: coverage tables, curves, failures and costs from stored campaigns
// and sessions, and the self-contained HTML, rendered by a real headless Chromium.

#include "actors/library/report.hpp"
#include "tests/test_store_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

using namespace opforge;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

stored_campaign campaign(std::string id, std::string model, std::vector<operator_spec> ops) {
  stored_campaign c;
  c.spec.campaign_id = std::move(id);
  c.spec.endpoint = "ep-" + model;
  c.spec.model = std::move(model);
  c.spec.operators = std::move(ops);
  c.state = contract::campaign_state::done;
  return c;
}

operator_spec op(std::string name, std::string category, std::vector<std::string> dtypes) {
  return {std::move(name), "", std::move(category), "", std::move(dtypes)};
}

session_record session(const std::string& campaign_id, const std::string& op_name,
                       session_state state, uint32_t calls, std::string end_reason = "") {
  session_record s;
  s.campaign_id = campaign_id;
  s.session_id = campaign_id + "/" + op_name;
  s.op = op_name;
  s.state = state;
  s.total_calls = calls;
  s.prompt_tokens = 1000 * calls;
  s.completion_tokens = 100 * calls;
  s.end_reason = std::move(end_reason);
  return s;
}

// Two models over the same four operators: "big" passes three, "small" passes one and fails two.
struct two_models {
  std::vector<stored_campaign> campaigns{
      campaign("c-big", "big",
               {op("abs", "elementwise", {"float32", "int64"}),
                op("neg", "elementwise", {"float32"}), op("sum", "reduction", {"float32"}),
                op("cumsum", "reduction", {"float32"})}),
      campaign("c-small", "small",
               {op("abs", "elementwise", {"float32", "int64"}),
                op("neg", "elementwise", {"float32"}), op("sum", "reduction", {"float32"}),
                op("cumsum", "reduction", {"float32"})})};
  std::vector<session_record> sessions{
      session("c-big", "abs", session_state::success, 1),
      session("c-big", "neg", session_state::success, 3),
      session("c-big", "sum", session_state::success, 3),
      session("c-big", "cumsum", session_state::failed, 20, "call budget spent"),
      session("c-small", "abs", session_state::success, 2),
      session("c-small", "sum", session_state::failed, 20, "call budget spent"),
      session("c-small", "cumsum", session_state::failed, 7, "dialogs exhausted"),
      // Still running: neither covered nor failed.
      session("c-small", "neg", session_state::prompt, 4),
      // Another campaign's session is not counted.
      session("c-other", "abs", session_state::success, 1)};
};

// A PNG as RGB, enough for Chromium's screenshots: 8-bit RGB or RGBA, not interlaced.
struct image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

image decode_png(const std::string& png) {
  image img;
  std::string idat;
  uint8_t colour = 0;
  for (size_t at = 8; at + 8 <= png.size();) {
    auto length = be32(png, at);
    auto type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      img.width = be32(png, at + 8);
      img.height = be32(png, at + 12);
      EXPECT_EQ(png[at + 16], 8) << "bit depth";
      colour = png[at + 17];
      EXPECT_EQ(png[at + 20], 0) << "interlaced";
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, length);
    }
    at += 12 + length;
  }
  size_t channels = colour == 6 ? 4 : 3;
  EXPECT_TRUE(colour == 2 || colour == 6) << "colour type " << int(colour);
  size_t stride = img.width * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf size = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
            Z_OK);
  std::vector<uint8_t> prev(stride, 0), line(stride);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t* in = &raw[y * (stride + 1)];
    for (size_t x = 0; x < stride; ++x) {
      int a = x >= channels ? line[x - channels] : 0, b = prev[x],
          c = x >= channels ? prev[x - channels] : 0;
      int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
      int predictor[] = {0, a, b, (a + b) / 2, pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)};
      line[x] = uint8_t(in[1 + x] + predictor[in[0]]);
    }
    for (uint32_t x = 0; x < img.width; ++x)
      for (size_t k = 0; k < 3; ++k)
        img.rgb.push_back(line[x * channels + k]);
    prev = line;
  }
  return img;
}

// Pixels within a small distance of `colour` (anti-aliasing blurs edges, not the inside).
size_t pixels_of(const image& img, uint32_t colour) {
  int want[] = {int(colour >> 16), int((colour >> 8) & 0xff), int(colour & 0xff)};
  size_t n = 0;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3)
    n += std::abs(img.rgb[i] - want[0]) + std::abs(img.rgb[i + 1] - want[1]) +
             std::abs(img.rgb[i + 2] - want[2]) <
         24;
  return n;
}

TEST(Report, CoverageByCategoryAndDtypePerModel) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  EXPECT_EQ(report.columns, (std::vector<std::string>{"big", "small"}));
  ASSERT_EQ(report.by_category.size(), 2u);
  EXPECT_EQ(report.by_category[0].name, "elementwise");
  EXPECT_EQ(report.by_category[0].operators, 2u);
  EXPECT_DOUBLE_EQ(report.by_category[0].covered.at("big"), 1.0);
  EXPECT_DOUBLE_EQ(report.by_category[0].covered.at("small"), 0.5);
  EXPECT_EQ(report.by_category[1].name, "reduction");
  EXPECT_DOUBLE_EQ(report.by_category[1].covered.at("big"), 0.5);
  EXPECT_DOUBLE_EQ(report.by_category[1].covered.at("small"), 0.0);
  ASSERT_EQ(report.by_dtype.size(), 2u);
  EXPECT_EQ(report.by_dtype[0].name, "float32");
  EXPECT_EQ(report.by_dtype[0].operators, 4u);
  EXPECT_DOUBLE_EQ(report.by_dtype[0].covered.at("big"), 0.75);
  EXPECT_EQ(report.by_dtype[1].name, "int64");
  EXPECT_DOUBLE_EQ(report.by_dtype[1].covered.at("small"), 1.0);
}

TEST(Report, CurvesPerCampaignAndTheirUnion) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  ASSERT_EQ(report.curves.size(), 3u);
  auto points = [](const coverage_curve& c) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const auto& p : c.points)
      out.emplace_back(p.calls, p.covered);
    return out;
  };
  using pts = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(report.curves[0].name, "c-big");
  EXPECT_EQ(report.curves[0].operators, 4u);
  EXPECT_EQ(points(report.curves[0]), (pts{{1, 1}, {3, 3}}));
  EXPECT_EQ(points(report.curves[1]), (pts{{2, 1}}));
  // The union takes each operator's cheapest pass: abs after 1 call (big), neg and sum after 3.
  EXPECT_EQ(report.curves[2].name, "all campaigns");
  EXPECT_EQ(report.curves[2].operators, 4u);
  EXPECT_EQ(points(report.curves[2]), (pts{{1, 1}, {3, 3}}));
}

TEST(Report, FailuresByReasonAndCostsOfPasses) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  EXPECT_EQ(report.failures,
            (std::map<std::string, uint32_t>{{"call budget spent", 2}, {"dialogs exhausted", 1}}));
  ASSERT_EQ(report.passed.size(), 4u);
  EXPECT_EQ(report.passed[0].campaign_id, "c-big");
  EXPECT_EQ(report.passed[0].op, "abs");
  EXPECT_EQ(report.passed[2].op, "sum");
  EXPECT_EQ(report.passed[2].calls, 3u);
  EXPECT_EQ(report.passed[2].prompt_tokens, 3000u);
  EXPECT_EQ(report.passed[2].completion_tokens, 300u);
  EXPECT_EQ(report.passed[3].campaign_id, "c-small");
}

TEST(Report, HtmlIsSelfContained) {
  two_models in;
  in.campaigns[0].spec.operators[0].category = "<script>";
  auto html = render_html(build_report(in.campaigns, in.sessions));
  EXPECT_THAT(html, HasSubstr("<tr><td>reduction</td><td>2</td><td>50.0%</td><td>0.0%</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>float32</td><td>4</td><td>75.0%</td><td>25.0%</td></tr>"));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"coverage-curve\""));
  EXPECT_THAT(html, HasSubstr("<svg id=\"failures\""));
  EXPECT_THAT(html, HasSubstr("<svg id=\"calls-per-operator\""));
  // Nothing to fetch: no scripts, no links, no images from elsewhere.
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
}

// A real headless Chromium draws the page: the bars and all three curves show up in their colours.
TEST(Report, ChromiumRendersThePlots) {
  two_models in;
  test::temp_dir dir;
  auto page = dir.path() / "report.html";
  auto shot = dir.path() / "report.png";
  std::ofstream{page} << render_html(build_report(in.campaigns, in.sessions));
  const char* chromium = std::getenv("OPFORGE_CHROMIUM");
  auto command = std::string{chromium ? chromium : "chromium"} +
                 " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=800,1600"
                 " --screenshot=" +
                 shot.string() + " file://" + page.string() + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command << " (ops/setup.sh installs chromium)";
  std::ifstream file{shot, std::ios::binary};
  std::string png{std::istreambuf_iterator<char>{file}, {}};
  ASSERT_GT(png.size(), 8u);
  auto img = decode_png(png);
  EXPECT_EQ(img.width, 800u);
  EXPECT_EQ(img.height, 1600u);
  // Bars are filled in the first colour; the curves are 2-3 px lines of about 570 px.
  EXPECT_GT(pixels_of(img, 0x1f77b4), 2000u);
  EXPECT_GT(pixels_of(img, 0xd62728), 400u);
  EXPECT_GT(pixels_of(img, 0x2ca02c), 600u);
  if (const char* keep = std::getenv("OPFORGE_REPORT_SCREENSHOT"))
    std::filesystem::copy_file(shot, keep, std::filesystem::copy_options::overwrite_existing);
}

} // namespace
