// How long does one LL step through host memory take, and how does it grow
// with the bytes it carries? NCCL's LL protocol sends 16-byte lines of two
// 4-byte data words, each beside a 4-byte flag, with volatile stores; the
// receiver polls each line until both flags carry the step's value, then
// copies the data out. Through SHM both the lines and the flags cross PCIe
// into pinned host memory and back. Here two thread blocks of 512 threads
// (LL's) on one GPU play the two ranks: block 0 sends n bytes through host
// buffer A, block 1 receives them and sends them back through buffer B,
// block 0 receives them; half a round trip is one step (send and receive)
// of n bytes. The rounds repeat with a new flag value each, and the probe
// prints one JSON line per size with the mean time of a step.
// Build: nvcc -O3 -arch=sm_90 ll_host_step.cu
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
#include "probe.h"

struct Line {
  uint32_t data0, flag0, data1, flag1;
};

__device__ __forceinline__ void store_line(Line* at, uint32_t d0, uint32_t d1, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(at), "r"(d0), "r"(flag), "r"(d1), "r"(flag) : "memory");
}

__device__ __forceinline__ uint2 poll_line(const Line* at, uint32_t flag) {
  uint32_t d0, f0, d1, f1;
  do {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(at) : "memory");
  } while (f0 != flag || f1 != flag);
  return make_uint2(d0, d1);
}

// Sends `lines` lines of `from` (8 data bytes each) with `flag`.
__device__ void send(Line* fifo, const uint2* from, int lines, uint32_t flag) {
  for (int i = threadIdx.x; i < lines; i += blockDim.x) store_line(fifo + i, from[i].x, from[i].y, flag);
}

// Receives `lines` lines carrying `flag` into `into`.
__device__ void receive(const Line* fifo, uint2* into, int lines, uint32_t flag) {
  for (int i = threadIdx.x; i < lines; i += blockDim.x) into[i] = poll_line(fifo + i, flag);
  __syncthreads();
}

__global__ void ping_pong(Line* a, Line* b, uint2* buffer0, uint2* buffer1, int lines, int rounds, uint32_t first_flag) {
  for (int r = 0; r < rounds; ++r) {
    const uint32_t flag = first_flag + (uint32_t)r;
    if (blockIdx.x == 0) {
      send(a, buffer0, lines, flag);
      receive(b, buffer0, lines, flag);
    } else {
      receive(a, buffer1, lines, flag);
      send(b, buffer1, lines, flag);
    }
  }
}

int main() {
  const int max_lines = 1 << 17;  // 1 MiB of data, 2 MiB of lines
  Line *a, *b;
  CHECK(cudaHostAlloc(&a, max_lines * sizeof(Line), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&b, max_lines * sizeof(Line), cudaHostAllocMapped));
  memset(a, 0, max_lines * sizeof(Line));
  memset(b, 0, max_lines * sizeof(Line));
  Line *a_dev, *b_dev;
  CHECK(cudaHostGetDevicePointer(&a_dev, a, 0));
  CHECK(cudaHostGetDevicePointer(&b_dev, b, 0));
  uint2 *buffer0, *buffer1;
  CHECK(cudaMalloc(&buffer0, max_lines * sizeof(uint2)));
  CHECK(cudaMalloc(&buffer1, max_lines * sizeof(uint2)));
  CHECK(cudaMemset(buffer0, 1, max_lines * sizeof(uint2)));
  uint32_t flag = 1;
  for (int lines = 1; lines <= max_lines; lines *= 2) {
    const int rounds = lines <= 4096 ? 200 : 20;
    ping_pong<<<2, 512>>>(a_dev, b_dev, buffer0, buffer1, lines, 2, flag);  // warm
    CHECK(cudaGetLastError());
    flag += 2;
    // Each launch's rounds carry new flag values.
    const double ms = median_ms(5, [&] {
      ping_pong<<<2, 512>>>(a_dev, b_dev, buffer0, buffer1, lines, rounds, flag);
      flag += rounds;
    });
    const double step_us = ms * 1e3 / rounds / 2;
    printf("{\"probe\":\"ll_host_step\",\"threads\":512,\"data_bytes\":%d,\"rounds\":%d,\"step_us\":%.3f,\"data_gbps\":%.3f}\n", lines * 8,
           rounds, step_us, lines * 8 / (step_us * 1e3));
  }
  return 0;
}
