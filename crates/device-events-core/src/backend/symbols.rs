//! A table of C functions resolved from a loaded driver library, for the
//! backends that load their driver themselves (CUDA, HIP): one helper, so
//! each backend's table is its list of signatures.

/// Declares a struct of C function pointers and its `resolve`, which looks
/// each one up by name through `lookup`: a backend passes its loaded
/// library's symbol lookup, of whatever `libloading` version loaded it
/// (cudarc's, for CUDA), so the table ties it to none. Each function is
/// declared with the return type given, so a status the bindings would
/// make an enum arrives as a plain integer.
///
/// `resolve` is `unsafe`: the caller promises that `lookup` gives, for each
/// name (NUL-terminated), the address of a function with the C signature
/// written here, or `None`, and that it stays loaded while the table is
/// used. It returns the first missing name as `Err`.
///
/// ```
/// use std::ffi::{c_int, c_void};
///
/// device_events_core::backend::driver_functions! {
///     /// Two functions of the C library.
///     struct Libc {
///         abs(c_int) -> c_int;
///         labs(std::ffi::c_long) -> std::ffi::c_long;
///     }
/// }
///
/// # #[cfg(target_os = "linux")] {
/// // SAFETY: glibc's `abs` and `labs` have these signatures; the library
/// // is kept loaded for as long as the table is used.
/// let lib = unsafe { libloading::Library::new("libc.so.6") }.unwrap();
/// let libc = unsafe { Libc::resolve(|name| lib.get::<*const c_void>(name).ok().map(|f| *f)) }
///     .unwrap();
/// // SAFETY: `abs` takes any `int`.
/// assert_eq!(unsafe { (libc.abs)(-3) }, 3);
/// # }
/// ```
// Exported at the crate's root, as every exported macro is; shown and
// named under `backend`, with the rest of a backend author's part.
#[doc(hidden)]
#[macro_export]
macro_rules! driver_functions {
    (
        $(#[$meta:meta])*
        $vis:vis struct $table:ident {
            $($name:ident($($arg:ty),*) -> $ret:ty;)*
        }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        $vis struct $table {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl $table {
            /// Look up every function through `lookup`; the first missing
            /// name is the error.
            ///
            /// # Safety
            ///
            /// `lookup` gives each name's function, of the C signature
            /// declared, which stays loaded while the table is used.
            #[allow(dead_code)]
            $vis unsafe fn resolve(
                mut lookup: impl FnMut(&[u8]) -> Option<*const ::std::ffi::c_void>,
            ) -> Result<Self, &'static str> {
                Ok(Self {
                    $($name: {
                        const NAME: &str = concat!(stringify!($name), "\0");
                        let address = lookup(NAME.as_bytes())
                            .filter(|address| !address.is_null())
                            .ok_or(stringify!($name))?;
                        // SAFETY: as the caller promises, the address of this
                        // name's function, of this signature; a function
                        // pointer and a data pointer are one size here.
                        unsafe {
                            ::std::mem::transmute::<
                                *const ::std::ffi::c_void,
                                unsafe extern "C" fn($($arg),*) -> $ret,
                            >(address)
                        }
                    },)*
                })
            }
        }
    };
}
