// icsim's memory-bound kernels of an LLM layer, compiled by NVRTC at run
// time (src/calibrate/runner/kernels/nvrtc.rs). bf16 values are carried as
// 16-bit integers (no CUDA headers needed) and computed in float; memory is
// moved 8 values (16 bytes) at a time. Every width is a multiple of 8 and
// every row starts 16-byte aligned. Each kernel moves the bytes the model
// counts for it (src/workload/forward.rs).

typedef unsigned short bf16;
typedef unsigned long long u64;

__device__ __forceinline__ float lo(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(unsigned int w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned int round_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ unsigned int two(float a, float b) { return round_bf16(a) | (round_bf16(b) << 16); }

__device__ __forceinline__ void unpack(uint4 v, float* f) {
    f[0] = lo(v.x); f[1] = hi(v.x); f[2] = lo(v.y); f[3] = hi(v.y);
    f[4] = lo(v.z); f[5] = hi(v.z); f[6] = lo(v.w); f[7] = hi(v.w);
}
__device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(two(f[0], f[1]), two(f[2], f[3]), two(f[4], f[5]), two(f[6], f[7]));
}
__device__ __forceinline__ uint4 load8(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store8(bf16* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

// Pseudo-random values in [-scale, scale] (weights and activations with
// real bit patterns, not zeros: a GPU's power draw depends on the data).
extern "C" __global__ void fill_random(bf16* out, u64 count, unsigned int seed, float scale) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        unsigned int h = (unsigned int)(i * 2654435761ull) ^ seed;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        float value = ((float)(h & 0xffffff) / 8388608.0f - 1.0f) * scale;
        out[i] = (bf16)round_bf16(value);
    }
}

// Block-wide sum of one float per thread (blockDim.x a multiple of 32, at most 1024).
__device__ float block_sum(float value) {
    __shared__ float partial[32];
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = value;
    __syncthreads();
    value = (threadIdx.x < blockDim.x / 32) ? partial[lane] : 0.0f;
    if (warp == 0) for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (threadIdx.x == 0) partial[0] = value;
    __syncthreads();
    float total = partial[0];
    __syncthreads();
    return total;
}

// y = x / rms(x) * w, one block per row (the second read of a row hits L2).
extern "C" __global__ void rms_norm(const bf16* x, const bf16* w, bf16* y, int width, float eps) {
    const bf16* row = x + (u64)blockIdx.x * width;
    float f[8], g[8], squares = 0.0f;
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        unpack(load8(row + c), f);
        for (int i = 0; i < 8; i++) squares += f[i] * f[i];
    }
    float scale = rsqrtf(block_sum(squares) / width + eps);
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        unpack(load8(row + c), f);
        unpack(load8(w + c), g);
        for (int i = 0; i < 8; i++) f[i] *= scale * g[i];
        store8(y + (u64)blockIdx.x * width + c, pack(f));
    }
}

// residual += x; y = norm(residual) * w, one block per row.
extern "C" __global__ void add_rms_norm(const bf16* x, bf16* residual, const bf16* w, bf16* y, int width, float eps) {
    u64 base = (u64)blockIdx.x * width;
    float f[8], g[8], squares = 0.0f;
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        unpack(load8(x + base + c), f);
        unpack(load8(residual + base + c), g);
        for (int i = 0; i < 8; i++) { f[i] += g[i]; squares += f[i] * f[i]; }
        store8(residual + base + c, pack(f));
    }
    float scale = rsqrtf(block_sum(squares) / width + eps);
    for (int c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
        unpack(load8(residual + base + c), f);
        unpack(load8(w + c), g);
        for (int i = 0; i < 8; i++) f[i] *= scale * g[i];
        store8(y + base + c, pack(f));
    }
}

// out[r][c] = a[r][c] op b[r][c] over rows of `width`, each operand with its
// own row stride; op 0 adds, 1 multiplies, 2 is silu(a) (b unused), 3 is
// silu(a) * b.
extern "C" __global__ void elementwise(const bf16* a, int a_stride, const bf16* b, int b_stride, bf16* out, int rows, int width, int op) {
    u64 vectors = (u64)rows * (width / 8);
    float f[8], g[8];
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < vectors; v += (u64)gridDim.x * blockDim.x) {
        u64 r = v / (width / 8), c = (v % (width / 8)) * 8;
        unpack(load8(a + r * a_stride + c), f);
        if (op != 2) unpack(load8(b + r * b_stride + c), g);
        for (int i = 0; i < 8; i++) {
            float s = (op >= 2) ? silu(f[i]) : f[i];
            f[i] = op == 0 ? s + g[i] : (op == 2 ? s : s * g[i]);
        }
        store8(out + r * width + c, pack(f));
    }
}

// Rotates the first `heads` heads of every row of qkv in place (NeoX
// style: halves of a head), with a row of cos|sin per token.
extern "C" __global__ void rotary(bf16* qkv, int row_stride, const bf16* cos_sin, int rows, int heads, int head_dim) {
    int half = head_dim / 2, per_head = half / 8;
    u64 vectors = (u64)rows * heads * per_head;
    float x1[8], x2[8], c[8], s[8];
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < vectors; v += (u64)gridDim.x * blockDim.x) {
        u64 r = v / (heads * per_head);
        int h = (v / per_head) % heads, i = (v % per_head) * 8;
        bf16* head = qkv + r * row_stride + (u64)h * head_dim;
        unpack(load8(head + i), x1);
        unpack(load8(head + half + i), x2);
        unpack(load8(cos_sin + r * head_dim + i), c);
        unpack(load8(cos_sin + r * head_dim + half + i), s);
        float o1[8], o2[8];
        for (int j = 0; j < 8; j++) { o1[j] = x1[j] * c[j] - x2[j] * s[j]; o2[j] = x2[j] * c[j] + x1[j] * s[j]; }
        store8(head + i, pack(o1));
        store8(head + half + i, pack(o2));
    }
}

// Copies rows of `width` from src (row stride src_stride) into dst at row
// `first`; a second pair (src2, dst2) is copied too unless src2 is null.
extern "C" __global__ void copy_rows(const bf16* src, const bf16* src2, int src_stride, bf16* dst, bf16* dst2, int rows, int width, int first) {
    u64 vectors = (u64)rows * (width / 8);
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < vectors; v += (u64)gridDim.x * blockDim.x) {
        u64 r = v / (width / 8), c = (v % (width / 8)) * 8;
        u64 to = (first + r) * (u64)width + c;
        store8(dst + to, load8(src + r * src_stride + c));
        if (src2) store8(dst2 + to, load8(src2 + r * src_stride + c));
    }
}

// out[r] = table[ids[r]] for rows of `width`.
extern "C" __global__ void embedding(const int* ids, const bf16* table, bf16* out, int rows, int width) {
    u64 vectors = (u64)rows * (width / 8);
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < vectors; v += (u64)gridDim.x * blockDim.x) {
        u64 r = v / (width / 8), c = (v % (width / 8)) * 8;
        store8(out + r * width + c, load8(table + (u64)ids[r] * width + c));
    }
}

// Token ids spread over a vocabulary, so that lookups touch distinct rows.
extern "C" __global__ void fill_ids(int* ids, int rows, int vocab) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) ids[r] = (int)((r * 7919u + 13u) % (unsigned int)vocab);
}
