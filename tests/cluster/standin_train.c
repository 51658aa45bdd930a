/* Stand-in for the multi-rank `vtrain train` job in the cluster tests (tests/cluster): an MPI
 * program with vtrain's train CLI and vtrain's run contract, without a model. It exists only
 * until the distributed engine, the parallel checkpoint and the signal handler are in vtrain;
 * the tests switch to build/vtrain with a one-line change (MULTIRANK_TRAIN in
 * tests/cluster/cluster_util.py).
 *
 * What it does, like vtrain will:
 *  - `standin_train train --data D --steps N --tp T --pp P --ckpt-dir DIR --ckpt-every K
 *     --resume auto|none|PATH --metrics FILE [any other vtrain flag, ignored]`;
 *    refuses a world size that tp*pp does not divide (exit 2, message on rank 0).
 *  - every step: sleeps --step-ms (stand-in only; default 100) and all-reduces over the world;
 *    the "model state" follows state = 0.5 * state + step, independent of the world size, so a
 *    resumed run ends in exactly the state of an uninterrupted one (any layout).
 *  - rank 0 appends {"step","loss","lr","tokens","tok_per_s","mfu"} to --metrics (truncates when
 *    starting fresh) and prints `step i/N | loss ...`.
 *  - checkpoints: step_NNNNNNNN.h5 (HDF5, attributes step/state/world_size/tp/pp) written as
 *    .tmp then renamed, then `latest` (one line, the file name) replaced atomically.
 *  - SIGUSR1 or SIGTERM: the ranks agree at the end of the current step (all-reduce of the flag),
 *    save a checkpoint of that step, print "stopping on signal", and exit 75 (EX_TEMPFAIL:
 *    "checkpointed, not finished, resume me"). Finishing all steps exits 0.
 */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal = 0;
static void on_signal(int sig) { g_signal = sig; }

static int rank = 0, world = 1;

static void die(int code, const char* msg) {
  if (rank == 0) fprintf(stderr, "standin_train: %s\n", msg);
  MPI_Finalize();
  exit(code);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int write_attr_i64(hid_t loc, const char* name, long long v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, H5T_NATIVE_LLONG, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = H5Awrite(a, H5T_NATIVE_LLONG, &v);
  H5Aclose(a);
  H5Sclose(sp);
  return e < 0 ? -1 : 0;
}

static int write_attr_f64(hid_t loc, const char* name, double v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Sclose(sp);
  return e < 0 ? -1 : 0;
}

/* Rank 0 writes DIR/step_NNNNNNNN.h5 atomically, then DIR/latest; all ranks wait for it. */
static void save(const char* dir, long long step, double state, int tp, int pp) {
  if (!dir || !*dir) return;
  int ok = 1;
  if (rank == 0) {
    char name[64], path[4096], tmp[4200], latest[4200], latest_tmp[4300];
    snprintf(name, sizeof name, "step_%08lld.h5", step);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
      ok = 0;
    } else {
      hsize_t n = 4;
      double w[4] = {state, state * 0.5, (double)step, (double)world};
      hid_t sp = H5Screate_simple(1, &n, NULL);
      hid_t g = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      hid_t d = H5Dcreate2(g, "w", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, w) < 0) ok = 0;
      H5Dclose(d);
      H5Gclose(g);
      H5Sclose(sp);
      if (write_attr_i64(f, "step", step) || write_attr_f64(f, "state", state) ||
          write_attr_i64(f, "world_size", world) || write_attr_i64(f, "tp", tp) ||
          write_attr_i64(f, "pp", pp))
        ok = 0;
      if (H5Fclose(f) < 0) ok = 0;
    }
    if (ok && rename(tmp, path) != 0) ok = 0;
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(latest_tmp, sizeof latest_tmp, "%s.tmp", latest);
    FILE* l = ok ? fopen(latest_tmp, "w") : NULL;
    if (!l || fprintf(l, "%s\n", name) < 0 || fclose(l) != 0 || rename(latest_tmp, latest) != 0)
      ok = 0;
    if (ok) printf("saved checkpoint %s\n", path);
    fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) die(1, "cannot write the checkpoint");
}

