#include "tests/adversarial/hostile_cluster.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "planner/testing/layout_builder.h"
#include "transport/data_plane_address.h"

namespace refit::testing {

ChildProcess* HostileClusterTest::coordinator_ = nullptr;
ChildProcess* HostileClusterTest::refitd_ = nullptr;
std::string HostileClusterTest::folder_, HostileClusterTest::coordinator_address_,
    HostileClusterTest::socket_;
int64_t HostileClusterTest::version_ = 0;
int HostileClusterTest::threads_baseline_[2] = {0, 0};
int HostileClusterTest::files_baseline_[2] = {0, 0};

namespace {

template <typename T>
void Deadline(grpc::ClientContext* context, T seconds) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

}  // namespace

void HostileClusterTest::SetUpTestSuite() {
  folder_ = ScratchFolder("refit-hostile");
  ASSERT_FALSE(folder_.empty());
  // One source and one destination rank, both on the one refitd; a short lease.
  std::ofstream(folder_ + "/job.json")
      << R"({"name": "hostile", "sourceRanks": 1, "destinationRanks": 1,
             "epochDeadlineMs": 20000, "leaseMs": 1000})";
  coordinator_ =
      new ChildProcess({RunfilesPath("coordinator/refit-coordinator"), "--listen=127.0.0.1:0",
                        "--job=" + folder_ + "/job.json", "--metrics_port=0", "--insecure"},
                       folder_ + "/coordinator.log");
  const std::string listening =
      coordinator_->AwaitLine("listening on 127.0.0.1:", absl::Seconds(20));
  ASSERT_FALSE(listening.empty()) << coordinator_->Log();
  coordinator_address_ = listening.substr(listening.rfind("127.0.0.1:"));
  socket_ = folder_ + "/refitd.sock";
  refitd_ =
      new ChildProcess({RunfilesPath("refitd/refitd"), "--coordinator=" + coordinator_address_,
                        "--node=node-a", "--socket=" + socket_, "--metrics_port=0"},
                       folder_ + "/refitd.log");
  ASSERT_FALSE(refitd_->AwaitLine("incarnation=", absl::Seconds(20)).empty()) << refitd_->Log();
  MeasureBaseline();
}

