// dist/hosts.h: where the ranks run, as the log and the warnings name it.
#include <gtest/gtest.h>

#include "dist/hosts.h"

namespace tessera::dist {
namespace {

RankHosts hosts_of(std::vector<std::string> names) {
  RankHosts h;
  for (std::size_t r = 0; r < names.size(); ++r) {
    int local = 0;
    for (std::size_t q = 0; q < r; ++q) local += names[q] == names[r];
    h.local_rank.push_back(local);
  }
  h.host = std::move(names);
  return h;
}

TEST(Hosts, DescribedInTheOrderOfTheirFirstRank) {
  const RankHosts h = hosts_of({"b", "b", "a", "a"});
  EXPECT_EQ(h.hosts(), 2);
  EXPECT_EQ(describe_hosts(h), "b (ranks 0-1, local 0-1), a (ranks 2-3, local 0-1)");
  EXPECT_EQ(describe_hosts(hosts_of({"a", "b", "a"})), "a (ranks 0,2, local 0-1), b (rank 1, local 0)");
  EXPECT_EQ(name_ranks_with_hosts(h, {1, 2, 3}), "rank 1 on b, ranks 2-3 on a");
}

TEST(Hosts, TensorGroupsInsideOneHostAreNotWarnedOf) {
  EXPECT_EQ(tensor_groups_spanning_hosts(hosts_of({"a", "a", "b", "b"}), 2), "");
  EXPECT_EQ(tensor_groups_spanning_hosts(hosts_of({"a", "b"}), 1), "");  // no tensor parallelism
}

TEST(Hosts, TensorGroupsSpanningHostsAreNamed) {
  // Three slots per host, tp = 2: the second group (ranks 2, 3) spans a and b.
  const std::string w = tensor_groups_spanning_hosts(hosts_of({"a", "a", "a", "b", "b", "b"}), 2);
  EXPECT_NE(w.find("1 of 3 tensor-parallel groups span hosts, the first with rank 2 on a, rank 3 on b:"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("parallel.tensor = 2"), std::string::npos) << w;
  // Round-robin placement (mpirun --map-by node): every group spans.
  EXPECT_NE(tensor_groups_spanning_hosts(hosts_of({"a", "b", "a", "b"}), 2).find("2 of 2 tensor-parallel groups"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::dist
