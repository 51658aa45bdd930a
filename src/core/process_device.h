// Which GPU this process uses: the one source of truth for the CUDA backend, the NCCL
// communicators and the device-count checks of `vtrain train`. One process per GPU: the device
// is the node-local rank modulo the number of visible devices. The node-local rank comes from
// the launcher's environment: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's mpirun), MPI_LOCALRANKID
// (MPICH / Hydra), SLURM_LOCALID (srun), else 0 (a single process, or a launcher that already
// restricts CUDA_VISIBLE_DEVICES to one GPU per process, where the count is 1). It describes the
// process, never a sub-communicator: a rank's data-parallel group on an 8-GPU node must not pick
// its device from its rank inside that group.
#pragma once

namespace vt {

// The node-local rank (0 when no launcher variable is set); processes on one node per launcher.
int node_local_rank();
// Ranks of this job on this node (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE
// when it is a plain number; 1 when unknown).
int node_local_size();
// node_local_rank() % device_count (device_count >= 1).
int process_device_index(int device_count);

}  // namespace vt
