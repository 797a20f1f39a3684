#!/usr/bin/env python3
"""What PyTorch asks of the driver (issue 13): small runs of the workloads the issue
names, for the pass-through logger (scripts/driver-survey.sh) on a GPU host. Prints one
line per part with a checksum, so the same script can later compare native and remote.

usage: survey.py [PART...]   parts: resnet50 train18 fft sparse solve threads pinned gpt compiled
"""
import sys
import threading

import torch
import torch.nn as nn
import torchvision

torch.manual_seed(0)
dev = torch.device("cuda")


def resnet50():
    m = torchvision.models.resnet50(weights=None).half().to(dev).eval()
    x = torch.randn(1, 3, 224, 224, device=dev, dtype=torch.half)
    with torch.no_grad():
        for _ in range(3):
            y = m(x)
    torch.cuda.synchronize()
    return float(y.float().sum())


def train18():
    torch.backends.cudnn.benchmark = True
    m = torchvision.models.resnet18(weights=None).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(8, 3, 64, 64, device=dev)
    t = torch.randint(0, 1000, (8,), device=dev)
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(m(x), t)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    return float(loss)


def fft():
    a = torch.randn(4096, device=dev, dtype=torch.complex64)
    b = torch.randn(8, 256, 256, device=dev)
    return float(torch.fft.fft(a).abs().sum() + torch.fft.rfft2(b).abs().sum())


def sparse():
    i = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]], device=dev)
    s = torch.sparse_coo_tensor(i, torch.ones(4, device=dev), (4, 4)).to_sparse_csr()
    return float((s @ torch.randn(4, 16, device=dev)).sum())


def solve():
    a = torch.randn(64, 64, device=dev) + 64 * torch.eye(64, device=dev)
    return float(torch.linalg.solve(a, torch.randn(64, 8, device=dev)).sum())


def threads():
    out = [0.0] * 4
    ev = torch.cuda.Event()
    s0 = torch.cuda.Stream()

    def work(k):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            if k == 1:
                s.wait_event(ev)
            x = torch.randn(1024, 1024, device=dev)
            out[k] = float((x @ x).sum())

    with torch.cuda.stream(s0):
        torch.randn(8, device=dev)
        ev.record(s0)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(out)


def pinned():
    h = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    d = h.to(dev, non_blocking=True)
    back = torch.empty_like(h).pin_memory()
    back.copy_(d * 2, non_blocking=True)
    torch.cuda.synchronize()
    return float(back.sum())


def gpt():
    torch.backends.cuda.matmul.allow_tf32 = False
    layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True, norm_first=True)
    m = nn.Sequential(nn.Embedding(256, 128), nn.TransformerEncoder(layer, 2), nn.Linear(128, 256)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (8, 64), device=dev)
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(m(x[:, :-1]).flatten(0, 1).float(), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return float(loss)


def compiled():
    f = torch.compile(lambda a, b: torch.relu(a @ b + 1.0).sum(dim=1))
    a = torch.randn(64, 64, device=dev)
    return float(f(a, a).sum())


PARTS = {"resnet50": resnet50, "train18": train18, "fft": fft, "sparse": sparse, "solve": solve,
         "threads": threads, "pinned": pinned, "gpt": gpt, "compiled": compiled}
for name in sys.argv[1:] or PARTS:
    print(f"{name} {PARTS[name]():.6g}", flush=True)
