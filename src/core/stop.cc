#include "src/core/stop.h"

#include <unistd.h>

#include <csignal>

namespace stretch {

namespace {

volatile std::sig_atomic_t g_stop = 0;

void OnStopSignal(int signal) {
  if (g_stop != 0) {  // the second one: stop at once
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop = signal;
  static const char kMessage[] =
      "\nstretch: stopping after the current step, once it is saved (send the signal again to "
      "stop at once)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write in progress goes on; the loop checks the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopSignal() { return g_stop; }

void SetStopSignalForTest(int signal) { g_stop = signal; }

std::string StopSignalName(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT (Ctrl-C)";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace stretch
