// What a server tells the coordinator about an elastic job's workers, and
// the versions a change of them starts from (ShardStore::GetElasticReport).
#ifndef PSYNC_SERVER_ELASTIC_REPORT_H_
#define PSYNC_SERVER_ELASTIC_REPORT_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace psync {

struct ElasticReport {
  // The lowest and highest version over the server's chunks (false: it
  // owns none, or holds no layout yet).
  bool has_chunks = false;
  int64_t min_version = 0;
  int64_t max_version = 0;
  // Workers that registered while not members (asked within the last few
  // seconds), with their weights, ascending.
  std::vector<std::pair<int, double>> joins;
  // Members silent past their lease or whose connection closed, and
  // members that said they leave.
  std::vector<int> lost;
  std::vector<int> leaving;
};

}  // namespace psync

#endif  // PSYNC_SERVER_ELASTIC_REPORT_H_
