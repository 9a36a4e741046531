#!/usr/bin/env python3
"""Turn public bf16 GEMM timings of one GPU, as ai-dynamo/aiconfigurator
(Apache-2.0) publishes them, into icsim's schema-1 `op: kernel` rows.

    python3 tools/import_aiconfigurator_gemm.py GEMM_PERF.parquet --system NAME > measurements.jsonl

GEMM_PERF.parquet is aiconfigurator's
aic-core/src/aiconfigurator_core/systems/data/<gpu>/gemm/vllm/<version>/gemm_perf.parquet
(columns m, n, k, latency in ms, gemm_dtype, kernel_source, device; timed by
its collector as one torch.nn.functional.linear call per CUDA graph, graph
replays timed with CUDA events). Only bf16 rows with n and k of LLM layers
(1024..16384, and 51200/65536 for LM heads) and m a power of two up to 16384
are kept. Needs pandas and pyarrow.
"""
import argparse
import json
import sys

import pandas as pd

K_VALUES = [1024, 2048, 4096, 5120, 8192, 12288, 16384]
N_VALUES = K_VALUES + [51200, 65536]
M_VALUES = [2**i for i in range(15)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parquet")
    parser.add_argument("--system", required=True, help="the `system` field of every row")
    parser.add_argument("--source", default="aiconfigurator", help="what every row's `source` starts with")
    args = parser.parse_args()
    data = pd.read_parquet(args.parquet)
    data = data[(data.gemm_dtype == "bfloat16") & data.n.isin(N_VALUES) & data.k.isin(K_VALUES) & data.m.isin(M_VALUES)]
    data = data.sort_values(["n", "k", "m"])
    for row in data.itertuples():
        record = {
            "schema": 1,
            "system": args.system,
            "op": "kernel",
            "kernel": "gemm",
            "gpu": row.device,
            "m": int(row.m),
            "n": int(row.n),
            "k": int(row.k),
            "dtype": "bfloat16",
            "time_us": round(float(row.latency) * 1000.0, 3),
            "stack": "torch-graph",
            "timing": "one call per CUDA graph, replays timed with CUDA events",
            "source": f"{args.source} {row.kernel_source}".strip(),
        }
        sys.stdout.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
