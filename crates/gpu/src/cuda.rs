//! A thin safe layer over the few parts of the CUDA driver API the
//! calibration runner uses, through cudarc with the driver library loaded at
//! run time: devices, streams, timing events, device and pinned buffers,
//! copies and graph capture. Knows nothing of what is measured.
//!
//! Device memory is handed out only as bounds-checked ranges of allocations
//! made here, so copies between device ranges (and the NCCL calls that take
//! them) are safe. Copies that touch host memory are `unsafe fn`: their
//! caller must keep the host memory alive until the stream has finished.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream, DriverError, result, sys};

use crate::GpuError;

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
pub fn describe(error: DriverError) -> String {
    let name = error.error_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", error.0));
    match error.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Names what the runner was doing when a driver call failed.
trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, GpuError>;
}

impl<T> Doing<T> for Result<T, DriverError> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, GpuError> {
        self.map_err(|error| GpuError::Cuda { what: what(), error: describe(error) })
    }
}

/// Proof that the driver library was loaded and initialized.
#[derive(Debug)]
pub struct Driver(());

impl Driver {
    /// Loads the driver library and initializes CUDA, or says precisely what
    /// is missing.
    pub fn init() -> Result<Driver, GpuError> {
        // SAFETY: only tries to open the driver library under its usual names
        // (running its initializers, as any program using CUDA does).
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        result::init()
            .map_err(|error| GpuError::NoGpu { detail: format!("cuInit failed with {}", describe(error)), visible: visible_devices() })?;
        Ok(Driver(()))
    }

    pub fn device_count(&self) -> Result<usize, GpuError> {
        let count = result::device::get_count().doing(|| "counting GPUs (cuDeviceGetCount)".into())?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The CUDA version the driver supports, as (major, minor).
    pub fn cuda_version(&self) -> Result<(i32, i32), GpuError> {
        let mut version: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        unsafe { sys::cuDriverGetVersion(&mut version) }
            .result()
            .doing(|| "asking the driver's CUDA version (cuDriverGetVersion)".into())?;
        Ok((version / 1000, version % 1000 / 10))
    }

    /// Retains GPU `ordinal`'s primary context (the one the CUDA runtime, and
    /// so NCCL, uses too).
    pub fn open(&self, ordinal: usize) -> Result<Device, GpuError> {
        let ctx = CudaContext::new(ordinal).doing(|| format!("opening GPU {ordinal}"))?;
        Ok(Device { ctx })
    }
}

/// CUDA_VISIBLE_DEVICES as it is set, for error messages.
pub fn visible_devices() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(value) => format!("CUDA_VISIBLE_DEVICES={value:?}"),
        Err(_) => "CUDA_VISIBLE_DEVICES unset".into(),
    }
}

/// One GPU, through its primary context.
#[derive(Debug, Clone)]
pub struct Device {
    ctx: Arc<CudaContext>,
}

impl Device {
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    pub fn name(&self) -> Result<String, GpuError> {
        self.ctx.name().doing(|| format!("reading GPU {}'s name (cuDeviceGetName)", self.ordinal()))
    }

    pub fn total_memory(&self) -> Result<u64, GpuError> {
        self.ctx.total_mem().map(|b| b as u64).doing(|| format!("reading GPU {}'s memory size", self.ordinal()))
    }

    pub fn free_memory(&self) -> Result<u64, GpuError> {
        self.ctx.mem_get_info().map(|(free, _)| free as u64).doing(|| format!("reading GPU {}'s free memory", self.ordinal()))
    }

    pub fn compute_capability(&self) -> Result<(i32, i32), GpuError> {
        self.ctx.compute_capability().doing(|| format!("reading GPU {}'s compute capability", self.ordinal()))
    }

    /// "0000:00:06.0", as the driver writes it.
    pub fn pci_bus_id(&self) -> Result<String, GpuError> {
        let mut text = [0 as c_char; 64];
        // SAFETY: the driver writes a NUL-terminated string of at most `len`
        // bytes into the buffer, which is that long.
        unsafe { sys::cuDeviceGetPCIBusId(text.as_mut_ptr(), text.len() as c_int, self.ctx.cu_device()) }
            .result()
            .doing(|| format!("reading GPU {}'s PCI address", self.ordinal()))?;
        // SAFETY: the buffer holds a NUL-terminated string (and was zeroed).
        Ok(unsafe { CStr::from_ptr(text.as_ptr()) }.to_string_lossy().into_owned())
    }

    pub fn can_access_peer(&self, peer: &Device) -> Result<bool, GpuError> {
        let mut can: c_int = 0;
        // SAFETY: writes one int through a valid pointer; both devices are valid handles.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer.ctx.cu_device()) }
            .result()
            .doing(|| format!("asking whether GPU {} can reach GPU {} directly", self.ordinal(), peer.ordinal()))?;
        Ok(can != 0)
    }

