// Does what GPU threads move through host memory depend on how much host
// memory their rings cover? NCCL's SHM transport gives every channel of
// every rank a 4 MiB staging ring (Simple: 8 steps of 512 KiB) in pinned
// host memory, so 4 ranks of 16 channels cycle through 256 MiB of it, 2
// ranks of 4 channels through 32 MiB. A CPU's last-level cache can hold a
// small footprint and not a large one. This probe runs k blocks of 512
// threads (Simple's), each cycling 512 KiB slices through its own ring of a
// footprint F shared by the k rings, F = 8 MiB .. 1 GiB, and prints one
// JSON line per case with the bytes each way a second. Modes: `write` (into
// host memory only), `read` (out of it only, pages the GPU never wrote),
// `alternate` (a write, then a read of other pages, as host_channels'
// alternation) and `alternate_own` (a write, then a read of what the block
// wrote half a ring earlier, as a peer reads what was sent to it).
// Build: nvcc -O3 -arch=sm_90 host_footprint.cu
#include <cstdio>
#include <cuda_runtime.h>
#include "probe.h"

enum Mode { kWrite = 0, kRead = 1, kAlternate = 2, kAlternateOwn = 3 };

// Block b cycles `steps` slices of `slice` int4s through slots [b * slots,
// (b + 1) * slots) of the host buffers.
__global__ void rings(const int4* __restrict__ host_in, int4* __restrict__ host_out, int4* __restrict__ dev, size_t slice,
                      int slots, int steps, int mode) {
  const size_t ring = (size_t)blockIdx.x * slots * slice;
  for (int s = 0; s < steps; ++s) {
    const size_t at = ring + (size_t)(s % slots) * slice;
    const size_t earlier = ring + (size_t)((s + slots / 2) % slots) * slice;
    if (mode != kRead) send_slice(host_out, dev, at, slice, 0, blockDim.x);
    __syncthreads();
    if (mode == kRead || mode == kAlternate) receive_slice(host_in, host_out, dev, at, slice, 0, blockDim.x, false);
    if (mode == kAlternateOwn) receive_slice(host_out, host_out, dev, earlier, slice, 0, blockDim.x, false);
    __syncthreads();
  }
}

int main() {
  const size_t slice_bytes = 512 << 10, slice = slice_bytes / 16;
  const size_t max_footprint = (size_t)1 << 30;
  int4 *in, *out;
  int4* in_dev = mapped_host(max_footprint, &in);
  int4* out_dev = mapped_host(max_footprint, &out);
  int4* dev = device_filled<int4>(max_footprint, 1);
  for (size_t i = 0; i < max_footprint / 16; ++i) in[i] = make_int4(1, 2, 3, 4);
  const char* names[] = {"write", "read", "alternate", "alternate_own"};
  for (int blocks : {4, 16}) {
    for (size_t footprint_mib : {8, 16, 32, 64, 128, 256, 512, 1024}) {
      const int slots = (int)((footprint_mib << 20) / (blocks * slice_bytes));
      if (slots < 4) continue;
      const int steps = slots * 2 > 64 ? slots * 2 : 64;
      for (int mode = kWrite; mode <= kAlternateOwn; ++mode) {
        auto launch = [&] {
          rings<<<blocks, 512>>>(in_dev, out_dev, dev, slice, slots, steps, mode);
          CHECK(cudaGetLastError());
        };
        launch();  // a warm run
        const double ms = median_ms(3, launch);
        const double each_way = (double)slice_bytes * steps * blocks / (ms * 1e-3) / 1e9;
        printf("{\"probe\":\"host_footprint\",\"mode\":\"%s\",\"blocks\":%d,\"threads\":512,\"slice_bytes\":%zu,"
               "\"footprint_bytes\":%zu,\"steps\":%d,\"time_ms\":%.4f,\"gbps_each_way\":%.2f}\n",
               names[mode], blocks, slice_bytes, footprint_mib << 20, steps, ms, each_way);
        fflush(stdout);
      }
    }
  }
  return 0;
}