/* Reads step and state from the checkpoint `latest` names (auto) or from PATH; 0 if none. */
static int load(const char* resume, const char* dir, long long* step, double* state, char* from,
                size_t from_len) {
  char path[4096] = "";
  if (strcmp(resume, "none") == 0) return 0;
  if (strcmp(resume, "auto") == 0) {
    if (!dir || !*dir) die(2, "--resume auto needs --ckpt-dir");
    char latest[4200], name[512] = "";
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE* l = fopen(latest, "r");
    if (!l) return 0;
    if (!fgets(name, sizeof name, l)) name[0] = 0;
    fclose(l);
    name[strcspn(name, "\r\n")] = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
  } else {
    snprintf(path, sizeof path, "%s", resume);
  }
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  hid_t a = H5Aopen(f, "step", H5P_DEFAULT);
  herr_t e1 = H5Aread(a, H5T_NATIVE_LLONG, step);
  H5Aclose(a);
  a = H5Aopen(f, "state", H5P_DEFAULT);
  herr_t e2 = H5Aread(a, H5T_NATIVE_DOUBLE, state);
  H5Aclose(a);
  H5Fclose(f);
  snprintf(from, from_len, "%s", path);
  return (e1 < 0 || e2 < 0) ? -1 : 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  if (argc < 2 || strcmp(argv[1], "train") != 0) die(2, "usage: standin_train train --data DIR ...");
  long long steps = 10, ckpt_every = 0, step_ms = 100;
  int tp = 1, pp = 1;
  const char *data = NULL, *ckpt_dir = NULL, *resume = "none", *metrics = NULL;
  const char* env_ms = getenv("STANDIN_STEP_MS");
  if (env_ms) step_ms = atoll(env_ms);
  static const char* kBoolFlags[] = {"--detach-v1", "--shared-table", "--bov-add-fixed",
                                     "--polar-express"};
  for (int i = 2; i < argc; ++i) {
    const char* k = argv[i];
    int is_bool = 0;
    for (size_t b = 0; b < sizeof kBoolFlags / sizeof *kBoolFlags; ++b)
      if (strcmp(k, kBoolFlags[b]) == 0) is_bool = 1;
    if (is_bool) continue;
    if (strncmp(k, "--", 2) != 0 || i + 1 >= argc) {
      char msg[512];
      snprintf(msg, sizeof msg, "unexpected argument '%s'", k);
      die(2, msg);
    }
    const char* v = argv[++i];
    if (!strcmp(k, "--steps")) steps = atoll(v);
    else if (!strcmp(k, "--ckpt-every")) ckpt_every = atoll(v);
    else if (!strcmp(k, "--step-ms")) step_ms = atoll(v);
    else if (!strcmp(k, "--tp")) tp = atoi(v);
    else if (!strcmp(k, "--pp")) pp = atoi(v);
    else if (!strcmp(k, "--data")) data = v;
    else if (!strcmp(k, "--ckpt-dir")) ckpt_dir = v;
    else if (!strcmp(k, "--resume")) resume = v;
    else if (!strcmp(k, "--metrics")) metrics = v;
  }
  if (!data) die(2, "--data DATADIR is required");
  if (tp < 1 || pp < 1 || world % (tp * pp) != 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "world size %d is not a multiple of tp*pp = %d*%d", world, tp, pp);
    die(2, msg);
  }
  char host[256] = "";
  gethostname(host, sizeof host);
  printf("rank %d/%d on %s pid %d\n", rank, world, host, (int)getpid());
  fflush(stdout);

  long long start = 0;
  double state = 0;
  char from[4096] = "";
  int rc = 0;
  if (rank == 0) rc = load(resume, ckpt_dir, &start, &state, from, sizeof from);
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc < 0) die(1, "cannot read the checkpoint to resume from");
  MPI_Bcast(&start, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  MPI_Bcast(&state, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    if (rc > 0) printf("resumed from %s at step %lld\n", from, start);
    printf("layout: world %d = dp %d x tp %d x pp %d; %lld steps\n", world, world / (tp * pp), tp,
           pp, steps);
    fflush(stdout);
  }
  if (ckpt_dir && rank == 0) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", ckpt_dir);
    if (system(cmd) != 0) die(1, "cannot create --ckpt-dir");
  }
  FILE* mf = NULL;
  if (metrics && rank == 0) {
    mf = fopen(metrics, start > 0 ? "a" : "w");
    if (!mf) die(1, "cannot open --metrics");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  const long long tokens_per_step = 4096;
  double t0 = now_s();
  for (long long step = start + 1; step <= steps; ++step) {
    double ts = now_s();
    sleep_ms(step_ms);
    long long contrib = step, total = 0;
    MPI_Allreduce(&contrib, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    state = 0.5 * state + (double)(total / world);
    double loss = 1.0 + 4.0 * exp(-0.05 * (double)step);
    double dt = now_s() - ts;
    if (rank == 0) {
      double tps = tokens_per_step / (dt > 1e-9 ? dt : 1e-9);
      if (mf) {
        fprintf(mf,
                "{\"step\": %lld, \"loss\": %.6f, \"lr\": 0.02, \"tokens\": %lld, "
                "\"tok_per_s\": %.1f, \"mfu\": 0.0, \"state\": %.17g}\n",
                step, loss, step * tokens_per_step, tps, state);
        fflush(mf);
      }
      double eta = (now_s() - t0) / (double)(step - start) * (double)(steps - step);
      printf("step %lld/%lld | loss %.4f | lr 0.0200 | %.0f tok/s | mfu 0.00%% | eta %.0fs\n", step,
             steps, loss, tps, eta);
      fflush(stdout);
    }
    int mine = (int)g_signal, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && step < steps) {
      save(ckpt_dir, step, state, tp, pp);
      if (rank == 0) {
        printf("stopping on signal %d after step %lld (checkpoint saved); exit 75 to be resumed\n",
               any, step);
        fflush(stdout);
      }
      if (mf) fclose(mf);
      MPI_Finalize();
      return 75;
    }
    if (ckpt_every > 0 && step % ckpt_every == 0 && step != steps)
      save(ckpt_dir, step, state, tp, pp);
  }
  if (start < steps) save(ckpt_dir, steps, state, tp, pp);
  if (rank == 0) {
    printf("done: %lld steps, state %.17g\n", steps, state);
    fflush(stdout);
  }
  if (mf) fclose(mf);
  MPI_Finalize();
  return 0;
}
