//! NCCL, loaded at run time with libloading from a path the user gives or
//! from where it is usually installed, and the few of its calls the runner
//! makes: version, communicators for all GPUs of one process, all-reduce,
//! all-gather, reduce-scatter. Knows nothing of what is measured.
//!
//! Search order: `--nccl-lib PATH`, then `$NCCL_LIB`, then `libnccl.so.2`
//! (and `libnccl.so`) on the library search path, then the `lib/` folder of
//! python3's `nvidia.nccl` package (where PyTorch's pip wheels put NCCL),
//! then torch's own `lib/` folder.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cudarc::driver::sys::CUstream;
use libloading::Library;
use serde::{Deserialize, Serialize};

use crate::cuda::{DeviceRange, Stream};

/// Why NCCL could not be loaded or a call of it failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NcclError {
    #[error(
        "{origin} {}: no such file; give the path of NCCL's shared library, such as <python site-packages>/nvidia/nccl/lib/libnccl.so.2",
        path.display()
    )]
    MissingFile { origin: &'static str, path: PathBuf },
    #[error("cannot load NCCL from {what}: {message}")]
    Load { what: String, message: String },
    #[error("{what} is not a usable NCCL library: it has no {symbol} ({message})")]
    MissingSymbol { what: String, symbol: &'static str, message: String },
    #[error(
        "NCCL not found: tried {tried}; pass --nccl-lib /path/to/libnccl.so.2 or set NCCL_LIB (pip's PyTorch keeps it in <site-packages>/nvidia/nccl/lib/), or use --skip-collectives"
    )]
    NotFound { tried: String },
    #[error("{call} failed with {code}: {message}")]
    Call { call: String, code: String, message: String },
}

/// A library path the user named, and where it was named.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplicitLibrary {
    pub origin: &'static str,
    pub path: PathBuf,
}

/// The library `--nccl-lib` names, else `$NCCL_LIB` (when set and not empty).
pub fn explicit_library(flag: Option<&Path>) -> Option<ExplicitLibrary> {
    if let Some(path) = flag {
        return Some(ExplicitLibrary { origin: "--nccl-lib", path: path.to_path_buf() });
    }
    std::env::var_os("NCCL_LIB").filter(|v| !v.is_empty()).map(|path| ExplicitLibrary { origin: "NCCL_LIB", path: path.into() })
}

// NCCL's C types (nccl.h): enums are C ints, handles are pointers.
type NcclResult = c_int;
type NcclComm = *mut c_void;
const NCCL_SUCCESS: NcclResult = 0;
const NCCL_SUM: c_int = 0;

/// Element types the runner measures with: float32 as nccl-tests does, and
/// bfloat16 for an LLM's activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    Float32,
    Bfloat16,
}

impl DataType {
    /// The type of LLM activations `bytes` wide, if the runner has one.
    pub fn of_width(bytes: u64) -> Option<DataType> {
        match bytes {
            4 => Some(DataType::Float32),
            2 => Some(DataType::Bfloat16),
            _ => None,
        }
    }

    pub const fn bytes(self) -> usize {
        match self {
            DataType::Float32 => 4,
            DataType::Bfloat16 => 2,
        }
    }

    /// The schema's `dtype`.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Float32 => "float32",
            DataType::Bfloat16 => "bfloat16",
        }
    }

    /// ncclDataType_t (nccl.h).
    fn code(self) -> c_int {
        match self {
            DataType::Float32 => 7,
            DataType::Bfloat16 => 9,
        }
    }
}

/// What all-gather and reduce-scatter move, as nccl-tests measures them.
const COLLECTIVE_TYPE: DataType = DataType::Float32;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type GetLastError = unsafe extern "C" fn(NcclComm) -> *const c_char;
type CommInitAll = unsafe extern "C" fn(*mut NcclComm, c_int, *const c_int) -> NcclResult;
type CommDestroy = unsafe extern "C" fn(NcclComm) -> NcclResult;
type AllReduce = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, CUstream) -> NcclResult;
type AllGather = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, NcclComm, CUstream) -> NcclResult;
type ReduceScatter = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, CUstream) -> NcclResult;

