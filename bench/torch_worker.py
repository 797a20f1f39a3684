#!/usr/bin/env python3
"""PyTorch steps for `remora bench --only torch` and scripts/roundtrips.sh: a launch-bound
training step of a small CNN, ResNet-50 inference and a GPT-style training step. Prints
key=value lines (bench/workers.h): ms_per_step, cpu_ms_per_step (the process's CPU time per
step, all its threads), and result_hex of the last step (native and
remote must agree bit for bit: deterministic settings). Exits 3 with unsupported=WHY where
PyTorch or a CUDA device is missing (the bench then skips its section).

usage: torch_worker.py PART [STEPS]     parts: cnn_train  cnn_train_loss  resnet50_b1  gpt_train
       torch_worker.py resnet50_share ITERS
resnet50_share is one client of the sharing section (many processes at once): ResNet-50 fp16
inference at batch 1, started with the others through the bench's gate (fd 3 written once
ready, fd 4 read to its end), ITERS inferences and one synchronize timed; prints
images_per_s.
With REMORA_STEP_MARKS set, writes "remora-steps begin N" and "remora-steps end" on stderr
around the timed steps, after warm-up (scripts/roundtrips.sh counts calls between them).
With REMORA_STATS a file's path (frontend/stats.h), prints what the client counted over the
timed steps, per step: round_trips_per_step, calls_per_step, bytes_sent_per_step,
bytes_received_per_step and sends_per_step (nothing natively, where no such file is written).
"""
import os
import struct
import sys
import time

# models.py (the framework programs' deterministic settings, and their GPT) is beside this
# file in the build tree, in tests/frameworks in the source tree.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests", "frameworks")]
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts, as models.py
try:
    import torch
    import torch.nn as nn
except ImportError as e:
    print(f"unsupported=no PyTorch ({e})")
    sys.exit(3)
if not torch.cuda.is_available():
    print("unsupported=PyTorch finds no CUDA device")
    sys.exit(3)
from models import GPT, dev  # noqa: E402  (seeds and deterministic settings on import)


def cnn_train():
    """Three convolutions (strided, no pooling: deterministic backward) and a linear layer on
    32x32 images, batch 32: launch-bound."""
    m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1),
                      nn.ReLU(), nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
                      nn.Linear(64 * 8 * 8, 10)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(32, 3, 32, 32, device=dev, generator=g)
    t = torch.randint(0, 10, (32,), device=dev, generator=g)

    def step():
        loss = nn.functional.cross_entropy(m(x), t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def cnn_train_loss():
    """The CNN's step, reading its loss every step (a training loop that logs it): one
    waiting round trip a step at least."""
    step = cnn_train()

    def step_reading_loss():
        loss = step()
        loss.item()
        return loss
    return step_reading_loss


def resnet50_b1():
    import torchvision
    m = torchvision.models.resnet50(weights=None).half().to(dev).eval()
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(1, 3, 224, 224, device=dev, dtype=torch.half, generator=g)

    def step():
        with torch.no_grad():
            return m(x).float().sum()
    return step


def gpt_train():
    m = GPT().to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    g = torch.Generator(device=dev).manual_seed(5)
    data = torch.randint(0, 512, (16, 129), device=dev, generator=g)

    def step():
        logits = m(data[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


PARTS = {"cnn_train": cnn_train, "cnn_train_loss": cnn_train_loss, "resnet50_b1": resnet50_b1,
         "gpt_train": gpt_train}


def client_counters():
    """The client library's counters (pid, calls, round trips, bytes sent, bytes received,
    sends) from REMORA_STATS's file, or None."""
    path = os.environ.get("REMORA_STATS", "")
    if not path or path == "1":
        return None
    try:
        with open(path.replace("%p", str(os.getpid())), "rb") as f:
            raw = f.read(56)
    except OSError:
        return None
    return struct.unpack("<6Q", raw[8:56]) if len(raw) == 56 and raw[:8] == b"RMSTATS2" else None


def resnet50_share(iters):
    step = resnet50_b1()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    try:  # the gate (bench/workers.h): ready, then wait until every client is
        os.write(3, b"r")
        while os.read(4, 1):
            pass
    except OSError:
        pass  # run alone, without the bench's gate
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    print(f"images_per_s={iters / (time.perf_counter() - t0):.2f}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "resnet50_share":
        resnet50_share(int(sys.argv[2]))
        return
    if len(sys.argv) < 2 or sys.argv[1] not in PARTS:
        sys.exit(__doc__)
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    step = PARTS[sys.argv[1]]()
    for _ in range(5):  # warm-up: cuDNN's choices, the caching allocator's pools, lazy loading
        step()
    torch.cuda.synchronize()
    marks = os.environ.get("REMORA_STEP_MARKS")
    if marks:
        os.write(2, f"remora-steps begin {steps}\n".encode())
    before = client_counters()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / steps * 1e3
    cpu_ms = (time.process_time() - cpu0) / steps * 1e3
    after = client_counters()
    if marks:
        os.write(2, b"remora-steps end\n")
    print(f"ms_per_step={ms:.4f}")
    print(f"cpu_ms_per_step={cpu_ms:.4f}")  # this process's CPU (all threads): near ms_per_step when CPU-bound
    print(f"result_hex={float(loss.detach()).hex()}")
    if before and after:  # the final synchronize's round trip is shared out over the steps
        for i, name in ((1, "calls"), (2, "round_trips"), (3, "bytes_sent"), (4, "bytes_received"), (5, "sends")):
            print(f"{name}_per_step={(after[i] - before[i]) / steps:.2f}")


if __name__ == "__main__":
    main()
