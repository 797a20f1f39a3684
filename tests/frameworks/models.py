#!/usr/bin/env python3
"""The framework programs of the GPU suite (issue 13), run natively and through Remora by
scripts/gpu-frameworks.sh, which compares their stdout with lines starting "time_" dropped.
Deterministic settings, so results print as exact hex and hashes: native and remote must match
bit for bit. Each part prints its results and a time_ line.

usage: models.py PART [ARGS]
  parts: fft conv resnet50 BATCH  resnet18_amp  gpt  compiled  threads  cudagraph [REPLAYS]
         linalg [magma|cusolver|default]  rnn
         mps_worker BATCH ITERS   (ResNet-50 fp16 inference for the sharing experiment)
"""
import hashlib
import os
import sys
import threading
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def timed(fn, reps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) / reps * 1e3


def fft():
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(1 << 16, device=dev, dtype=torch.complex64, generator=g)
    b = torch.randn(16, 256, 256, device=dev, generator=g)
    c = torch.randn(64, 1024, device=dev, dtype=torch.complex64, generator=g)
    print("fft c2c_1d", digest(torch.fft.fft(a)))
    print("fft r2c_2d", digest(torch.fft.rfft2(b)))
    print("fft batched", digest(torch.fft.ifft(torch.fft.fft(c, dim=1), dim=1)))
    _, ms = timed(lambda: torch.fft.rfft2(b), 50)
    print(f"time_ms_rfft2 {ms:.3f}")


def conv():
    g = torch.Generator(device=dev).manual_seed(2)
    x = torch.randn(8, 32, 56, 56, device=dev, generator=g, requires_grad=True)
    w = torch.randn(64, 32, 3, 3, device=dev, generator=g, requires_grad=True)
    y = nn.functional.conv2d(x, w, padding=1)
    y.backward(torch.ones_like(y))
    print("conv forward", digest(y))
    print("conv backward_data", digest(x.grad))
    print("conv backward_filter", digest(w.grad))
    _, ms = timed(lambda: nn.functional.conv2d(x, w, padding=1), 50)
    print(f"time_ms_conv {ms:.3f}")


def resnet50(batch):
    import torchvision
    m = torchvision.models.resnet50(weights=None).half().to(dev).eval()
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(batch, 3, 224, 224, device=dev, dtype=torch.half, generator=g)
    with torch.no_grad():
        y = m(x)
        print(f"resnet50 batch {batch}", digest(y))
        _, ms = timed(lambda: m(x), 20)
    print(f"time_ms_per_batch {ms:.3f}")
    print(f"time_images_per_s {batch / ms * 1e3:.1f}")