void HostileClusterTest::MeasureBaseline() {
  // Warm both servers up: refitd connected to the coordinator, and one call of each kind
  // served (their thread pools and channels grow on first use, not by leaking).
  auto local = v1::LocalDaemon::NewStub(
      grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  auto coordinator = v1::Coordinator::NewStub(
      grpc::CreateChannel(coordinator_address_, grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext context;
    Deadline(&context, 5);
    v1::StatusResponse status;
    if (coordinator->Status(&context, v1::StatusRequest(), &status).ok() &&
        status.daemons_size() == 1 && status.daemons(0) == "node-a") {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  {
    grpc::ClientContext context;
    Deadline(&context, 5);
    v1::RegisterRankResponse response;
    local->RegisterRank(&context, v1::RegisterRankRequest(), &response);
  }
  {
    grpc::ClientContext context;
    Deadline(&context, 5);
    v1::WaitForVersionRequest request;
    request.set_deadline_ms(10);
    v1::WaitForVersionResponse response;
    local->WaitForVersion(&context, request, &response);
  }
  {
    grpc::ClientContext context;
    Deadline(&context, 5);
    v1::RefitRequest request;
    request.set_version(1 << 20);
    request.set_deadline_ms(10);
    v1::RefitReport report;
    coordinator->Refit(&context, request, &report);
  }
  // At rest: the counts stop changing (for half a second, within ten).
  ChildProcess* processes[2] = {coordinator_, refitd_};
  int last[2] = {-1, -1};
  absl::Time stable_since = absl::Now();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up && absl::Now() - stable_since < absl::Milliseconds(500)) {
    for (int i = 0; i < 2; ++i) {
      const int threads = processes[i]->Threads();
      if (threads != last[i]) stable_since = absl::Now();
      last[i] = threads;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (int i = 0; i < 2; ++i) {
    threads_baseline_[i] = processes[i]->Threads();
    files_baseline_[i] = processes[i]->OpenFiles();
  }
}

void HostileClusterTest::TearDownTestSuite() {
  delete refitd_;
  delete coordinator_;
  refitd_ = coordinator_ = nullptr;
}

void HostileClusterTest::SetUp() {
  ASSERT_NE(refitd_, nullptr);
  local_ = v1::LocalDaemon::NewStub(
      grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(coordinator_address_, grpc::InsecureChannelCredentials(),
                                           arguments);
  coordinator_stub_ = v1::Coordinator::NewStub(channel);
  control_stub_ = v1::CoordinatorControl::NewStub(channel);
}

::testing::AssertionResult HostileClusterTest::ThreadsSettle(int threads) {
  ChildProcess* processes[2] = {coordinator_, refitd_};
  const char* names[2] = {"refit-coordinator", "refitd"};
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (true) {
    std::string over;
    for (int i = 0; i < 2; ++i) {
      const int now = processes[i]->Threads();
      if (now > threads_baseline_[i] + threads) {
        absl::StrAppend(&over, names[i], " holds ", now, " threads, ", threads_baseline_[i],
                        " at rest before the first case; ");
      }
    }
    if (over.empty()) return ::testing::AssertionSuccess();
    if (absl::Now() > give_up) return ::testing::AssertionFailure() << over;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

::testing::AssertionResult HostileClusterTest::CoordinatorHolds(int sources, int destinations) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (true) {
    grpc::ClientContext context;
    Deadline(&context, 5);
    v1::LayoutsResponse layouts;
    const grpc::Status status =
        coordinator_stub_->Layouts(&context, v1::LayoutsRequest(), &layouts);
    const int held_sources = layouts.sources().ranks_size();
    const int held_destinations = layouts.destinations().ranks_size();
    if (status.ok() && held_sources == sources && held_destinations == destinations) {
      return ::testing::AssertionSuccess();
    }
    if (absl::Now() > give_up) {
      return ::testing::AssertionFailure()
             << "the coordinator holds " << held_sources << " source and " << held_destinations
             << " destination ranks, not " << sources << " and " << destinations << " ("
             << status.error_message() << ")";
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void HostileClusterTest::TearDown() {
  ASSERT_TRUE(coordinator_->Alive()) << "the coordinator died:\n" << coordinator_->Log();
  ASSERT_TRUE(refitd_->Alive()) << "refitd died:\n" << refitd_->Log();
  EXPECT_TRUE(ThreadsSettle());
  ChildProcess* processes[2] = {coordinator_, refitd_};
  for (int i = 0; i < 2; ++i) {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (processes[i]->OpenFiles() > files_baseline_[i] + 16 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_LE(processes[i]->OpenFiles(), files_baseline_[i] + 16) << "descriptors leaked";
  }
}

v1::RegisterRankRequest HostileClusterTest::GoodRequest(v1::Role role, int64_t rank) {
  LayoutBuilder builder;
  builder.Tensor("w", {16, 8}).Rank(rank, "node-a", -1).View(rank, "w", {0, 0}, {16, 8});
  const v1::LayoutSpec backed = backed_.Back(builder.spec(), "layout");
  v1::RegisterRankRequest request;
  request.set_role(role);
  *request.mutable_layout() = backed.ranks(0);
  *request.mutable_tensors() = backed.tensors();
  return request;
}

grpc::Status HostileClusterTest::Register(const v1::RegisterRankRequest& request,
                                          std::string* session) {
  grpc::ClientContext context;
  Deadline(&context, 30);
  v1::RegisterRankResponse response;
  grpc::Status status = local_->RegisterRank(&context, request, &response);
  if (session != nullptr) *session = response.session();
  return status;
}

grpc::Status HostileClusterTest::Deregister(v1::Role role, int64_t rank) {
  grpc::ClientContext context;
  Deadline(&context, 10);
  v1::DeregisterRankRequest request;
  request.set_role(role);
  request.set_rank(rank);
  v1::DeregisterRankResponse response;
  return local_->DeregisterRank(&context, request, &response);
}

grpc::Status HostileClusterTest::Publish(int64_t rank, int64_t version) {
  grpc::ClientContext context;
  Deadline(&context, 10);
  v1::PublishRequest request;
  request.set_rank(rank);
  request.set_version(version);
  v1::PublishResponse response;
  return local_->Publish(&context, request, &response);
}

grpc::Status HostileClusterTest::WaitForVersion(int64_t rank, int64_t version,
                                                int64_t deadline_ms) {
  grpc::ClientContext context;
  Deadline(&context, 30);
  v1::WaitForVersionRequest request;
  request.set_rank(rank);
  request.set_version(version);
  request.set_deadline_ms(deadline_ms);
  v1::WaitForVersionResponse response;
  return local_->WaitForVersion(&context, request, &response);
}

grpc::Status HostileClusterTest::Refit(int64_t version, int64_t deadline_ms,
                                       v1::RefitReport* report) {
  grpc::ClientContext context;
  Deadline(&context, 60);
  v1::RefitRequest request;
  request.set_version(version);
  request.set_deadline_ms(deadline_ms);
  v1::RefitReport ignored;
  return coordinator_stub_->Refit(&context, request, report != nullptr ? report : &ignored);
}

v1::DaemonHello HostileClusterTest::GoodHello(const std::string& node) {
  v1::DaemonHello hello;
  hello.set_node(node);
  hello.set_incarnation("rogue-1");
  hello.set_committed_version(-1);
  hello.set_data_plane_address(transport::SealDataPlaneAddress("not a real worker"));
  return hello;
}

grpc::Status HostileClusterTest::SayHello(const v1::DaemonHello& hello) {
  grpc::ClientContext context;
  Deadline(&context, 5);
  auto stream = control_stub_->Control(&context);
  v1::DaemonMessage message;
  *message.mutable_hello() = hello;
  stream->Write(message);
  stream->WritesDone();
  v1::CoordinatorMessage answer;
  while (stream->Read(&answer)) {
  }
  return stream->Finish();
}

int64_t HostileClusterTest::CurrentVersion() {
  grpc::ClientContext context;
  Deadline(&context, 10);
  v1::StatusResponse status;
  if (!coordinator_stub_->Status(&context, v1::StatusRequest(), &status).ok()) return -2;
  return status.current_version();
}

}  // namespace refit::testing
