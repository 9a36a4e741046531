// How does what GPU threads move through host memory grow with the number
// of thread blocks? NCCL's SHM transport runs one thread block a channel;
// each block of a ring writes its step into a pinned host buffer (the next
// GPU reads it there) and reads the previous GPU's step out of another, one
// after the other. This probe runs k blocks of 512 threads (Simple's), each
// alternating a 512 KiB write of host memory and a 512 KiB read of it (NCCL's
// Simple step), and, apart, k blocks that only read or only write, for k =
// 1..32, and prints one JSON line per case with the bytes each way a second.
// The `_unrolled` modes read as NCCL's Simple primitives do, four 16-byte
// loads in flight a thread (COLL_UNROLL): a block reading host memory is
// bound by the reads it keeps in flight, and this is its rate.
// Build: nvcc -O3 -arch=sm_90 host_channels.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "probe.h"

enum Mode { kAlternate = 0, kRead = 1, kWrite = 2, kAlternateUnrolled = 3, kReadUnrolled = 4 };

// Block b moves `steps` slices of `slice` int4s; its slices sit at its own
// offset of each buffer, so blocks never share a line.
__global__ void channels(const int4* __restrict__ host_in, int4* __restrict__ host_out, int4* __restrict__ dev,
                         size_t slice, int steps, int mode) {
  const size_t base = (size_t)blockIdx.x * slice;
  for (int s = 0; s < steps; ++s) {
    const size_t at = base + (size_t)(s % 4) * slice * gridDim.x;
    if (mode != kRead && mode != kReadUnrolled) {
      for (size_t i = threadIdx.x; i < slice; i += blockDim.x) host_out[at + i] = dev[at + i];
      __syncthreads();
    }
    if (mode == kRead || mode == kAlternate) {
      for (size_t i = threadIdx.x; i < slice; i += blockDim.x) dev[at + i] = host_in[at + i];
      __syncthreads();
    }
    if (mode == kReadUnrolled || mode == kAlternateUnrolled) {
      for (size_t i = threadIdx.x; i < slice; i += 4 * blockDim.x) {
        int4 v[4];
        load_unrolled<4>(v, host_in, at, i, slice);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const size_t j = i + (size_t)u * blockDim.x;
          if (j < slice) dev[at + j] = v[u];
        }
      }
      __syncthreads();
    }
  }
}

int main() {
  const size_t slice_bytes = 512 << 10, slice = slice_bytes / 16;
  const int max_blocks = 32, steps = 64;
  const size_t buffer_bytes = slice_bytes * max_blocks * 4;
  int4 *in, *out, *in_dev, *out_dev, *dev;
  CHECK(cudaHostAlloc(&in, buffer_bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&out, buffer_bytes, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&in_dev, in, 0));
  CHECK(cudaHostGetDevicePointer(&out_dev, out, 0));
  CHECK(cudaMalloc(&dev, buffer_bytes));
  CHECK(cudaMemset(dev, 1, buffer_bytes));
  for (size_t i = 0; i < buffer_bytes / 16; ++i) in[i] = make_int4(1, 2, 3, 4);
  const char* names[] = {"alternate", "read", "write", "alternate_unrolled", "read_unrolled"};
  for (int mode = 0; mode < 5; ++mode) {
    for (int blocks : {1, 2, 4, 8, 12, 16, 24, 32}) {
      auto launch = [&] {
        channels<<<blocks, 512>>>(in_dev, out_dev, dev, slice, steps, mode);
        CHECK(cudaGetLastError());
      };
      launch();  // two warm runs
      launch();
      const double ms = median_ms(5, launch);
      const double each_way = (double)slice_bytes * steps * blocks / (ms * 1e-3) / 1e9;
      printf("{\"probe\":\"host_channels\",\"mode\":\"%s\",\"blocks\":%d,\"threads\":512,\"slice_bytes\":%zu,"
             "\"steps\":%d,\"time_ms\":%.4f,\"gbps_each_way\":%.2f}\n",
             names[mode], blocks, slice_bytes, steps, ms, each_way);
    }
  }
  return 0;
}
