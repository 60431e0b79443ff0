//! A CubeCL server's raw streams, admitted once each.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use cubecl_runtime::server::ServerError;
use device_events_core::backend::{CheckedStream, RawApi};
use device_events_core::{Backend, DriverError, ErrorKind, EventApi};

use crate::errors::server_error;

/// A backend whose raw streams a CubeCL server keeps as they are
/// (`CUstream`, `hipStream_t`), with what admits one.
pub trait RawStreams: Backend + Sized {
    /// The driver's stream handle.
    type Raw: Copy;
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

    /// The handle as a key: its address.
    fn key(raw: Self::Raw) -> usize;

    /// The owner as a key (CUDA: the context's address; HIP: the device).
    fn owner_key(owner: Self::Owner) -> usize;

    /// This backend's admitted raw streams, process-wide.
    fn admitted() -> &'static Admitted<Self>;
}

/// A backend's admitted raw streams, by handle, each with its owner's key
/// (see [`CubeStreams`]).
pub struct Admitted<A: EventApi>(Mutex<HashMap<usize, (usize, A::Stream)>>);

impl<A: EventApi> Default for Admitted<A> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

/// A CubeCL server's raw streams, admitted once each when the server makes
/// them and found by handle wherever it passes one, process-wide: a
/// backend keeps its `CUstream`s (`hipStream_t`s) and passes them as they
/// are, with no second handle beside each, even where it holds nothing
/// but the raw stream (a static `flush`).
///
/// One raw value resolves to one owner's stream only: the null, legacy
/// and per-thread handles name a stream of each context (device), so the
/// first owner to admit one keeps it, and another owner's admission of the
/// same value is refused, never answered with the first owner's stream
/// (whose fences would record on the wrong device). A server of each
/// device makes streams of its own.
///
/// ```
/// use cubecl_runtime::server::ServerError;
/// use device_events_cubecl::{CubeFence, RawStreams, StreamOf};
///
/// // A server's static `flush`, on its raw streams (`CUstream` with `Cuda`).
/// fn flush<A: RawStreams>(from: A::Raw, to: A::Raw) -> Result<(), ServerError>
/// where
///     A::Raw: StreamOf<A>,
/// {
///     CubeFence::<A>::new(from).wait_async(to)
/// }
/// ```
pub struct CubeStreams<A: RawStreams>(std::marker::PhantomData<A>);

impl<A: RawStreams> CubeStreams<A> {
    /// Admit `raw`, once: a server does this as it makes each stream.
    /// Admitting it again for the same owner does nothing, unless its
    /// checked stream was destroyed meanwhile, when it is admitted afresh.
    ///
    /// # Safety
    ///
    /// As [`RawStreams::admit`] asks, with `raw` staying live until it is
    /// passed to [`forget`](Self::forget): a handle the driver reuses for
    /// a new stream would otherwise find the old one's entry.
    ///
    /// # Errors
    ///
    /// The backend's refusal, as a [`ServerError`]; a value another owner
    /// admitted and has not forgotten, refused.
    pub unsafe fn admit(raw: A::Raw, owner: A::Owner) -> Result<(), ServerError> {
        let mut admitted = lock::<A>();
        if let Some(&(kept_owner, stream)) = admitted.get(&A::key(raw))
            && A::context_key(stream).is_some()
        {
            // Live (a checked stream names its context until destroyed).
            return if kept_owner == A::owner_key(owner) {
                Ok(())
            } else {
                Err(server_error(&DriverError::refused(
                    A::BACKEND,
                    "CubeStreams::admit",
                    ErrorKind::InvalidHandle,
                    "this raw stream value is admitted for another context (device): \
                     the null, legacy and per-thread streams name one stream of each, \
                     and only the first owner's is kept; make a stream of your own",
                )))
            };
        }
        // SAFETY: as the caller promises.
        let stream = unsafe { A::admit(raw, owner) }.map_err(|err| server_error(&err))?;
        // A dead entry's stream is already destroyed: nothing to release.
        admitted.insert(A::key(raw), (A::owner_key(owner), stream));
        Ok(())
    }

    /// The checked stream of `raw`.
    ///
    /// # Errors
    ///
    /// A [`ServerError`] when `raw` was never admitted, or was forgotten.
    pub fn get(raw: A::Raw) -> Result<A::Stream, ServerError> {
        lock::<A>()
            .get(&A::key(raw))
            .map(|&(_, stream)| stream)
            .ok_or_else(|| server_error(&not_admitted::<A>()))
    }

