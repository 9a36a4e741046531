// What does the element type cost a reducing thread block? NCCL's reducing
// primitives (recvReduceSend, recvReduceCopy, ...) load two operands, add
// them element-wise and store the sum; the adds are the only work that
// depends on the element type. fp32, fp16 and bf16 take one instruction per
// 4 bytes (FADD, HADD2); NCCL sums 8-bit integers four to a 32-bit word with
// two masked adds and a byte permute (reduce_kernel.h, uint8 FuncSum), and
// fp8 by widening pairs to half2, adding, and narrowing back. This probe runs
// k blocks of 512 threads (Simple's), each reduce-copying its share of two
// arrays into a third with 16-byte accesses, four in flight a thread (NCCL's
// unroll), once for each element type, from HBM (1 GiB working set) and from
// L2 (6 MiB), and prints one JSON line per case: the data bytes (one
// operand's) a block reduces a second, and the picoseconds a byte that the
// type adds over fp16's.
// Build: nvcc -O3 -arch=sm_90 cta_reduce.cu
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "probe.h"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

enum Element { kF32 = 0, kF16 = 1, kBf16 = 2, kI8 = 3, kFp8 = 4 };
constexpr int kUnroll = 4;

// One 32-bit word of `a` plus one of `b`, element-wise, as NCCL sums the type.
template <int E>
__device__ __forceinline__ uint32_t add_word(uint32_t a, uint32_t b) {
  if constexpr (E == kF32) {
    return __float_as_uint(__uint_as_float(a) + __uint_as_float(b));
  } else if constexpr (E == kF16) {
    __half2 x = *reinterpret_cast<__half2*>(&a), y = *reinterpret_cast<__half2*>(&b);
    __half2 s = __hadd2(x, y);
    return *reinterpret_cast<uint32_t*>(&s);
  } else if constexpr (E == kBf16) {
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a), y = *reinterpret_cast<__nv_bfloat162*>(&b);
    __nv_bfloat162 s = __hadd2(x, y);
    return *reinterpret_cast<uint32_t*>(&s);
  } else if constexpr (E == kI8) {
    // Even and odd bytes summed in separate 16-bit lanes (carries fall into
    // the unused byte), then the low byte of each lane picked back.
    const uint32_t low = 0x00ff00ffu;
    const uint32_t evens = (a & low) + (b & low);
    const uint32_t odds = (a & ~low) + (b & ~low);
    return __byte_perm(evens, odds, 0x7250);
  } else {
    // Two fp8 pairs: widen each to half2, add, narrow back.
    uint32_t out = 0;
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      __nv_fp8x2_e4m3 x, y;
      x.__x = (uint16_t)(a >> (16 * pair));
      y.__x = (uint16_t)(b >> (16 * pair));
      __nv_fp8x2_e4m3 s(__hadd2(__half2(x), __half2(y)));
      out |= (uint32_t)s.__x << (16 * pair);
    }
    return out;
  }
}

template <int E>
__device__ __forceinline__ int4 add_vector(int4 a, int4 b) {
  int4 r;
  r.x = (int)add_word<E>((uint32_t)a.x, (uint32_t)b.x);
  r.y = (int)add_word<E>((uint32_t)a.y, (uint32_t)b.y);
  r.z = (int)add_word<E>((uint32_t)a.z, (uint32_t)b.z);
  r.w = (int)add_word<E>((uint32_t)a.w, (uint32_t)b.w);
  return r;
}

// Block k reduce-copies elements [k * per_block, (k + 1) * per_block).
template <int E>
__global__ void reduce_copy(const int4* __restrict__ a, const int4* __restrict__ b, int4* __restrict__ out,
                            size_t per_block, int passes) {
  const size_t base = (size_t)blockIdx.x * per_block;
  const size_t stride = (size_t)blockDim.x * kUnroll;
  for (int pass = 0; pass < passes; ++pass)
    for (size_t i = threadIdx.x; i < per_block; i += stride) {
      int4 x[kUnroll], y[kUnroll];
      load_unrolled(x, a, base, i, per_block);
      load_unrolled(y, b, base, i, per_block);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t at = i + (size_t)u * blockDim.x;
        if (at < per_block) out[base + at] = add_vector<E>(x[u], y[u]);
      }
    }
}

using Kernel = void (*)(const int4*, const int4*, int4*, size_t, int);

int main() {
  const size_t max_array = (size_t)1 << 30;
  int4 *a, *b, *out;
  CHECK(cudaMalloc(&a, max_array));
  CHECK(cudaMalloc(&b, max_array));
  CHECK(cudaMalloc(&out, max_array));
  // Small values in every element type (0x01 bytes; 0x3c00 is fp16 1.0).
  CHECK(cudaMemset(a, 1, max_array));
  CHECK(cudaMemset(b, 1, max_array));
  const char* names[] = {"float32", "float16", "bfloat16", "int8", "float8e4m3"};
  const Kernel kernels[] = {reduce_copy<kF32>, reduce_copy<kF16>, reduce_copy<kBf16>, reduce_copy<kI8>, reduce_copy<kFp8>};
  // Working sets (three arrays together): HBM-resident and L2-resident.
  const size_t sets[] = {(size_t)3 << 30, (size_t)6 << 20};
  for (size_t set : sets) {
    for (int blocks : {1, 24}) {
      const size_t per_array = set / 3;
      const size_t per_block = per_array / 16 / blocks;
      // Each block reduces 512 MiB of one operand, whatever the set.
      const int passes = (int)std::max<size_t>(1, ((size_t)512 << 20) / (per_block * 16));
      double f16_ps = 0;
      for (int e : {kF16, kF32, kBf16, kI8, kFp8}) {
        kernels[e]<<<blocks, 512>>>(a, b, out, per_block, 1);  // warm
        CHECK(cudaGetLastError());
        const double ms = median_ms(5, [&] { kernels[e]<<<blocks, 512>>>(a, b, out, per_block, passes); });
        const double reduced = (double)per_block * 16 * passes;  // one operand's bytes, one block
        const double ps_per_byte = ms * 1e9 / reduced;
        if (e == kF16) f16_ps = ps_per_byte;
        printf("{\"probe\":\"cta_reduce\",\"element\":\"%s\",\"blocks\":%d,\"threads\":512,\"working_set_bytes\":%zu,"
               "\"time_ms\":%.4f,\"gbps_per_block\":%.2f,\"ps_per_byte\":%.3f,\"over_float16_ps_per_byte\":%.3f}\n",
               names[e], blocks, set, ms, reduced / (ms * 1e-3) / 1e9, ps_per_byte, ps_per_byte - f16_ps);
      }
    }
  }
  return 0;
}
