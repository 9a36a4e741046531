// What does a Simple slice through host memory cost its sender beyond its
// bytes? NCCL's SHM sender writes a slice into the pinned staging buffer,
// syncs its threads, and one thread then fences at system scope
// (fence.acq_rel.sys) before it stores the step counter the receiver
// polls (postPeer in prims_simple.h): the next slice waits for both. This
// probe runs 1 or 4 blocks of 512 threads, each writing 256 slices of 8 KiB
// to 1 MiB into its own 8-slot ring of pinned host memory, with the fence
// and counter store after each slice and, apart, with the counter store
// alone, and prints one JSON line per case with the time a slice: the
// difference is the fence's cost on the sender's path.
// Build: nvcc -O3 -arch=sm_90 host_fence.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "probe.h"

constexpr int kSlots = 8;

__global__ void send_slices(int4* __restrict__ host, unsigned long long* __restrict__ steps, const int4* __restrict__ dev,
                            size_t slice, int slices, bool fence) {
  const size_t ring = (size_t)blockIdx.x * kSlots * slice;
  for (int s = 0; s < slices; ++s) {
    const size_t at = ring + (size_t)(s % kSlots) * slice;
    for (size_t i = threadIdx.x; i < slice; i += blockDim.x) host[at + i] = dev[at + i];
    __syncthreads();
    if (threadIdx.x == 0) {
      if (fence) asm volatile("fence.acq_rel.sys;" ::: "memory");
      asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(steps + blockIdx.x * 16), "l"((unsigned long long)s + 1) : "memory");
    }
    __syncthreads();
  }
}

int main() {
  const int slices = 256, max_blocks = 4;
  const size_t max_slice_bytes = 1 << 20;
  const size_t buffer_bytes = max_slice_bytes * kSlots * max_blocks;
  int4 *host, *host_dev, *dev;
  unsigned long long *steps, *steps_dev;
  CHECK(cudaHostAlloc(&host, buffer_bytes, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host_dev, host, 0));
  CHECK(cudaHostAlloc(&steps, 16 * max_blocks * sizeof(unsigned long long), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&steps_dev, steps, 0));
  CHECK(cudaMalloc(&dev, buffer_bytes));
  CHECK(cudaMemset(dev, 1, buffer_bytes));
  for (int blocks : {1, 4}) {
    for (size_t slice_bytes : {8u << 10, 32u << 10, 128u << 10, 512u << 10, 1u << 20}) {
      for (bool fence : {false, true}) {
        auto launch = [&] {
          send_slices<<<blocks, 512>>>(host_dev, steps_dev, dev, slice_bytes / 16, slices, fence);
          CHECK(cudaGetLastError());
        };
        launch();  // two warm runs
        launch();
        const double ms = median_ms(7, launch);
        const double us_a_slice = ms * 1e3 / slices;
        printf("{\"probe\":\"host_fence\",\"blocks\":%d,\"threads\":512,\"slice_bytes\":%zu,\"slices\":%d,\"fence\":%s,"
               "\"time_ms\":%.4f,\"us_a_slice\":%.3f,\"gbps_a_block\":%.2f}\n",
               blocks, slice_bytes, slices, fence ? "true" : "false", ms, us_a_slice, slice_bytes / (us_a_slice * 1e3));
      }
    }
  }
  return 0;
}
