// How far apart do a kernel's thread blocks end when each walks a chain of
// flag handshakes? NCCL runs a collective's channels as thread blocks, and a
// call ends with its slowest channel; icsim charges the slowest of n
// channels E[max of n] x sqrt(steps) x step_jitter (src/collective/plan).
// One GPU cannot run NCCL's ranks, but it can show the two sources of that
// spread it has: when the blocks of one launch start, and how much a chain
// of flag round trips through memory varies from block to block.
//
//   start:  B blocks of 512 threads record the global timer as they start;
//           per launch, the latest start after the earliest and the mean.
//   chain:  C channels, each two blocks passing a flag back and forth S
//           times through global memory (a step: one post, one poll); per
//           launch, each channel's duration on its first block's timer.
//
// Build: nvcc -O3 -arch=sm_90 channel_skew.cu. Prints JSON lines.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "probe.h"

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The global timer's step: the smallest change one thread sees.
__global__ void timer_step(unsigned long long* step) {
  unsigned long long smallest = ~0ull, last = now_ns();
  for (int i = 0; i < 100000; ++i) {
    unsigned long long t = now_ns();
    if (t != last) { smallest = t - last < smallest ? t - last : smallest; last = t; }
  }
  *step = smallest;
}

__global__ void record_start(unsigned long long* start) {
  if (threadIdx.x == 0) start[blockIdx.x] = now_ns();
}

// Block 2c pings and block 2c+1 pongs; flags[c] counts the steps taken.
__global__ void flag_chain(volatile unsigned int* flags, int steps, unsigned long long* duration) {
  const int channel = blockIdx.x / 2, side = blockIdx.x % 2;
  if (threadIdx.x != 0) return;
  volatile unsigned int* flag = flags + channel * 32;  // one 128-byte line a channel
  unsigned long long begin = now_ns();
  for (int step = side; step < steps; step += 2) {
    while (*flag != (unsigned int)step) {}
    __threadfence();
    *flag = step + 1;
  }
  if (side == 0) {
    while (*flag != (unsigned int)steps) {}
    duration[channel] = now_ns() - begin;
  }
}

static double mean(const std::vector<double>& v) {
  double s = 0; for (double x : v) s += x; return s / v.size();
}

static double stdev(const std::vector<double>& v) {
  double m = mean(v), s = 0; for (double x : v) s += (x - m) * (x - m); return std::sqrt(s / (v.size() - 1));
}

int main() {
  const int launches = 400;
  unsigned long long *start, *duration;
  unsigned int* flags;
  CHECK(cudaMalloc(&start, 64 * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&duration, 64 * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&flags, 64 * 32 * sizeof(unsigned int)));
  cudaDeviceProp prop; CHECK(cudaGetDeviceProperties(&prop, 0));
  unsigned long long step_ns;
  timer_step<<<1, 1>>>(start);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&step_ns, start, sizeof(step_ns), cudaMemcpyDeviceToHost));
  printf("{\"probe\":\"timer\",\"gpu\":\"%s\",\"step_ns\":%llu}\n", prop.name, step_ns);

  for (int blocks : {2, 4, 8, 16, 24, 32}) {
    std::vector<double> spread, late;
    std::vector<unsigned long long> host(blocks);
    for (int l = 0; l < launches; ++l) {
      record_start<<<blocks, 512>>>(start);
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(host.data(), start, blocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      auto [lo, hi] = std::minmax_element(host.begin(), host.end());
      double sum = 0; for (auto t : host) sum += double(t - *lo);
      spread.push_back(double(*hi - *lo) / 1e3);
      late.push_back(double(*hi - *lo) / 1e3 - sum / blocks / 1e3);
    }
    printf("{\"probe\":\"start\",\"gpu\":\"%s\",\"blocks\":%d,\"launches\":%d,\"latest_after_earliest_us\":%.3f,\"latest_after_mean_us\":%.3f}\n",
           prop.name, blocks, launches, mean(spread), mean(late));
  }

  for (int steps : {2, 6, 14}) {
    for (int channels : {2, 8, 24}) {
      std::vector<double> all, slowest_after_mean;
      std::vector<unsigned long long> host(channels);
      for (int l = 0; l < launches; ++l) {
        CHECK(cudaMemset(flags, 0, 64 * 32 * sizeof(unsigned int)));
        flag_chain<<<2 * channels, 512>>>(flags, steps, duration);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(host.data(), duration, channels * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        std::vector<double> us(channels);
        for (int c = 0; c < channels; ++c) us[c] = double(host[c]) / 1e3;
        if (l < 10) continue;  // warm-up
        all.insert(all.end(), us.begin(), us.end());
        slowest_after_mean.push_back(*std::max_element(us.begin(), us.end()) - mean(us));
      }
      printf("{\"probe\":\"chain\",\"gpu\":\"%s\",\"steps\":%d,\"channels\":%d,\"launches\":%d,\"mean_us\":%.3f,\"stdev_us\":%.4f,"
             "\"step_stdev_us\":%.4f,\"slowest_after_mean_us\":%.4f}\n",
             prop.name, steps, channels, launches - 10, mean(all), stdev(all), stdev(all) / std::sqrt(double(steps)),
             mean(slowest_after_mean));
    }
  }
  return 0;
}
