// Runs the built `stretch` command (STRETCH_CLI_PATH) as a user does, for the CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace stretch::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line, stdout and stderr together.
inline RunResult RunShell(const std::string& cmd) {
  RunResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `args` is pasted into a shell command line: quote paths.
inline RunResult RunCli(const std::string& args) {
  return RunShell(std::string("'") + STRETCH_CLI_PATH + "' " + args);
}

// The same, killed after `seconds` (exit code 137 then): for inputs that once made it hang.
inline RunResult RunCliWithin(int seconds, const std::string& args) {
  return RunShell("timeout -s KILL " + std::to_string(seconds) + " '" + STRETCH_CLI_PATH + "' " +
                  args);
}

inline bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace stretch::testing
