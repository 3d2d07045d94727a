// SIGTERM and SIGINT during training: the first asks the loop to finish its step, checkpoint and
// exit (with 128 + the signal); a second one ends the process at once. Every rank stops at the
// same step: the ranks agree on a signal any of them got.
#pragma once

#include <csignal>
#include <cstdint>

#include "dist/communicator.h"

namespace tessera::train {

// The stop signal this process got since StopSignals was installed (0: none).
int own_stop_signal();

// The signal a rank stops for: its own, else its peers' (`signalled` ranks got one, `interrupted` of
// them SIGINT): SIGINT when all of those were SIGINT (a Ctrl-C reaching every rank, or one), so
// that rank 0's message and exit status name it; else SIGTERM; 0 when no rank got one.
int agreed_signal(int own, std::int32_t signalled, std::int32_t interrupted);

// The same, counted over `world` (a collective: every rank at once), where the ranks already agreed
// to stop (before the first step, or a validation they all cut short): SIGTERM if no rank holds one.
int agreed_stop_signal(dist::Communicator* world);

// "SIGINT" or "SIGTERM".
const char* signal_name(int sig);

// Installs the handlers for the lifetime of one training run.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

}  // namespace tessera::train
