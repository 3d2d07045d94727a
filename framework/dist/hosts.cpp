#include "dist/hosts.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace tessera::dist {
namespace {

// "0-1" for consecutive numbers, else "0,2,5".
std::string number_list(const std::vector<int>& n) {
  bool consecutive = true;
  for (std::size_t i = 1; i < n.size(); ++i) consecutive = consecutive && n[i] == n[i - 1] + 1;
  if (n.size() > 1 && consecutive) return fmt::format("{}-{}", n.front(), n.back());
  return fmt::format("{}", fmt::join(n, ","));
}

// The hosts in the order of their first rank, with the ranks (ascending) of `ranks` on each.
std::vector<std::pair<std::string, std::vector<int>>> by_host(const RankHosts& hosts, const std::vector<int>& ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const int r : ranks) {
    const std::string& h = hosts.host.at(static_cast<std::size_t>(r));
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == h; });
    if (it == out.end()) it = out.insert(out.end(), {h, {}});
    it->second.push_back(r);
  }
  return out;
}

}  // namespace

int RankHosts::hosts() const {
  std::vector<std::string> distinct = host;
  std::sort(distinct.begin(), distinct.end());
  return static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
}

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "?";
  return name;
}

RankHosts gather_hosts(Communicator& world, int local_rank) {
  const std::string name = this_host();
  std::vector<std::int32_t> mine{local_rank};
  for (const char c : name) mine.push_back(static_cast<unsigned char>(c));
  RankHosts out;
  for (const std::vector<std::int32_t>& s : all_gather_sequences(world, {mine})) {
    out.local_rank.push_back(s.at(0));
    out.host.emplace_back(s.begin() + 1, s.end());
  }
  return out;
}

std::string describe_hosts(const RankHosts& hosts) {
  std::vector<int> all(hosts.host.size());
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : by_host(hosts, all)) {
    std::vector<int> local;
    for (const int r : ranks) local.push_back(hosts.local_rank.at(static_cast<std::size_t>(r)));
    parts.push_back(fmt::format("{} (rank{} {}, local {})", host, ranks.size() > 1 ? "s" : "", number_list(ranks),
                                number_list(local)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string name_ranks_with_hosts(const RankHosts& hosts, const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (const auto& [host, on_host] : by_host(hosts, ranks))
    parts.push_back(fmt::format("rank{} {} on {}", on_host.size() > 1 ? "s" : "", number_list(on_host), host));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string tensor_groups_spanning_hosts(const RankHosts& hosts, int tp) {
  const int size = static_cast<int>(hosts.host.size());
  int spanning = 0;
  std::string first;
  for (int start = 0; tp > 1 && start + tp <= size; start += tp) {
    std::vector<int> group(static_cast<std::size_t>(tp));
    for (int i = 0; i < tp; ++i) group[static_cast<std::size_t>(i)] = start + i;
    if (by_host(hosts, group).size() == 1) continue;
    if (spanning++ == 0) first = name_ranks_with_hosts(hosts, group);
  }
  if (spanning == 0) return {};
  return fmt::format(
      "{} of {} tensor-parallel groups span hosts, the first with {}: their all-reduces in every layer cross the "
      "network. Place the ranks host by host (mpirun --map-by slot, the default) with a multiple of parallel.tensor "
      "= {} slots on each host",
      spanning, size / tp, first, tp);
}

}  // namespace tessera::dist
