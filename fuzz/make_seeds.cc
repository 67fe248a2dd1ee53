// fuzz_make_seeds DIR: writes the binary seed corpora (fuzz/seed_writer.h) into DIR/<target>/.
#include <fmt/format.h>

#include <exception>

#include "fuzz/seed_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} DIR\n", argv[0]);
    return 2;
  }
  try {
    const int n = stretch::fuzz::WriteFuzzSeeds(argv[1]);
    fmt::print("fuzz_make_seeds: {} seed files in {}\n", n, argv[1]);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fuzz_make_seeds: {}\n", e.what());
    return 1;
  }
  return 0;
}
