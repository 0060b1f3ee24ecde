// The fixture of the parameter-server service tests (ps_service_*_test.cc): a parameter server on
// loopback with its data in a fresh folder, a stub, and the requests and calls the tests make.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/grants.h"
#include "common/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_load_request.h"
#include "server/ps_server.h"
#include "tests/server/ps_test_util.h"

namespace dlrm::server::testing {

// The deadline of every call the tests make (a call that needs a shorter one says so).
inline constexpr absl::Duration kTimeout = absl::Seconds(10);

class PsServiceTest : public ::testing::Test {
 protected:
  void StartPs(int64_t budget = 1 << 20) { StartPs(TestPsOptions(dir_.path(), budget)); }
  void StartPs(const PsOptions& options) {
    auto ps = ParameterServer::Start(options);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    stub_ = PsStub(ps_->address());
  }
  // Gives the server grant key `key` (as registering with a coordinator does): the calls below
  // then carry the member grant of their job and epoch, as a worker's do.
  void SetGrantKey(const std::string& key) {
    grant_key_ = key;
    ps_->service().SetGrantKey(key);
  }
  // A call's context, with the member grant of `job_id` at `epoch` once SetGrantKey ran.
  std::unique_ptr<grpc::ClientContext> Context(const std::string& job_id, int64_t epoch) const {
    auto ctx = common::MakeClientContext(kTimeout);
    if (!grant_key_.empty()) {
      ctx->AddMetadata(common::kMemberGrantMetadata,
                       common::JobMemberGrant(grant_key_, job_id, epoch));
    }
    return ctx;
  }
  // Starts a server with grant key `key`, loads job "j" (one table of 100 rows of 4) and returns
  // its row 5 as initialised.
  std::vector<float> StartWithJobJ(const std::string& key) {
    StartPs();
    SetGrantKey(key);
    EXPECT_TRUE(Load(TestJob("j", {{100, 4}})).ok());
    dlrm::v1::LookupResponse resp;
    EXPECT_TRUE(Lookup(LookupOf("j", 0, {5}), &resp).ok());
    return resp.tables_size() > 0 ? UnpackFloats(resp.tables(0).rows()) : std::vector<float>();
  }
  // The context of LoadJob `r`: with its member grant and the load grant of `r` itself once
  // SetGrantKey ran, as the coordinator gives a job's ranks (server/ps_load_request.h).
  std::unique_ptr<grpc::ClientContext> LoadContext(const dlrm::v1::LoadJobRequest& r) const {
    auto ctx = Context(r.job_id(), r.job_epoch());
    if (!grant_key_.empty()) {
      ctx->AddMetadata(common::kLoadGrantMetadata,
                       common::JobLoadGrant(grant_key_, LoadJobRequestBytes(r)));
    }
    return ctx;
  }
  grpc::Status Load(const dlrm::v1::LoadJobRequest& r) {
    dlrm::v1::LoadJobResponse resp;
    return stub_->LoadJob(LoadContext(r).get(), r, &resp);
  }
  grpc::Status Lookup(const dlrm::v1::LookupRequest& r, dlrm::v1::LookupResponse* resp) {
    return stub_->Lookup(Context(r.job_id(), r.job_epoch()).get(), r, resp);
  }
  grpc::Status Push(const dlrm::v1::PushGradientsRequest& r) {
    dlrm::v1::PushGradientsResponse resp;
    return stub_->PushGradients(Context(r.job_id(), r.job_epoch()).get(), r, &resp);
  }
  static dlrm::v1::LookupRequest LookupOf(const std::string& job, int table,
                                          const std::vector<int64_t>& ids, int64_t epoch = 1) {
    dlrm::v1::LookupRequest r;
    r.set_job_id(job);
    r.set_job_epoch(epoch);
    r.set_step(-1);
    dlrm::v1::TableIds* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    return r;
  }
  static dlrm::v1::WriteRowsRequest WriteRowsOf(const std::string& job, int table,
                                                const std::vector<int64_t>& ids,
                                                const std::vector<float>& rows) {
    dlrm::v1::WriteRowsRequest r;
    r.set_job_id(job);
    r.set_job_epoch(1);
    dlrm::v1::TableIdsRows* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    t->set_rows(PackFloats(rows));
    return r;
  }
  grpc::Status WriteRows(const dlrm::v1::WriteRowsRequest& r,
                         dlrm::v1::WriteRowsResponse* resp = nullptr) {
    dlrm::v1::WriteRowsResponse unused;
    return stub_->WriteRows(common::MakeClientContext(kTimeout).get(), r,
                            resp != nullptr ? resp : &unused);
  }
  static dlrm::v1::PushGradientsRequest PushOf(const std::string& job, int table,
                                               const std::vector<int64_t>& ids,
                                               const std::vector<float>& grads) {
    dlrm::v1::PushGradientsRequest r;
    r.set_job_id(job);
    r.set_job_epoch(1);
    r.set_step(-1);
    dlrm::v1::TableGradients* t = r.add_tables();
    t->set_table(table);
    t->set_ids(PackIds(ids));
    t->set_grads(PackFloats(grads));
    return r;
  }

  PsTempDir dir_;
  std::string grant_key_;
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<dlrm::v1::ParameterServer::Stub> stub_;
};

}  // namespace dlrm::server::testing
