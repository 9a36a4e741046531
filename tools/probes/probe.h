// What every probe here shares: a CUDA call checked (exit with the file,
// line and error), pinned host memory mapped for the GPU and device memory
// set, the median of repeated timings between CUDA events, one thread
// block's unrolled 16-byte loads as NCCL's primitives issue them, and a
// thread group's slice written into host memory and read back out of it.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

// Pinned host memory of `bytes`, mapped for the GPU: its host address in
// `*host`; returns its device address.
template <class T>
T* mapped_host(size_t bytes, T** host) {
  CHECK(cudaHostAlloc(host, bytes, cudaHostAllocMapped));
  T* device;
  CHECK(cudaHostGetDevicePointer(&device, *host, 0));
  return device;
}

// Device memory of `bytes`, every byte set to `value`.
template <class T>
T* device_filled(size_t bytes, int value) {
  T* device;
  CHECK(cudaMalloc(&device, bytes));
  CHECK(cudaMemset(device, value, bytes));
  return device;
}

static inline float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

// The median of `reps` timings, in ms, of what `launch` enqueues on the
// default stream, each between two CUDA events.
template <class Launch>
float median_ms(int reps, Launch launch) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> runs;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    runs.push_back(ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return median(runs);
}

// Loads a block's U elements at base + i, i + blockDim.x, ..., four in flight
// a thread as NCCL's unroll keeps them; zero past `count`.
template <int U>
__device__ __forceinline__ void load_unrolled(int4 (&into)[U], const int4* __restrict__ from, size_t base, size_t i, size_t count) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const size_t at = i + (size_t)u * blockDim.x;
    into[u] = at < count ? from[base + at] : make_int4(0, 0, 0, 0);
  }
}

// Threads [first, first + count) write a slice of device memory into host memory.
__device__ __forceinline__ void send_slice(int4* __restrict__ host_out, const int4* __restrict__ dev, size_t at, size_t slice,
                                           int first, int count) {
  for (size_t i = threadIdx.x - first; i < slice; i += count) host_out[at + i] = dev[at + i];
}

// Threads [first, first + count) read a slice of host memory, four loads in
// flight a thread, into device memory; with `send_on` they also add what
// device memory held and store the sum back into host memory.
__device__ __forceinline__ void receive_slice(const int4* __restrict__ host_in, int4* __restrict__ host_out, int4* __restrict__ dev,
                                              size_t at, size_t slice, int first, int count, bool send_on) {
  for (size_t i = threadIdx.x - first; i < slice; i += 4 * (size_t)count) {
    int4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t j = i + (size_t)u * count;
      v[u] = j < slice ? host_in[at + j] : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t j = i + (size_t)u * count;
      if (j >= slice) continue;
      if (send_on) {
        const int4 mine = dev[at + j];
        v[u] = make_int4(v[u].x + mine.x, v[u].y + mine.y, v[u].z + mine.z, v[u].w + mine.w);
        host_out[at + j] = v[u];
      }
      dev[at + j] = v[u];
    }
  }
}
