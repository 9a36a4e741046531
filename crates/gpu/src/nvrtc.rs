//! NVRTC, loaded at run time (`libs`): compiles the runner's own CUDA C
//! kernels for the GPU at hand and loads them through the driver, then
//! launches them by name. Knows nothing of what is measured.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

use cudarc::driver::{result, sys};

use crate::GpuError;
use crate::cuda::Stream;
use crate::libs;

type Program = *mut c_void;
type Status = c_int;
type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status;
type CreateProgram =
    unsafe extern "C" fn(*mut Program, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> Status;
type CompileProgram = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
type GetSize = unsafe extern "C" fn(Program, *mut usize) -> Status;
type GetBytes = unsafe extern "C" fn(Program, *mut c_char) -> Status;
type DestroyProgram = unsafe extern "C" fn(*mut Program) -> Status;

/// Kernels compiled and loaded into the current context.
pub struct Module {
    module: sys::CUmodule,
    /// NVRTC's version and where it was loaded from.
    pub compiler: String,
}

fn nvrtc_error(what: &str, status: Status, log: &str) -> GpuError {
    GpuError::Cuda {
        what: what.to_string(),
        error: format!("nvrtcResult {status}{}", if log.is_empty() { String::new() } else { format!(": {log}") }),
    }
}

/// Compiles `source` for compute capability `major.minor` into a cubin for
/// that GPU (no GPU needed); returns it and what compiled it.
pub fn compile(source: &str, (major, minor): (i32, i32)) -> Result<(Vec<u8>, String), GpuError> {
    {
        let loaded = libs::load("libnvrtc", &["libnvrtc-builtins"], "NVRTC_LIB").map_err(GpuError::Usage)?;
        let lib = &loaded.library;
        let symbol = |name: &'static str| GpuError::Usage(format!("{} is not a usable NVRTC: no {name}", loaded.location));
        // SAFETY (every `get` and call below): symbols declared as nvrtc.h
        // declares them, called while the library is loaded; every pointer
        // passed is valid for what NVRTC reads or writes (sizes asked first).
        unsafe {
            let version = *lib.get::<Version>(b"nvrtcVersion\0").map_err(|_| symbol("nvrtcVersion"))?;
            let create = *lib.get::<CreateProgram>(b"nvrtcCreateProgram\0").map_err(|_| symbol("nvrtcCreateProgram"))?;
            let compile = *lib.get::<CompileProgram>(b"nvrtcCompileProgram\0").map_err(|_| symbol("nvrtcCompileProgram"))?;
            let log_size = *lib.get::<GetSize>(b"nvrtcGetProgramLogSize\0").map_err(|_| symbol("nvrtcGetProgramLogSize"))?;
            let get_log = *lib.get::<GetBytes>(b"nvrtcGetProgramLog\0").map_err(|_| symbol("nvrtcGetProgramLog"))?;
            let cubin_size = *lib.get::<GetSize>(b"nvrtcGetCUBINSize\0").map_err(|_| symbol("nvrtcGetCUBINSize"))?;
            let get_cubin = *lib.get::<GetBytes>(b"nvrtcGetCUBIN\0").map_err(|_| symbol("nvrtcGetCUBIN"))?;
            let destroy = *lib.get::<DestroyProgram>(b"nvrtcDestroyProgram\0").map_err(|_| symbol("nvrtcDestroyProgram"))?;
            let (mut v_major, mut v_minor) = (0, 0);
            version(&mut v_major, &mut v_minor);
            let compiler = format!("NVRTC {v_major}.{v_minor} ({})", loaded.location);

            let text = CString::new(source).map_err(|_| GpuError::Usage("kernel source holds a NUL byte".into()))?;
            let name = CString::new("icsim_kernels.cu").expect("no NUL");
            let mut program: Program = std::ptr::null_mut();
            let status = create(&mut program, text.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null());
            if status != 0 {
                return Err(nvrtc_error("creating the kernels' NVRTC program", status, ""));
            }
            let options: Vec<CString> = [format!("--gpu-architecture=sm_{major}{minor}"), "--std=c++17".into(), "-default-device".into()]
                .into_iter()
                .map(|o| CString::new(o).expect("no NUL"))
                .collect();
            let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
            let status = compile(program, pointers.len() as c_int, pointers.as_ptr());
            let mut size = 0usize;
            log_size(program, &mut size);
            let mut log = vec![0 as c_char; size.max(1)];
            get_log(program, log.as_mut_ptr());
            let log = CStr::from_ptr(log.as_ptr()).to_string_lossy().trim().to_string();
            if status != 0 {
                destroy(&mut program);
                return Err(nvrtc_error(&format!("compiling the kernels for sm_{major}{minor} with {compiler}"), status, &log));
            }
            let mut size = 0usize;
            cubin_size(program, &mut size);
            let mut cubin = vec![0u8; size];
            let status = get_cubin(program, cubin.as_mut_ptr().cast());
            destroy(&mut program);
            if status != 0 {
                return Err(nvrtc_error("reading the compiled kernels", status, ""));
            }
            Ok((cubin, compiler))
        }
    }
}

impl Module {
    /// Compiles `source` for the GPU of compute capability `capability`
    /// and loads it; the GPU's context must be current.
    pub fn compile(source: &str, capability: (i32, i32)) -> Result<Module, GpuError> {
        let (cubin, compiler) = compile(source, capability)?;
        // SAFETY: a cubin NVRTC just produced for this GPU.
        let module = unsafe { result::module::load_data(cubin.as_ptr().cast()) }
            .map_err(|e| GpuError::Cuda { what: "loading the compiled kernels".into(), error: crate::cuda::describe(e) })?;
        Ok(Module { module, compiler })
    }

    /// The kernel `name` of the module.
    pub fn function(&self, name: &str) -> Result<Function, GpuError> {
        let c_name = CString::new(name).expect("kernel names hold no NUL");
        // SAFETY: the module is loaded (owned by `self`).
        let function = unsafe { result::module::get_function(self.module, c_name) }
            .map_err(|e| GpuError::Cuda { what: format!("finding kernel {name}"), error: crate::cuda::describe(e) })?;
        Ok(Function { function, name: name.to_string() })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded once by `compile`, unloaded once; its kernels were
        // waited for by the measurements that used them.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// One kernel of a loaded module.
pub struct Function {
    function: sys::CUfunction,
    name: String,
}

/// One argument of a kernel launch.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    Pointer(sys::CUdeviceptr),
    /// An `unsigned long long`.
    Long(u64),
    Int(i32),
    Float(f32),
}

impl Function {
    /// Queues the kernel on `stream` over `grid` blocks of `block` threads.
    pub fn launch(&self, stream: &Stream, grid: u32, block: u32, args: &[Arg]) -> Result<(), GpuError> {
        let mut values: Vec<[u8; 8]> = args
            .iter()
            .map(|a| match *a {
                Arg::Pointer(p) => p.to_ne_bytes(),
                Arg::Long(v) => v.to_ne_bytes(),
                Arg::Int(i) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&i.to_ne_bytes());
                    b
                }
                Arg::Float(f) => {
                    let mut b = [0u8; 8];
                    b[..4].copy_from_slice(&f.to_ne_bytes());
                    b
                }
            })
            .collect();
        let mut pointers: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: the function belongs to a loaded module; each argument
        // points at a value of the type the kernel declares (a device
        // pointer in 8 bytes, an int or float in the first 4), alive until
        // the call returns (the driver copies them); pointers address live
        // device memory, which callers keep until the stream is done.
        unsafe { result::launch_kernel(self.function, (grid, 1, 1), (block, 1, 1), 0 as c_uint, stream.raw(), &mut pointers) }
            .map_err(|e| GpuError::Cuda { what: format!("launching kernel {}", self.name), error: crate::cuda::describe(e) })
    }
}
