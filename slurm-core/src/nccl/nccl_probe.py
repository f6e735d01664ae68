# The NCCL probe of slurm-run: one all-reduce over every GPU of the job.
# Run by torchrun (one process per GPU, on every node). Rank r contributes r + 1,
# so every element must end as world * (world + 1) / 2. Rank 0 prints one marker:
# NCCL_PROBE_OK, or NCCL_PROBE_BAD sum=X expected=Y (a wrong answer, not a hang).
# A hang is caught outside, by the `timeout` around each rung of the ladder.
# NCCL on GPUs; where torch sees no GPU (a CPU-only test cluster), Gloo on CPUs: the
# launcher, the rendezvous and the verdict path are the same, the transport is not.
# The TAO rendezvous values (TAO_NODE_COUNT, TAO_GPUS_PER_NODE, TAO_NODE_RANK) were
# kept by the batch script before torchrun overwrote WORLD_SIZE; the world must be
# their product.
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    nodes = os.environ.get("TAO_NODE_COUNT", "?")
    per_node = os.environ.get("TAO_GPUS_PER_NODE", "?")
    node_rank = os.environ.get("TAO_NODE_RANK", "?")
    expected_world = os.environ.get("SLURM_RUN_NCCL_PROBE_WORLD")
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    device = "cuda" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        backend=backend, timeout=datetime.timedelta(seconds=600)
    )
    # 4 MiB: large enough to take the ring/tree paths, small enough to be quick.
    data = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(data)
    if cuda:
        torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    wrong = int((data != expected).sum().item())
    # Every rank's verdict reaches every rank (a second collective, over the same path).
    verdict = torch.tensor([1.0 if wrong else 0.0], device=device)
    dist.all_reduce(verdict)
    if cuda:
        torch.cuda.synchronize()
    bad_ranks = int(verdict.item())
    wrong_world = expected_world is not None and int(expected_world) != world
    where = "backend=%s tao_nodes=%s tao_gpus_per_node=%s" % (backend, nodes, per_node)
    if rank == 0:
        if wrong_world:
            print(
                "NCCL_PROBE_BAD sum=%s expected=%s world=%d expected_world=%s %s"
                % (data[0].item(), expected, world, expected_world, where),
                flush=True,
            )
        elif bad_ranks:
            print(
                "NCCL_PROBE_BAD sum=%s expected=%s bad_ranks=%d %s"
                % (data[0].item(), expected, bad_ranks, where),
                flush=True,
            )
        else:
            print("NCCL_PROBE_OK world=%d %s" % (world, where), flush=True)
    # One line per rank: where it ran, as torchrun and the batch script set it.
    print(
        "nccl-probe rank=%d world=%d tao_node_rank=%s local_rank=%d"
        % (rank, world, node_rank, local_rank),
        flush=True,
    )
    # No rank leaves before rank 0 has printed: srun --kill-on-bad-exit would stop it.
    dist.barrier()
    dist.destroy_process_group()
    # Only rank 0 reports failure by its exit code, after its marker is out.
    return 3 if rank == 0 and (bad_ranks or wrong_world) else 0


if __name__ == "__main__":
    sys.exit(main())