def resnet18_amp():
    import torchvision
    m = torchvision.models.resnet18(weights=None).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator(device=dev).manual_seed(4)
    x = torch.randn(16, 3, 64, 64, device=dev, generator=g)
    t = torch.randint(0, 1000, (16,), device=dev, generator=g)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(20):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(m(x), t)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        print("resnet18_amp step", step, float(loss).hex())
    torch.cuda.synchronize()
    print(f"time_ms_per_step {(time.perf_counter() - t0) / 20 * 1e3:.3f}")


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A GPT-style decoder: token and position embeddings, causal self-attention blocks."""

    def __init__(self, vocab=512, d=256, heads=8, layers=4, ctx=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        n = idx.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def gpt(steps=20, pause_ms=0):
    """The GPT training step; STEPS and a pause after each (scripts/migrate-gpt.sh moves it)."""
    m = GPT().to(dev)
    print("gpt parameters", sum(p.numel() for p in m.parameters()))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    g = torch.Generator(device=dev).manual_seed(5)
    data = torch.randint(0, 512, (16, 129), device=dev, generator=g)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(steps):
        logits = m(data[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("gpt step", step, float(loss).hex(), flush=bool(pause_ms))
        if pause_ms:
            time.sleep(pause_ms / 1e3)
    torch.cuda.synchronize()
    print(f"time_ms_per_step {(time.perf_counter() - t0) / steps * 1e3:.3f}")


def compiled():
    torch.use_deterministic_algorithms(False)
    f = torch.compile(lambda a, b: torch.relu(a @ b + 1.0).sum(dim=1))
    g = torch.Generator(device=dev).manual_seed(6)
    a = torch.randn(256, 256, device=dev, generator=g)
    print("compiled", digest(f(a, a)))
    _, ms = timed(lambda: f(a, a), 50)
    print(f"time_ms_compiled {ms:.3f}")


def threads():
    """Four threads, each on its own stream; thread k > 0 waits on an event thread k-1 records."""
    n = 4
    events = [torch.cuda.Event() for _ in range(n)]
    recorded = [threading.Event() for _ in range(n)]
    out = [None] * n

    def work(k):
        s = torch.cuda.Stream()
        g = torch.Generator(device=dev).manual_seed(10 + k)
        with torch.cuda.stream(s):
            x = torch.randn(512, 512, device=dev, generator=g)
            if k > 0:
                recorded[k - 1].wait(60)
                s.wait_event(events[k - 1])
                x = x + out[k - 1]
            for _ in range(20):
                x = torch.tanh(x @ x / 512)
            out[k] = x
            events[k].record(s)
            recorded[k].set()
        s.synchronize()

    ts = [threading.Thread(target=work, args=(k,)) for k in reversed(range(n))]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k in range(n):
        print("threads", k, digest(out[k]))
    print(f"time_ms_threads {(time.perf_counter() - t0) * 1e3:.1f}")


def cudagraph(replays=20):
    """torch.cuda.graph: a small MLP's whole training step (forward, loss, backward, SGD step)
    captured once, as PyTorch's documentation does it (static inputs, warm-up on a side stream,
    gradients set to None before the capture), and replayed on new data copied into the static
    inputs. The same steps run uncaptured from the same start must give the same losses."""
    g = torch.Generator(device=dev).manual_seed(7)
    xs = torch.randn(replays, 64, 128, device=dev, generator=g)
    ts = torch.randint(0, 10, (replays, 64), device=dev, generator=g)
    warmups = 3

    def make():
        torch.manual_seed(8)
        m = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
        return m, torch.optim.SGD(m.parameters(), lr=0.1)

    def step(m, opt, x, t):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(m(x), t)
        loss.backward()
        opt.step()
        return loss

    # Captured: warm up on a side stream, capture one step, replay it on each batch.
    m, opt = make()
    static_x, static_t = xs[0].clone(), ts[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm = [step(m, opt, static_x, static_t).detach().clone() for _ in range(warmups)]
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = nn.functional.cross_entropy(m(static_x), static_t)
        static_loss.backward()
        opt.step()
    captured = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(replays):
        static_x.copy_(xs[i])
        static_t.copy_(ts[i])
        graph.replay()
        captured.append(static_loss.detach().clone())
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / replays * 1e3

    # Uncaptured: the same warm-up and steps from the same initial weights.
    m2, opt2 = make()
    warm2 = [step(m2, opt2, xs[0], ts[0]).detach().clone() for _ in range(warmups)]
    plain = [step(m2, opt2, xs[i], ts[i]).detach().clone() for i in range(replays)]

    for i, loss in enumerate(torch.stack(warm).cpu().tolist()):
        print("cudagraph warmup", i, float(loss).hex())
    for i, loss in enumerate(torch.stack(captured).cpu().tolist()):
        print("cudagraph replay", i, float(loss).hex())
    print("cudagraph weights", digest(torch.cat([p.detach().flatten() for p in m.parameters()])))
    same_losses = torch.equal(torch.stack(warm + captured), torch.stack(warm2 + plain))
    same_weights = all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
    print("cudagraph captured_equals_uncaptured losses", same_losses, "weights", same_weights)
    print(f"time_ms_per_replay {ms:.3f}")


def linalg(library="default"):
    """torch.linalg on batches of matrices, through MAGMA or cuSOLVER (library: magma,
    cusolver or default): solve, cholesky, eigh, svd (not MAGMA's), qr, inv, det."""
    torch.use_deterministic_algorithms(False)  # eigh/svd have no deterministic flag; inputs are
    if library != "default":
        torch.backends.cuda.preferred_linalg_library(library)
    g = torch.Generator(device=dev).manual_seed(2)
    for batch, n in ((64, 8), (16, 32), (4, 128)):
        a = torch.randn(batch, n, n, device=dev, dtype=torch.float64, generator=g)
        spd = a @ a.mT + n * torch.eye(n, device=dev, dtype=torch.float64)
        b = torch.randn(batch, n, 3, device=dev, dtype=torch.float64, generator=g)
        x = torch.linalg.solve(a, b)
        print(library, batch, n, "solve residual_ok", bool((a @ x - b).abs().max() < 1e-8))
        c = torch.linalg.cholesky(spd)
        print(library, batch, n, "cholesky residual_ok", bool((c @ c.mT - spd).abs().max() < 1e-8 * n))
        w, v = torch.linalg.eigh(spd)
        print(library, batch, n, "eigh residual_ok", bool((spd @ v - v * w.unsqueeze(-2)).abs().max() < 1e-8 * n))
        if library != "magma":  # PyTorch 2.11's MAGMA svd gives wrong results natively (cuSOLVER's is right)
            u, sv, vh = torch.linalg.svd(a)
            print(library, batch, n, "svd residual_ok", bool((u @ torch.diag_embed(sv) @ vh - a).abs().max() < 1e-8 * n))
        q, r = torch.linalg.qr(a)
        print(library, batch, n, "qr residual_ok", bool((q @ r - a).abs().max() < 1e-8 * n))
        inv = torch.linalg.inv(a)
        eye = torch.eye(n, device=dev, dtype=torch.float64).expand(batch, n, n)
        print(library, batch, n, "inv residual_ok", bool((a @ inv - eye).abs().max() < 1e-6 * n))
        d = torch.linalg.det(spd)
        print(library, batch, n, "det positive", bool((d > 0).all()))
        print(library, batch, n, "digests", digest(x), digest(c), digest(q.abs()), digest(inv))
    torch.cuda.synchronize()


def rnn():
    """LSTM and GRU training through cuDNN's RNN path: a few steps each, losses and weights."""
    for kind in (nn.LSTM, nn.GRU):
        torch.manual_seed(5)
        m = kind(input_size=32, hidden_size=64, num_layers=2, batch_first=True).to(dev)
        head = nn.Linear(64, 8).to(dev)
        opt = torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.05)
        g = torch.Generator(device=dev).manual_seed(6)
        x = torch.randn(16, 20, 32, device=dev, generator=g)
        t = torch.randn(16, 8, device=dev, generator=g)
        losses = []
        for _ in range(5):
            out, _ = m(x)
            loss = nn.functional.mse_loss(head(out[:, -1]), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item().hex())
        name = kind.__name__.lower()
        print(name, "losses", " ".join(losses))
        print(name, "weights", digest(torch.cat([p.flatten() for p in m.parameters()])))
        _, ms = timed(lambda: m(x), 20)
        print(f"time_ms_{name}_forward {ms:.3f}")


