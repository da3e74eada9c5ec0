#!/usr/bin/python3
"""torch_peer.py: the PyTorch peer of `attnlab bench attention|prefill|train`.

Runs on the CPU in PyTorch 1.13 (Debian's python3-torch, for /usr/bin/python3),
with torch.set_num_threads(--threads, default 2):
  attention  causal softmax attention, B=1 H=12 T=1024 d_h=64, forward and
             backward: q k^T * scale, masked_fill(-inf), softmax, @ v (PyTorch
             1.13 has no fused CPU attention); backward by autograd;
  prefill    one no-grad forward over 512 tokens of the 12-layer, hidden-768
             Llama-style byte model below (attnlab's `gpt2` preset);
  train      one training step of that model at B=4 x T=256: forward,
             cross-entropy, backward, clip at 1.0, AdamW (0.9, 0.95, wd 0.1).
The model is attnlab's: byte vocabulary (256), embedding, 12 x [RMSNorm ->
q, k, v, o projections without biases, rotate-half RoPE (theta 10000), causal
softmax attention -> residual -> RMSNorm -> SwiGLU (2048) -> residual], final
RMSNorm, untied 256-way head; weights N(0, 0.02) (the timing does not depend
on them).

Each benchmark follows attnlab's method (docs/bench.md): one untimed warm-up,
the peak RSS, then --iters rounds of one torch.mm sgemm ceiling (2048^3, same
threads) followed by the timed run; the best of each is reported and the
ratio is best rate / best sgemm rate. FLOP counts are attnlab's, so rates
compare directly. Output: a text report, or with --json one JSON object per
benchmark (one line each) with the field names of `attnlab bench ... --json`.
peak_rss_bytes is the process's high-water mark after that benchmark's
warm-up (benchmarks run in the order attention, prefill, train, so each
includes the earlier ones' peak; run one with --bench for its own).

--bf16 runs the same work under torch.autocast("cpu", dtype=torch.bfloat16)
(the products in bf16 through oneDNN, what a PyTorch user would pick for
speed; the backward outside the autocast region, as autocast prescribes) and
reports "precision": "BF16" (else "F32"). Beside the sgemm ceiling every
benchmark measures, after its timed runs, the bf16 ceiling of the same run:
torch.mm in bf16 at --sgemm-n^3, which PyTorch runs on oneDNN
("bf16_onednn_gflops", and the ratios to it as "<ratio>_bf16_onednn", as
attnlab reports them); PyTorch has no AMX tile loop, so "amx_tile_gflops"
and the "<ratio>_amx_tile" fields are null.
"""
import contextlib
import argparse
import ctypes
import json
import math
import os
import resource
import sys
import time


def fix_openblas_kernels():
    """Debian's torch runs its matmuls on Debian's OpenBLAS 0.3.21, which
    falls back to its SSE3 "Prescott" kernels on CPUs newer than it knows
    (5-10x slower). attnlab picks the AVX-512 or AVX2 kernels itself
    (src/core/blas.c); do the same here, before torch loads the library, so
    the peer is not handicapped. A user's own OPENBLAS_CORETYPE wins."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return
    try:
        flags = open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split()
    except (OSError, IndexError):
        return
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq")):
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif "avx2" in flags and "fma" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


fix_openblas_kernels()
import torch  # noqa: E402 (after the OpenBLAS kernel choice)
import torch.nn.functional as F  # noqa: E402


def blas_kernels():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def loadavg():
    try:
        return round(os.getloadavg()[0], 3)
    except OSError:
        return -1.0


class SgemmProbe:
    """An n x n x n torch.mm ceiling, run once before each timed run; keeps the best, and the sum of the runs for
    the noise (attnlab's: mean time / best time - 1, docs/bench.md)."""

    def __init__(self, n):
        self.n = n
        idx = torch.arange(n * n, dtype=torch.int64)
        self.a = ((idx * 7) % 13).to(torch.float32).mul_(0.1).view(n, n)
        self.b = ((idx * 5) % 11).to(torch.float32).mul_(0.1).view(n, n)
        self.c = torch.empty(n, n)
        self.best, self.total, self.runs = float("inf"), 0.0, 0
        self.run()  # warm-up
        self.best, self.total, self.runs = float("inf"), 0.0, 0

    def run(self):
        t0 = time.perf_counter()
        torch.mm(self.a, self.b, out=self.c)
        dt = time.perf_counter() - t0
        self.best = min(self.best, dt)
        self.total, self.runs = self.total + dt, self.runs + 1

    def gflops(self):
        return 2.0 * self.n ** 3 / self.best / 1e9

    def noise(self):
        return self.total / self.runs / self.best - 1.0 if self.runs else 0.0


def timed(fn, iters, probe):
    """warm-up once (by the caller), then iters x (sgemm probe, fn); best and mean seconds"""
    ts = []
    for _ in range(iters):
        probe.run()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), sum(ts) / len(ts)


