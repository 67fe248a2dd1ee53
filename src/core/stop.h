// Stopping long work on the user's request (Ctrl-C is SIGINT; `kill` and job schedulers send
// SIGTERM) without losing it: `stretch train` and `stretch lab` finish the step or cell at hand,
// write its checkpoint or record, say where, and exit with 128 + the signal (130, 143), as a shell
// expects of a program stopped by a signal. Before, Ctrl-C killed the process on the spot and said
// nothing: the last checkpoint could be minutes old and nobody said which it was.
//
// A second signal of either kind stops the process at once (the default action), for a user who
// does not want to wait for the step.
#pragma once

#include <string>

#include "src/core/error.h"

namespace stretch {

// Installs the handlers for SIGINT and SIGTERM (idempotent). Only the commands whose loops check
// StopSignal install them; the others keep the default (an immediate stop).
void InstallStopHandlers();

// The signal that asked for a stop (SIGINT, SIGTERM), or 0.
int StopSignal();

// For tests: as if `signal` had arrived (0 clears it).
void SetStopSignalForTest(int signal);

// "SIGINT (Ctrl-C)", "SIGTERM".
std::string StopSignalName(int signal);

// Thrown by work that stopped at a signal, once what it had done is saved; the message says where
// (the checkpoint, the records file). The command exits with 128 + signal().
class Stopped : public Error {
 public:
  Stopped(int signal, const std::string& message) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace stretch
