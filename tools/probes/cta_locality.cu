// Does what one thread block moves depend on where its data sits, the GPU's
// L2 cache or its HBM? NCCL's channels are thread blocks whose rate is set by
// the loads and stores they keep in flight; a call of a few MiB finds its
// buffers in L2 (the same buffers, called over and over), a call of a GiB
// streams them from HBM. This probe runs k blocks of 512 threads (Simple's),
// each moving its share of a working set with 16-byte accesses, four in
// flight a thread (NCCL's unroll), as three of NCCL's primitives do: load
// only, copy (a load and a store: recv), and reduce-copy (two loads, one
// store: recvReduceCopy). Each case runs warm (the working set touched just
// before, and passed over until a block has moved 256 MiB) for working
// sets of 1 MiB to 1 GiB and prints one JSON line with
// the bytes a block loads and stores a second.
// Build: nvcc -O3 -arch=sm_90 cta_locality.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "probe.h"

enum Op { kLoad = 0, kCopy = 1, kReduceCopy = 2 };
constexpr int kUnroll = 4;

// Block b works on elements [b * per_block, (b + 1) * per_block) of each array.
__global__ void primitive(const int4* __restrict__ a, const int4* __restrict__ b, int4* __restrict__ out,
                          size_t per_block, int passes, int op, int4* __restrict__ sink) {
  const size_t base = (size_t)blockIdx.x * per_block;
  const size_t stride = (size_t)blockDim.x * kUnroll;
  int4 acc = make_int4(0, 0, 0, 0);
  for (int pass = 0; pass < passes; ++pass)
  for (size_t i = threadIdx.x; i < per_block; i += stride) {
    int4 x[kUnroll], y[kUnroll];
    load_unrolled(x, a, base, i, per_block);
    if (op == kReduceCopy) {
      load_unrolled(y, b, base, i, per_block);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        x[u].x += y[u].x; x[u].y += y[u].y; x[u].z += y[u].z; x[u].w += y[u].w;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t at = i + (size_t)u * blockDim.x;
      if (op == kLoad) {
        acc.x += x[u].x; acc.y += x[u].y; acc.z += x[u].z; acc.w += x[u].w;
      } else if (at < per_block) {
        out[base + at] = x[u];
      }
    }
  }
  if (op == kLoad && acc.x == 0x7fffffff && acc.y == 1) sink[0] = acc;  // keeps the loads
}

int main() {
  const size_t max_set = (size_t)1 << 30;
  int4 *a, *b, *out, *sink;
  CHECK(cudaMalloc(&a, max_set));
  CHECK(cudaMalloc(&b, max_set));
  CHECK(cudaMalloc(&out, max_set));
  CHECK(cudaMalloc(&sink, 16));
  CHECK(cudaMemset(a, 1, max_set));
  CHECK(cudaMemset(b, 2, max_set));
  const char* names[] = {"load", "copy", "reduce_copy"};
  const int arrays[] = {1, 2, 3};
  for (int op = 0; op < 3; ++op) {
    for (int blocks : {1, 4, 24}) {
      for (size_t set = (size_t)1 << 20; set <= max_set; set <<= 1) {
        // The working set is every array the primitive touches.
        const size_t per_array = set / arrays[op];
        const size_t per_block = per_array / 16 / blocks;
        if (per_block < 512 * kUnroll) continue;
        // Enough passes over the set that a launch's start is a small part.
        const int passes = (int)std::max<size_t>(1, ((size_t)256 << 20) / (per_block * 16 * arrays[op]));
        primitive<<<blocks, 512>>>(a, b, out, per_block, 1, op, sink);  // warm
        CHECK(cudaGetLastError());
        const double ms = median_ms(5, [&] { primitive<<<blocks, 512>>>(a, b, out, per_block, passes, op, sink); });
        const double moved = (double)per_block * 16 * arrays[op] * passes;  // loads and stores of one block
        printf("{\"probe\":\"cta_locality\",\"op\":\"%s\",\"blocks\":%d,\"threads\":512,\"working_set_bytes\":%zu,"
               "\"time_ms\":%.4f,\"gbps_per_block\":%.2f}\n",
               names[op], blocks, set, ms, moved / (ms * 1e-3) / 1e9);
      }
    }
  }
  return 0;
}
