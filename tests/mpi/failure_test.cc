// The in-process parts of failure handling under MPI: all_ok agreement (lowest failing rank's
// code and message on every rank, world-rank prefix, subgroups), the watchdog's timeout API and
// message, and that calls shorter than the timeout do not trip it. The aborts themselves are
// tested across processes by test_failures.py (fault_demo).
// vtrain-mpi-ranks: 1 2 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "parallel/failure.h"
#include "parallel/mpi_communicator.h"

namespace vt {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(AllOk, OkOnEveryRankIsOk) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const absl::Status s = all_ok(&world, absl::OkStatus());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(is_agreed(s));
}

TEST(AllOk, EveryRankGetsTheLowestFailingRanksError) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), r = world.rank();
  // The last rank fails with NotFound; with 4 ranks rank 1 fails too (FailedPrecondition).
  absl::Status local = absl::OkStatus();
  if (r == W - 1) local = absl::NotFoundError(absl::StrCat("missing on ", r, " (caf\xc3\xa9)"));
  if (W == 4 && r == 1) local = absl::FailedPreconditionError("bad on 1");
  const absl::Status s = all_ok(&world, local);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(is_agreed(s));
  if (W == 1) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(s.message(), "missing on 0 (caf\xc3\xa9)");
  } else if (W == 2) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(s.message(), "rank 1: missing on 1 (caf\xc3\xa9)");
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(), "rank 1: bad on 1 (and 1 other rank(s) failed too)");
  }
}

TEST(AllOk, LongMessagesAreCut) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string huge(10000, 'x');
  const absl::Status s = all_ok(&world, absl::InternalError(huge));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::string(4000, 'x')), absl::string_view::npos);
  EXPECT_EQ(s.message().find(std::string(4001, 'x')), absl::string_view::npos);
}

TEST(AllOk, SubgroupsNameTheWorldRank) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int r = world.rank();
  std::unique_ptr<MpiCommunicator> half(world.split(r % 2, r, "half"));
  // In each half, the member with the highest world rank fails.
  const bool last = half->rank() == half->size() - 1;
  const absl::Status s = all_ok(half.get(), last ? absl::AbortedError("no") : absl::OkStatus());
  ASSERT_FALSE(s.ok());
  int want = r;  // the highest world rank with the same parity
  while (want + 2 < world_size()) want += 2;
  EXPECT_EQ(s.message(), world_size() > 1 ? absl::StrCat("rank ", want, ": no") : "no");
}

TEST(AllOk, SelfCommunicator) {
  const absl::Status s = all_ok(self_communicator(), absl::UnavailableError("down"));
  EXPECT_TRUE(is_agreed(s));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  EXPECT_EQ(s.message(), world_size() > 1 ? absl::StrCat("rank ", r, ": down") : "down");
}

TEST(Agreed, MarksOnlyErrors) {
  EXPECT_FALSE(is_agreed(agreed(absl::OkStatus())));
  EXPECT_TRUE(is_agreed(agreed(absl::InternalError("x"))));
  EXPECT_FALSE(is_agreed(absl::InternalError("x")));
}

TEST(Watchdog, TimeoutApi) {
  const double before = comm_timeout();
  set_comm_timeout(7.5);
  EXPECT_DOUBLE_EQ(comm_timeout(), 7.5);
  set_comm_timeout(0);
  EXPECT_EQ(comm_timeout(), 0);
  set_comm_timeout(before);
}

TEST(Watchdog, StuckMessageNamesOpGroupAndPeer) {
  EXPECT_EQ(stuck_message(301.2, "all-reduce", "dp", -1),
            "stuck for 301 s in all-reduce on the dp group (a peer rank probably died or "
            "diverged); aborting");
  EXPECT_EQ(stuck_message(5, "recv", "pp", 1),
            "stuck for 5 s in recv with peer 1 on the pp group (a peer rank probably died or "
            "diverged); aborting");
}

TEST(Watchdog, CallsShorterThanTheTimeoutPass) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const double before = comm_timeout();
  // 30 s: far above the 1 s the others wait below, also when a busy machine keeps rank 0 off
  // the CPU a while longer (with 2 s, one more second of that would have aborted the job).
  set_comm_timeout(30);
  start_comm_watchdog();
  {
    CommOpScope outer("outer", intern_group_name("test"));
    CommOpScope inner("inner", intern_group_name("test"));
  }
  // Rank 0 arrives 1 s late: the others wait 1 s in the barrier, under the 30 s timeout.
  if (world.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
  world.barrier();
  double v = 1;
  world.all_reduce_sum(&v, 1);
  EXPECT_EQ(v, world.size());
  set_comm_timeout(before);
}

}  // namespace
}  // namespace vt
