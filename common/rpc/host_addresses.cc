#include "common/rpc/host_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include "common/rpc/same_host.h"

namespace psync {

std::string NonLoopbackIpv4Address() {
  std::string address;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return address;
  for (ifaddrs* a = list; a != nullptr && address.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
              sizeof(text));
    if (!IsLoopbackHost(text)) address = text;
  }
  freeifaddrs(list);
  return address;
}

}  // namespace psync