def mps_worker(batch, iters):
    """ResNet-50 fp16 inference for the sharing experiment: prints images per second."""
    import torchvision
    torch.use_deterministic_algorithms(False)
    m = torchvision.models.resnet50(weights=None).half().to(dev).eval()
    x = torch.randn(batch, 3, 224, 224, device=dev, dtype=torch.half)
    with torch.no_grad():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        barrier = os.environ.get("MPS_BARRIER")
        if barrier:  # start together: say ready, then wait until the barrier file appears
            open(f"{barrier}.ready.{os.getpid()}", "w").close()
            while not os.path.exists(barrier):
                time.sleep(0.005)
        t0, c0, q0, v0 = time.perf_counter(), time.process_time(), _run_queue_ns(), _switches()
        for _ in range(iters):
            m(x)
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        queued, switches = _run_queue_ns() - q0, [b - a for a, b in zip(v0, _switches())]
    print(f"images_per_s {batch * iters / wall:.1f}")
    print(f"cpu_share {cpu / wall:.2f}")  # the process's CPU time over the timed loop's wall time
    # the main thread's time runnable but not running (Linux's schedstat), over the wall time,
    # and its context switches an image: voluntary (it slept) and not (it was preempted)
    print(f"run_queue_share {queued / 1e9 / wall:.2f}")
    print(f"switches_per_image {switches[0] / (batch * iters):.2f} {switches[1] / (batch * iters):.2f}")


def _run_queue_ns():
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except OSError:
        return 0


def _switches():
    v = [0, 0]
    try:
        with open("/proc/thread-self/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    v[0] = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    v[1] = int(line.split()[1])
    except OSError:
        pass
    return v


PARTS = {"fft": fft, "conv": conv, "linalg": linalg, "rnn": rnn, "resnet50": resnet50, "resnet18_amp": resnet18_amp, "gpt": gpt,
         "compiled": compiled, "threads": threads, "cudagraph": cudagraph, "mps_worker": mps_worker}
if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PARTS:
        sys.exit(__doc__)
    PARTS[sys.argv[1]](*(int(a) if a.isdigit() else a for a in sys.argv[2:]))
    sys.stdout.flush()
