//! icsim-gpu: the measuring runner's device side, and the only crate of
//! icsim allowed unsafe code. Safe types over the few parts of the CUDA
//! driver (`cuda`), NCCL (`nccl`), cuBLAS (`cublas`) and NVRTC (`nvrtc`)
//! that `icsim calibrate run` uses, all loaded at run time (`libs` finds the
//! math libraries), and the copies it times (`copies`), where host memory
//! is kept alive for as long as the GPU uses it. Knows nothing of the model
//! or of what a measurement is written as: the runner's orchestration in
//! the `icsim` crate plans, records and reports.

pub mod copies;
pub mod cublas;
pub mod cuda;
pub mod libs;
pub mod nccl;
pub mod nvrtc;

/// Why a GPU or one of its libraries could not be used, in one line that
/// says what to do (NCCL's own errors are `nccl::NcclError`).
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no NVIDIA GPU driver: the CUDA driver library (libcuda.so.1) cannot be loaded; run this on a machine with an NVIDIA GPU and its driver installed, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH"
    )]
    NoDriver,
    #[error("no usable NVIDIA GPU: {detail}; check that `nvidia-smi` lists the GPUs and that none is hidden from this process ({visible})")]
    NoGpu { detail: String, visible: String },
    #[error("CUDA failed while {what}: {error}")]
    Cuda { what: String, error: String },
    /// Something the user changes: a library to install or name, a size
    /// that does not fit, a copy that needs more GPUs.
    #[error("{0}")]
    Usage(String),
}
