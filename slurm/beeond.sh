#!/usr/bin/env bash
# BeeOND (BeeGFS On Demand) for one SLURM job: a temporary parallel file system striped over
# the job's node-local NVMe disks, the guide's node-local cache (guide sec. 2.2, claim C5).
#
#   source slurm/beeond.sh                 # inside the job script, after the #SBATCH lines
#   beeond_up /local/nvme /mnt/beeond      # DIR on every node's local disk, MOUNT point
#   python data_prep/stage.py --src /lustre/proj/images-tfrecord --dest /mnt/beeond/images-tfrecord
#   srun ... python train.py --data /mnt/beeond/images-tfrecord
#   (beeond_down runs by itself when the script exits, also on failure or scancel)
#
# Needs the beeond package on every node and the right to run it (sites usually allow it via
# sudo or a SLURM prolog; ask your admins). Where `beeond` is not installed, beeond_up says
# so and returns 1 without changing anything: stage to $SLURM_TMPDIR (node-local, one node)
# instead. HPCBENCH_BEEOND_MOUNT is exported so that hpcbench's staging picks the mount.
#
#   beeond start -n NODEFILE -d DIR -c MOUNT   one storage+metadata server per node on DIR,
#                                              clients mount the file system at MOUNT
#   beeond stop  -n NODEFILE -L -d             unmount, stop the services, delete DIR's data
#                                              (-L: also delete the log files)

beeond_up() {
    local dir="${1:?usage: beeond_up NODE_LOCAL_DIR MOUNT}" mount="${2:?usage: beeond_up NODE_LOCAL_DIR MOUNT}"
    if ! command -v beeond >/dev/null 2>&1; then
        echo "beeond.sh: beeond is not installed on $(hostname); stage to \$SLURM_TMPDIR instead" >&2
        return 1
    fi
    if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
        echo "beeond.sh: not inside a SLURM job (SLURM_JOB_NODELIST is unset)" >&2
        return 1
    fi
    BEEOND_NODEFILE="$(mktemp "${TMPDIR:-/tmp}/beeond-nodes.${SLURM_JOB_ID:-$$}.XXXX")"
    scontrol show hostnames "$SLURM_JOB_NODELIST" > "$BEEOND_NODEFILE"
    export BEEOND_NODEFILE
    trap beeond_down EXIT
    beeond start -n "$BEEOND_NODEFILE" -d "$dir" -c "$mount" || { beeond_down; return 1; }
    export HPCBENCH_BEEOND_MOUNT="$mount"
    echo "beeond.sh: BeeOND on $(wc -l < "$BEEOND_NODEFILE") node(s) mounted at $mount"
}

beeond_down() {
    [ -n "${BEEOND_NODEFILE:-}" ] || return 0
    beeond stop -n "$BEEOND_NODEFILE" -L -d || echo "beeond.sh: beeond stop failed; check the nodes" >&2
    rm -f "$BEEOND_NODEFILE"
    unset BEEOND_NODEFILE HPCBENCH_BEEOND_MOUNT
    trap - EXIT
}
