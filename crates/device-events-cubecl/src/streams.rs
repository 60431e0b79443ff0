//! A CubeCL server's raw streams, admitted once each.

use std::collections::HashMap;
use std::hash::Hash;

use cubecl_runtime::server::ServerError;
use device_events_core::{AnchorApi, DriverError, EventApi};

use crate::errors::server_error;

/// A backend whose raw streams a CubeCL server keeps as they are
/// (`CUstream`, `hipStream_t`), with what admits one.
pub trait RawStreams: AnchorApi {
    /// The driver's stream handle.
    type Raw: Copy + Eq + Hash;
    /// What a stream belongs to (CUDA: its context; HIP: its device).
    type Owner: Copy;

    /// Admit `raw` as this backend's checked stream.
    ///
    /// # Safety
    ///
    /// As the backend's own admission asks (`Cuda::stream_from_raw`,
    /// `Hip::stream_from_raw`): `owner` is live (CUDA: a primary context;
    /// HIP: a device), `raw` a live stream of it, of the driver library
    /// this backend loaded, and `raw` stays live until the returned stream
    /// is destroyed (which forgets it, leaving `raw` to its owner).
    ///
    /// # Errors
    ///
    /// When the driver is missing or `owner` is not valid.
    unsafe fn admit(raw: Self::Raw, owner: Self::Owner) -> Result<Self::Stream, DriverError>;
}

/// A server's raw streams of one context (device), each admitted the first
/// time it is seen and forgotten when the server says or when this goes: a
/// backend keeps its `CUstream`s and passes them as they are, with no
/// second handle beside each.
///
/// ```
/// use cubecl_runtime::server::ServerError;
/// use device_events_cubecl::{CubeFence, CubeStreams, RawStreams};
///
/// // A server's `flush`, on its raw streams (`CUstream` with `Cuda`).
/// fn flush<A: RawStreams>(
///     streams: &mut CubeStreams<A>,
///     from: A::Raw,
///     to: A::Raw,
/// ) -> Result<(), ServerError> {
///     CubeFence::<A>::new(streams.get(from)?).wait_async(streams.get(to)?)
/// }
/// ```
pub struct CubeStreams<A: RawStreams> {
    owner: A::Owner,
    admitted: HashMap<A::Raw, A::Stream>,
}

impl<A: RawStreams> CubeStreams<A> {
    /// Streams of `owner`, none admitted yet.
    ///
    /// # Safety
    ///
    /// As [`RawStreams::admit`] asks, for `owner` and every raw stream later
    /// passed to [`get`](Self::get), each staying live until it is passed
    /// to [`forget`](Self::forget) or this value is dropped: a handle the
    /// driver reuses for a new stream would otherwise find the old one's
    /// entry.
    pub unsafe fn new(owner: A::Owner) -> Self {
        Self {
            owner,
            admitted: HashMap::new(),
        }
    }

    /// The checked stream of `raw`, admitted now the first time.
    ///
    /// # Errors
    ///
    /// The backend's refusal to admit it, as a [`ServerError`].
    pub fn get(&mut self, raw: A::Raw) -> Result<A::Stream, ServerError> {
        if let Some(stream) = self.admitted.get(&raw) {
            return Ok(*stream);
        }
        // SAFETY: `raw` is live and of `owner` until it is forgotten, as
        // `new`'s caller promised.
        let stream = unsafe { A::admit(raw, self.owner) }.map_err(|err| server_error(&err))?;
        self.admitted.insert(raw, stream);
        Ok(stream)
    }

    /// Forget `raw` before its owner destroys it: its checked copies are
    /// refused from now on, and the stream itself is left alone.
    pub fn forget(&mut self, raw: A::Raw) {
        if let Some(stream) = self.admitted.remove(&raw) {
            forget::<A>(stream);
        }
    }
}

fn forget<A: RawStreams>(stream: A::Stream) {
    if let Err(err) = <A as EventApi>::stream_destroy(stream) {
        log::warn!(
            "{}: a server's stream could not be forgotten: {err}",
            A::BACKEND
        );
    }
}

// SAFETY: the raw handles are map keys and the owner an argument to the
// backend's admission, both usable from any thread (the CUDA driver API
// and HIP runtime are thread-safe); the checked streams are `Send`. A
// CubeCL server, which must be `Send`, can hold it.
unsafe impl<A: RawStreams> Send for CubeStreams<A> {}

impl<A: RawStreams> std::fmt::Debug for CubeStreams<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubeStreams")
            .field("backend", &A::BACKEND)
            .field("admitted", &self.admitted.len())
            .finish()
    }
}

impl<A: RawStreams> Drop for CubeStreams<A> {
    fn drop(&mut self) {
        for (_, stream) in self.admitted.drain() {
            forget::<A>(stream);
        }
    }
}

#[cfg(feature = "cuda")]
impl RawStreams for device_events_cuda::Cuda {
    type Raw = cudarc::driver::sys::CUstream;
    type Owner = cudarc::driver::sys::CUcontext;

    unsafe fn admit(raw: Self::Raw, owner: Self::Owner) -> Result<Self::Stream, DriverError> {
        // SAFETY: as the caller promises.
        unsafe { Self::stream_from_raw(raw, owner) }
    }
}

#[cfg(feature = "hip")]
impl RawStreams for device_events_hip::Hip {
    type Raw = device_events_hip::runtime::RawStream;
    type Owner = std::ffi::c_int;

    unsafe fn admit(raw: Self::Raw, owner: Self::Owner) -> Result<Self::Stream, DriverError> {
        // SAFETY: as the caller promises.
        unsafe { Self::stream_from_raw(raw, owner) }
    }
}
