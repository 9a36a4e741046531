#!/usr/bin/env python3
"""A continuously batched serving engine of our own, to measure what
`icsim serve` predicts: requests arrive in real time at a rate, a scheduler
with the rules of icsim's (src/serve/scheduler.rs, vLLM V1's) batches them,
and each iteration runs a Llama-shaped forward with random bf16 weights on
one GPU, or tensor-parallel over several (--tp, one process a GPU, NCCL
through torch.distributed).

    python3 tools/serve_engine.py --model llama-3.1-8b --rates 5,10,20 --requests 300 --out m/
    NCCL_NVLS_ENABLE=0 python3 tools/serve_engine.py --model llama-3.1-70b --tp 4 --rates 1,2 --out m/
    NCCL_P2P_DISABLE=1 ... --tp 4 ...          # the same through host memory (SHM)
    python3 tools/serve_engine.py --tp 2 --dist-backend gloo --check --out m/   # sharding, on one GPU
    python3 tools/serve_engine.py --rates 1000 --max-concurrency 16 --out m/     # clients capped, as vllm bench serve

The scheduler, per iteration: a budget of --max-num-batched-tokens tokens,
taken first by the running sequences in the order they started (a decode's
one token, or the next chunk of a prompt), then by waiting requests in
arrival order while fewer than --max-num-seqs run (a prompt longer than what
is left is cut into chunks). KV blocks of --block-size tokens are counted
against the capacity icsim computes (0.9 of the GPU's memory less the
weights); the runs here never fill it, and the engine stops with an error if
one would (it does not preempt). A sequence samples a token at the end of
the iteration that computed its last known token. Iterations start back to
back; an idle engine waits for the next arrival. With --max-concurrency N
the clients keep at most N requests in flight, as `vllm bench serve
--max-concurrency` does: one arriving while N are in flight is sent when one
of them finishes, and its latency counts from then (`icsim serve
--max-concurrency`).

The forward, per iteration, over the packed tokens of every scheduled
sequence: embedding gather; per layer rms_norm, fused QKV GEMM, rotary on q
and k together (three PyTorch ops: x * cos + roll(x) * sin), the new K and V written into the cache, one varlen
flash attention over every sequence (FlashAttention-2 through
torch.ops.aten._flash_attention_forward: causal, bottom-right aligned, so a
prompt chunk attends to the sequence's cached tokens and to itself; each
sequence reads only its own cached tokens via seqused_k), O GEMM, residual
add, rms_norm, gate/up GEMM, silu, mul, down GEMM, residual add; then a
final rms_norm, the LM head GEMM at every sequence's last position and an
argmax (as vLLM computes logits for every scheduled sequence). One layer's
weights serve every layer (the same HBM traffic; as tools/torch_forward.py).
The KV cache has a slot of --max-len tokens per running sequence, not pages:
what attention reads is the same. Iterations of decodes only are replayed
from CUDA graphs captured per batch size (padded up to the next captured
size, as vLLM pads), every other iteration runs eagerly from Python.

At TP=N each GPU holds what vLLM's tensor parallelism gives it: 1/N of the
query heads and of the FFN's columns, its KV heads (each head on N/K
neighbours where the K heads are fewer), and 1/N of the vocabulary's
embedding and LM-head rows; the shards are slices of the same full weights
a TP=1 run draws (--seed). A pass allreduces the embedding's lookup once
and each layer's O and down projections' outputs, and gathers the LM
head's logits (all_gather) before the argmax: the collectives icsim's
forward charges. Rank 0 schedules and sends each iteration's sequences to
the others (a gloo group on the host, timed in its host time), and every
rank runs the same forward. --check compares the sharded forward's logits
with the TP=1 forward of the same weights on a prompt, decodes and a mixed
batch. With --dist-backend gloo every rank runs on GPU 0 and every
iteration eagerly (gloo cannot be captured in CUDA graphs): for --check,
and for trying a TP run's lockstep on one GPU, whose times mean nothing.

What is written (--out DIR):
- requests.jsonl: one row a request: rate, arrival, when it was sent (its
  arrival, unless the clients' cap held it), prompt and output tokens, the
  time of each output token (seconds from the run's start).
- iterations.jsonl: one row an iteration: rate, start and end (s), rows,
  sequences, decodes, cached tokens, each sequence's new and cached tokens
  (`parts`), whether a graph ran, the GPU's time (CUDA events) and the
  host's time before launch (scheduling, inputs).
- runs.jsonl: one row a rate: the settings, the engine's versions, and the
  measured summary (TTFT, TPOT, E2E percentiles, throughput).
- profile.jsonl (--profile): every kernel of a few iterations and their times.
- check.jsonl (--check): each case's deviation from TP=1's logits.

Needs PyTorch with CUDA and FlashAttention-2 in ATen; shapes come from
models/llm/NAME.toml.
"""
import argparse
import heapq
import json
import math
import os
import random
import statistics
import sys
import time
from collections import deque
from pathlib import Path

