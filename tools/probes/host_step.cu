// How long does one Simple step through host memory take, and does it take
// longer while other channels stream through host memory? NCCL's Simple
// sender writes a slice into the receiver's pinned staging buffer, syncs
// its threads, fences at system scope and stores the step counter; the
// receiver's thread polls that counter in host memory, then its threads
// read the slice (postPeer / waitPeer in prims_simple.h). Here two thread
// blocks of 512 threads play the two ranks: block 0 sends n bytes through
// host buffer A, block 1 receives them and sends them back through buffer
// B, block 0 receives them; half a round trip is one step (send and
// receive) of n bytes. Beside them 0-8 more blocks alternate 512 KiB writes
// and reads of other host memory, as a call's other channels do, or only
// write it, or only read it, until the ping-pong ends. Block 0 times its rounds with the GPU's global timer; the
// probe prints one JSON line per case with the mean time of a step.
// Build: nvcc -O3 -arch=sm_90 host_step.cu
#include <cstdint>
#include <cuda_runtime.h>
#include "probe.h"

constexpr int kThreads = 512;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void post_step(uint64_t* counter, uint64_t step) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(counter), "l"(step) : "memory");
  }
}

__device__ __forceinline__ void wait_step(const uint64_t* counter, uint64_t step) {
  if (threadIdx.x == 0) {
    uint64_t seen;
    do {
      asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(seen) : "l"(counter) : "memory");
    } while (seen < step);
  }
  __syncthreads();
}

// One step: the sender's slice into host memory and its counter; the
// receiver's wait and its read of the slice.
__device__ __forceinline__ void send(int4* host, uint64_t* counter, const int4* dev, size_t count, uint64_t step) {
  send_slice(host, dev, 0, count, 0, kThreads);
  post_step(counter, step);
}

__device__ __forceinline__ void receive(const int4* host, const uint64_t* counter, int4* dev, size_t count, uint64_t step) {
  wait_step(counter, step);
  receive_slice(host, nullptr, dev, 0, count, 0, kThreads, false);
}

enum Load { kAlternate = 0, kWrite = 1, kRead = 2 };

__global__ void ping_pong(int4* a, int4* b, uint64_t* counters, int4* dev, size_t count, int rounds, uint64_t base,
                          int4* load_host, int4* load_dev, size_t load_slice, int load, volatile int* stop, uint64_t* elapsed_ns) {
  if (blockIdx.x >= 2) {
    // Another channel: write a slice into host memory and read it back, or
    // only write, or only read, until the ping-pong is over.
    const size_t at = (size_t)(blockIdx.x - 2) * load_slice;
    while (*stop == 0) {
      if (load != kRead) send_slice(load_host, load_dev, at, load_slice, 0, kThreads);
      __syncthreads();
      if (load != kWrite) receive_slice(load_host, nullptr, load_dev, at, load_slice, 0, kThreads, false);
      __syncthreads();
    }
    return;
  }
  int4* mine = dev + (size_t)blockIdx.x * count;
  const uint64_t start = global_ns();
  for (int r = 1; r <= rounds; ++r) {
    const uint64_t step = base + r;
    if (blockIdx.x == 0) {
      send(a, &counters[0], mine, count, step);
      receive(b, &counters[16], mine, count, step);
    } else {
      receive(a, &counters[0], mine, count, step);
      send(b, &counters[16], mine, count, step);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *elapsed_ns = global_ns() - start;
    *stop = 1;
  }
}

int main() {
  const int rounds = 2000, max_load_blocks = 8;
  const size_t max_bytes = 1 << 20, max_load_slice_bytes = 512 << 10;
  const size_t load_bytes = max_load_slice_bytes * max_load_blocks;
  int4 *a, *b, *load_host;
  uint64_t *counters, *elapsed;
  int4* a_dev = mapped_host(max_bytes, &a);
  int4* b_dev = mapped_host(max_bytes, &b);
  int4* load_host_dev = mapped_host(load_bytes, &load_host);
  uint64_t* counters_dev = mapped_host(32 * sizeof(uint64_t), &counters);
  int4* dev = device_filled<int4>(2 * max_bytes, 1);
  int4* load_dev = device_filled<int4>(load_bytes, 1);
  int* stop = device_filled<int>(sizeof(int), 0);
  CHECK(cudaMallocManaged(&elapsed, sizeof(uint64_t)));
  for (int i = 0; i < 32; ++i) counters[i] = 0;
  uint64_t base = 0;
  const char* loads[] = {"alternate", "write", "read"};
  // The other channels' slices: 512 KiB, NCCL's Simple step through host
  // memory, and 32 KiB, a slice of a 512 KiB 2-rank allreduce on 4 channels
  // (alternating only).
  for (size_t load_slice_bytes : {max_load_slice_bytes, (size_t)32 << 10}) {
    for (int load = kAlternate; load <= kRead; ++load) {
      if (load_slice_bytes != max_load_slice_bytes && load != kAlternate) continue;
      for (int load_blocks : {0, 1, 2, 3, 4, 8}) {
        if (load_blocks == 0 && (load != kAlternate || load_slice_bytes != max_load_slice_bytes)) continue;
        for (size_t bytes : {16ul, 8ul << 10, 32ul << 10, 64ul << 10, 128ul << 10}) {
          std::vector<float> steps_us;
          for (int rep = 0; rep < 4; ++rep) {  // the first run is a warm-up
            CHECK(cudaMemset(stop, 0, sizeof(int)));
            ping_pong<<<2 + load_blocks, kThreads>>>(a_dev, b_dev, counters_dev, dev, bytes / 16, rounds, base, load_host_dev, load_dev,
                                                     load_slice_bytes / 16, load, stop, elapsed);
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            base += rounds;
            if (rep > 0) steps_us.push_back((float)(*elapsed / 1e3 / (2.0 * rounds)));
          }
          printf("{\"probe\":\"host_step\",\"protocol\":\"simple\",\"threads\":%d,\"data_bytes\":%zu,\"load\":\"%s\",\"load_blocks\":%d,"
                 "\"load_slice_bytes\":%zu,\"rounds\":%d,\"step_us\":%.3f}\n",
                 kThreads, bytes, loads[load], load_blocks, load_slice_bytes, rounds, median(steps_us));
          fflush(stdout);
        }
      }
    }
  }
  return 0;
}
