// Which host (machine) each rank of a job runs on, as the ranks themselves see it (their hostname):
// to say where the ranks are, to warn of a tensor-parallel group spread over machines, and to
// name the host of a rank that is lost.
#pragma once

#include <string>
#include <vector>

#include "dist/communicator.h"

namespace tessera::dist {

struct RankHosts {
  std::vector<std::string> host;  // by world rank
  std::vector<int> local_rank;    // by world rank: its rank among the ranks of its host
  int hosts() const;              // how many different hosts
};

// This process's hostname ("?" when it cannot be read).
std::string this_host();

// Every rank's hostname and local rank, on every rank. Collective.
RankHosts gather_hosts(Communicator& world, int local_rank);

// "host1 (ranks 0-1, local 0-1), host2 (ranks 2-3, local 0-1)": the hosts in the order of their
// first rank.
std::string describe_hosts(const RankHosts& hosts);

// "ranks 2-3 on host2, rank 5 on host3": where the given ranks (ascending) run.
std::string name_ranks_with_hosts(const RankHosts& hosts, const std::vector<int>& ranks);

// Empty when every tensor-parallel group (`tp` adjacent ranks) is inside one host; else a warning
// naming the first group that spans hosts, and its hosts, and how many groups do.
std::string tensor_groups_spanning_hosts(const RankHosts& hosts, int tp);

}  // namespace tessera::dist
