#!/usr/bin/env python3
"""Measure what Rust cannot reach: whole Llama-shaped forwards and attention
kernels through PyTorch on NVIDIA GPUs, written as icsim's schema-1 rows.

    python3 tools/torch_forward.py forward   --model llama-3.1-70b --tp 2 --prompt 8192 --batch 1 --out m/forward.jsonl
    python3 tools/torch_forward.py attention --model llama-3.1-70b --tp 1,2,4,8 --out m/attention.jsonl
    python3 tools/torch_forward.py forward   ... --profile        # also which kernels PyTorch launches a layer
    python3 tools/torch_forward.py caller    --out m/caller.jsonl   # what PyTorch adds to a collective call

`forward` follows the method of shared/calibration/h200x2-nvswitch/
llama70b-tp2-forward.jsonl: random bf16 weights, one layer's weights reused
by every layer (the same HBM traffic), a KV cache per layer; per layer
rms_norm, fused QKV GEMM, SDPA (causal at prefill, GQA), O GEMM, allreduce,
residual add, rms_norm, gate/up GEMM, silu*mul, down GEMM, allreduce,
residual add, and at decode the copy of the new K and V into the cache (no
rotary, embedding, final norm or LM head: `scope: layers`). The prefill is
launched eagerly and timed with CUDA events, median of 3 passes; the decode
step is captured in a CUDA graph and replayed, mean of 20. Allreduces go
through torch.distributed (NCCL), one process a GPU, with
NCCL_NVLS_ENABLE=0; each transport is its own run: `nvswitch` (NCCL's
default over NVLink), `shm` (NCCL_P2P_DISABLE=1), `none` (the allreduces
skipped). Rows: `op: llm_forward`, `phase` prefill or decode_step.

`attention` times torch's scaled_dot_product_attention at the heads one GPU
holds: prefill (one sequence, causal) and decode (a batch of one token a
sequence over a KV cache), each call in a CUDA graph of back-to-back calls,
KV caches cycled so that every call reads its cache from HBM. Rows:
`op: kernel`, `kernel: attention`.

`--profile` adds, for one prefill and one decode step, every CUDA kernel
the profiler saw with its calls a layer and mean time (`op: kernel_trace`):
which kernels PyTorch really runs, to compare with the LLM file's `torch`
fusion.

`caller` measures what PyTorch itself adds to a collective call, on one
GPU: torch.distributed at one rank, where NCCL's call is a copy on the GPU
(out of place: all_gather_into_tensor, reduce_scatter_tensor). Raw NCCL's
one-rank copy in a CUDA graph is 0.85-0.91 us (models/hardware/measurements/
h200-device-1gpu/); what a torch call takes beyond it is PyTorch's cost per
call. Each call of 8 B to 2 KiB is timed as in the shared torch file: 20
calls captured in a CUDA graph, mean of 20 replays (`stack: torch-graph`,
`ranks: 1`). It also prints, not as rows, an in-place all_reduce in a graph
(NCCL launches nothing) and the host's time of calls launched back to back
from Python.

Needs PyTorch with CUDA; model shapes come from models/llm/NAME.toml.
"""
import argparse
import json
import os
import statistics
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def model_shape(name):
    path = Path(name) if name.endswith(".toml") else ROOT / "models" / "llm" / f"{name}.toml"
    if not path.is_file():
        sys.exit(f"error: --model {name}: no {path}; use a shipped model (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b) or a .toml file")
    with open(path, "rb") as f:
        shape = tomllib.load(f)
    shape["label"] = name
    return shape


def split(shape, tp):
    heads, kv_heads, ffn = shape["heads"], shape["kv_heads"], shape["ffn"]
    if heads % tp or ffn % tp:
        sys.exit(f"error: --tp {tp}: {shape['name']} has {heads} heads and {ffn} FFN columns; TP must divide both")
    return heads // tp, max(kv_heads // tp, 1), ffn // tp


