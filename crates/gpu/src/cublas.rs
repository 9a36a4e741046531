//! cuBLAS, loaded at run time (`libs`), and the one call the runner makes:
//! a bf16 matrix product with float accumulation, as PyTorch's
//! `torch.nn.functional.linear` issues it (the weight transposed, so
//! Y[m x n] = X[m x k] W[n x k]^T in row-major terms). Knows nothing of
//! what is measured.

use std::ffi::{c_int, c_void};

use crate::GpuError;
use crate::cuda::{DeviceRange, Stream};
use crate::libs;

type Handle = *mut c_void;
type Status = c_int;
type Create = unsafe extern "C" fn(*mut Handle) -> Status;
type Destroy = unsafe extern "C" fn(Handle) -> Status;
type SetStream = unsafe extern "C" fn(Handle, cudarc::driver::sys::CUstream) -> Status;
type SetWorkspace = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;
type GetVersion = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
#[rustfmt::skip]
type GemmEx = unsafe extern "C" fn(
    Handle, c_int, c_int, c_int, c_int, c_int, *const c_void,
    *const c_void, c_int, c_int, *const c_void, c_int, c_int, *const c_void,
    *mut c_void, c_int, c_int, c_int, c_int,
) -> Status;

// cublas_api.h and library_types.h.
const OP_N: c_int = 0;
const OP_T: c_int = 1;
const R_16BF: c_int = 14;
const COMPUTE_32F: c_int = 68;
const GEMM_DEFAULT: c_int = -1;

/// cuBLAS's entry points and one handle on one stream.
pub struct Cublas {
    create: Create,
    destroy: Destroy,
    set_stream: SetStream,
    set_workspace: SetWorkspace,
    get_version: GetVersion,
    gemm_ex: GemmEx,
    handle: Handle,
    pub location: String,
    _library: libs::Loaded,
}

fn check(call: &str, status: Status) -> Result<(), GpuError> {
    if status == 0 { Ok(()) } else { Err(GpuError::Cuda { what: call.to_string(), error: format!("cublasStatus_t {status}") }) }
}

impl Cublas {
    /// Loads cuBLAS and makes a handle (the GPU's context must be current).
    pub fn load() -> Result<Cublas, GpuError> {
        let loaded = libs::load("libcublas", &["libcublasLt"], "CUBLAS_LIB").map_err(GpuError::Usage)?;
        let symbol = |name: &'static str| GpuError::Usage(format!("{} is not a usable cuBLAS: no {name}", loaded.location));
        // SAFETY (every `get`): each symbol is declared with cublas_api.h's
        // signature and used only while the library stays loaded (`Cublas`
        // owns it).
        let mut cublas = unsafe {
            Cublas {
                create: *loaded.library.get::<Create>(b"cublasCreate_v2\0").map_err(|_| symbol("cublasCreate_v2"))?,
                destroy: *loaded.library.get::<Destroy>(b"cublasDestroy_v2\0").map_err(|_| symbol("cublasDestroy_v2"))?,
                set_stream: *loaded.library.get::<SetStream>(b"cublasSetStream_v2\0").map_err(|_| symbol("cublasSetStream_v2"))?,
                set_workspace: *loaded
                    .library
                    .get::<SetWorkspace>(b"cublasSetWorkspace_v2\0")
                    .map_err(|_| symbol("cublasSetWorkspace_v2"))?,
                get_version: *loaded.library.get::<GetVersion>(b"cublasGetVersion_v2\0").map_err(|_| symbol("cublasGetVersion_v2"))?,
                gemm_ex: *loaded.library.get::<GemmEx>(b"cublasGemmEx\0").map_err(|_| symbol("cublasGemmEx"))?,
                handle: std::ptr::null_mut(),
                location: loaded.location.clone(),
                _library: loaded,
            }
        };
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer.
        check("cublasCreate", unsafe { (cublas.create)(&mut handle) })?;
        cublas.handle = handle;
        Ok(cublas)
    }

    /// The library's version, as major.minor.patch.
    pub fn version(&self) -> Result<String, GpuError> {
        let mut version: c_int = 0;
        // SAFETY: a live handle; writes one int.
        check("cublasGetVersion", unsafe { (self.get_version)(self.handle, &mut version) })?;
        Ok(format!("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100))
    }

    /// Issues later products on `stream`, with `workspace` as cuBLAS's
    /// scratch memory (so that graph capture allocates nothing).
    pub fn bind(&self, stream: &Stream, workspace: DeviceRange<'_>) -> Result<(), GpuError> {
        // SAFETY: a live handle and stream; the workspace lies in a live
        // allocation that outlives the handle's use of it (the caller keeps it).
        unsafe {
            check("cublasSetStream", (self.set_stream)(self.handle, stream.raw()))?;
            check("cublasSetWorkspace", (self.set_workspace)(self.handle, workspace.address() as *mut c_void, workspace.len()))
        }
    }

    /// Queues Y[m x n] = X[m x k] W[n x k]^T in bf16, accumulating in float.
    pub fn linear(&self, x: DeviceRange<'_>, w: DeviceRange<'_>, y: DeviceRange<'_>, m: usize, n: usize, k: usize) -> Result<(), GpuError> {
        assert!(x.len() >= 2 * m * k && w.len() >= 2 * n * k && y.len() >= 2 * m * n, "buffers too small for a {m}x{k} by {k}x{n} product");
        let dimension =
            |d: usize| c_int::try_from(d).map_err(|_| GpuError::Usage(format!("a matrix dimension of {d} is too large for cuBLAS")));
        let (m, n, k) = (dimension(m)?, dimension(n)?, dimension(k)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major: C[n x m] = op(A)[n x k] B[k x m], A = W stored k x n
        // (transposed), B = X stored k x m, C = Y stored n x m.
        // SAFETY: the ranges lie in live device allocations large enough
        // for the shapes (asserted); alpha and beta are host floats that
        // outlive the call (read before it returns).
        let status = unsafe {
            (self.gemm_ex)(
                self.handle,
                OP_T,
                OP_N,
                n,
                m,
                k,
                (&alpha as *const f32).cast(),
                w.address() as *const c_void,
                R_16BF,
                k,
                x.address() as *const c_void,
                R_16BF,
                k,
                (&beta as *const f32).cast(),
                y.address() as *mut c_void,
                R_16BF,
                n,
                COMPUTE_32F,
                GEMM_DEFAULT,
            )
        };
        check("cublasGemmEx", status)
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `load` and is destroyed once.
        // Nothing to do with a failure here.
        let _ = unsafe { (self.destroy)(self.handle) };
    }
}
