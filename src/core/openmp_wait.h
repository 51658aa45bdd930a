// How OpenMP's idle threads wait. libgomp (the OpenMP runtime of this build, shared by Debian's
// OpenMP OpenBLAS) lets a thread that finished its share of a parallel region spin for up to
// 300,000 iterations before it sleeps. On cores that other processes share, those spinning
// threads hold the CPU the threads with work need: measured on the 2-core development VM with two
// busy processes beside it, `vtrain train --preset tiny` (T256, micro-batch 8, 2 threads) made
// 290-410 tok/s with the default and 6.1-6.3k with GOMP_SPINCOUNT=1000 (6.7k with
// OMP_WAIT_POLICY=passive); on the idle machine the three were within run-to-run noise (tiny:
// 12.0-12.9k, 11.9-12.6k, 11.3-12.0k; 4 layers d512 T512: 834-1,000, 842-1,000, 967-1,100).
// libgomp reads its settings once, when it is loaded (before main), so vtrain sets
// GOMP_SPINCOUNT=1000 and executes itself again, once, at start-up: only when OpenMP runs more
// than one thread and the user set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY
// (VTRAIN_OMP_DEFAULTS=1 keeps libgomp's defaults, for comparing).
#pragma once
#include <string>

namespace vt {

// Call first thing in main, before MPI or any thread starts. Returns only when no re-execution
// is needed (or it failed: then the process goes on with libgomp's defaults).
void shorten_openmp_spin(char** argv);

// "OpenMP idle threads: spin 1000 iterations, then sleep (GOMP_SPINCOUNT)" and the like.
std::string openmp_wait_description();

}  // namespace vt
