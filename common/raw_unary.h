// Unary methods served as raw bytes (the generated WithRawCallbackMethod_<Method> mixins), so
// that bytes which are no request get INVALID_ARGUMENT naming the message ("SubmitJob: malformed
// SubmitJobRequest") instead of the bare UNIMPLEMENTED a typed callback method answers when its
// request does not parse. The service parses and serializes itself; handlers keep their typed
// signatures:
//
//   grpc::ServerUnaryReactor* Service::Register(grpc::CallbackServerContext* context,
//                                               const grpc::ByteBuffer* in, grpc::ByteBuffer* out)
//                                               {
//     return common::ServeRawUnary<RegisterRequest, RegisterResponse>(
//         context, in, out, "/dlrm.v1.Coordinator/Register",
//         [&](const RegisterRequest& request, RegisterResponse* response, auto done) {
//           done(DoRegister(context, &request, response));   // or later, on any thread
//         },
//         finish);   // finish(reactor, status): counts the call and finishes it
//
// Every call is counted in RpcByteCounters::ProcessServer() under its full method name
// (common/rpc_bytes.h): the request's bytes, also when it does not parse, and the response's
// serialized bytes when one is sent (status OK), each plus the 5-byte gRPC message prefix.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/authz.h"
#include "common/grpc_util.h"
#include "common/rpc_bytes.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"

namespace dlrm::common {

// "Coordinator.Register" for "/dlrm.v1.Coordinator/Register": the method as the access policy
// (common/authz.h) names it.
inline std::string PolicyMethodName(absl::string_view method) {
  absl::string_view service = method.substr(0, method.rfind('/'));
  service = service.substr(service.rfind('.') + 1);
  return absl::StrCat(service, ".", method.substr(method.rfind('/') + 1));
}

// Authorizes the caller for `method` (common/authz.h) and parses `in` as a Request;
// `handle(request, response, done)` answers by calling done(status) exactly once, on any thread
// (request and response live until then). The response is serialized into `out` when the status is
// OK; then finish(reactor, status) ends the call. `method` is the full method name
// ("/dlrm.v1.Coordinator/Register"); error messages name the part after the last '/'.
template <typename Request, typename Response, typename Handle, typename Finish>
grpc::ServerUnaryReactor* ServeRawUnary(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                                        absl::string_view method, Handle&& handle, Finish finish) {
  RpcMethodCounters* tally = &RpcByteCounters::ProcessServer().ForMethod(method);
  tally->AddCall();
  tally->AddReceived(GrpcMessageBytes(static_cast<int64_t>(in->Length())));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Who calls is checked before a byte of the request is parsed: a parse can take many times the
  // request's size in memory and seconds of CPU, which no caller without the right may spend.
  if (absl::Status denied = Authorize(*context, PolicyMethodName(method)); !denied.ok()) {
    finish(reactor, denied);
    return reactor;
  }
  struct Call {
    Request request;
    Response response;
  };
  auto call = std::make_shared<Call>();
  grpc::ByteBuffer bytes(*in);  // shares the slices; parsing consumes the copy
  if (!grpc::SerializationTraits<Request>::Deserialize(&bytes, &call->request).ok()) {
    finish(reactor,
           absl::InvalidArgumentError(absl::StrCat(method.substr(method.rfind('/') + 1),
                                                   ": malformed ", Request::descriptor()->name())));
    return reactor;
  }
  handle(call->request, &call->response, [reactor, out, call, finish, tally](absl::Status status) {
    if (status.ok()) {
      bool own_buffer = false;
      status = FromGrpcStatus(
          grpc::SerializationTraits<Response>::Serialize(call->response, out, &own_buffer));
      if (status.ok()) tally->AddSent(GrpcMessageBytes(static_cast<int64_t>(out->Length())));
    }
    finish(reactor, status);
  });
  return reactor;
}

}  // namespace dlrm::common
