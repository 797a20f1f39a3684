#!/usr/bin/env python3
"""torch.distributed with the nccl backend (issue 39), run natively and through Remora by
scripts/gpu-suite.sh, which compares their stdout with lines starting "time_" dropped.
Results print as exact hex and hashes: native and remote must match bit for bit. Rank 0
alone prints, after the others' results are gathered to it; each part checks its own
collectives' results and ends with PASS (exit 1 on a wrong value).

usage: distributed.py single          init_process_group("nccl", world_size=1): a collective of one
       distributed.py ops             all-reduce, all-gather, broadcast, reduce-scatter with 2 ranks
                                      (torch.multiprocessing, one GPU each)
       distributed.py ddp             under torchrun --nproc_per_node=2: a small DDP training run,
                                      its losses and final weights
       distributed.py share           one GPU: a CUDA tensor sent to a torch.multiprocessing child
                                      (CUDA IPC: memory and event handles), which reads it and adds
                                      to it in place; the parent then reads the child's writes
"""
import hashlib
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

PORT = os.environ.get("REMORA_DIST_PORT", "29531")


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def init(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", PORT)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))


def single():
    init(0, 1)
    x = torch.arange(16, dtype=torch.float32, device="cuda")
    dist.all_reduce(x)
    ok = torch.equal(x.cpu(), torch.arange(16, dtype=torch.float32))
    print("single all_reduce", digest(x))
    dist.barrier()
    dist.destroy_process_group()
    return ok


def ops_rank(rank, world, failed):
    init(rank, world)
    dev = torch.device("cuda", rank)
    n = 1 << 20
    base = torch.arange(n, dtype=torch.float32, device=dev) % 1000
    results = []
    ok = True

    x = base + rank
    dist.all_reduce(x)  # sum: 2 * base + 1
    ok &= torch.equal(x, 2 * base + 1)
    results.append(("all_reduce sum", x))
    y = base * (rank + 2)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    ok &= torch.equal(y, base * (world + 1))
    results.append(("all_reduce max", y))

    parts = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(parts, base + 10 * rank)
    ok &= all(torch.equal(parts[r], base + 10 * r) for r in range(world))
    results.append(("all_gather", torch.cat(parts)))

    b = base.clone() if rank == 1 else torch.zeros(n, device=dev)
    dist.broadcast(b, src=1)
    ok &= torch.equal(b, base)
    results.append(("broadcast", b))

    out = torch.empty(n // world, device=dev)
    dist.reduce_scatter_tensor(out, base + rank)
    ok &= torch.equal(out, (2 * base + 1)[rank * (n // world):(rank + 1) * (n // world)])
    results.append(("reduce_scatter", out))

    h = torch.tensor([1.0 if ok else 0.0], device=dev)
    dist.all_reduce(h, op=dist.ReduceOp.MIN)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    big = torch.ones(64 << 20, device=dev)
    for _ in range(10):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / 10 * 1e3
    if rank == 0:
        for name, t in results:
            print("ops", name, digest(t))
        print(f"time_ms_allreduce_256MiB {ms:.3f}")
    if h.item() != 1.0:
        failed.value = 1
    dist.barrier()
    dist.destroy_process_group()


def ops():
    world = 2
    failed = mp.get_context("spawn").Value("i", 0)
    mp.spawn(ops_rank, args=(world, failed), nprocs=world, join=True)
    return failed.value == 0


def ddp():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    init(rank, world)
    dev = torch.device("cuda", rank)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    m = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1234 + rank)
    losses = []
    t0 = time.perf_counter()
    for step in range(20):
        x = torch.randn(32, 64, generator=g).to(dev)
        t = torch.randint(0, 10, (32,), generator=g).to(dev)
        loss = nn.functional.cross_entropy(m(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / 20 * 1e3
    all_losses = [torch.empty(20, device=dev) for _ in range(world)]
    dist.all_gather(all_losses, torch.stack(losses))
    weights = torch.cat([p.detach().flatten() for p in m.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    same = all(torch.equal(gathered[0], w) for w in gathered)
    if rank == 0:
        for r in range(world):
            print(f"ddp rank {r} losses", " ".join(float(v).hex() for v in all_losses[r].cpu()))
        print("ddp weights", digest(weights), " ".join(float(v).hex() for v in weights[:8].cpu()))
        print("ddp replicas equal", same)
        print(f"time_ms_per_step {ms:.3f}")
    dist.barrier()
    dist.destroy_process_group()
    return same


def share_child(tensors, answers):
    t = tensors.get(timeout=120)  # opened by CUDA IPC in this process
    answers.put(("child read", digest(t), float(t.double().sum().item())))
    t.mul_(3).add_(1)  # seen by the parent, whose memory it is
    torch.cuda.synchronize()
    answers.put(("child wrote", digest(t), 0.0))
    tensors.get(timeout=120)  # the parent's word that it has read: its tensor goes with it


def share():
    ctx = mp.get_context("spawn")
    tensors, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=share_child, args=(tensors, answers))
    child.start()
    n = 1 << 20
    t = (torch.arange(n, dtype=torch.float32, device="cuda") % 977) * 0.5
    t.add_(1)  # queued on the parent's stream before the send: the child must see it
    tensors.put(t)
    ok = True
    for _ in range(2):
        what, dig, total = answers.get(timeout=120)
        print("share", what, dig, float(total).hex())
    want = ((torch.arange(n, dtype=torch.float32, device="cuda") % 977) * 0.5 + 1) * 3 + 1
    torch.cuda.synchronize()
    ok &= torch.equal(t, want)
    print("share parent reads", digest(t), "as expected" if ok else "NOT as expected")
    tensors.put(None)
    child.join(120)
    ok &= child.exitcode == 0
    return ok


def main():
    part = sys.argv[1] if len(sys.argv) > 1 else ""
    parts = {"single": single, "ops": ops, "ddp": ddp, "share": share}
    if part not in parts:
        sys.exit(__doc__)
    ok = parts[part]()
    if part != "ddp" or int(os.environ.get("RANK", "0")) == 0:
        print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
