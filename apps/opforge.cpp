#include <iostream>

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"opforge: LLM-driven Triton kernels for every ATen operator, proven on device"};
  app.set_version_flag("--version", std::string{"opforge "} + OPFORGE_VERSION);
  app.require_subcommand(0);
  CLI11_PARSE(app, argc, argv);
  std::cout << app.help();
  return 0;
}
