// Latency of one session checkpoint batch (a ~2 KiB session record and a ~4 KiB event, as the
// op_session actor writes on every transition) with and without sync, measured side by side:
// the two modes alternate in blocks on the same database.
//   store_bench [batches per mode, default 2000] [database dir, default a fresh temporary one]

#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace opforge;

namespace {

constexpr size_t block = 100;
constexpr size_t sessions = 64;

write_batch checkpoint(uint64_t seq, bool sync) {
  auto session = "session-" + std::to_string(seq % sessions);
  return write_batch{{{family::sessions, session, std::string(2048, 's')},
                      {family::events, event_key(session, seq), std::string(4096, 'e')}},
                     sync};
}

struct latencies {
  const char* mode;
  std::vector<double> micros;
  double total_seconds = 0;

  double quantile(double q) const {
    auto sorted = micros;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
  }

  void print() const {
    std::printf("| %s | %zu | %.0f | %.0f | %.0f | %.0f |\n", mode, micros.size(), quantile(0.5),
                quantile(0.99), quantile(1.0), micros.size() / total_seconds);
  }
};

} // namespace

int main(int argc, char** argv) {
  size_t batches = argc > 1 ? std::stoul(argv[1]) : 2000;
  std::filesystem::path dir;
  bool temporary = argc <= 2;
  if (temporary) {
    auto pattern = (std::filesystem::temp_directory_path() / "opforge-store-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = pattern;
  } else {
    dir = argv[2];
  }
  auto db = open_rocksdb_store(dir / "db");
  if (!db) {
    std::fprintf(stderr, "store_bench: %s\n", render(db.error()).c_str());
    return 1;
  }
  latencies with_sync{"sync=true", {}};
  latencies without_sync{"sync=false", {}};
  uint64_t seq = 0;
  for (size_t done = 0; done < batches; done += block) {
    for (auto* mode : {&with_sync, &without_sync}) {
      for (size_t i = done; i < std::min(batches, done + block); ++i) {
        auto batch = checkpoint(seq++, mode == &with_sync);
        auto start = std::chrono::steady_clock::now();
        if (auto err = (*db)->write(batch)) {
          std::fprintf(stderr, "store_bench: %s\n", render(err).c_str());
          return 1;
        }
        std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        mode->micros.push_back(took.count() * 1e6);
        mode->total_seconds += took.count();
      }
    }
  }
  std::printf("| mode | batches | p50 us | p99 us | max us | batches/s of write time |\n");
  std::printf("|---|---|---|---|---|---|\n");
  with_sync.print();
  without_sync.print();
  std::printf("\np50 ratio sync/no-sync: %.1fx\n",
              with_sync.quantile(0.5) / without_sync.quantile(0.5));
  if (auto err = (*db)->close())
    std::fprintf(stderr, "store_bench: %s\n", render(err).c_str());
  if (temporary)
    std::filesystem::remove_all(dir);
  return 0;
}
