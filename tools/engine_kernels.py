#!/usr/bin/env python3
"""The kernels of tools/serve_engine.py's iterations, each timed alone, so
that the hardware model can be fitted on them and the engine's profile and
serving runs stay out of sample.

    python3 tools/engine_kernels.py --out m/

Written to m/engine-kernels.jsonl, one row a measurement (`what` says which):
- `op`: one of the engine's eager ops at its shapes (Llama-3.1-8B, TP=1) over
  `rows` new tokens, as a CUDA graph of 20 back-to-back calls replayed 10
  times (CUDA events): the rotary's multiply, roll and addcmul, the KV cache
  writes (index_copy_), the copy of Q FlashAttention's varlen entry point
  makes, SiLU and the multiply on the gate/up halves, and FlashAttention-2's
  varlen kernel over one prompt of `rows` tokens (causal, no cache).
- `gemm_burst`: one product after 50 ms idle (the clock recovered), median
  of five; `gemm_stream`: 300 products back to back, the time of each, to
  show how the rate falls as matrix work goes on.
- `prompt_inputs`: the engine's forward over one 1024-token prompt (eager),
  its token ids all 1 as the engine feeds them or drawn at random: the GPU's
  time (CUDA events, mean of five) and its products' total under the
  profiler (products run faster on predictable operands).
- `duty`: the gate/up product at 1024 rows between device copies (memory
  bound) that take the rest of each cycle, at shares of products from 1.0
  to 0.4, for about 400 ms each after 300 ms idle: each product's time, to
  show how the clock follows the mix of work (`--only duty` runs this
  alone).
- `graph_gap`: the engine's decode graph at a batch size replayed 50 times
  back to back (no inputs built) and once under PyTorch's profiler: the
  GPU's time an iteration, its kernels' total and count.
- `decode_attention` (`--only decode`): FlashAttention-2's varlen kernel as
  a decode-only iteration calls it (one new token a sequence, each reading
  `context` cached tokens of its slot, `max_len` the slots' length) at
  1-128 sequences, timed as `op` is, with the kernel's name.
- `decode_graph` (`--only decode`): the engine's decode graph as a serving
  run replays it (inputs built and copied in, random token ids, the batch
  padded to the next captured size) at 1-64 sequences of one context, one
  iteration at a time with 0.5 ms idle between (as the host leaves it): the
  GPU's time an iteration (mean of 30) and every kernel kind's total under
  the profiler.
- `graph_launch` (`--only launch`): that replay of 8 sequences for models
  of 16, 32 and 64 of the shape's layers, with the kernels' total and
  count: how the wait before the first kernel grows with the graph.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_engine import DecodeGraphs, Model, Parallel, inputs  # noqa: E402
from torch_forward import captured, cuda_torch, kernel_totals, model_shape  # noqa: E402

ROWS = [1, 8, 64, 256, 1024, 2048, 4096]


def graph_time_us(torch, call, calls=20, replays=10):
    """Per call, from a CUDA graph of `calls` back-to-back calls."""

    def calls_in_a_row():
        for _ in range(calls):
            call()

    graph = captured(torch, calls_in_a_row)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (calls * replays)


def ops(torch, shape, rows, device):
    """The engine's eager ops over `rows` new tokens: name -> call."""
    F = torch.nn.functional
    bf16 = torch.bfloat16
    qh, kvh, h, f = shape["heads"], shape["kv_heads"], shape["hidden"], shape["ffn"]
    d = h // qh
    qkv = torch.randn(rows, (qh + 2 * kvh) * d, device=device, dtype=bf16)
    qk, v = qkv.split([(qh + kvh) * d, kvh * d], dim=-1)
    x = qk.view(rows, qh + kvh, d)
    cos = torch.randn(rows, 1, d, device=device, dtype=bf16)
    sin = torch.randn(rows, 1, d, device=device, dtype=bf16)
    rotated = torch.addcmul(x * cos, x.roll(d // 2, dims=-1), sin)
    q, k = rotated.split([qh, kvh], dim=1)
    cache = torch.zeros(rows + 4096, kvh, d, device=device, dtype=bf16)
    cache_rows = torch.arange(rows, device=device) + 4096
    gate_up = torch.randn(rows, 2 * f, device=device, dtype=bf16)
    gate, up = gate_up.chunk(2, dim=-1)
    silu = F.silu(gate)
    calls = {
        "rotary_mul": lambda: x * cos,
        "rotary_roll": lambda: x.roll(d // 2, dims=-1),
        "rotary_addcmul": lambda: torch.addcmul(rotated, rotated, sin),
        "kv_write": lambda: cache.index_copy_(0, cache_rows, k),
        "q_copy": lambda: q.contiguous(),
        "silu": lambda: F.silu(gate),
        "mul": lambda: silu * up,
    }
    if rows > 1:
        whole = torch.zeros(rows, kvh, d, device=device, dtype=bf16)
        cu = torch.tensor([0, rows], dtype=torch.int32, device=device)
        qc = q.contiguous()
        calls["flash_prefill"] = lambda: torch.ops.aten._flash_attention_forward(
            qc, whole, whole, cu, cu, rows, rows, 0.0, True, False)[0]
    return calls


def products(shape):
    h, f = shape["hidden"], shape["ffn"]
    d = h // shape["heads"]
    return {"gemm_qkv": ((shape["heads"] + 2 * shape["kv_heads"]) * d, h), "gemm_o": (h, h),
            "gemm_gate_up": (2 * f, h), "gemm_down": (h, f)}


def prompt_inputs(torch, model, device, max_len, write):
    """One 1024-token prompt's forward with repeated and with random token ids."""
    for ids in ("repeated", "random"):
        batch = inputs(torch, device, max_len, [(0, 0, 1024)], draw_from=model.vocab if ids == "random" else None)
        for _ in range(3):
            model.forward(batch)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            model.forward(batch)
        end.record()
        end.synchronize()
        kernels = kernel_totals(torch, lambda: model.forward(batch))
        products = sum(t for name, (_, t) in kernels if name.startswith("nvjet") or "gemm" in name.lower())
        write({"what": "prompt_inputs", "token_ids": ids, "rows": 1024, "iteration_us": round(start.elapsed_time(end) * 1e3 / 5, 2),
               "products_us": round(products, 2), "kernel_us": round(sum(t for _, (_, t) in kernels), 2)})


def duty_cycles(torch, shape, device, write):
    """Products between memory-bound copies, at several shares of products."""
    h, f = shape["hidden"], shape["ffn"]
    weight = torch.randn(2 * f, h, device=device, dtype=torch.bfloat16) * 0.02
    a = torch.randn(1024, h, device=device, dtype=torch.bfloat16)
    src = torch.randn(32 << 20, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def elapsed_us(call):
        call()
        torch.cuda.synchronize()
        start.record()
        for _ in range(20):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / 20

    product_us = elapsed_us(lambda: torch.nn.functional.linear(a, weight))
    copy_us = elapsed_us(lambda: dst.copy_(src))
    for share in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4):
        copies = round(product_us * (1 - share) / share / copy_us)
        cycles = int(400e3 / (product_us + copies * copy_us))
        events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * cycles)]
        torch.cuda.synchronize()
        time.sleep(0.3)
        for i in range(cycles):
            events[2 * i].record()
            torch.nn.functional.linear(a, weight)
            events[2 * i + 1].record()
            for _ in range(copies):
                dst.copy_(src)
        events[-1].synchronize()
        times = [round(events[2 * i].elapsed_time(events[2 * i + 1]) * 1e3, 2) for i in range(cycles)]
        cycle_us = events[0].elapsed_time(events[-1]) * 1e3 / cycles
        write({"what": "duty", "kernel": "gemm_gate_up", "m": 1024, "n": 2 * f, "k": h, "share": share, "copies": copies,
               "copy_us": round(copy_us, 2), "cycle_us": round(cycle_us, 2),
               "products_share": round(statistics.fmean(times) / cycle_us, 3), "times_us": times})


DECODE_BATCHES = [1, 2, 4, 8, 12, 13, 14, 16, 20, 24, 25, 28, 32, 40, 48, 64, 96, 128]


def decode_attention(torch, shape, device, write):
    """FlashAttention-2's varlen kernel over decodes alone, as the engine calls it."""
    qh, kvh, d = shape["heads"], shape["kv_heads"], shape["hidden"] // shape["heads"]
    for max_len, contexts in ((1152, (512, 1100)), (2304, (512, 1100, 2300)), (4608, (1100, 2300, 4500))):
        for context in contexts:
            for batch in DECODE_BATCHES:
                cache = torch.randn((batch + 1) * max_len, kvh, d, device=device, dtype=torch.bfloat16)
                q = torch.randn(batch, qh, d, device=device, dtype=torch.bfloat16)
                cu_q = torch.arange(batch + 1, dtype=torch.int32, device=device)
                cu_k = torch.arange(batch + 1, dtype=torch.int32, device=device) * max_len
                used = torch.full((batch,), context + 1, dtype=torch.int32, device=device)

                def call():
                    return torch.ops.aten._flash_attention_forward(q, cache, cache, cu_q, cu_k, 1, max_len, 0.0, True, False,
                                                                   seqused_k=used)[0]

                name = kernel_totals(torch, call)[0][0]
                write({"what": "decode_attention", "batch": batch, "context": context, "max_len": max_len,
                       "time_us": round(graph_time_us(torch, call), 3), "kernel": name[:120]})


def served_replay(torch, device, model, graphs, parts):
    """A decode graph replayed as a serving run replays it, each time after
    its inputs are built and 0.5 ms idle: the GPU's mean time a replay
    (CUDA events around copying the inputs in and replaying) and its
    kernels under the profiler."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(33):
        batch_inputs = graphs.inputs(model, parts)
        torch.cuda.synchronize()
        time.sleep(0.0005)
        start.record()
        graphs.run(batch_inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    kernels = kernel_totals(torch, lambda: graphs.run(graphs.inputs(model, parts)))
    return round(statistics.fmean(times[3:]), 2), kernels


def decode_graphs_served(torch, shape, device, write):
    """The engine's decode graph replayed as a serving run replays it."""
    for max_len, context in ((2304, 1100), (2304, 2200), (4608, 2400)):
        model = Model(torch, shape, 64, max_len, Parallel(torch, device=device))
        graphs = DecodeGraphs(torch, model, 64)
        for batch in (1, 8, 16, 24, 25, 32, 40, 48, 64):
            parts = [(slot, context + slot % 17, 1) for slot in range(batch)]
            iteration_us, kernels = served_replay(torch, device, model, graphs, parts)
            write({"what": "decode_graph", "batch": batch, "context": context, "max_len": max_len, "iteration_us": iteration_us,
                   "kernels": [[name[:120], calls, round(total, 2)] for name, (calls, total) in kernels]})
        del graphs, model
        torch.cuda.empty_cache()


def launch_by_layers(torch, shape, device, write):
    """The decode graph replayed as served (`decode_graph`) for models of
    16, 32 and 64 of the shape's layers: how the wait before its first
    kernel grows with the graph's kernels."""
    for layers in (16, 32, 64):
        model = Model(torch, dict(shape, layers=layers), 16, 2304, Parallel(torch, device=device))
        graphs = DecodeGraphs(torch, model, 16)
        parts = [(slot, 1100 + slot % 17, 1) for slot in range(8)]
        iteration_us, kernels = served_replay(torch, device, model, graphs, parts)
        write({"what": "graph_launch", "layers": layers, "batch": 8, "context": 1100, "max_len": 2304, "iteration_us": iteration_us,
               "kernel_us": round(sum(t for _, (_, t) in kernels), 2), "kernels": sum(c for _, (c, _) in kernels)})
        del graphs, model
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", choices=["duty", "decode", "launch"], help="one measurement alone, appended to the file")
    args = parser.parse_args()
    torch = cuda_torch()
    device = torch.device("cuda", 0)
    shape = model_shape(args.model)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    common = {"model": args.model, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with open(out_dir / "engine-kernels.jsonl", "a" if args.only else "w") as out, torch.no_grad():
        def write(row):
            out.write(json.dumps(dict(common, **row)) + "\n")
            out.flush()
            print(json.dumps(row)[:200], flush=True)

        if args.only == "duty":
            duty_cycles(torch, shape, device, write)
            return
        if args.only == "decode":
            decode_attention(torch, shape, device, write)
            decode_graphs_served(torch, shape, device, write)
            return
        if args.only == "launch":
            launch_by_layers(torch, shape, device, write)
            return

        for rows in ROWS:
            for name, call in ops(torch, shape, rows, device).items():
                write({"what": "op", "op": name, "rows": rows, "time_us": round(graph_time_us(torch, call), 3)})
        for name, (n, k) in products(shape).items():
            weight = torch.randn(n, k, device=device, dtype=torch.bfloat16) * 0.02
            for m in (128, 512, 1024, 2048, 4096):
                a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                torch.nn.functional.linear(a, weight)
                times = []
                for _ in range(5):
                    torch.cuda.synchronize()
                    time.sleep(0.05)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    torch.nn.functional.linear(a, weight)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end) * 1e3)
                write({"what": "gemm_burst", "kernel": name, "m": m, "n": n, "k": k, "time_us": round(statistics.median(times), 3)})
                if m in (1024, 4096) and name in ("gemm_gate_up", "gemm_qkv"):
                    torch.cuda.synchronize()
                    time.sleep(0.2)
                    events = [torch.cuda.Event(enable_timing=True) for _ in range(301)]
                    events[0].record()
                    for i in range(300):
                        torch.nn.functional.linear(a, weight)
                        events[i + 1].record()
                    events[-1].synchronize()
                    each = [round(events[i].elapsed_time(events[i + 1]) * 1e3, 2) for i in range(300)]
                    write({"what": "gemm_stream", "kernel": name, "m": m, "n": n, "k": k, "times_us": each})
        max_len = 1152
        model = Model(torch, shape, 64, max_len, Parallel(torch, device=device))
        graphs = DecodeGraphs(torch, model, 64)
        prompt_inputs(torch, model, device, max_len, write)
        for size in (1, 8, 32, 64):
            batch = graphs.inputs(model, [(slot, max_len - 64, 1) for slot in range(size)])
            graphs.run(batch)
            graph = graphs.graphs[size][0]
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                graph.replay()
            end.record()
            end.synchronize()
            kernels = kernel_totals(torch, graph.replay)
            write({"what": "graph_gap", "batch": size, "iteration_us": round(start.elapsed_time(end) * 1e3 / 50, 2),
                   "kernel_us": round(sum(t for _, (_, t) in kernels), 2), "kernels": sum(c for _, (c, _) in kernels)})
        duty_cycles(torch, shape, device, write)


if __name__ == "__main__":
    main()
