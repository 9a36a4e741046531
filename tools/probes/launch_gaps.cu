// How far apart do back-to-back kernels start on the GPU, launched one by
// one from a stream (eager) and replayed from a CUDA graph? Each kernel
// stamps the GPU's global timer when it starts and when it ends, spinning
// in between (2 to 50 us, so the host's launches run ahead of the GPU
// except at the shortest); the gap is the next kernel's start less this
// one's end. Prints one JSON line per case: the median and the 10th and
// 90th percentiles of the gaps (the first 16 kernels left out), and the
// host's time a launch (eager: the launch loop's wall time over the
// kernels).
// Build: nvcc -O3 -arch=sm_90 launch_gaps.cu
#include <chrono>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include "probe.h"

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stamped_spin(unsigned long long* stamps, int index, unsigned long long ns) {
  if (threadIdx.x != 0) return;
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
  stamps[2 * index] = start;
  stamps[2 * index + 1] = global_ns();
}

static double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[(size_t)(q * (v.size() - 1))];
}

int main() {
  const int kernels = 512, skipped = 16;
  unsigned long long* stamps = device_filled<unsigned long long>(2 * kernels * sizeof(unsigned long long), 0);
  std::vector<unsigned long long> host(2 * kernels);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (double spin_us : {2.0, 10.0, 50.0}) {
    const unsigned long long ns = (unsigned long long)(spin_us * 1e3);
    auto enqueue = [&] {
      for (int k = 0; k < kernels; ++k) stamped_spin<<<1, 32, 0, stream>>>(stamps, k, ns);
      CHECK(cudaGetLastError());
    };
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    enqueue();
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const char* launch : {"stream", "graph"}) {
      const bool graphed = launch[0] == 'g';
      for (int warm = 0; warm < 2; ++warm) {
        if (graphed) CHECK(cudaGraphLaunch(exec, stream)); else enqueue();
        CHECK(cudaStreamSynchronize(stream));
      }
      const auto begin = std::chrono::steady_clock::now();
      if (graphed) CHECK(cudaGraphLaunch(exec, stream)); else enqueue();
      const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count();
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      std::vector<double> gaps;
      for (int k = skipped; k + 1 < kernels; ++k) gaps.push_back((double)(host[2 * (k + 1)] - host[2 * k + 1]) / 1e3);
      printf("{\"probe\":\"launch_gaps\",\"launch\":\"%s\",\"spin_us\":%.0f,\"kernels\":%d,\"gap_us_median\":%.3f,"
             "\"gap_us_p10\":%.3f,\"gap_us_p90\":%.3f,\"host_us_a_launch\":%.3f}\n",
             launch, spin_us, kernels, percentile(gaps, 0.5), percentile(gaps, 0.1), percentile(gaps, 0.9),
             host_us / (graphed ? 1 : kernels));
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  return 0;
}