    /// Lets this GPU's copies reach `peer`'s memory directly (idempotent).
    pub fn enable_peer_access(&self, peer: &Device) -> Result<(), GpuError> {
        let what = || format!("enabling peer access from GPU {} to GPU {}", self.ordinal(), peer.ordinal());
        self.ctx.bind_to_thread().doing(what)?;
        // SAFETY: both contexts are alive (held by `self` and `peer`); flags must be 0.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0) }.result() {
            Err(DriverError(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => Ok(()),
            other => other.doing(what),
        }
    }

    pub fn stream(&self) -> Result<Stream, GpuError> {
        let inner = self.ctx.new_stream().doing(|| format!("creating a stream on GPU {}", self.ordinal()))?;
        Ok(Stream { inner })
    }

    /// An event that can time work.
    pub fn event(&self) -> Result<Event, GpuError> {
        timing_event(&self.ctx)
    }

    /// `len` bytes of device memory, zeroed.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer, GpuError> {
        let what = || format!("allocating {} on GPU {}", icsim_core::units::Bytes(len as u64), self.ordinal());
        self.ctx.bind_to_thread().doing(what)?;
        // SAFETY: plain allocation; cuMemAlloc refuses 0 bytes, so at least 1 is asked for.
        let ptr = unsafe { result::malloc_sync(len.max(1)) }.doing(what)?;
        let buffer = DeviceBuffer { ctx: self.ctx.clone(), ptr, len };
        // SAFETY: the allocation just made is at least `len` bytes long.
        unsafe { result::memset_d8_sync(ptr, 0, len) }.doing(what)?;
        Ok(buffer)
    }

    /// `len` bytes of page-locked host memory that every GPU's copies can use
    /// (CU_MEMHOSTALLOC_PORTABLE), filled with ones.
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedBuffer, GpuError> {
        let what = || format!("allocating {} of pinned host memory", icsim_core::units::Bytes(len as u64));
        self.ctx.bind_to_thread().doing(what)?;
        // SAFETY: plain allocation of at least one byte.
        let ptr = unsafe { result::malloc_host(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }.doing(what)?.cast::<u8>();
        // SAFETY: `ptr` points to at least `len` writable bytes just allocated.
        unsafe { ptr.write_bytes(1, len) };
        Ok(PinnedBuffer { ctx: self.ctx.clone(), ptr, len })
    }
}

/// Device memory, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `offset..offset + len` of the buffer.
    pub fn range(&self, offset: usize, len: usize) -> DeviceRange<'_> {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "range {offset}+{len} outside a buffer of {} bytes", self.len);
        DeviceRange { buffer: self, offset, len }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Errors cannot be returned from drop; cudarc keeps them for the
        // context's next call.
        self.ctx.record_err(self.ctx.synchronize());
        // SAFETY: `ptr` came from cuMemAlloc and is freed once, after the
        // device finished the work queued on it.
        self.ctx.record_err(unsafe { result::free_sync(self.ptr) });
    }
}

/// Part of a device buffer.
#[derive(Debug, Clone, Copy)]
pub struct DeviceRange<'a> {
    buffer: &'a DeviceBuffer,
    offset: usize,
    len: usize,
}

impl DeviceRange<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the range's first byte.
    pub fn address(&self) -> sys::CUdeviceptr {
        self.buffer.ptr + self.offset as u64
    }
}

/// Page-locked host memory, freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
}

impl PinnedBuffer {
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialized bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once; the
        // copies that used it were waited for by their callers (see the
        // `unsafe fn` copies on `Stream`).
        self.ctx.record_err(unsafe { result::free_host(self.ptr.cast::<c_void>()) });
    }
}

/// A CUDA stream (non-blocking) of one GPU.
#[derive(Debug)]
pub struct Stream {
    inner: Arc<CudaStream>,
}

impl Stream {
    /// The raw handle, for libraries that take a `cudaStream_t` (the same
    /// object as a driver `CUstream`).
    pub fn raw(&self) -> sys::CUstream {
        self.inner.cu_stream()
    }

    fn ordinal(&self) -> usize {
        self.inner.context().ordinal()
    }

    fn bind(&self) -> Result<(), GpuError> {
        self.inner.context().bind_to_thread().doing(|| format!("selecting GPU {}", self.ordinal()))
    }

    /// Queues a copy between device ranges of equal length: within one GPU,
    /// or to or from another GPU (directly where peer access is enabled).
    pub fn copy_device(&self, dst: DeviceRange<'_>, src: DeviceRange<'_>) -> Result<(), GpuError> {
        assert_eq!(dst.len, src.len, "device copy between ranges of different lengths");
        self.bind()?;
        let what = || format!("queueing a {} device copy on GPU {}", icsim_core::units::Bytes(src.len as u64), self.ordinal());
        if dst.buffer.ctx.cu_ctx() == src.buffer.ctx.cu_ctx() {
            // SAFETY: both ranges lie inside live device allocations (checked
            // when the ranges were made); only device memory is touched.
            unsafe { result::memcpy_dtod_async(dst.address(), src.address(), src.len, self.raw()) }.doing(what)
        } else {
            // SAFETY: as above; the two contexts are alive (held by the buffers).
            unsafe {
                result::memcpy_peer_async(
                    dst.buffer.ctx.cu_ctx(),
                    dst.address(),
                    src.buffer.ctx.cu_ctx(),
                    src.address(),
                    src.len,
                    self.raw(),
                )
            }
            .doing(what)
        }
    }

