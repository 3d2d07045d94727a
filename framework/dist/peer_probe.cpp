#include "dist/peer_probe.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/mpi_communicator.h"

namespace tessera::dist {
namespace {

struct Peers {
  int rank = 0;
  RankHosts hosts;
  std::vector<sockaddr_in> address;  // by rank; port 0: not reachable (unresolved)
};
Peers* g_peers = nullptr;  // set once, before the watchdog may read it; never freed (threads use it)

// Answers every probe with the probe itself, and this rank, for as long as the process lives.
void answer_probes(int fd, int rank) {
  for (;;) {
    char buf[64];
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const ssize_t n = recvfrom(fd, buf, sizeof buf - 8, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 8) continue;
    std::memcpy(buf + 8, &rank, sizeof rank);  // the probe's 8-byte id, then who answers
    sendto(fd, buf, 8 + sizeof rank, 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

// The IPv4 address of `host` (127.0.0.1 for this rank's own host); port 0 when it does not resolve.
sockaddr_in address_of(const std::string& host, bool own, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (own) {
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    a.sin_port = 0;
    return a;
  }
  a.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return a;
}

// A UDP socket on any address, its port in `port`; -1 when none can be opened.
int open_port(int& port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

}  // namespace

void start_peer_probe(Communicator& world, const RankHosts& hosts) {
  int port = 0;
  const int fd = open_port(port);
  // Every rank's port (0: none), so that all take part in the collective alike.
  const std::vector<std::vector<std::int32_t>> ports = all_gather_sequences(world, {{fd < 0 ? 0 : port}});
  if (fd < 0) return;
  auto* peers = new Peers{world.rank(), hosts, {}};
  const std::string& own = hosts.host.at(static_cast<std::size_t>(world.rank()));
  for (int r = 0; r < world.size(); ++r) {
    const std::string& host = hosts.host.at(static_cast<std::size_t>(r));
    peers->address.push_back(address_of(host, host == own, ports.at(static_cast<std::size_t>(r)).at(0)));
  }
  g_peers = peers;
  std::thread(answer_probes, fd, world.rank()).detach();
  at_collective_timeout_explain([] { return probe_peers(3.0); });
}

std::string probe_peers(double wait_s) {
  const Peers* peers = g_peers;
  if (peers == nullptr) return {};
  const int size = static_cast<int>(peers->address.size());
  std::vector<bool> answered(static_cast<std::size_t>(size), false);
  answered[static_cast<std::size_t>(peers->rank)] = true;
  int port = 0;
  const int fd = open_port(port);
  if (fd < 0) return {};
  const std::uint64_t id = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (int round = 0; std::chrono::steady_clock::now() < end; ++round) {
    for (int r = 0; r < size && round % 5 == 0; ++r)  // (again every half second: UDP may lose one)
      if (!answered[static_cast<std::size_t>(r)] && peers->address[static_cast<std::size_t>(r)].sin_port != 0)
        sendto(fd, &id, sizeof id, 0, reinterpret_cast<const sockaddr*>(&peers->address[static_cast<std::size_t>(r)]),
               sizeof(sockaddr_in));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[16];
    std::uint64_t got = 0;
    int from = -1;
    if (recv(fd, buf, sizeof buf, 0) != 8 + sizeof from) continue;
    std::memcpy(&got, buf, 8);
    std::memcpy(&from, buf + 8, sizeof from);
    if (got == id && from >= 0 && from < size) answered[static_cast<std::size_t>(from)] = true;
  }
  close(fd);
  std::vector<int> silent;
  for (int r = 0; r < size; ++r)
    if (!answered[static_cast<std::size_t>(r)]) silent.push_back(r);
  if (silent.empty()) return "every rank still answers a probe (one hangs, or the network between them fails)";
  return fmt::format("{} do{} not answer a probe (the process or its host is gone, or cut off from this one)",
                     name_ranks_with_hosts(peers->hosts, silent), silent.size() == 1 ? "es" : "");
}

}  // namespace tessera::dist