/// The entry points, copied out of the library (valid while it stays loaded).
struct Api {
    get_version: GetVersion,
    get_error_string: GetErrorString,
    /// Since NCCL 2.13.
    get_last_error: Option<GetLastError>,
    comm_init_all: CommInitAll,
    comm_destroy: CommDestroy,
    all_reduce: AllReduce,
    all_gather: AllGather,
    reduce_scatter: ReduceScatter,
}

/// A loaded NCCL library.
pub struct Nccl {
    api: Api,
    /// What was loaded: the path, or the name looked up on the library path.
    name: String,
    /// The file the dynamic linker loaded, where it can be told.
    file: Option<PathBuf>,
    _library: Library,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nccl").field("name", &self.name).field("file", &self.file).finish()
    }
}

/// NCCL's version, from `ncclGetVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclVersion {
    pub major: i32,
    pub minor: i32,
    pub patch: i32,
}

impl NcclVersion {
    /// Decodes NCCL_VERSION_CODE: `major*10000 + minor*100 + patch` since
    /// 2.9, `major*1000 + minor*100 + patch` before.
    pub fn from_code(code: i32) -> NcclVersion {
        if code >= 10_000 {
            NcclVersion { major: code / 10_000, minor: code % 10_000 / 100, patch: code % 100 }
        } else {
            NcclVersion { major: code / 1000, minor: code % 1000 / 100, patch: code % 100 }
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Nccl {
    /// Loads the library `--nccl-lib` or `$NCCL_LIB` names.
    pub fn load_explicit(library: &ExplicitLibrary) -> Result<Nccl, NcclError> {
        if !library.path.is_file() {
            return Err(NcclError::MissingFile { origin: library.origin, path: library.path.clone() });
        }
        Nccl::load(&library.path.to_string_lossy())
    }

    /// Searches the usual places (see the module comment).
    pub fn search() -> Result<Nccl, NcclError> {
        let mut tried = Vec::new();
        for name in ["libnccl.so.2", "libnccl.so"] {
            match Nccl::load(name) {
                Ok(nccl) => return Ok(nccl),
                Err(error) => tried.push(format!("{name} on the library search path ({})", short_reason(&error))),
            }
        }
        let folders = python_package_folders();
        for (package, folder) in [("nvidia.nccl", &folders.nvidia_nccl), ("torch", &folders.torch)] {
            let Some(folder) = folder else {
                tried.push(format!("python3's {package} package ({})", folders.failure.as_deref().unwrap_or("not installed")));
                continue;
            };
            for file in ["libnccl.so.2", "libnccl.so"] {
                let path = folder.join("lib").join(file);
                if path.is_file() {
                    match Nccl::load(&path.to_string_lossy()) {
                        Ok(nccl) => return Ok(nccl),
                        Err(error) => tried.push(format!("{} ({})", path.display(), short_reason(&error))),
                    }
                } else {
                    tried.push(format!("{} (no such file)", path.display()));
                }
            }
        }
        Err(NcclError::NotFound { tried: tried.join(", ") })
    }

    /// Loads NCCL from a path, or a name looked up on the library path.
    pub fn load(name: &str) -> Result<Nccl, NcclError> {
        // SAFETY: loading a shared library runs its initializers; NCCL's only
        // set up its own state.
        let library = unsafe { Library::new(name) }.map_err(|e| NcclError::Load { what: name.to_string(), message: e.to_string() })?;
        let missing = |symbol: &'static str, e: libloading::Error| NcclError::MissingSymbol {
            what: name.to_string(),
            symbol,
            message: e.to_string(),
        };
        // SAFETY (every `get` below): each symbol is declared with the
        // signature nccl.h gives it; the pointers are used only while
        // `library` is loaded, since `Nccl` owns both.
        let api = unsafe {
            Api {
                get_version: *library.get::<GetVersion>(b"ncclGetVersion\0").map_err(|e| missing("ncclGetVersion", e))?,
                get_error_string: *library.get::<GetErrorString>(b"ncclGetErrorString\0").map_err(|e| missing("ncclGetErrorString", e))?,
                get_last_error: library.get::<GetLastError>(b"ncclGetLastError\0").ok().map(|s| *s),
                comm_init_all: *library.get::<CommInitAll>(b"ncclCommInitAll\0").map_err(|e| missing("ncclCommInitAll", e))?,
                comm_destroy: *library.get::<CommDestroy>(b"ncclCommDestroy\0").map_err(|e| missing("ncclCommDestroy", e))?,
                all_reduce: *library.get::<AllReduce>(b"ncclAllReduce\0").map_err(|e| missing("ncclAllReduce", e))?,
                all_gather: *library.get::<AllGather>(b"ncclAllGather\0").map_err(|e| missing("ncclAllGather", e))?,
                reduce_scatter: *library.get::<ReduceScatter>(b"ncclReduceScatter\0").map_err(|e| missing("ncclReduceScatter", e))?,
            }
        };
        let file = std::fs::read_to_string("/proc/self/maps").ok().and_then(|maps| nccl_file_in_maps(&maps));
        Ok(Nccl { api, name: name.to_string(), file, _library: library })
    }

    /// The file that was loaded, or the name it was loaded by (what a child
    /// process loads to get this same library).
    pub fn location(&self) -> String {
        self.file.as_ref().map_or_else(|| self.name.clone(), |f| f.display().to_string())
    }

    pub fn version(&self) -> Result<NcclVersion, NcclError> {
        let mut code: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        let result = unsafe { (self.api.get_version)(&mut code) };
        self.check("ncclGetVersion", result, None)?;
        Ok(NcclVersion::from_code(code))
    }

    /// One communicator per GPU (by CUDA ordinal), all in this process
    /// (`ncclCommInitAll`); rank i is `ordinals[i]`.
    pub fn init_all(&self, ordinals: &[i32]) -> Result<Vec<Communicator<'_>>, NcclError> {
        let mut raw: Vec<NcclComm> = vec![std::ptr::null_mut(); ordinals.len()];
        let count = c_int::try_from(ordinals.len()).map_err(|_| NcclError::Call {
            call: "ncclCommInitAll".into(),
            code: "too many GPUs".into(),
            message: format!("{} GPUs", ordinals.len()),
        })?;
        // SAFETY: `raw` has room for `count` handles and `ordinals` holds
        // `count` device numbers; NCCL writes the handles.
        let result = unsafe { (self.api.comm_init_all)(raw.as_mut_ptr(), count, ordinals.as_ptr()) };
        self.check(&format!("ncclCommInitAll over GPUs {ordinals:?}"), result, None)?;
        Ok(raw.into_iter().enumerate().map(|(rank, raw)| Communicator { nccl: self, raw, rank }).collect())
    }

    fn check(&self, call: &str, result: NcclResult, comm: Option<NcclComm>) -> Result<(), NcclError> {
        if result == NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string (or null).
        let text = unsafe { c_text((self.api.get_error_string)(result)) };
        // SAFETY: ncclGetLastError takes a live communicator or null, and
        // returns a NUL-terminated string owned by NCCL (or null).
        let last = self.api.get_last_error.and_then(|f| unsafe { c_text(f(comm.unwrap_or(std::ptr::null_mut()))) });
        let message = match (text, last) {
            (Some(text), Some(last)) if !last.is_empty() => format!("{text}: {last}"),
            (Some(text), _) => text,
            (None, Some(last)) => last,
            (None, None) => "no message".into(),
        };
        Err(NcclError::Call { call: call.to_string(), code: result_name(result), message: message.replace('\n', " ") })
    }
}

/// A C string NCCL returned, copied; `None` for null.
///
/// # Safety
/// `text` must be null or point to a NUL-terminated string.
unsafe fn c_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { CStr::from_ptr(text) }.to_string_lossy().trim().to_string())
}

