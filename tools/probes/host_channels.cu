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
// Three more unrolled modes copy what a GPU of a 2-rank SHM allreduce does
// a step: `split` is a tree's leaf (NCCL's runTreeSplit: 320 threads send,
// writing host memory, while the other 192 receive, reading it, each group
// on its own barrier); `read_write` is the tree's root (receive, reduce and
// send on: each thread loads from host memory and stores its sum back
// there); `ring_allreduce` is the ring's loop (send, receive-reduce-send,
// receive), which moves two slices each way a step. Run as
// `host_channels FIRST_MODE [registered]`: from mode FIRST_MODE on, in
// memory CUDA pins (the default) or shared pages registered with CUDA.
// Build: nvcc -O3 -arch=sm_90 host_channels.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <string>
#include <sys/mman.h>
#include <cuda_runtime.h>
#include "probe.h"

enum Mode {
  kAlternate = 0, kRead = 1, kWrite = 2, kAlternateUnrolled = 3, kReadUnrolled = 4,
  kSplitUnrolled = 5, kReadWriteUnrolled = 6, kRingAllreduceUnrolled = 7
};

// A barrier of `count` threads (a multiple of 32) under `id`, as NCCL's
// thread groups sync apart from the rest of their block.
__device__ __forceinline__ void group_barrier(int id, int count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count)); }

// Block b moves `steps` slices of `slice` int4s; its slices sit at its own
// offset of each buffer, so blocks never share a line.
__global__ void channels(const int4* __restrict__ host_in, int4* __restrict__ host_out, int4* __restrict__ dev,
                         size_t slice, int steps, int mode) {
  const size_t base = (size_t)blockIdx.x * slice;
  for (int s = 0; s < steps; ++s) {
    const size_t at = base + (size_t)(s % 4) * slice * gridDim.x;
    switch (mode) {
      case kAlternate:
        send_slice(host_out, dev, at, slice, 0, blockDim.x);
        __syncthreads();
        for (size_t i = threadIdx.x; i < slice; i += blockDim.x) dev[at + i] = host_in[at + i];
        break;
      case kRead:
        for (size_t i = threadIdx.x; i < slice; i += blockDim.x) dev[at + i] = host_in[at + i];
        break;
      case kWrite:
        send_slice(host_out, dev, at, slice, 0, blockDim.x);
        break;
      case kAlternateUnrolled:
        send_slice(host_out, dev, at, slice, 0, blockDim.x);
        __syncthreads();
        receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, false);
        break;
      case kReadUnrolled:
        receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, false);
        break;
      case kSplitUnrolled: {
        const int up = 320;  // runTreeSplit: half the block, plus 64 from 256 threads
        if ((int)threadIdx.x < up) {
          send_slice(host_out, dev, at, slice, 0, up);
          group_barrier(1, up);
        } else {
          receive_slice(host_in, host_out, dev, at, slice, up, blockDim.x - up, false);
          group_barrier(2, blockDim.x - up);
        }
        break;
      }
      case kReadWriteUnrolled:
        receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, true);
        break;
      case kRingAllreduceUnrolled:
        send_slice(host_out, dev, at, slice, 0, blockDim.x);
        __syncthreads();
        receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, true);
        __syncthreads();
        receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, false);
        break;
    }
    // A tree leaf's two groups keep their own pace (their own barriers).
    if (mode != kSplitUnrolled) __syncthreads();
  }
}

int main(int argc, char** argv) {
  const size_t slice_bytes = 512 << 10, slice = slice_bytes / 16;
  const int max_blocks = 32, steps = 64;
  const size_t buffer_bytes = slice_bytes * max_blocks * 4;
  int4 *in, *out, *in_dev, *out_dev;
  // NCCL's SHM transport maps shared memory (shm_open, mmap) and registers
  // it with CUDA; `registered` does the same with anonymous shared pages,
  // where the default is memory CUDA allocates pinned.
  const bool registered = argc > 2 && std::string(argv[2]) == "registered";
  if (registered) {
    for (int4** buffer : {&in, &out}) {
      void* pages = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (pages == MAP_FAILED) { perror("mmap"); return 1; }
      CHECK(cudaHostRegister(pages, buffer_bytes, cudaHostRegisterMapped));
      *buffer = static_cast<int4*>(pages);
    }
    CHECK(cudaHostGetDevicePointer(&in_dev, in, 0));
    CHECK(cudaHostGetDevicePointer(&out_dev, out, 0));
  } else {
    in_dev = mapped_host(buffer_bytes, &in);
    out_dev = mapped_host(buffer_bytes, &out);
  }
  int4* dev = device_filled<int4>(buffer_bytes, 1);
  for (size_t i = 0; i < buffer_bytes / 16; ++i) in[i] = make_int4(1, 2, 3, 4);
  const char* names[] = {"alternate",     "read",       "write",          "alternate_unrolled",
                         "read_unrolled", "split_unrolled", "read_write_unrolled", "ring_allreduce_unrolled"};
  const int first_mode = argc > 1 ? atoi(argv[1]) : 0;
  for (int mode = first_mode; mode < 8; ++mode) {
    for (int blocks : {1, 2, 4, 8, 12, 16, 24, 32}) {
      auto launch = [&] {
        channels<<<blocks, 512>>>(in_dev, out_dev, dev, slice, steps, mode);
        CHECK(cudaGetLastError());
      };
      launch();  // two warm runs
      launch();
      const double ms = median_ms(5, launch);
      const int slices_a_step = mode == kRingAllreduceUnrolled ? 2 : 1;
      const double each_way = (double)slice_bytes * slices_a_step * steps * blocks / (ms * 1e-3) / 1e9;
      printf("{\"probe\":\"host_channels\",\"memory\":\"%s\",\"mode\":\"%s\",\"blocks\":%d,\"threads\":512,\"slice_bytes\":%zu,"
             "\"steps\":%d,\"time_ms\":%.4f,\"gbps_each_way\":%.2f}\n",
             registered ? "registered" : "cuda_host_alloc", names[mode], blocks, slice_bytes, steps, ms, each_way);
    }
  }
  return 0;
}
