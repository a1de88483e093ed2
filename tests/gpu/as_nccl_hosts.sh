#!/usr/bin/env bash
# Runs a command as an NCCL host of its own: under `mpirun -np N tests/gpu/as_nccl_hosts.sh
# PROGRAM ARGS...`, each process sets NCCL_HOSTID=pipetune-host-<its MPI rank> and then becomes
# PROGRAM. NCCL takes processes with different host ids for different machines, so N processes
# may share one GPU (NCCL refuses two ranks on one GPU of one host) and talk through NCCL's network
# transport: sockets over the loopback interface (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1, unless
# already set). Slow next to NVLink, but every transfer and collective crosses processes through
# NCCL, so a machine with one GPU can run the NCCL communicator with ranks as processes
# (engine/nccl/nccl_hosts.hpp). The rank comes from Open MPI (OMPI_COMM_WORLD_RANK), PMIx
# (PMIX_RANK), MPICH (PMI_RANK) or Slurm (SLURM_PROCID).
# Exit status: the program's; 2 when no MPI rank is in the environment or no program is named.
set -euo pipefail
case "${1:-}" in
  "" ) echo "as_nccl_hosts: name the program to run (under mpirun)" >&2; exit 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
rank="${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}}"
[[ "$rank" =~ ^[0-9]+$ ]] ||
  { echo "as_nccl_hosts: no MPI rank in the environment (run it under mpirun)" >&2; exit 2; }
export NCCL_HOSTID="pipetune-host-$rank"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
export NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-1}"
exec "$@"
