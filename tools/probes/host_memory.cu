// Does streaming HBM between them slow GPU threads reading and writing host
// memory? NCCL's SHM transport moves a collective's data with SM loads and
// stores to pinned host memory; inside a forward those calls follow kernels
// that stream gigabytes of weights. This probe times the same host-memory
// copy (16 blocks of 512 threads, as NCCL's SHM channels) back to back, and
// each one right after a kernel that streams HBM, with CUDA events around the
// host-memory copy only; then reads and writes of host memory at once, as a
// GPU of an SHM ring does. Build: nvcc -O3 -arch=sm_90 host_memory.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "probe.h"

__global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

// Half the blocks read host memory while the other half write it, as each
// GPU of an SHM ring does (it writes what the next GPU reads and reads what
// the previous one wrote).
__global__ void read_and_write(const int4* __restrict__ host_in, int4* __restrict__ dev_out,
                               const int4* __restrict__ dev_in, int4* __restrict__ host_out, size_t n) {
  const bool reader = blockIdx.x < gridDim.x / 2;
  const int4* src = reader ? host_in : dev_in;
  int4* dst = reader ? dev_out : host_out;
  const size_t half = gridDim.x / 2, block = reader ? blockIdx.x : blockIdx.x - half;
  for (size_t i = block * (size_t)blockDim.x + threadIdx.x; i < n; i += half * blockDim.x) dst[i] = src[i];
}

static float timed_copy(const int4* src, int4* dst, size_t n, int blocks, cudaEvent_t a, cudaEvent_t b) {
  CHECK(cudaEventRecord(a));
  copy16<<<blocks, 512>>>(src, dst, n);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms; CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

int main() {
  const size_t host_bytes = 128ull << 20, hbm_bytes = 4ull << 30;
  const size_t nh = host_bytes / 16, nd = hbm_bytes / 16;
  int4 *host, *host_dev, *dev, *hbm_a, *hbm_b;
  CHECK(cudaHostAlloc(&host, host_bytes, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host_dev, host, 0));
  for (size_t i = 0; i < nh; ++i) host[i] = make_int4(i, i + 1, i + 2, i + 3);
  CHECK(cudaMalloc(&dev, host_bytes));
  CHECK(cudaMalloc(&hbm_a, hbm_bytes));
  CHECK(cudaMalloc(&hbm_b, hbm_bytes));
  CHECK(cudaMemset(hbm_a, 1, hbm_bytes));
  cudaEvent_t a, b; CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
  int sms; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("what                                  blocks  median_ms  GB/s\n");
  for (int blocks : {4, 16}) {
    for (int dir = 0; dir < 2; ++dir) {  // 0: read host, 1: write host
      const int4* src = dir == 0 ? host_dev : dev;
      int4* dst = dir == 0 ? dev : host_dev;
      for (int w = 0; w < 3; ++w) timed_copy(src, dst, nh, blocks, a, b);
      std::vector<float> alone, after;
      for (int r = 0; r < 15; ++r) alone.push_back(timed_copy(src, dst, nh, blocks, a, b));
      for (int r = 0; r < 15; ++r) {
        copy16<<<sms * 4, 512>>>(hbm_a, hbm_b, nd);  // 8 GiB of HBM traffic first
        CHECK(cudaGetLastError());
        after.push_back(timed_copy(src, dst, nh, blocks, a, b));
      }
      const char* what = dir == 0 ? "GPU threads read host memory" : "GPU threads write host memory";
      printf("%-30s alone  %6d  %9.3f  %5.1f\n", what, blocks, median(alone), host_bytes / median(alone) / 1e6);
      printf("%-30s after  %6d  %9.3f  %5.1f\n", what, blocks, median(after), host_bytes / median(after) / 1e6);
    }
  }
  int4 *host2, *host2_dev, *dev2;
  CHECK(cudaHostAlloc(&host2, host_bytes, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&host2_dev, host2, 0));
  CHECK(cudaMalloc(&dev2, host_bytes));
  CHECK(cudaMemset(dev2, 2, host_bytes));
  for (int blocks : {8, 32}) {
    for (int gap = 0; gap < 2; ++gap) {  // back to back, or each after HBM streaming
      std::vector<float> both;
      for (int r = 0; r < 18; ++r) {
        if (gap) {
          copy16<<<sms * 4, 512>>>(hbm_a, hbm_b, nd);
          CHECK(cudaGetLastError());
        }
        CHECK(cudaEventRecord(a));
        read_and_write<<<blocks, 512>>>(host_dev, dev, dev2, host2_dev, nh);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms; CHECK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 3) both.push_back(ms);
      }
      printf("read and write host, each %s %6d  %9.3f  %5.1f\n", gap ? "after" : "alone", blocks / 2, median(both), host_bytes / median(both) / 1e6);
    }
  }
  std::vector<float> hbm;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a)); copy16<<<sms * 4, 512>>>(hbm_a, hbm_b, nd); CHECK(cudaEventRecord(b)); CHECK(cudaEventSynchronize(b));
    float ms; CHECK(cudaEventElapsedTime(&ms, a, b)); hbm.push_back(ms);
  }
  printf("HBM stream (read+write 8 GiB)   %6d  %9.3f  %5.1f\n", sms * 4, median(hbm), 2.0 * hbm_bytes / median(hbm) / 1e6);
  return 0;
}