/// ncclResult_t's names (nccl.h).
fn result_name(code: NcclResult) -> String {
    let name = match code {
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => return format!("ncclResult {code}"),
    };
    name.to_string()
}

/// The reason in a load error, without the name repeated.
fn short_reason(error: &NcclError) -> String {
    match error {
        NcclError::Load { message, .. } => message.rsplit(": ").next().unwrap_or(message).to_string(),
        other => other.to_string(),
    }
}

/// The NCCL library file in /proc/self/maps, if one is mapped.
pub fn nccl_file_in_maps(maps: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.starts_with('/') && Path::new(path).file_name().is_some_and(|f| f.to_string_lossy().starts_with("libnccl.so")))
        .map(PathBuf::from)
}

/// Where python3 has the nvidia.nccl and torch packages.
#[derive(Debug, Default, PartialEq)]
struct PythonFolders {
    nvidia_nccl: Option<PathBuf>,
    torch: Option<PathBuf>,
    /// Why nothing could be asked, when python3 did not run.
    failure: Option<String>,
}

/// Asks python3 where the packages are, without importing them.
fn python_package_folders() -> PythonFolders {
    const FIND: &str = "import importlib.util as u\nfor n in ('nvidia.nccl', 'torch'):\n    try:\n        s = u.find_spec(n)\n        print(n, list(s.submodule_search_locations)[0])\n    except Exception:\n        print(n)\n";
    match Command::new("python3").args(["-c", FIND]).stdin(Stdio::null()).stderr(Stdio::null()).output() {
        Ok(output) if output.status.success() => parse_python_folders(&String::from_utf8_lossy(&output.stdout)),
        Ok(output) => PythonFolders { failure: Some(format!("python3 exited with {}", output.status)), ..PythonFolders::default() },
        Err(error) => PythonFolders { failure: Some(format!("cannot run python3: {error}")), ..PythonFolders::default() },
    }
}

