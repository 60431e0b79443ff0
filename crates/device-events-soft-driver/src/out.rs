//! Writes through the out-pointers the C ABIs return their results in.

use std::ffi::{c_char, c_int};

use crate::engine::{Fault, Outcome};

/// Write `value` through `ptr`; a null `ptr` is the caller's invalid value.
///
/// # Safety
///
/// `ptr` is null or valid for a write of a `T`.
pub(crate) unsafe fn put<T>(ptr: *mut T, value: T) -> Outcome<()> {
    if ptr.is_null() {
        return Err(Fault::InvalidValue);
    }
    // SAFETY: non-null, and valid for a write by this function's contract.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Copy `text` into the `len`-byte buffer at `buffer`, truncated to fit and
/// NUL-terminated.
///
/// # Safety
///
/// `buffer` is null or valid for writes of `len` bytes.
pub(crate) unsafe fn put_str(buffer: *mut c_char, len: c_int, text: &str) -> Outcome<()> {
    let len = usize::try_from(len).map_err(|_| Fault::InvalidValue)?;
    if buffer.is_null() || len == 0 {
        return Err(Fault::InvalidValue);
    }
    let n = text.len().min(len - 1);
    // SAFETY: `buffer` holds `len` > n bytes by this function's contract, and
    // `text` is a live string of at least `n` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, n);
        buffer.add(n).write(0);
    }
    Ok(())
}
