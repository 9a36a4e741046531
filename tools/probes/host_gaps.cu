// Do GPU threads move data through host memory faster after a pause? The
// SHM allreduces inside a Llama forward (a few ms of GEMMs between calls)
// run 10-33% faster than the same calls back to back. This probe runs what
// one GPU of a 2-rank SHM ring does for a 128 MiB allreduce (4 thread
// blocks of 512 threads, each alternating a 512 KiB write of pinned host
// memory and a 512 KiB read of it, 16 MiB each way a block) 20 times: back
// to back, then with a pause of 2 or 6 ms between calls (a spinning kernel,
// or a kernel streaming HBM as a GEMM would), and prints one JSON line per
// case with the mean time of a call and its bytes each way a second.
// Build: nvcc -O3 -arch=sm_90 host_gaps.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "probe.h"

// Block b alternates writing its slice to host memory and reading it back.
__global__ void shm_call(const int4* __restrict__ host_in, int4* __restrict__ host_out, int4* __restrict__ dev, size_t slice,
                         int steps) {
  const size_t base = (size_t)blockIdx.x * slice;
  for (int s = 0; s < steps; ++s) {
    const size_t at = base + (size_t)(s % 8) * slice * gridDim.x;
    for (size_t i = threadIdx.x; i < slice; i += blockDim.x) host_out[at + i] = dev[at + i];
    __syncthreads();
    for (size_t i = threadIdx.x; i < slice; i += blockDim.x) dev[at + i] = host_in[at + i];
    __syncthreads();
  }
}

// A pause of about `ns` nanoseconds on the GPU.
__global__ void spin(long long ns) {
  const long long start = clock64();
  const long long cycles = ns * 2;  // under 2 GHz: at least ns
  while (clock64() - start < cycles) {
  }
}

// A pause that streams HBM, as a GEMM's operands do: `passes` copies of a buffer.
__global__ void stream_hbm(const int4* __restrict__ src, int4* __restrict__ dst, size_t n, int passes) {
  for (int p = 0; p < passes; ++p)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

int main() {
  const size_t slice_bytes = 512 << 10, slice = slice_bytes / 16;
  const int blocks = 4, steps = 32, calls = 20;
  const size_t buffer_bytes = slice_bytes * blocks * 8;
  const size_t hbm_bytes = (size_t)1 << 30;
  int4 *in, *out, *in_dev, *out_dev, *dev, *hbm_a, *hbm_b;
  CHECK(cudaHostAlloc(&in, buffer_bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&out, buffer_bytes, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&in_dev, in, 0));
  CHECK(cudaHostGetDevicePointer(&out_dev, out, 0));
  CHECK(cudaMalloc(&dev, buffer_bytes));
  CHECK(cudaMalloc(&hbm_a, hbm_bytes));
  CHECK(cudaMalloc(&hbm_b, hbm_bytes));
  CHECK(cudaMemset(dev, 1, buffer_bytes));
  CHECK(cudaMemset(hbm_a, 1, hbm_bytes));
  for (size_t i = 0; i < buffer_bytes / 16; ++i) in[i] = make_int4(1, 2, 3, 4);
  std::vector<cudaEvent_t> starts(calls), stops(calls);
  for (int c = 0; c < calls; ++c) {
    CHECK(cudaEventCreate(&starts[c]));
    CHECK(cudaEventCreate(&stops[c]));
  }
  // pause: 0 back to back; otherwise its length in us, spinning or streaming HBM.
  struct Case { const char* pause; int us; };
  const Case cases[] = {{"none", 0}, {"spin", 2000}, {"spin", 6000}, {"hbm", 2000}, {"hbm", 6000}, {"none", 0}};
  for (const Case& k : cases) {
    shm_call<<<blocks, 512>>>(in_dev, out_dev, dev, slice, steps);  // warm
    CHECK(cudaDeviceSynchronize());
    for (int c = 0; c < calls; ++c) {
      if (k.us > 0 && k.pause[0] == 's') spin<<<1, 32>>>((long long)k.us * 1000);
      // About 4 TB/s of copy traffic: 2 GiB of it a ms.
      if (k.us > 0 && k.pause[0] == 'h') stream_hbm<<<264, 1024>>>(hbm_a, hbm_b, hbm_bytes / 16, k.us / 500);
      CHECK(cudaEventRecord(starts[c]));
      shm_call<<<blocks, 512>>>(in_dev, out_dev, dev, slice, steps);
      CHECK(cudaEventRecord(stops[c]));
    }
    CHECK(cudaDeviceSynchronize());
    double total = 0;
    for (int c = 0; c < calls; ++c) {
      float ms;
      CHECK(cudaEventElapsedTime(&ms, starts[c], stops[c]));
      total += ms;
    }
    const double ms = total / calls;
    const double each_way = (double)slice_bytes * steps * blocks / (ms * 1e-3) / 1e9;
    printf("{\"probe\":\"host_gaps\",\"pause\":\"%s\",\"pause_us\":%d,\"blocks\":%d,\"threads\":512,\"slice_bytes\":%zu,"
           "\"steps\":%d,\"calls\":%d,\"call_ms\":%.4f,\"gbps_each_way\":%.2f}\n",
           k.pause, k.us, blocks, slice_bytes, steps, calls, ms, each_way);
  }
  return 0;
}