from torch_forward import cuda_torch, kernel_totals, model_shape

GRAPH_BATCHES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256]


class Sequence:
    def __init__(self, request, prompt, output):
        self.request, self.tokens, self.computed, self.remaining = request, prompt, 0, output
        self.blocks, self.slot = 0, None


class Clients:
    """The benchmark's clients (icsim's `Clients`, src/serve/mod.rs): at
    most `cap` requests in flight; a request arriving while they are is
    sent when one of them finishes."""

    def __init__(self, cap):
        self.free_at = [0.0] * cap  # when each client came free: a heap

    def idle(self):
        """Whether a client can send now."""
        return bool(self.free_at)

    def send(self, arrival):
        """When a request arriving at `arrival` is sent, by the client
        that came free first."""
        return max(arrival, heapq.heappop(self.free_at))

    def finished(self, at):
        heapq.heappush(self.free_at, at)


class Scheduler:
    """icsim's scheduler (src/serve/scheduler.rs) without preemption."""

    def __init__(self, max_num_seqs, budget, block_size, kv_blocks):
        self.max_num_seqs, self.budget, self.block_size = max_num_seqs, budget, block_size
        self.free_blocks = kv_blocks
        self.waiting, self.running = deque(), []

    def blocks_for(self, tokens):
        return -(-tokens // self.block_size)

    def schedule(self):
        """[(sequence, new tokens)] of the next iteration."""
        budget, scheduled = self.budget, []
        for sequence in self.running:
            if budget == 0:
                break
            new = min(sequence.tokens - sequence.computed, budget)
            needed = self.blocks_for(sequence.computed + new) - sequence.blocks
            if needed > self.free_blocks:
                sys.exit("error: the KV cache is full: this engine does not preempt; serve fewer requests at once")
            self.free_blocks -= needed
            sequence.blocks += needed
            scheduled.append((sequence, new))
            budget -= new
        while budget > 0 and len(self.running) < self.max_num_seqs and self.waiting:
            sequence = self.waiting[0]
            new = min(sequence.tokens, budget)
            blocks = self.blocks_for(new)
            if blocks > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= blocks
            sequence.blocks = blocks
            scheduled.append((sequence, new))
            budget -= new
            self.running.append(sequence)
        return scheduled

    def complete(self, scheduled):
        """Sequences that sampled a token, and those that finished."""
        sampled = []
        for sequence, new in scheduled:
            sequence.computed += new
            if sequence.computed == sequence.tokens:
                sequence.remaining -= 1
                sequence.tokens += 1
                sampled.append(sequence)
        finished = [s for s in self.running if s.remaining == 0]
        for sequence in finished:
            self.free_blocks += sequence.blocks
        self.running = [s for s in self.running if s.remaining > 0]
        return sampled, finished


def head_range(count, tp, rank):
    """The heads of `count` GPU `rank` of TP=`tp` holds (icsim's
    src/serve/handoff.rs `heads`): runs of count/tp, or one head shared by
    tp/count neighbours where the heads are fewer than the GPUs."""
    if count >= tp:
        each = -(-count // tp)
        return min(rank * each, count), min((rank + 1) * each, count)
    head = rank * count // tp
    return head, head + 1


class Parallel:
    """One rank of a tensor-parallel group: its GPU, the group its tensors
    are reduced in (None at TP=1) and the host group the schedule goes
    through."""

    def __init__(self, torch, rank=0, tp=1, device=None, group=None, host_group=None, backend="nccl"):
        self.torch, self.rank, self.tp, self.device = torch, rank, tp, device
        self.group, self.host_group, self.backend = group, host_group, backend

    def allreduce(self, x):
        if self.group is not None:
            self.torch.distributed.all_reduce(x, group=self.group)
        return x

    def gather_columns(self, x):
        """[rows, columns] on every rank as [rows, tp x columns], rank order."""
        if self.group is None:
            return x
        dist, x = self.torch.distributed, x.contiguous()
        if self.backend == "nccl":
            gathered = x.new_empty((self.tp,) + tuple(x.shape))
            dist.all_gather_into_tensor(gathered, x, group=self.group)
            parts = gathered.unbind(0)
        else:
            parts = [self.torch.empty_like(x) for _ in range(self.tp)]
            dist.all_gather(parts, x, group=self.group)
        return self.torch.cat(parts, dim=-1)

    def share(self, message):
        """Rank 0's `message` on every rank."""
        if self.host_group is None:
            return message
        box = [message]
        self.torch.distributed.broadcast_object_list(box, src=0, group=self.host_group)
        return box[0]


class Model:
    """One GPU's share of the model: one layer's weights for every layer, a KV slot a sequence."""

    def __init__(self, torch, shape, slots, max_len, parallel, token_ids="random", seed=0):
        self.torch, self.F, self.parallel = torch, torch.nn.functional, parallel
        device, tp, rank = parallel.device, parallel.tp, parallel.rank
        self.h, self.layers, self.vocab = shape["hidden"], shape["layers"], shape["vocab"]
        qh, kvh, f = shape["heads"], shape["kv_heads"], shape["ffn"]
        self.d = self.h // qh
        self.max_len = max_len
        # Token ids drawn at random give the products operands as varied as
        # text's; one repeated id (what the first runs fed) makes every row
        # alike, and products on such predictable operands run about 15%
        # faster (engine_kernels.py's `prompt_inputs`).
        self.draw_from = self.vocab if token_ids == "random" else None
        bf16 = torch.bfloat16
        q0, q1 = head_range(qh, tp, rank)
        k0, k1 = head_range(kvh, tp, rank)
        f0, f1 = f * rank // tp, f * (rank + 1) // tp
        self.vocab_rows = -(-self.vocab // tp)
        v0 = rank * self.vocab_rows
        self.qh, self.kvh = q1 - q0, k1 - k0
        # Every rank draws the full weights from one seed and keeps its
        # slices, so that the shards are one model's.
        torch.manual_seed(seed)

        def weight(*size):
            return torch.randn(*size, device=device, dtype=bf16) * 0.02

        def rows_of(full, *ranges):
            return torch.cat([full[a:b] for a, b in ranges]).contiguous()

        def vocab_part(full):
            part = full[v0:v0 + self.vocab_rows]
            return torch.cat((part, part.new_zeros(self.vocab_rows - part.shape[0], self.h))) if part.shape[0] < self.vocab_rows else part.contiguous()

        d = self.d
        self.embedding = vocab_part(weight(self.vocab, self.h))
        self.lm_head = vocab_part(weight(self.vocab, self.h))
        self.w_qkv = rows_of(weight((qh + 2 * kvh) * d, self.h), (q0 * d, q1 * d), ((qh + k0) * d, (qh + k1) * d),
                             ((qh + kvh + k0) * d, (qh + kvh + k1) * d))
        self.w_o = weight(self.h, qh * d)[:, q0 * d:q1 * d].contiguous()
        self.w_gate_up = rows_of(weight(2 * f, self.h), (f0, f1), (f + f0, f + f1))
        self.w_down = weight(self.h, f)[:, f0:f1].contiguous()
        self.vocab_start = v0
        self.norm = torch.ones(self.h, device=device, dtype=bf16)
        # Slot `slots` is a spare one the padding of a graph's batch writes to.
        cache_rows = (slots + 1) * max_len
        self.k_cache = [torch.zeros(cache_rows, self.kvh, d, device=device, dtype=bf16) for _ in range(self.layers)]
        self.v_cache = [torch.zeros(cache_rows, self.kvh, d, device=device, dtype=bf16) for _ in range(self.layers)]
        inverse = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inverse)
        # cos and sin over a whole head, sin signed so that rotating a head
        # is x * cos + roll(x, d/2) * sin: three kernels for q and k at once.
        self.cos = torch.cat((angles.cos(), angles.cos()), dim=-1).to(bf16)
        self.sin = torch.cat((-angles.sin(), angles.sin()), dim=-1).to(bf16)

    def weight_bytes(self):
        """This GPU's share of the weights as if every layer had its own."""
        layer = self.w_qkv.numel() + self.w_o.numel() + self.w_gate_up.numel() + self.w_down.numel()
        return 2 * (self.layers * layer + self.embedding.numel() + self.lm_head.numel())

    def token_bytes(self):
        """The KV cache a token takes on this GPU: its heads' K and V, every layer."""
        return 2 * self.layers * self.kvh * self.d * 2

    def batch(self, parts, pad=None):
        """The input tensors of an iteration over `parts` on this GPU."""
        return inputs(self.torch, self.parallel.device, self.max_len, parts, pad=pad, draw_from=self.draw_from)

    def rotary(self, x, cos, sin):
        return self.torch.addcmul(x * cos, x.roll(self.d // 2, dims=-1), sin)

    def embed(self, token_ids):
        """The embedding's rows; at TP>1 each rank looks up those of its part
        of the vocabulary (zeros for the rest), summed by an allreduce."""
        F = self.F
        if self.parallel.tp == 1:
            return F.embedding(token_ids, self.embedding)
        local = token_ids - self.vocab_start
        inside = ((local >= 0) & (local < self.vocab_rows)).unsqueeze(-1)
        rows = F.embedding(local.clamp(0, self.vocab_rows - 1), self.embedding) * inside.to(self.embedding.dtype)
        return self.parallel.allreduce(rows)

    def forward(self, batch, logits=False):
        """Next token of every sequence of `batch` (a dict of input tensors),
        or with `logits` the logits it is chosen from."""
        F, torch, parallel = self.F, self.torch, self.parallel
        tokens = batch["token_ids"].shape[0]
        x = self.embed(batch["token_ids"])
        cos = self.cos[batch["positions"]].unsqueeze(1)
        sin = self.sin[batch["positions"]].unsqueeze(1)
        for layer in range(self.layers):
            h = F.rms_norm(x, (self.h,), self.norm, 1e-5)
            qk, v = F.linear(h, self.w_qkv).split([(self.qh + self.kvh) * self.d, self.kvh * self.d], dim=-1)
            q, k = self.rotary(qk.view(tokens, self.qh + self.kvh, self.d), cos, sin).split([self.qh, self.kvh], dim=1)
            self.k_cache[layer].index_copy_(0, batch["cache_rows"], k)
            self.v_cache[layer].index_copy_(0, batch["cache_rows"], v.view(tokens, self.kvh, self.d))
            o = torch.ops.aten._flash_attention_forward(
                q, self.k_cache[layer], self.v_cache[layer], batch["cu_q"], batch["cu_k"], batch["max_q"], self.max_len,
                0.0, True, False, seqused_k=batch["seqused_k"])[0]
            x = x + parallel.allreduce(F.linear(o.reshape(tokens, self.qh * self.d), self.w_o))
            h = F.rms_norm(x, (self.h,), self.norm, 1e-5)
            gate, up = F.linear(h, self.w_gate_up).chunk(2, dim=-1)
            x = x + parallel.allreduce(F.linear(F.silu(gate) * up, self.w_down))
        last = F.rms_norm(x[batch["last_rows"]], (self.h,), self.norm, 1e-5)
        scores = parallel.gather_columns(F.linear(last, self.lm_head))[:, :self.vocab]
        return scores if logits else scores.argmax(dim=-1)


def inputs(torch, device, max_len, parts, pad=None, draw_from=None):
    """The forward's input tensors for `parts` [(slot, context, new tokens)],
    in slot order (the cache's offsets must grow); with `pad` (size, spare
    slot), padded up to `size` sequences of one token in the spare slot.
    Token ids are drawn below `draw_from`, or all 1 without it."""
    parts = sorted(parts)
    if pad is not None:
        size, spare = pad
        parts = parts + [(spare, 0, 1)] * (size - len(parts))
    positions, rows, cu_q, cu_k, used, last = [], [], [0], [], [], []
    for slot, context, new in parts:
        start = slot * max_len
        positions += range(context, context + new)
        rows += range(start + context, start + context + new)
        cu_q.append(cu_q[-1] + new)
        cu_k.append(start)
        used.append(context + new)
        last.append(cu_q[-1] - 1)
    cu_k.append(cu_k[-1] + max_len)

    def tensor(values):
        return torch.tensor(values, dtype=torch.int32, device=device)

    return {
        "token_ids": (torch.randint(0, draw_from, (len(positions),), device=device) if draw_from
                      else torch.tensor([1] * len(positions), dtype=torch.int64, device=device)),
        "positions": tensor(positions).long(),
        "cache_rows": tensor(rows).long(),
        "cu_q": tensor(cu_q),
        "cu_k": tensor(cu_k),
        "seqused_k": tensor(used),
        "last_rows": tensor(last).long(),
        "max_q": max(p[2] for p in parts),
    }


class DecodeGraphs:
    """A CUDA graph of a decode-only iteration per batch size in GRAPH_BATCHES."""

    def __init__(self, torch, model, slots):
        self.torch, self.graphs, self.spare = torch, {}, slots
        for size in [b for b in GRAPH_BATCHES if b <= slots]:
            static = inputs(torch, model.parallel.device, model.max_len, [(slot, 1, 1) for slot in range(size)])
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                model.forward(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model.forward(static)
            self.graphs[size] = (graph, static, out)

    def inputs(self, model, parts):
        """`parts`' inputs padded to the next captured batch size; the spare
        slot is past every slot a sequence can hold."""
        size = next(b for b in self.graphs if b >= len(parts))
        return model.batch(parts, pad=(size, self.spare))

    def run(self, batch):
        graph, static, out = self.graphs[len(batch["cu_q"]) - 1]
        for key in ("token_ids", "positions", "cache_rows", "cu_q", "cu_k", "seqused_k", "last_rows"):
            static[key].copy_(batch[key])
        graph.replay()
        return out


def decodes_only(parts):
    """Whether an iteration over `parts` [(slot, context, new tokens)] runs
    from a graph: every part one decode."""
    return all(new == 1 and context > 0 for _, context, new in parts)


def prepare(model, graphs, parts):
    """An iteration over `parts` made ready: its inputs (drawn alike on
    every rank), and a call that runs it (a graph's replay for decodes
    only where there are graphs, the forward launched eagerly otherwise)."""
    if graphs is not None and decodes_only(parts):
        batch = graphs.inputs(model, parts)
        return lambda: graphs.run(batch)
    batch = model.batch(parts)
    return lambda: model.forward(batch)


def profile(torch, model, graphs, label, path):
    """Every CUDA kernel of a few iterations, and their GPU times: decodes
    from graphs at several batch sizes, a prompt alone, and a prompt chunk
    beside decodes (eager). Every rank runs them; `path` None writes nothing."""
    context = model.max_len - 64
    cases = {f"decode-{b}": [(slot, context, 1) for slot in range(b)] for b in (1, 8, 32, 64)}
    cases["prompt-1024"] = [(0, 0, 1024)]
    cases["chunk-1024-with-64-decodes"] = [(0, 0, 1024)] + [(slot, context, 1) for slot in range(1, 65)]
    with torch.no_grad():
        for case, parts in cases.items():

            def run():
                return prepare(model, graphs, parts)()

            for _ in range(3):
                run()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                run()
            end.record()
            end.synchronize()
            kernels = kernel_totals(torch, run)
            if path is None:
                continue
            row = {"label": label, "case": case, "graph": graphs is not None and decodes_only(parts), "tp": model.parallel.tp, "iteration_ms": round(start.elapsed_time(end) / 10, 4),
                   "kernels": [{"name": name[:160], "calls": calls, "total_us": round(total, 2)} for name, (calls, total) in kernels]}
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(case, row["iteration_ms"], "ms,", sum(c for _, (c, _) in kernels), "kernels,",
                  round(sum(t for _, (_, t) in kernels) / 1e3, 3), "ms in kernels", flush=True)


def serve(torch, args, model, graphs, rate, requests, kv_blocks):
    """Rank 0's run of `requests` at `rate`: it schedules, sends each
    iteration's sequences to the other ranks, and times every token."""
    scheduler = Scheduler(args.max_num_seqs, args.max_num_batched_tokens, args.block_size, kv_blocks)
    clients = Clients(args.max_concurrency or len(requests))
    free_slots = list(range(args.max_num_seqs))
    token_times = [[] for _ in requests]
    sent = [None] * len(requests)
    iterations = []
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    arrived = 0
    t0 = time.perf_counter()
    while arrived < len(requests) or scheduler.running or scheduler.waiting:
        now = time.perf_counter() - t0
        while arrived < len(requests) and requests[arrived][0] <= now and clients.idle():
            sent[arrived] = clients.send(requests[arrived][0])
            scheduler.waiting.append(Sequence(arrived, requests[arrived][1], requests[arrived][2]))
            arrived += 1
        if not scheduler.running and not scheduler.waiting:
            time.sleep(max(0.0, requests[arrived][0] - (time.perf_counter() - t0)))
            continue
        began = time.perf_counter() - t0
        scheduled = scheduler.schedule()
        for sequence, _ in scheduled:
            if sequence.slot is None:
                sequence.slot = free_slots.pop()
        parts = model.parallel.share(("run", [(s.slot, s.computed, new) for s, new in scheduled]))[1]
        with torch.no_grad():
            run = prepare(model, graphs, parts)
            launched = time.perf_counter() - t0
            start_event.record()
            out = run()
            end_event.record()
            out.cpu()
        ended = time.perf_counter() - t0
        iterations.append({
            "rate": rate, "start_s": round(began, 6), "end_s": round(ended, 6), "host_ms": round((launched - began) * 1e3, 4),
            "gpu_ms": round(start_event.elapsed_time(end_event), 4), "graph": graphs is not None and decodes_only(parts),
            "rows": sum(p[2] for p in parts), "sequences": len(parts),
            "decodes": sum(1 for p in parts if p[2] == 1 and p[1] > 0), "cached": sum(p[1] for p in parts),
            "parts": [[p[2], p[1]] for p in parts],
        })
        sampled, finished = scheduler.complete(scheduled)
        for sequence in sampled:
            token_times[sequence.request].append(ended)
        for sequence in finished:
            free_slots.append(sequence.slot)
            clients.finished(ended)
    return sent, token_times, iterations


def follow(torch, model, graphs):
    """Another rank's run: each iteration rank 0 sends, until it stops."""
    while True:
        message = model.parallel.share(None)
        if message[0] == "stop":
            return
        with torch.no_grad():
            prepare(model, graphs, message[1])()


def check(torch, args, shape, parallel, max_len):
    """The sharded forward's logits against the TP=1 forward of the same
    weights (rank 0 holds both), on a prompt, a prompt beside a decode, and
    decodes; True where every case agrees. Every layer holds the same
    weights, so CHECK_LAYERS of them check the slices."""
    shape = dict(shape, layers=CHECK_LAYERS)
    sharded = Model(torch, shape, 4, max_len, parallel, args.token_ids, args.seed)
    whole = Model(torch, shape, 4, max_len, Parallel(torch, device=parallel.device), args.token_ids, args.seed) if parallel.rank == 0 else None
    cases = [("prompt", [(0, 0, 100)]), ("prompt beside a decode", [(0, 100, 1), (1, 0, 37)]), ("decodes", [(0, 101, 1), (1, 37, 1)])]
    agreed = True
    for index, (case, parts) in enumerate(cases):
        torch.manual_seed(args.seed + 1 + index)
        batch = sharded.batch(parts)
        with torch.no_grad():
            got = sharded.forward(batch, logits=True).float()
            if whole is None:
                continue
            want = whole.forward(batch, logits=True).float()
        deviation = ((got - want).norm() / want.norm()).item()
        largest = ((got - want).abs().max() / want.abs().max()).item()
        same = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
        ok = deviation <= CHECK_DEVIATION
        agreed &= ok
        row = {"check": case, "model": args.model, "tp": parallel.tp, "backend": parallel.backend, "layers": CHECK_LAYERS,
               "deviation": round(deviation, 5), "largest_deviation": round(largest, 5), "same_next_token": round(same, 3), "ok": ok}
        with open(Path(args.out) / "check.jsonl", "a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    return agreed


# How far a sharded forward's logits may be from TP=1's (the norm of the
# difference over the norm of TP=1's), over CHECK_LAYERS layers. Measured
# with gloo on one H200: bf16 sums taken in another order drift apart with
# depth (1.0-1.4% over two layers at TP 2-8 for 8B and 70B; 4-5% over 8B's
# 32 layers, 11-12% over 70B's 80); a wrong slice of the FFN or of the
# vocabulary gives logits unrelated to TP=1's (0.94-1.34).
CHECK_LAYERS = 2
CHECK_DEVIATION = 0.1


def percentile(values, share):
    """Nearest rank, as icsim's report takes it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summary(sent, token_times):
    """Latency from when each request was sent; throughput over the span
    from the first send to the last token."""
    ttft = [times[0] - start for start, times in zip(sent, token_times)]
    e2e = [times[-1] - start for start, times in zip(sent, token_times)]
    tpot = [(times[-1] - times[0]) / (len(times) - 1) for times in token_times if len(times) > 1]
    span = max(times[-1] for times in token_times) - sent[0]
    out = {}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for share in (0.5, 0.9, 0.99):
            out[f"{name}_p{round(share * 100)}_ms"] = round(percentile(values, share) * 1e3, 3)
        out[f"{name}_mean_ms"] = round(statistics.fmean(values) * 1e3, 3)
    out["requests_per_s"] = round(len(sent) / span, 4)
    out["output_tokens_per_s"] = round(sum(len(t) for t in token_times) / span, 2)
    out["span_s"] = round(span, 3)
    return out


def arrivals(rate, count, prompt, output, seed):
    """Poisson arrivals (the first at 0) and lengths `LOW..HIGH` or fixed."""
    draw = random.Random(seed)

    def length(spec):
        low, _, high = spec.partition("..")
        return draw.randint(int(low), int(high or low))

    clock, out = 0.0, []
    for index in range(count):
        if index:
            clock += draw.expovariate(rate)
        out.append((clock, length(prompt), length(output)))
    return out


def work(parallel, args):
    """What every rank does: its share of the model, its graphs, then the
    check, the profile or the runs (rank 0 leads, the others follow)."""
    torch = parallel.torch
    shape = model_shape(args.model)
    max_len = args.max_len or sum(int(spec.partition("..")[2] or spec) for spec in (args.prompt, args.output))
    if args.check:
        if not check(torch, args, shape, parallel, max_len) and parallel.rank == 0:
            sys.exit(f"error: the TP={parallel.tp} forward's logits differ from TP=1's by more than {CHECK_DEVIATION}")
        return
    tp = parallel.tp
    model = Model(torch, shape, args.max_num_seqs, max_len, parallel, args.token_ids, args.seed)
    memory = torch.cuda.get_device_properties(parallel.device).total_memory
    kv_blocks = int((memory * args.gpu_memory_utilization - model.weight_bytes()) // (model.token_bytes() * args.block_size))
    with torch.no_grad():
        # gloo's collectives cannot be captured: every iteration eager.
        graphs = DecodeGraphs(torch, model, args.max_num_seqs) if parallel.backend == "nccl" else None
        # Warm up the eager path's kernels at the shapes a run meets.
        for rows in (args.max_num_batched_tokens, 1000, 100, 7):
            model.forward(model.batch([(0, 0, min(rows, max_len))]))
        torch.cuda.synchronize()
    out_dir = Path(args.out)
    if args.profile:
        profile(torch, model, graphs, args.label, out_dir / "profile.jsonl" if parallel.rank == 0 else None)
        return
    if parallel.rank > 0:
        follow(torch, model, graphs)
        return
    env = {key: os.environ[key] for key in ("NCCL_P2P_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_SHM_DISABLE") if key in os.environ}
    settings = {
        "label": args.label, "model": args.model, "gpu": torch.cuda.get_device_name(parallel.device), "tp": tp, "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if tp > 1 else None, "dist_backend": parallel.backend if tp > 1 else None,
        "env": env,
        "prompt": args.prompt, "output": args.output, "requests": args.requests, "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens, "max_concurrency": args.max_concurrency,
        "block_size": args.block_size, "kv_blocks": kv_blocks,
        "max_len": max_len, "seed": args.seed, "token_ids": args.token_ids, "graph_batches": [b for b in GRAPH_BATCHES if b <= args.max_num_seqs],
        "engine": "tools/serve_engine.py: decode-only iterations from CUDA graphs, the rest eager; "
                  "varlen FlashAttention-2 (aten) over per-sequence KV slots; one layer's weights for all layers"
                  + ("; TP through torch.distributed (NCCL), rank 0 sends each iteration's sequences to the others over gloo" if tp > 1 else ""),
    }
    for rate in [float(r) for r in args.rates.split(",")]:
        requests = arrivals(rate, args.requests, args.prompt, args.output, args.seed)
        sent, token_times, iterations = serve(torch, args, model, graphs, rate, requests, kv_blocks)
        measured = summary(sent, token_times)
        with open(out_dir / "requests.jsonl", "a") as f:
            for index, (request, start, times) in enumerate(zip(requests, sent, token_times)):
                f.write(json.dumps({"label": args.label, "rate": rate, "request": index, "arrival": round(request[0], 6),
                                    "sent": round(start, 6), "prompt_tokens": request[1], "output_tokens": request[2],
                                    "token_times": [round(t, 6) for t in times]}) + "\n")
        with open(out_dir / "iterations.jsonl", "a") as f:
            for row in iterations:
                f.write(json.dumps(dict(row, label=args.label)) + "\n")
        host = [row["host_ms"] for row in iterations]
        gaps = [b["start_s"] - a["end_s"] for a, b in zip(iterations, iterations[1:]) if b["start_s"] - a["end_s"] < 0.005]
        row = dict(settings, rate=rate, iterations=len(iterations), measured=measured,
                   host_ms_mean=round(statistics.fmean(host), 4), gap_ms_mean=round(statistics.fmean(gaps) * 1e3, 4) if gaps else None)
        with open(out_dir / "runs.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({"rate": rate, **measured, "iterations": len(iterations), "host_ms_mean": row["host_ms_mean"]}), flush=True)
    parallel.share(("stop",))


def worker(rank, args):
    """Rank `rank` of a TP group: its GPU (every rank on GPU 0 under gloo),
    the group its tensors are reduced in and the host group, then `work`."""
    import torch
    import torch.distributed as dist

    index = rank if args.dist_backend == "nccl" else 0
    torch.cuda.set_device(index)
    device = torch.device("cuda", index)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group(args.dist_backend, rank=rank, world_size=args.tp, **({"device_id": device} if args.dist_backend == "nccl" else {}))
    host = dist.new_group(backend="gloo")
    work(Parallel(torch, rank, args.tp, device, dist.group.WORLD, host, args.dist_backend), args)
    dist.barrier(group=host)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--rates", help="requests a second, e.g. 5,10,20 (required unless --profile or --check)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--prompt", default="1024", help="tokens: N or LOW..HIGH")
    parser.add_argument("--output", default="128", help="tokens: N or LOW..HIGH")
    parser.add_argument("--max-num-seqs", type=int, default=128)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-concurrency", type=int, default=None,
                        help="most requests in flight, as vllm bench serve's clients keep them (default: no cap)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-len", type=int, default=None, help="tokens a KV slot holds (default: longest prompt + output)")
    parser.add_argument("--seed", type=int, default=0, help="of the arrivals, the lengths and the weights")
    parser.add_argument("--label", default="", help="a name for this run's rows")
    parser.add_argument("--token-ids", choices=["random", "repeated"], default="random",
                        help="the prompt's and decodes' token ids: drawn at random (as text varies) or all 1 (the first runs')")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree: one process a GPU (default 1)")
    parser.add_argument("--dist-backend", choices=["nccl", "gloo"], default="nccl",
                        help="at TP>1: nccl, one GPU a rank; gloo runs every rank on GPU 0 without graphs, "
                             "for --check and for trying a TP run's lockstep on one GPU (its times mean nothing)")
    parser.add_argument("--port", type=int, default=29541, help="at TP>1: torch.distributed's port")
    parser.add_argument("--profile", action="store_true", help="instead of serving: every kernel of a few iterations (profile.jsonl)")
    parser.add_argument("--check", action="store_true", help="instead of serving: the TP forward's logits against TP=1's, same weights")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not (args.profile or args.check or args.rates):
        parser.error("give --rates (or --profile, or --check)")
    if args.tp < 1:
        parser.error("--tp: give a positive integer")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        parser.error("--max-concurrency: give a positive integer")
    shape = model_shape(args.model)
    if shape["heads"] % args.tp or shape["ffn"] % args.tp:
        parser.error(f"--tp {args.tp}: {args.model} has {shape['heads']} heads and {shape['ffn']} FFN columns; TP must divide both")
    torch = cuda_torch()
    if args.dist_backend == "nccl" and args.tp > torch.cuda.device_count():
        sys.exit(f"error: --tp {args.tp} needs {args.tp} GPUs, {torch.cuda.device_count()} visible "
                 "(--dist-backend gloo --check runs the ranks on one GPU)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.tp == 1:
        work(Parallel(torch, device=torch.device("cuda", 0)), args)
    else:
        # A rank that fails ends the others (spawn's join) and raises here.
        torch.multiprocessing.spawn(worker, args=(args,), nprocs=args.tp)


if __name__ == "__main__":
    main()