    /// Forget `raw` before its owner destroys it: its checked copies are
    /// refused from now on, and the stream itself is left alone. A raw
    /// stream never admitted, or already forgotten, is `Ok`.
    ///
    /// # Errors
    ///
    /// The backend's refusal to let go of the checked stream (a call on it
    /// in flight on this thread, inside `with_raw`), as a [`ServerError`]:
    /// the entry is kept, so that a later `forget` releases it.
    pub fn forget(raw: A::Raw) -> Result<(), ServerError> {
        let Some(stream) = lock::<A>().get(&A::key(raw)).map(|&(_, stream)| stream) else {
            return Ok(());
        };
        // With the map let go: the destroy can wait for the stream's work
        // (HIP drains it), and for a call on it in flight, which may look
        // a stream up meanwhile; other streams' lookups go on.
        match <A as EventApi>::stream_destroy(stream) {
            Ok(()) => {
                drop_entry::<A>(raw, stream);
                Ok(())
            }
            // Destroyed elsewhere: nothing is left to release.
            Err(err) if err.kind() == ErrorKind::InvalidHandle => {
                drop_entry::<A>(raw, stream);
                Ok(())
            }
            Err(err) => {
                log::warn!(
                    "{}: a server's stream could not be forgotten: {err}",
                    A::BACKEND
                );
                Err(server_error(&err))
            }
        }
    }
}

/// Drop the entry of `raw`, if it is still `stream`'s (not one admitted
/// afresh meanwhile).
fn drop_entry<A: RawStreams>(raw: A::Raw, stream: A::Stream) {
    let mut admitted = lock::<A>();
    if admitted
        .get(&A::key(raw))
        .is_some_and(|&(_, kept)| A::stream_key(kept) == A::stream_key(stream))
    {
        admitted.remove(&A::key(raw));
    }
}

fn lock<A: RawStreams>() -> std::sync::MutexGuard<'static, HashMap<usize, (usize, A::Stream)>> {
    A::admitted()
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn not_admitted<A: RawStreams>() -> DriverError {
    DriverError::refused(
        A::BACKEND,
        "stream",
        ErrorKind::InvalidHandle,
        "a raw stream not admitted (CubeStreams::admit), or forgotten",
    )
}

#[cfg(feature = "cuda")]
impl RawStreams for device_events_cuda::Cuda {
    type Raw = cudarc::driver::sys::CUstream;
    type Owner = cudarc::driver::sys::CUcontext;

    unsafe fn admit(raw: Self::Raw, owner: Self::Owner) -> Result<Self::Stream, DriverError> {
        // SAFETY: as the caller promises.
        unsafe { Self::stream_from_raw(raw, owner) }
    }

    fn key(raw: Self::Raw) -> usize {
        raw as usize
    }

    fn owner_key(owner: Self::Owner) -> usize {
        owner as usize
    }

    fn admitted() -> &'static Admitted<Self> {
        static ADMITTED: std::sync::OnceLock<Admitted<device_events_cuda::Cuda>> =
            std::sync::OnceLock::new();
        ADMITTED.get_or_init(Admitted::default)
    }
}

#[cfg(feature = "hip")]
impl RawStreams for device_events_hip::Hip {
    type Raw = device_events_hip::runtime::hipStream_t;
    type Owner = std::ffi::c_int;

    unsafe fn admit(raw: Self::Raw, owner: Self::Owner) -> Result<Self::Stream, DriverError> {
        // SAFETY: as the caller promises.
        unsafe { Self::stream_from_raw(raw, owner) }
    }

    fn key(raw: Self::Raw) -> usize {
        raw as usize
    }

    fn owner_key(owner: Self::Owner) -> usize {
        // A device ordinal, never negative for an admitted stream.
        owner.unsigned_abs() as usize
    }

    fn admitted() -> &'static Admitted<Self> {
        static ADMITTED: std::sync::OnceLock<Admitted<device_events_hip::Hip>> =
            std::sync::OnceLock::new();
        ADMITTED.get_or_init(Admitted::default)
    }
}

/// A stream as a CubeCL server passes it: the backend's checked stream, or
/// (features `cuda`, `hip`) its raw handle, admitted before
/// ([`CubeStreams::admit`]) and found by handle. A backend of your own
/// implements it for its stream type.
pub trait StreamOf<A: EventApi> {
    /// The checked stream.
    ///
    /// # Errors
    ///
    /// A raw handle never admitted, or forgotten.
    fn stream(self) -> Result<A::Stream, ServerError>;
}

impl<R: RawApi> StreamOf<R> for CheckedStream<R> {
    fn stream(self) -> Result<Self, ServerError> {
        Ok(self)
    }
}

#[cfg(feature = "sim")]
impl StreamOf<device_events_core::sim::Sim> for device_events_core::sim::SimStream {
    fn stream(self) -> Result<Self, ServerError> {
        Ok(self)
    }
}

#[cfg(feature = "cuda")]
impl StreamOf<device_events_cuda::Cuda> for cudarc::driver::sys::CUstream {
    fn stream(self) -> Result<device_events_cuda::CudaStream, ServerError> {
        CubeStreams::<device_events_cuda::Cuda>::get(self)
    }
}

/// Any pointer type, as HIP's bindings each name `hipStream_t` their own
/// way (`cubecl-hip-sys`: `*mut ihipStream_t`).
#[cfg(feature = "hip")]
impl<T> StreamOf<device_events_hip::Hip> for *mut T {
    fn stream(self) -> Result<device_events_hip::HipStream, ServerError> {
        CubeStreams::<device_events_hip::Hip>::get(self.cast())
    }
}
