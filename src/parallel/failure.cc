// run_guarded's exits, the crash-signal handlers, and the all_ok status agreement.
#include "parallel/failure.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "parallel/mpi_communicator.h"

namespace vt {

namespace {

constexpr char kAgreedUrl[] = "vtrain/agreed";
// Longest error message all_ok carries from the failing rank (bytes; longer ones are cut).
constexpr int kMaxMessage = 4000;

int world_rank() {
  int init = 0, fin = 0, r = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int init = 0, fin = 0, n = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void print_error(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "vtrain: error: %s\n", message.c_str());
  std::fflush(stderr);
}

// ---- crash signals ----

struct CrashSignal {
  int sig;
  const char* name;
};
constexpr CrashSignal kCrashSignals[] = {
    {SIGSEGV, "SIGSEGV, segmentation fault"},
    {SIGABRT, "SIGABRT, aborted"},
    {SIGFPE, "SIGFPE, arithmetic error"},
    {SIGBUS, "SIGBUS, bus error"},
};
constexpr int kNumCrash = sizeof(kCrashSignals) / sizeof(kCrashSignals[0]);

// Formatted at install time: the handler only write()s (async-signal-safe).
char g_crash_text[kNumCrash][128];
int g_crash_len[kNumCrash];
struct sigaction g_previous[kNumCrash];
// An alternate stack, so a stack overflow (SIGSEGV) still reaches the handler.
alignas(16) char g_alt_stack[64 * 1024];

void crash_handler(int sig, siginfo_t* info, void* context) {
  int i = 0;
  while (i < kNumCrash && kCrashSignals[i].sig != sig) ++i;
  if (i == kNumCrash) return;
  ssize_t unused = write(STDERR_FILENO, g_crash_text[i], g_crash_len[i]);
  (void)unused;
  // Hand over to the previous handler (OpenMPI prints a backtrace), then die by the signal.
  const struct sigaction& prev = g_previous[i];
  sigaction(sig, &prev, nullptr);
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);  // pending until this handler returns, then ends the process
}

}  // namespace

void install_crash_handlers() {
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof(g_alt_stack);
  sigaltstack(&ss, nullptr);
  const int rank = world_rank();
  for (int i = 0; i < kNumCrash; ++i) {
    g_crash_len[i] = std::snprintf(g_crash_text[i], sizeof(g_crash_text[i]),
                                   "vtrain: rank %d: crashed with signal %d (%s)\n", rank,
                                   kCrashSignals[i].sig, kCrashSignals[i].name);
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(kCrashSignals[i].sig, &sa, &g_previous[i]);
  }
}

// ---- agreement ----

absl::Status agreed(absl::Status s) {
  if (!s.ok()) s.SetPayload(kAgreedUrl, absl::Cord("1"));
  return s;
}

bool is_agreed(const absl::Status& s) { return !s.ok() && s.GetPayload(kAgreedUrl).has_value(); }

absl::Status all_ok(Communicator* comm, const absl::Status& local) {
  const int n = comm->size();
  // Every rank learns which ranks failed (status code, world rank) ...
  const float mine[2] = {static_cast<float>(static_cast<int>(local.code())),
                         static_cast<float>(world_rank())};
  std::vector<float> all(2 * static_cast<size_t>(n));
  comm->all_gather(mine, all.data(), 2);
  int first = -1, failing = 0;
  for (int r = 0; r < n; ++r) {
    if (all[2 * r] == 0) continue;
    if (first < 0) first = r;
    ++failing;
  }
  if (first < 0) return absl::OkStatus();
  // ... and the lowest failing rank sends its message, one byte per float.
  std::vector<float> buf(kMaxMessage + 1, 0.0f);
  if (comm->rank() == first) {
    const absl::string_view m = local.message();
    const int len = static_cast<int>(std::min<size_t>(m.size(), kMaxMessage));
    buf[0] = static_cast<float>(len);
    for (int i = 0; i < len; ++i) buf[1 + i] = static_cast<unsigned char>(m[i]);
  }
  comm->broadcast(buf.data(), static_cast<int64_t>(buf.size()), first);
  std::string message(static_cast<size_t>(buf[0]), ' ');
  for (size_t i = 0; i < message.size(); ++i)
    message[i] = static_cast<char>(static_cast<unsigned char>(buf[1 + i]));
  const int who = static_cast<int>(all[2 * first + 1]);
  std::string text = world_size() > 1 ? absl::StrCat("rank ", who, ": ", message) : message;
  if (failing > 1) absl::StrAppend(&text, " (and ", failing - 1, " other rank(s) failed too)");
  return agreed(absl::Status(static_cast<absl::StatusCode>(static_cast<int>(all[2 * first])),
                             text));
}

// ---- run_guarded ----

namespace detail {

void guarded_start() {
  install_crash_handlers();
  start_comm_watchdog();
}

int guarded_status_exit(const absl::Status& s) {
  if (s.ok()) return 0;
  if (is_agreed(s)) {
    if (world_rank() == 0) print_error(std::string(s.message()));
    return 2;
  }
  if (world_size() <= 1) {
    print_error(std::string(s.message()));
    return 2;
  }
  abort_job(absl::StrCat("error: ", s.message()));
}

int guarded_code_exit(int code) {
  if (code == 0 || world_size() <= 1) return code;
  abort_job(absl::StrCat("exited with code ", code, " while other ranks may still be running"),
            code);
}

int guarded_exception(const std::string& what) {
  if (world_size() <= 1) {
    print_error("uncaught exception: " + what);
    return 2;
  }
  abort_job("uncaught exception: " + what);
}

}  // namespace detail

}  // namespace vt
