// The driver of the fuzz targets when they are not built with libFuzzer (the default gcc build,
// run by `make test`): runs every file of the given corpus folders through
// LLVMFuzzerTestOneInput, then `--runs` inputs mutated from them (bytes flipped, inserted,
// erased, copied between inputs, truncated), drawn from a fixed seed so that a failure is
// reproducible, for at most `--seconds`. A crash, an abort or a sanitizer report fails the run;
// the mutated input that was running is written to `--crash-dir` first (default: the current
// folder) so it can be added to the corpus once fixed.
//
//   fuzz_job_spec [--runs N] [--seconds S] [--seed K] [--crash-dir DIR] CORPUS_DIR...
//
// `make fuzz` builds the same targets with clang's libFuzzer instead (coverage-guided).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional, as with libFuzzer: called once with the command line before any input.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

std::string g_crash_path;
std::string g_current;  // the input being run

void OnFatalSignal(int sig) {
  // Best effort: the input that crashed, for the corpus.
  const int fd = ::open(g_crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    (void)!::write(fd, g_current.data(), g_current.size());
    ::close(fd);
  }
  const char msg[] = "fuzz: crashed; the input is in the crash file\n";
  (void)!::write(2, msg, sizeof(msg) - 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& input) {
  g_current = input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = corpus.empty() ? std::string() : corpus[rng() % corpus.size()];
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // insert random bytes
        s.insert(s.empty() ? 0 : rng() % s.size(),
                 std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 2:  // erase a range
        if (!s.empty()) {
          const size_t at = rng() % s.size();
          s.erase(at, 1 + rng() % std::min<size_t>(16, s.size() - at));
        }
        break;
      case 3:  // splice in a piece of another input
        if (!corpus.empty()) {
          const std::string& other = corpus[rng() % corpus.size()];
          if (!other.empty()) {
            const size_t from = rng() % other.size();
            const size_t len = 1 + rng() % std::min<size_t>(64, other.size() - from);
            s.insert(s.empty() ? 0 : rng() % s.size(), other.substr(from, len));
          }
        }
        break;
      case 4:  // set a byte to an interesting value
        if (!s.empty()) {
          static const char kInteresting[] = {0, 1, '\t', '\n', ':', '-', '9', '\x7f', '\xff'};
          s[rng() % s.size()] = kInteresting[rng() % sizeof(kInteresting)];
        }
        break;
      default:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  long runs = 20000;
  double seconds = 10;
  uint64_t seed = 20261201;
  std::string crash_dir = ".";
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fuzz: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--runs") {
      runs = std::strtol(value().c_str(), nullptr, 10);
    } else if (arg == "--seconds") {
      seconds = std::strtod(value().c_str(), nullptr);
    } else if (arg == "--seed") {
      seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (arg == "--crash-dir") {
      crash_dir = value();
    } else {
      dirs.push_back(arg);
    }
  }
  g_crash_path = crash_dir + "/fuzz-crash-input";
  signal(SIGSEGV, OnFatalSignal);
  signal(SIGABRT, OnFatalSignal);
  signal(SIGFPE, OnFatalSignal);
  signal(SIGBUS, OnFatalSignal);

  std::vector<std::string> corpus;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (ec) {
      std::fprintf(stderr, "fuzz: cannot read corpus %s: %s\n", dir.c_str(), ec.message().c_str());
      return 2;
    }
  }
  for (const std::string& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  long done = 0;
  for (; done < runs; ++done) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
      break;
    }
    Run(Mutate(corpus, rng));
  }
  std::printf("fuzz: %zu corpus inputs and %ld mutated inputs ran without a crash (seed %llu)\n",
              corpus.size(), done, static_cast<unsigned long long>(seed));
  return 0;
}
