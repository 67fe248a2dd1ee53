#include "src/core/stop.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <thread>

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

// The signals are taken by one thread of their own, never by a thread at work: the calling thread
// blocks them, and so does every thread it creates afterwards (the thread pool, OpenMP's and
// oneDNN's workers inherit the mask), and a dedicated thread waits for them with sigwait. A
// handler that interrupted a computing thread would push its frame onto that thread's stack: with
// an asynchronous handler, Ctrl-C during `stretch train` corrupted the heap about one time in five
// on a busy machine (glibc: "corrupted size vs. prev_size while consolidating", in oneDNN's
// sgemm during the backward; the handler itself only stored a flag and called write). The handler
// stays installed for a thread created before the call, which does not block them.
void InstallStopHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a read or write in progress goes on; the loop checks the flag
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      for (;;) {
        int signal = 0;
        if (sigwait(&set, &signal) != 0) continue;
        if (g_stop != 0) {  // the second one: stop at once, by the signal's default action
          std::signal(signal, SIG_DFL);
          sigset_t one;
          sigemptyset(&one);
          sigaddset(&one, signal);
          pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
          std::raise(signal);
          continue;
        }
        OnStopSignal(signal);
      }
    }).detach();
  });
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
