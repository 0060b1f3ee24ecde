// Sends bytes that are no request to every unary and server-streaming method of a service and
// checks that each answers INVALID_ARGUMENT naming its request message (common/raw_unary.h), not
// gRPC's bare UNIMPLEMENTED.
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

// One server-streaming call of `method` with `bytes` as the request, read to its end.
inline grpc::Status RawServerStreamingCall(const std::shared_ptr<grpc::Channel>& channel,
                                           const std::string& method, const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  common::SetDeadline(&ctx, absl::Seconds(10));
  auto call = generic.PrepareCall(&ctx, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) { return cq.Next(&tag, &ok) && tag == want && ok; };
  call->StartCall(reinterpret_cast<void*>(1));
  grpc::Status status(grpc::StatusCode::UNKNOWN, "call did not start");
  if (step(reinterpret_cast<void*>(1))) {
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer request(&slice, 1), response;
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    step(reinterpret_cast<void*>(2));
    do {
      call->Read(&response, reinterpret_cast<void*>(3));
    } while (step(reinterpret_cast<void*>(3)));
  }
  call->Finish(&status, reinterpret_cast<void*>(4));
  step(reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// A malformed varint, a length past the end, a truncated field: no message parses from these.
inline void ExpectEveryMethodRefusesGarbage(const std::shared_ptr<grpc::Channel>& channel,
                                            const google::protobuf::ServiceDescriptor& service) {
  for (int m = 0; m < service.method_count(); ++m) {
    const google::protobuf::MethodDescriptor& method = *service.method(m);
    if (method.client_streaming()) continue;
    const std::string path = "/" + service.full_name() + "/" + method.name();
    for (const std::string& junk :
         {std::string(1 << 16, '\xff'), std::string("\x0a\xff\xff\xff\x0f"), std::string("\x08")}) {
      grpc::Status s = method.server_streaming() ? RawServerStreamingCall(channel, path, junk)
                                                 : RawUnaryCall(channel, path, junk);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << path << ": " << s.error_message();
      EXPECT_THAT(s.error_message(),
                  ::testing::HasSubstr("malformed " + method.input_type()->name()))
          << path;
    }
  }
}

}  // namespace dlrm::testing