def base_row(args, shape, tp, gpu):
    return {"schema": 1, "system": args.system, "model": shape["label"], "tp": tp, "gpu": gpu}


class Forward:
    """One GPU's share of the model: one layer's weights, a KV cache per layer."""

    def __init__(self, torch, shape, tp, batch, cache_len, device, communicate, group):
        self.torch, self.F = torch, torch.nn.functional
        self.h = shape["hidden"]
        self.layers = shape["layers"]
        self.d = self.h // shape["heads"]
        self.qh, self.kvh, self.f = split(shape, tp)
        self.communicate, self.group = communicate and tp > 1, group
        bf16 = torch.bfloat16
        scale = 0.02

        def weight(*size):
            return torch.randn(*size, device=device, dtype=bf16) * scale

        self.w_qkv = weight((self.qh + 2 * self.kvh) * self.d, self.h)
        self.w_o = weight(self.h, self.qh * self.d)
        self.w_gate_up = weight(2 * self.f, self.h)
        self.w_down = weight(self.h, self.f)
        self.norm_1 = torch.ones(self.h, device=device, dtype=bf16)
        self.norm_2 = torch.ones(self.h, device=device, dtype=bf16)
        self.cache = [
            (
                torch.randn(batch, self.kvh, cache_len, self.d, device=device, dtype=bf16) * scale,
                torch.randn(batch, self.kvh, cache_len, self.d, device=device, dtype=bf16) * scale,
            )
            for _ in range(self.layers)
        ]

    def allreduce(self, x):
        if self.communicate:
            self.torch.distributed.all_reduce(x, group=self.group)
        return x

    def layer(self, x, index, position):
        """One decoder layer over x [batch, tokens, hidden]; `position` is
        where a decode step's token goes in the cache (None at prefill)."""
        F = self.F
        b, s, _ = x.shape
        h = F.rms_norm(x, (self.h,), self.norm_1, 1e-5)
        qkv = F.linear(h, self.w_qkv)
        q, k, v = qkv.split([self.qh * self.d, self.kvh * self.d, self.kvh * self.d], dim=-1)
        q = q.view(b, s, self.qh, self.d).transpose(1, 2)
        k = k.view(b, s, self.kvh, self.d).transpose(1, 2)
        v = v.view(b, s, self.kvh, self.d).transpose(1, 2)
        if position is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k_cache, v_cache = self.cache[index]
            k_cache[:, :, position : position + 1] = k
            v_cache[:, :, position : position + 1] = v
            o = F.scaled_dot_product_attention(q, k_cache[:, :, : position + 1], v_cache[:, :, : position + 1], enable_gqa=True)
        o = o.transpose(1, 2).reshape(b, s, self.qh * self.d)
        x = x + self.allreduce(F.linear(o, self.w_o))
        h = F.rms_norm(x, (self.h,), self.norm_2, 1e-5)
        gate, up = F.linear(h, self.w_gate_up).chunk(2, dim=-1)
        x = x + self.allreduce(F.linear(F.silu(gate) * up, self.w_down))
        return x

    def __call__(self, x, position=None):
        for index in range(self.layers):
            x = self.layer(x, index, position)
        return x


def cuda_torch():
    """PyTorch, with a CUDA GPU it can see; else the tool stops saying
    which is missing."""
    try:
        import torch
    except ImportError:
        sys.exit("error: PyTorch is not installed (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA GPU is visible to PyTorch")
    return torch


def cuda_time_ms(torch, run):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def captured(torch, run):
    """`run` once on a side stream (as CUDA graph capture wants its work
    warmed up), then captured in a CUDA graph, replayed once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    graph.replay()
    return graph


def kernel_totals(torch, run):
    """Every CUDA kernel one call of `run` launched, as [(name, (calls,
    total us))], the longest in total first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            calls, total = kernels.get(event.name, (0, 0.0))
            kernels[event.name] = (calls + 1, total + event.time_range.elapsed_us())
    return sorted(kernels.items(), key=lambda kv: -kv[1][1])