def bf16_mm_gflops(n, reps=2):
    """Best of `reps` n x n x n torch.mm in bf16 (oneDNN), GFLOP/s."""
    a = torch.full((n, n), 0.1, dtype=torch.bfloat16)
    b = torch.full((n, n), 0.2, dtype=torch.bfloat16)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def precision_ctx(args):
    """The region the products of a benchmark run in: autocast to bf16 with --bf16."""
    if args.bf16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def common(d, probe, iters, load_start, rss, args):
    """The fields every benchmark reports; ratio fields get their bf16-ceiling twins."""
    bf16 = bf16_mm_gflops(probe.n)
    for k in [k for k in d if k in ("fwd_ratio", "bwd_ratio", "ratio", "mfu")]:
        rate = d[{"fwd_ratio": "fwd_gflops_per_s", "bwd_ratio": "bwd_gflops_per_s"}.get(k, "model_gflops_per_s")]
        d[k + "_bf16_onednn"] = rate / bf16
        d[k + "_amx_tile"] = None
    d.update({
        "precision": "BF16" if args.bf16 else "F32",
        "bf16_engine": "onednn (torch.autocast)",
        "bf16_onednn_gflops": bf16,
        "amx_tile_gflops": None,
        "framework": "torch " + torch.__version__,
        "threads": torch.get_num_threads(),
        "blas_kernels": blas_kernels(),
        "iters": iters,
        "sgemm_n": probe.n,
        "sgemm_gflops": probe.gflops(),
        "noise": probe.noise(),
        "peak_rss_bytes": rss,
        "contend": 0,  # attnlab's --contend N: the peer runs no busy processes
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    })
    return d


# ---- attention ----

def attention(q, k, v, scale, mask):
    """q, k, v [B, H, T, d] -> o [B, H, T, d]: causal softmax attention"""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def bench_attention(args):
    load_start = loadavg()
    B, H, T, dh = 1, 12, args.context, 64
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, T, dh, generator=g, requires_grad=True)
    k = torch.randn(B, H, T, dh, generator=g, requires_grad=True)
    v = torch.randn(B, H, T, dh, generator=g, requires_grad=True)
    do = torch.randn(B, H, T, dh, generator=g)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scale = 1.0 / math.sqrt(dh)
    state = {}

    def fwd():
        with torch.no_grad(), precision_ctx(args):
            state["o"] = attention(q, k, v, scale, mask)

    def fwd_bwd_graph():
        with precision_ctx(args):
            state["og"] = attention(q, k, v, scale, mask)

    def bwd():
        q.grad = k.grad = v.grad = None
        state["og"].backward(do)

    fwd()
    fwd_bwd_graph()
    bwd()
    rss = peak_rss_bytes()
    probe = SgemmProbe(args.sgemm_n)
    best_f, _ = timed(fwd, args.iters, probe)
    # backward alone: build the graph untimed, time .backward()
    best_b = float("inf")
    for _ in range(args.iters):
        fwd_bwd_graph()
        probe.run()
        t0 = time.perf_counter()
        bwd()
        best_b = min(best_b, time.perf_counter() - t0)
    t_eff = (T + 1) / 2.0
    fwd_flops = 4.0 * B * H * T * t_eff * dh
    bwd_flops = 2.5 * fwd_flops
    gf, gb = fwd_flops / best_f / 1e9, bwd_flops / best_b / 1e9
    sg = probe.gflops()
    return common({
        "bench": "attention", "score": "softmax", "batch": B, "heads": H, "kv_heads": H, "context": T,
        "head_dim": dh, "causal": True, "fwd_ms": 1e3 * best_f, "bwd_ms": 1e3 * best_b,
        "fwd_gflops": fwd_flops / 1e9, "bwd_gflops": bwd_flops / 1e9, "fwd_gflops_per_s": gf,
        "bwd_gflops_per_s": gb, "fwd_ratio": gf / sg, "bwd_ratio": gb / sg,
    }, probe, args.iters, load_start, rss, args)


