#include "common/rpc/same_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace psync {
namespace {

std::string V4Text(const in_addr& v4) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &v4, text, sizeof(text));
  return text;
}

std::string V6Text(const in6_addr& v6) {
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    in_addr v4{};
    std::memcpy(&v4, &v6.s6_addr[12], 4);
    return V4Text(v4);
  }
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, &v6, text, sizeof(text));
  return text;
}

// The canonical text of a numeric address (brackets and an IPv6 zone
// "%eth0" dropped, IPv4-mapped IPv6 as IPv4); nullopt for anything else.
std::optional<std::string> Canonical(absl::string_view host) {
  host = absl::StripSuffix(absl::StripPrefix(host, "["), "]");
  if (const size_t zone = host.find('%'); zone != absl::string_view::npos) {
    host = host.substr(0, zone);
  }
  const std::string text(host);
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return V6Text(v6);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return V4Text(v4);
  return std::nullopt;
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  host = absl::StripSuffix(absl::StripPrefix(host, "["), "]");
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in6_addr v6{};
  const std::string text(host);
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (!IN6_IS_ADDR_V4MAPPED(&v6)) return false;
    return v6.s6_addr[12] == 127;
  }
  in_addr v4{};
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

bool IsLoopbackAddress(absl::string_view address) {
  return IsLoopbackHost(address.substr(0, address.rfind(':')));
}

absl::StatusOr<HostAddresses> HostAddresses::OfThisProcess() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(
        absl::StrCat("getifaddrs (this host's addresses): ", std::strerror(errno)));
  }
  std::vector<std::string> addresses;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET) {
      addresses.push_back(V4Text(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      addresses.push_back(V6Text(reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr));
    }
  }
  freeifaddrs(list);
  return HostAddresses(addresses);
}

HostAddresses::HostAddresses(const std::vector<std::string>& addresses) {
  for (const std::string& a : addresses) {
    std::optional<std::string> canonical = Canonical(a);
    if (canonical && std::find(addresses_.begin(), addresses_.end(), *canonical) ==
                         addresses_.end()) {
      addresses_.push_back(*std::move(canonical));
    }
  }
}

bool HostAddresses::Holds(absl::string_view host) const {
  if (IsLoopbackHost(host)) return true;
  const std::optional<std::string> canonical = Canonical(host);
  return canonical &&
         std::find(addresses_.begin(), addresses_.end(), *canonical) != addresses_.end();
}

std::string HostAddresses::ToString() const {
  return addresses_.empty() ? "no address" : absl::StrJoin(addresses_, ", ");
}

absl::StatusOr<std::string> PeerHost(absl::string_view peer) {
  const auto bad = [peer](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("peer '", peer, "' ", why));
  };
  std::string rest;
  if (absl::StartsWith(peer, "ipv4:")) {
    rest = std::string(peer.substr(5));
  } else if (absl::StartsWith(peer, "ipv6:")) {
    // gRPC writes the brackets of a URI's host percent-encoded.
    rest = absl::StrReplaceAll(peer.substr(5), {{"%5B", "["}, {"%5b", "["}, {"%5D", "]"},
                                                {"%5d", "]"}, {"%25", "%"}});
  } else {
    return bad("is not an IP connection; expected ipv4:ADDRESS:PORT or ipv6:[ADDRESS]:PORT");
  }
  const size_t colon = rest.rfind(':');
  const absl::string_view port =
      colon == std::string::npos ? "" : absl::string_view(rest).substr(colon + 1);
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) {
    return bad("has no port; expected ADDRESS:PORT after ipv4: or ipv6:");
  }
  const bool v6 = absl::StartsWith(peer, "ipv6:");
  absl::string_view host = absl::string_view(rest).substr(0, colon);
  if (v6) {
    if (!absl::ConsumePrefix(&host, "[") || !absl::ConsumeSuffix(&host, "]")) {
      return bad("has no brackets around its IPv6 address");
    }
    host = host.substr(0, host.find('%'));  // a zone, "fe80::1%eth0"
  }
  const std::string text(host);
  unsigned char parsed[sizeof(in6_addr)];
  if (inet_pton(v6 ? AF_INET6 : AF_INET, text.c_str(), parsed) != 1) {
    return bad(absl::StrCat("has no IPv", v6 ? 6 : 4, " address"));
  }
  return *Canonical(text);
}

absl::Status PeerOnHost(absl::string_view peer, const HostAddresses& host) {
  absl::StatusOr<std::string> from = PeerHost(peer);
  if (!from.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot tell whether the worker is on this server's host: ", from.status().message()));
  }
  if (host.Holds(*from)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the worker connects from ", *from, ", which is not this server's host (loopback or ",
      host.ToString(), "): memory is shared only within one host"));
}

ServerPlace PlaceOfServer(absl::string_view address, const HostAddresses& host) {
  const absl::string_view name = address.substr(0, address.rfind(':'));
  if (host.Holds(name)) return ServerPlace::kThisHost;
  return Canonical(name) ? ServerPlace::kOtherHost : ServerPlace::kNamed;
}

}  // namespace psync