    /// Queues a copy from host memory (pinned or pageable) to the device.
    ///
    /// # Safety
    /// `src` must stay alive and unchanged until this stream has finished the
    /// copy (wait for an event recorded after it, or synchronize).
    pub unsafe fn copy_to_device(&self, dst: DeviceRange<'_>, src: &[u8]) -> Result<(), GpuError> {
        assert_eq!(dst.len, src.len(), "host-to-device copy between ranges of different lengths");
        self.bind()?;
        // SAFETY: `dst` lies inside a live device allocation; the caller keeps `src` alive.
        unsafe { result::memcpy_htod_async(dst.address(), src, self.raw()) }
            .doing(|| format!("queueing a {} host-to-device copy on GPU {}", icsim_core::units::Bytes(src.len() as u64), self.ordinal()))
    }

    /// Queues a copy from the device to host memory (pinned or pageable).
    ///
    /// # Safety
    /// `dst` must stay alive, and be neither read nor written, until this
    /// stream has finished the copy.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: DeviceRange<'_>) -> Result<(), GpuError> {
        assert_eq!(dst.len(), src.len, "device-to-host copy between ranges of different lengths");
        self.bind()?;
        let len = dst.len();
        // SAFETY: `src` lies inside a live device allocation; the caller keeps `dst` alive.
        unsafe { result::memcpy_dtoh_async(dst, src.address(), self.raw()) }
            .doing(|| format!("queueing a {} device-to-host copy on GPU {}", icsim_core::units::Bytes(len as u64), self.ordinal()))
    }

    pub fn record(&self, event: &Event) -> Result<(), GpuError> {
        event.inner.record(&self.inner).doing(|| format!("recording an event on GPU {}", self.ordinal()))
    }

    /// Makes later work on this stream wait for `event` (of any GPU).
    pub fn wait(&self, event: &Event) -> Result<(), GpuError> {
        self.inner.wait(&event.inner).doing(|| format!("making a stream of GPU {} wait for an event", self.ordinal()))
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.inner.synchronize().doing(|| format!("waiting for GPU {}", self.ordinal()))
    }

    /// The GPU time, in microseconds, of the work `enqueue` queues on this
    /// stream, between two events. Returns once that work is finished, also
    /// when `enqueue` fails (with its error, of its caller's type).
    pub fn time<E: From<GpuError>>(&self, enqueue: impl FnOnce() -> Result<(), E>) -> Result<f64, E> {
        let (start, end) = (self.event()?, self.event()?);
        self.record(&start)?;
        let queued = enqueue();
        let finished = self.record(&end).and_then(|()| self.synchronize());
        queued?;
        finished?;
        let ms = start.inner.elapsed_ms(&end.inner).doing(|| format!("reading event times on GPU {}", self.ordinal()))?;
        Ok(f64::from(ms) * 1000.0)
    }

    fn event(&self) -> Result<Event, GpuError> {
        timing_event(self.inner.context())
    }

    /// Captures the work `enqueue` queues on this stream into a graph
    /// (thread-local capture mode: other threads may capture their own
    /// streams at the same time), and instantiates it.
    pub fn capture<E: From<GpuError>>(&self, enqueue: impl FnOnce() -> Result<(), E>) -> Result<Graph, E> {
        let what = || format!("capturing a CUDA graph on GPU {}", self.ordinal());
        self.inner.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).doing(what)?;
        let queued = enqueue();
        // Capture always ends, so that the stream is usable after a failure.
        let ended = self.inner.end_capture(sys::CUgraphInstantiate_flags(0));
        queued?;
        match ended.doing(what)? {
            Some(inner) => Ok(Graph { inner, ordinal: self.ordinal() }),
            None => Err(GpuError::Cuda { what: what(), error: "nothing was captured".into() }.into()),
        }
    }
}

/// An event that records timing.
#[derive(Debug)]
pub struct Event {
    inner: CudaEvent,
}

fn timing_event(ctx: &Arc<CudaContext>) -> Result<Event, GpuError> {
    let inner =
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).doing(|| format!("creating an event on GPU {}", ctx.ordinal()))?;
    Ok(Event { inner })
}

/// An instantiated CUDA graph, launched on the stream it was captured from.
pub struct Graph {
    inner: CudaGraph,
    ordinal: usize,
}

impl Graph {
    /// Moves the graph's resources to the GPU ahead of the first launch.
    pub fn upload(&self) -> Result<(), GpuError> {
        self.inner.upload().doing(|| format!("uploading a CUDA graph to GPU {}", self.ordinal))
    }

    pub fn launch(&self) -> Result<(), GpuError> {
        self.inner.launch().doing(|| format!("launching a CUDA graph on GPU {}", self.ordinal))
    }
}
