#include "common/rpc/channel.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace psync {
namespace {

// Adds the token to every call's initial metadata.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthMetadataKey, *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;  // owned by the factory, which outlives calls
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token) : value_(kAuthScheme + token) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&value_);
  }

 private:
  const std::string value_;
};

// A client speaks TLS when it has a CA to verify servers with.
bool SpeaksTls(const PeerSecurity& security) { return !security.ca_pem.empty(); }

}  // namespace

std::shared_ptr<grpc::Channel> CreatePeerChannel(const std::string& address,
                                                 const PeerSecurity& security,
                                                 const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (SpeaksTls(security)) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.ca_pem;
    ssl.pem_private_key = security.key_pem;
    ssl.pem_cert_chain = security.cert_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<TokenInterceptorFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(interceptors));
}

std::string ConnectionErrorMessage(const grpc::Status& st, const PeerSecurity& security) {
  const bool tls = SpeaksTls(security);
  const std::string& message = st.error_message();
  if (st.error_code() != grpc::StatusCode::UNAVAILABLE) return message;
  const bool handshake = absl::StrContains(message, "andshake failed");
  // A server that closes the connection mid-handshake reads as "Socket
  // closed" or, when the client was reading its part, "Handshake read
  // failed" (write, when writing), by timing alone.
  const bool closed = absl::StrContains(message, "Socket closed") ||
                      absl::StrContains(message, "Handshake read failed") ||
                      absl::StrContains(message, "Handshake write failed");
  if (!handshake && !closed) return message;
  // "Socket closed" also ends a call whose server died: the hints say when
  // they apply.
  if (!tls) {
    return absl::StrCat(message,
                        " (if every attempt ends so, the server may use TLS: give this process "
                        "--tls_cert, --tls_key and --tls_ca too)");
  }
  if (handshake) {
    return absl::StrCat(message,
                        " (TLS handshake failed: is --tls_ca the CA that signed the server's "
                        "certificate, and is the address in that certificate's "
                        "subjectAltName?)");
  }
  return absl::StrCat(message,
                      " (if every attempt ends so, the server closes the connection during the "
                      "TLS handshake: does it use TLS, and does its --tls_ca trust this "
                      "process's certificate, which must not have expired?)");
}

std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerSecurity& security) {
  if (security.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      security.ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = security.ca_pem;
  ssl.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace psync
