//! A table of C functions resolved from a loaded driver library, for the
//! backends that load their driver themselves (CUDA, HIP): one helper, so
//! each backend's table is its list of signatures.

/// Declares a struct of C function pointers and its `resolve`, which looks
/// each one up by name in a `libloading::Library` (the invoking crate's
/// dependency). Each function is declared with the return type given, so a
/// status the bindings would make an enum arrives as a plain integer.
///
/// `resolve` is `unsafe`: the caller promises that the library exports each
/// name with the C signature written here, and that it stays loaded while
/// the table is used. It returns the first missing name as `Err`.
///
/// ```
/// use std::ffi::c_int;
///
/// device_events_core::driver_functions! {
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
/// let libc = unsafe { Libc::resolve(&lib) }.unwrap();
/// // SAFETY: `abs` takes any `int`.
/// assert_eq!(unsafe { (libc.abs)(-3) }, 3);
/// # }
/// ```
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
            /// Look up every function in `lib`; the first missing name is
            /// the error.
            ///
            /// # Safety
            ///
            /// `lib` exports each name with the C signature declared, and
            /// stays loaded while the table is used.
            #[allow(dead_code)]
            $vis unsafe fn resolve(lib: &libloading::Library) -> Result<Self, &'static str> {
                Ok(Self {
                    $($name: {
                        const NAME: &str = concat!(stringify!($name), "\0");
                        // SAFETY: as the caller promises for this name.
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(NAME.as_bytes())
                        };
                        *symbol.map_err(|_| stringify!($name))?
                    },)*
                })
            }
        }
    };
}