def profile_rows(torch, run, layers, common):
    """Every CUDA kernel one call of `run` launched: calls a layer, mean us."""
    rows = []
    for name, (calls, total_us) in kernel_totals(torch, run):
        row = dict(common, op="kernel_trace", kernel=name[:200], calls=calls, calls_per_layer=round(calls / layers, 3))
        row.update(time_us=round(total_us / calls, 3), total_us=round(total_us, 3))
        rows.append(row)
    return rows


def forward_worker(rank, args, shape, tp, transport, queue):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if transport == "shm":
        os.environ["NCCL_P2P_DISABLE"] = "1"
    import torch

    torch.cuda.set_device(rank)
    group = None
    if tp > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        torch.distributed.init_process_group("nccl", rank=rank, world_size=tp, device_id=torch.device("cuda", rank))
        group = torch.distributed.group.WORLD
    device = torch.device("cuda", rank)
    gpu = torch.cuda.get_device_name(rank)
    env = "NCCL_NVLS_ENABLE=0" + (" NCCL_P2P_DISABLE=1" if transport == "shm" else "")
    source = (
        f"torch {torch.__version__} bf16 on {tp}x {gpu}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} through torch.distributed, "
        "random weights; one layer's weights reused for all layers (same HBM traffic); per layer: rms_norm, fused qkv GEMM, "
        "rotary omitted, SDPA (causal at prefill, GQA), o GEMM, allreduce, residual add, rms_norm, gate_up GEMM, silu*mul, "
        "down GEMM, allreduce, residual add; at decode the K and V copies into the cache; no embedding, final norm or LM head"
    )
    rows = []
    for prompt in args.prompt:
        for batch in args.batch:
            kv_len = prompt
            need = 2 * shape["layers"] * batch * max(shape["kv_heads"] // tp, 1) * (kv_len + 1) * (shape["hidden"] // shape["heads"]) * 2
            free, _ = torch.cuda.mem_get_info(rank)
            if need > 0.6 * free:
                if rank == 0:
                    print(f"notice: prompt {prompt} batch {batch} at TP={tp}: a {need / 1e9:.1f} GB KV cache does not fit; skipped", file=sys.stderr)
                continue
            model = Forward(torch, shape, tp, batch, kv_len + 1, device, transport != "none", group)
            common = base_row(args, shape, tp, gpu)
            common.update(transport=transport, batch=batch, scope="layers", fusion="torch", env=env, source=source)
            with torch.no_grad():
                x = torch.randn(batch, prompt, shape["hidden"], device=device, dtype=torch.bfloat16)
                prefill = lambda: model(x)
                prefill()
                times = [cuda_time_ms(torch, prefill) for _ in range(3)]
                rows.append(
                    dict(common, op="llm_forward", phase="prefill", tokens=prompt, kv_len=None, time_ms=round(statistics.median(times), 3),
                         stack="torch-eager", timing="cuda events, median of 3 passes, launched eagerly from python")
                )
                token = torch.randn(batch, 1, shape["hidden"], device=device, dtype=torch.bfloat16)
                graph = captured(torch, lambda: model(token, kv_len))
                decode_ms = cuda_time_ms(torch, lambda: [graph.replay() for _ in range(20)]) / 20
                rows.append(
                    dict(common, op="llm_forward", phase="decode_step", tokens=1, kv_len=kv_len, time_ms=round(decode_ms, 3),
                         stack="torch-graph", timing="one decode step captured in a cuda graph, mean of 20 replays")
                )
                if args.profile:
                    trace = dict(common, tokens=prompt, phase="prefill", stack="torch-eager")
                    rows += profile_rows(torch, prefill, shape["layers"], trace)
                    trace = dict(common, tokens=1, kv_len=kv_len, phase="decode_step", stack="torch-graph")
                    rows += profile_rows(torch, graph.replay, shape["layers"], trace)
            del model, graph, x, token
            torch.cuda.empty_cache()
    if tp > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if rank == 0:
        queue.put(rows)


def run_forward(args):
    import torch
    import torch.multiprocessing as mp

    shape = model_shape(args.model)
    rows = []
    for tp in args.tp:
        split(shape, tp)
        if tp > torch.cuda.device_count():
            print(f"notice: TP={tp} needs {tp} GPUs, {torch.cuda.device_count()} visible; skipped", file=sys.stderr)
            continue
        for transport in args.transport:
            if tp == 1 and transport != "none":
                continue
            queue = mp.get_context("spawn").SimpleQueue()
            workers = mp.spawn(forward_worker, args=(args, shape, tp, transport, queue), nprocs=tp, join=False)
            # Read before joining: rank 0 blocks on a full pipe until then. A
            # worker that fails makes join raise its error.
            finished = False
            while queue.empty() and not finished:
                finished = workers.join(timeout=1)
            if queue.empty():
                sys.exit(f"error: the TP={tp} {transport} forward ended without results")
            rows += queue.get()
            while not workers.join():
                pass
            args.port += 1
    return rows


def run_attention(args):
    import torch

    F = torch.nn.functional
    shape = model_shape(args.model)
    device = torch.device("cuda", 0)
    gpu = torch.cuda.get_device_name(0)
    d = shape["hidden"] // shape["heads"]
    rows = []
    for tp in args.tp:
        qh, kvh, _ = split(shape, tp)
        cases = [(1, tokens, 0) for tokens in args.prompt] + [(batch, 1, kv) for batch in args.batch for kv in args.kv_len]
        for batch, tokens, context in cases:
            kv_bytes = 2 * batch * kvh * (context + tokens) * d * 2
            copies = max(1, -(-(256 << 20) // kv_bytes))
            if kv_bytes * copies > 0.5 * torch.cuda.mem_get_info(0)[0]:
                print(f"notice: attention of batch {batch} over {context + tokens} positions at TP={tp} does not fit; skipped", file=sys.stderr)
                continue
            q = torch.randn(batch, qh, tokens, d, device=device, dtype=torch.bfloat16)
            kv = [
                (torch.randn(batch, kvh, context + tokens, d, device=device, dtype=torch.bfloat16),
                 torch.randn(batch, kvh, context + tokens, d, device=device, dtype=torch.bfloat16))
                for _ in range(copies)
            ]
            causal = context == 0

            def call(i):
                k, v = kv[i % copies]
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

            call(0)
            estimate = cuda_time_ms(torch, lambda: call(0)) * 1000.0
            calls = int(min(100, max(2, args.kernel_time_us / 10 / max(estimate, 1.0))))
            graph = captured(torch, lambda: [call(i) for i in range(calls)])
            replays = int(min(20, max(1, args.kernel_time_us / (calls * max(estimate, 1.0)))))
            total_ms = cuda_time_ms(torch, lambda: [graph.replay() for _ in range(replays)])
            row = base_row(args, shape, tp, gpu)
            row.update(op="kernel", kernel="attention", tokens=tokens, batch=batch, kv_len=context, dtype="bfloat16",
                       time_us=round(total_ms * 1000.0 / (calls * replays), 3), stack="torch-graph",
                       timing=f"CUDA graph of {calls} back-to-back calls, replayed {replays} times, CUDA events",
                       source=f"torch {torch.__version__} scaled_dot_product_attention (GQA{', causal' if causal else ''}), KV cycled over {copies} copies")
            rows.append(row)
            del q, kv, graph
    return rows


def run_caller(args):
    """PyTorch's own cost per collective call, at one rank (see the module's text)."""
    import torch

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    dist = torch.distributed
    gpu = torch.cuda.get_device_name(0)
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    calls, replays = 20, 20

    def in_graph_us(call):
        graph = captured(torch, lambda: [call() for _ in range(calls)])
        for _ in range(2):
            graph.replay()
        return cuda_time_ms(torch, lambda: [graph.replay() for _ in range(replays)]) * 1000.0 / (calls * replays)

    def eager_us(call):
        return statistics.median(cuda_time_ms(torch, lambda: [call() for _ in range(calls)]) for _ in range(replays)) * 1000.0 / calls

    rows = []
    for size in (8, 32, 128, 512, 2048):
        src = torch.ones(size // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        collectives = {"allgather": lambda: dist.all_gather_into_tensor(dst, src), "reducescatter": lambda: dist.reduce_scatter_tensor(dst, src)}
        for op, call in collectives.items():
            rows.append({"schema": 1, "system": args.system, "op": op, "bytes": size, "dtype": "float32", "ranks": 1, "transport": "auto",
                         "algo": "auto", "proto": "auto", "time_us": round(in_graph_us(call), 3), "stack": "torch-graph",
                         "timing": f"cuda graph of {calls} calls, cuda events, mean of {replays} replays after 3 warm-up",
                         "source": f"torch {torch.__version__} on 1x {gpu}, NCCL {nccl} through torch.distributed at one rank",
                         "env": "NCCL_NVLS_ENABLE=0", "note": "out of place: NCCL copies on the GPU at one rank"})
        # Not rows: icsim models neither a call NCCL skips (in place at one
        # rank) nor the host's time of eager calls apart from the GPU's.
        print(f"{size:>5} B: in place all_reduce in a graph {in_graph_us(lambda: dist.all_reduce(src)):.2f} us (NCCL launches nothing); "
              f"from python, back to back: all_reduce {eager_us(lambda: dist.all_reduce(src)):.1f} us, "
              f"all_gather_into_tensor {eager_us(collectives['allgather']):.1f} us, copy_ {eager_us(lambda: dst.copy_(src)):.1f} us")
    dist.destroy_process_group()
    return rows


def integers(text):
    return [int(value) for value in text.split(",") if value]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("what", choices=["forward", "attention", "caller"])
    parser.add_argument("--model", default="llama-3.1-70b", help="a shipped LLM or a models/llm .toml file")
    parser.add_argument("--tp", type=integers, default=[1], help="TP degrees, e.g. 1,2,4 (forward: one process a GPU)")
    parser.add_argument("--prompt", type=integers, default=[8192], help="prompt tokens (forward: the KV length of the decode step too)")
    parser.add_argument("--batch", type=integers, default=[1], help="sequences (forward) or decode batches (attention)")
    parser.add_argument("--kv-len", type=integers, default=[1024, 8192, 32768], help="attention: KV lengths of the decode cases")
    parser.add_argument("--transport", type=lambda t: t.split(","), default=["none", "nvswitch", "shm"], help="forward: none, nvswitch, shm")
    parser.add_argument("--profile", action="store_true", help="forward: also every kernel of one prefill and one decode step")
    parser.add_argument("--kernel-time-us", type=float, default=25000.0, help="attention: about how long each case is timed")
    parser.add_argument("--system", default=os.uname().nodename, help="the rows' `system`")
    parser.add_argument("--port", type=int, default=29533, help="forward and caller: torch.distributed's port")
    parser.add_argument("--out", required=True, help="JSON Lines file the rows are appended to")
    args = parser.parse_args()
    for name in ("tp", "prompt", "batch"):
        if not getattr(args, name) or min(getattr(args, name)) < 1:
            sys.exit(f"error: --{name}: give positive integers")
    for transport in args.transport:
        if transport not in ("none", "nvswitch", "shm"):
            sys.exit(f"error: --transport {transport}: use none, nvswitch or shm")
    cuda_torch()
    rows = {"forward": run_forward, "attention": run_attention, "caller": run_caller}[args.what](args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