fn parse_python_folders(text: &str) -> PythonFolders {
    let mut folders = PythonFolders::default();
    for line in text.lines() {
        let (package, folder) = line.split_once(' ').map_or((line, ""), |(p, f)| (p, f.trim()));
        let folder = (!folder.is_empty()).then(|| PathBuf::from(folder));
        match package.trim() {
            "nvidia.nccl" => folders.nvidia_nccl = folder,
            "torch" => folders.torch = folder,
            _ => {}
        }
    }
    folders
}

/// One rank's NCCL communicator, destroyed on drop.
pub struct Communicator<'a> {
    nccl: &'a Nccl,
    raw: NcclComm,
    rank: usize,
}

// SAFETY: an NCCL communicator may be used from any thread, one thread at a
// time; `Communicator` is not `Sync` and its calls take `&self` on the one
// thread that owns it.
unsafe impl Send for Communicator<'_> {}

impl Communicator<'_> {
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Queues a sum all-reduce of `count` elements of `dtype` from `send` into `recv`.
    pub fn all_reduce(
        &self,
        send: DeviceRange<'_>,
        recv: DeviceRange<'_>,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        check_room(send, count, recv, count, dtype);
        // SAFETY: both ranges are live device memory of at least `count`
        // elements (checked above); NCCL touches only device memory.
        let result = unsafe {
            (self.nccl.api.all_reduce)(
                send.address() as *const c_void,
                recv.address() as *mut c_void,
                count,
                dtype.code(),
                NCCL_SUM,
                self.raw,
                stream.raw(),
            )
        };
        self.nccl.check(&format!("ncclAllReduce (rank {}, {count} {})", self.rank, dtype.name()), result, Some(self.raw))
    }

    /// Queues a float32 all-gather: `send_count` elements from each rank
    /// into `recv`, which holds `ranks * send_count`.
    pub fn all_gather(
        &self,
        send: DeviceRange<'_>,
        recv: DeviceRange<'_>,
        send_count: usize,
        ranks: usize,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        check_room(send, send_count, recv, send_count * ranks, COLLECTIVE_TYPE);
        // SAFETY: as in `all_reduce`, with the sizes all-gather uses.
        let result = unsafe {
            (self.nccl.api.all_gather)(
                send.address() as *const c_void,
                recv.address() as *mut c_void,
                send_count,
                COLLECTIVE_TYPE.code(),
                self.raw,
                stream.raw(),
            )
        };
        let what = format!("ncclAllGather (rank {}, {send_count} {} per rank)", self.rank, COLLECTIVE_TYPE.name());
        self.nccl.check(&what, result, Some(self.raw))
    }

    /// Queues a float32 sum reduce-scatter: `send` holds `ranks *
    /// recv_count` elements, each rank receives its `recv_count`.
    pub fn reduce_scatter(
        &self,
        send: DeviceRange<'_>,
        recv: DeviceRange<'_>,
        recv_count: usize,
        ranks: usize,
        stream: &Stream,
    ) -> Result<(), NcclError> {
        check_room(send, recv_count * ranks, recv, recv_count, COLLECTIVE_TYPE);
        // SAFETY: as in `all_reduce`, with the sizes reduce-scatter uses.
        let result = unsafe {
            (self.nccl.api.reduce_scatter)(
                send.address() as *const c_void,
                recv.address() as *mut c_void,
                recv_count,
                COLLECTIVE_TYPE.code(),
                NCCL_SUM,
                self.raw,
                stream.raw(),
            )
        };
        let what = format!("ncclReduceScatter (rank {}, {recv_count} {} per rank)", self.rank, COLLECTIVE_TYPE.name());
        self.nccl.check(&what, result, Some(self.raw))
    }

    /// Frees the communicator. Every rank must do this at the same time
    /// (from its own thread): NCCL may wait for its peers.
    pub fn destroy(mut self) -> Result<(), NcclError> {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        // SAFETY: `raw` is a live communicator, destroyed once (drop skips a null one).
        let result = unsafe { (self.nccl.api.comm_destroy)(raw) };
        self.nccl.check(&format!("ncclCommDestroy (rank {})", self.rank), result, None)
    }
}

