// Sends bytes that are no request to every unary method of a service and checks that each
// answers INVALID_ARGUMENT naming its request message (common/raw_unary.h), not gRPC's bare
// UNIMPLEMENTED.
#pragma once

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace dlrm::testing {

// One unary call of `method` ("/pkg.Service/Method") with `bytes` as the request.
inline grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& method, const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  common::SetDeadline(&ctx, absl::Seconds(10));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// A malformed varint, a length past the end, a truncated field: no message parses from these.
inline void ExpectEveryUnaryMethodRefusesGarbage(
    const std::shared_ptr<grpc::Channel>& channel,
    const google::protobuf::ServiceDescriptor& service) {
  for (int m = 0; m < service.method_count(); ++m) {
    const google::protobuf::MethodDescriptor& method = *service.method(m);
    if (method.client_streaming() || method.server_streaming()) continue;
    const std::string path = "/" + service.full_name() + "/" + method.name();
    for (const std::string& junk :
         {std::string(1 << 16, '\xff'), std::string("\x0a\xff\xff\xff\x0f"), std::string("\x08")}) {
      grpc::Status s = RawUnaryCall(channel, path, junk);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << path << ": " << s.error_message();
      EXPECT_THAT(s.error_message(),
                  ::testing::HasSubstr("malformed " + method.input_type()->name()))
          << path;
    }
  }
}

}  // namespace dlrm::testing