# ---- the model ----

class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, dh, theta=10000.0):
    inv = theta ** (-torch.arange(0, dh // 2, dtype=torch.float64) * 2.0 / dh)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):
    """rotate-half: pair i with i + d/2; x [B, H, T, d]"""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, H, ffn):
        super().__init__()
        self.H, self.dh = H, d // H
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, d, bias=False)
        self.v = torch.nn.Linear(d, d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, ffn, bias=False)
        self.up = torch.nn.Linear(d, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, d = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.H, self.dh).transpose(1, 2)
        k = self.k(h).view(B, T, self.H, self.dh).transpose(1, 2)
        v = self.v(h).view(B, T, self.H, self.dh).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = attention(q, k, v, 1.0 / math.sqrt(self.dh), mask)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, layers=12, d=768, H=12, ffn=2048, vocab=256):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList([Block(d, H, ffn) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.dh, self.layers, self.H = d // H, layers, H
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        T = tokens.shape[1]
        cos, sin = rope_tables(T, self.dh)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.head(self.norm(x))

    def fwd_flops_per_token(self, T):
        """attnlab's count: 2 x parameters without the embedding + causal attention"""
        n = sum(p.numel() for p in self.parameters()) - self.embed.weight.numel()
        return 2.0 * n + self.layers * self.H * (2 * self.dh) * T


def bench_prefill(args):
    load_start = loadavg()
    torch.manual_seed(1)
    m = Model()
    T = args.tokens
    tokens = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(4))

    def fwd():
        with torch.no_grad(), precision_ctx(args):
            m(tokens)

    fwd()
    rss = peak_rss_bytes()
    probe = SgemmProbe(args.sgemm_n)
    best, mean = timed(fwd, args.iters, probe)
    flops = m.fwd_flops_per_token(T) * T
    gf = flops / best / 1e9
    return common({
        "bench": "prefill", "attention": "mha", "layers": 12, "hidden": 768, "heads": 12, "kv_heads": 12,
        "tokens": T, "ms_best": 1e3 * best, "ms_mean": 1e3 * mean, "tokens_per_s": T / best,
        "model_gflops": flops / 1e9, "model_gflops_per_s": gf, "ratio": gf / probe.gflops(), "weights": "F32",
    }, probe, args.iters, load_start, rss, args)


def bench_train(args):
    load_start = loadavg()
    torch.manual_seed(1)
    m = Model()
    B, T = args.batch, args.context
    decay = [p for p in m.parameters() if p.dim() == 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (B, T), generator=g)
    y = torch.randint(0, 256, (B, T), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with precision_ctx(args):
            loss = F.cross_entropy(m(x).view(-1, 256).float(), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    step()
    step()
    rss = peak_rss_bytes()
    probe = SgemmProbe(args.sgemm_n)
    best, mean = timed(step, args.iters, probe)
    flops = 3.0 * m.fwd_flops_per_token(T) * B * T
    gf = flops / best / 1e9
    return common({
        "bench": "train", "attention": "mha", "layers": 12, "hidden": 768, "heads": 12, "kv_heads": 12,
        "head_dim": 64, "batch": B, "context": T, "step_s_best": best, "step_s": mean, "tokens_per_s": B * T / best,
        "model_gflops_per_step": flops / 1e9, "model_gflops_per_s": gf, "mfu": gf / probe.gflops(),
        "mfu_mean": flops / mean / 1e9 / probe.gflops(),
    }, probe, args.iters, load_start, rss, args)


def text(r):
    b = r["bench"]
    if b == "attention":
        print("attention (softmax, causal): B=%d H=%d T=%d d_h=%d [%s]" % (r["batch"], r["heads"], r["context"],
                                                                          r["head_dim"], r["framework"]))
        print("  forward  %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm" % (r["fwd_ms"], r["fwd_gflops_per_s"],
                                                                       100 * r["fwd_ratio"]))
        print("  backward %8.2f ms  %7.1f GFLOP/s  %5.1f%% of sgemm" % (r["bwd_ms"], r["bwd_gflops_per_s"],
                                                                       100 * r["bwd_ratio"]))
    elif b == "prefill":
        print("prefill: 12 layers, hidden 768, %d tokens [%s]" % (r["tokens"], r["framework"]))
        print("  %.1f ms best (mean %.1f), %.0f tokens/s, %.1f model GFLOP/s -> %.1f%% of sgemm" % (
            r["ms_best"], r["ms_mean"], r["tokens_per_s"], r["model_gflops_per_s"], 100 * r["ratio"]))
    else:
        print("train step: 12 layers, hidden 768, B=%d x T=%d [%s]" % (r["batch"], r["context"], r["framework"]))
        print("  %.1f ms/step best (mean %.1f), %.0f tokens/s, %.1f model GFLOP/s -> MFU %.1f%% of sgemm" % (
            1e3 * r["step_s_best"], 1e3 * r["step_s"], r["tokens_per_s"], r["model_gflops_per_s"], 100 * r["mfu"]))
    print("  precision %s; bf16 ceiling: torch.mm bf16 (oneDNN) %.1f GFLOP/s (n=%d)" % (
        r["precision"], r["bf16_onednn_gflops"], r["sgemm_n"]))
    print("  sgemm %.1f GFLOP/s (torch.mm n=%d, same run, OpenBLAS %s kernels; their mean %.0f%% slower: the "
          "machine's noise); peak RSS %.1f MB; load average "
          "%.2f -> %.2f on %d threads" % (r["sgemm_gflops"], r["sgemm_n"], r["blas_kernels"], 100 * r["noise"],
                                          r["peak_rss_bytes"] / 1048576.0, r["loadavg_start"], r["loadavg_end"],
                                          r["threads"]))
    sys.stdout.flush()


def rounded(r):
    return {k: (float("%.6g" % v) if isinstance(v, float) else v) for k, v in r.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="all", choices=["all", "attention", "prefill", "train"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3, help="timed rounds per benchmark (best counts)")
    ap.add_argument("--context", type=int, default=None,
                    help="attention: T (default 1024); train: T (default 256)")
    ap.add_argument("--batch", type=int, default=4, help="train: B")
    ap.add_argument("--tokens", type=int, default=512, help="prefill: prompt length")
    ap.add_argument("--sgemm-n", type=int, default=2048)
    ap.add_argument("--json", action="store_true", help="one JSON object per benchmark, one line each")
    ap.add_argument("--bf16", action="store_true",
                    help='the products under torch.autocast("cpu", dtype=torch.bfloat16) ("precision": "BF16")')
    args = ap.parse_args()
    if args.threads < 1 or args.iters < 1:
        print("torch_peer.py: --threads and --iters must be positive", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    todo = ["attention", "prefill", "train"] if args.bench == "all" else [args.bench]
    for b in todo:
        a = argparse.Namespace(**vars(args))
        if a.context is None:
            a.context = 1024 if b == "attention" else 256
        r = rounded({"attention": bench_attention, "prefill": bench_prefill, "train": bench_train}[b](a))
        if args.json:
            print(json.dumps(r, separators=(",", ":")))
            sys.stdout.flush()
        else:
            text(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