impl Drop for Communicator<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: a live communicator, destroyed once; errors cannot be
            // reported from drop, and the process is ending its use of NCCL.
            unsafe { (self.nccl.api.comm_destroy)(self.raw) };
        }
    }
}

fn check_room(send: DeviceRange<'_>, send_count: usize, recv: DeviceRange<'_>, recv_count: usize, dtype: DataType) {
    let (element, name) = (dtype.bytes(), dtype.name());
    assert!(send_count * element <= send.len(), "send buffer of {} bytes too small for {send_count} {name}", send.len());
    assert!(recv_count * element <= recv.len(), "receive buffer of {} bytes too small for {recv_count} {name}", recv.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_decode_both_layouts() {
        assert_eq!(NcclVersion::from_code(22809).to_string(), "2.28.9");
        assert_eq!(NcclVersion::from_code(21903).to_string(), "2.19.3");
        assert_eq!(NcclVersion::from_code(2708).to_string(), "2.7.8");
    }

    #[test]
    fn explicit_paths_that_do_not_exist_are_named_with_where_they_came_from() {
        let library = ExplicitLibrary { origin: "--nccl-lib", path: PathBuf::from("/nonexistent/libnccl.so.2") };
        let error = Nccl::load_explicit(&library).unwrap_err().to_string();
        assert!(error.starts_with("--nccl-lib /nonexistent/libnccl.so.2: no such file"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused_with_the_loader_message() {
        let error = Nccl::load(file!()).unwrap_err();
        assert!(matches!(error, NcclError::Load { .. }), "{error}");
        assert!(error.to_string().contains("cannot load NCCL from"), "{error}");
    }

    #[test]
    fn the_mapped_nccl_file_is_found_in_proc_maps() {
        let maps = "7f0000000000-7f0000001000 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f1000000000-7f1000100000 r-xp 00000000 08:01 456 /venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2\n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(nccl_file_in_maps(maps), Some(PathBuf::from("/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2")));
        assert_eq!(nccl_file_in_maps("7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"), None);
    }

    #[test]
    fn python_answers_name_each_package_folder() {
        let folders = parse_python_folders("nvidia.nccl /venv/site-packages/nvidia/nccl\ntorch\n");
        assert_eq!(folders.nvidia_nccl, Some(PathBuf::from("/venv/site-packages/nvidia/nccl")));
        assert_eq!(folders.torch, None);
    }
}
