// Which ranks still answer: each rank answers probes on a UDP port of its own (a thread of its own,
// so a rank stuck in a collective still answers), and a rank whose collective has waited past
// parallel.timeout_s probes the others, so that its error names the ranks, and their hosts, that
// are gone (a machine that died, a link cut) rather than only "another rank has died or hangs".
#pragma once

#include <string>

#include "dist/communicator.h"
#include "dist/hosts.h"

namespace tessera::dist {

// Opens this rank's port, learns every rank's (collective over `world`), resolves each host's
// address now (not during a failure) and starts answering. Then has the collective watchdog append
// what a probe finds to its message. Where a port cannot be opened or a host not resolved, the
// probe is left out (the watchdog's message stays as it was).
void start_peer_probe(Communicator& world, const RankHosts& hosts);

// Probes every other rank (at most `wait_s` seconds): "ranks 2-3 on host2 do not answer (...)",
// "every rank answers ..." or "" where no probe was started. Safe from any thread.
std::string probe_peers(double wait_s);

}  // namespace tessera::dist
