#pragma once

// Looking at a report the way people do: a real headless Chromium screenshots the HTML, and the
// PNG is decoded to count the pixels of the plots' colours.

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zlib.h>

namespace opforge::chromium_testing {

// A PNG as RGB, enough for Chromium's screenshots: 8-bit RGB or RGBA, not interlaced.
struct image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

inline uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

inline image decode_png(const std::string& png) {
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
inline size_t pixels_of(const image& img, uint32_t colour) {
  int want[] = {int(colour >> 16), int((colour >> 8) & 0xff), int(colour & 0xff)};
  size_t n = 0;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3)
    n += std::abs(img.rgb[i] - want[0]) + std::abs(img.rgb[i + 1] - want[1]) +
             std::abs(img.rgb[i + 2] - want[2]) <
         24;
  return n;
}

// Chromium's screenshot of `page` (800 x 3200 px: the whole report, its header and tables above the
// plots) written to `shot`, decoded; empty after a failure it reports.
inline image screenshot(const std::filesystem::path& page, const std::filesystem::path& shot) {
  const char* chromium = std::getenv("OPFORGE_CHROMIUM");
  auto command = std::string{chromium ? chromium : "chromium"} +
                 " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=800,3200"
                 " --screenshot=" +
                 shot.string() + " file://" + page.string() + " >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << command << " failed (ops/setup.sh installs chromium)";
    return {};
  }
  std::ifstream file{shot, std::ios::binary};
  std::string png{std::istreambuf_iterator<char>{file}, {}};
  if (png.size() <= 8) {
    ADD_FAILURE() << "no screenshot in " << shot;
    return {};
  }
  return decode_png(png);
}

// Keeps the screenshot where OPFORGE_REPORT_SCREENSHOT says (bench/results/report.png).
inline void keep_screenshot(const std::filesystem::path& shot) {
  if (const char* keep = std::getenv("OPFORGE_REPORT_SCREENSHOT"))
    std::filesystem::copy_file(shot, keep, std::filesystem::copy_options::overwrite_existing);
}

} // namespace opforge::chromium_testing
