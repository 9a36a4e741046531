"""One-off conversion of ai-dynamo/aiconfigurator's measured NCCL tables into
icsim's measurement schema 1 (kept beside its output as its provenance).

Source: https://github.com/ai-dynamo/aiconfigurator (Apache-2.0), commit
095f58a51, files aic-core/src/aiconfigurator_core/systems/data/<gpu>/comm/nccl/
<version>/nccl_perf.parquet: 2.29.2 for H100, H200, B200 and GB200 (2 and 4
GPUs of one GB200 NVL72 compute tray), 2.27.3 for A100 (the only one there). Their collector (collector/network/collect_nccl.py)
runs nccl-tests (`<op>_perf -b S -e S -t <gpus> -d <dtype> -w 40 -a 1
-n 100|60 -c 0`, one process, a thread per GPU, no CUDA graph) and stores the
out-of-place time; `message_size` is in elements of `nccl_dtype`, the size
nccl-tests was given (for all-gather and reduce-scatter: the whole buffer).

Run: python3 convert.py PARQUET_DIR  (needs pandas and pyarrow)
"""
import json
import sys

import pandas as pd

GPUS = {"h100_sxm": ("h100", "2.29.2"), "h200_sxm": ("h200", "2.29.2"), "b200_sxm": ("b200", "2.29.2"), "gb200": ("gb200", "2.29.2"), "a100_sxm": ("a100", "2.27.3")}
OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter", "alltoall": "alltoall"}
DTYPES = {"half": ("float16", 2), "int8": ("int8", 1)}

for stem, (gpu, version) in GPUS.items():
    frame = pd.read_parquet(f"{sys.argv[1]}/{stem}.parquet").sort_values(["op_name", "nccl_dtype", "num_gpus", "message_size"])
    with open(f"{gpu}.jsonl", "w") as out:
        for row in frame.itertuples():
            dtype, width = DTYPES[row.nccl_dtype]
            measurement = {
                "schema": 1,
                "system": f"aiconfigurator-{stem.replace('_', '-')}",
                "op": OPS[row.op_name],
                "transport": "nvswitch",
                "algo": "auto",
                "proto": "auto",
                "ranks": int(row.num_gpus),
                "bytes": int(row.message_size) * width,
                "dtype": dtype,
                "time_us": round(float(row.latency) * 1000.0, 4),
                "gpu": row.device,
                "stack": "eager",
                "timing": "nccl-tests out-of-place mean of 100 calls (60 above 16 MB) after 40 warm-up, launched eagerly, no CUDA graph",
                "source": f"ai-dynamo/aiconfigurator 095f58a51 {stem}/comm/nccl/{version}/nccl_perf.parquet (NCCL {row.version}, nccl-tests)",
                "env": "NCCL defaults: NVLS where NCCL picks it",
            }
            out.write(json.dumps(measurement, separators=(",", ":")) + "\n")
