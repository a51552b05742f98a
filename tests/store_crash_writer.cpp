// Writes crash batches (tests/store_crash_batch.hpp) with sync, from `first` on, and prints
// "ack N" after the write of batch N returned, until it is killed.
//   store_crash_writer <database dir> <first batch>

#include "messages/errors.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/store_crash_batch.hpp"

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: store_crash_writer <database dir> <first batch>\n";
    return 2;
  }
  auto db = opforge::open_rocksdb_store(argv[1]);
  if (!db) {
    std::cerr << "store_crash_writer: " << opforge::render(db.error()) << '\n';
    return 1;
  }
  for (uint64_t n = std::stoull(argv[2]);; ++n) {
    if (auto err = (*db)->write(opforge::test::crash_batch(n))) {
      std::cerr << "store_crash_writer: batch " << n << ": " << opforge::render(err) << '\n';
      return 1;
    }
    std::cout << "ack " << n << std::endl;
  }
}
