//! What `cuModuleLoadData` is handed: a NUL-terminated PTX text or a
//! cubin (an ELF image of NVIDIA's machine type). The driver has no JIT and
//! no GPU, so it only tells the kinds apart, and a cubin's architecture
//! from its device's, as a real driver refuses a cubin built for another.

use std::ffi::c_void;

use crate::engine::Fault;

/// The compute capability every device reports, as major × 10 + minor:
/// 9.0, an H100's or H200's.
pub(crate) const ARCH: u32 = 90;

/// ELF's machine number for NVIDIA's GPUs (`EM_CUDA`).
const EM_CUDA: u16 = 190;

/// The kinds of image the driver takes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Image {
    /// PTX text, for the driver's JIT.
    Ptx,
    /// A cubin for this device's architecture.
    Cubin,
}

/// What `image` is: a cubin whose architecture is not the device's is
/// NO_BINARY_FOR_GPU (SASS runs only on its own major version, at its
/// minor or later); an ELF image of another machine, or text that is not
/// PTX, is INVALID_IMAGE.
///
/// # Safety
///
/// `image` is non-null and points to a NUL-terminated text or to a whole
/// ELF image (at least its 64-byte header).
pub(crate) unsafe fn classify(image: *const c_void) -> Result<Image, Fault> {
    let bytes = image.cast::<u8>();
    // Byte by byte, stopping at the first that differs: a NUL-terminated
    // text shorter than the magic is never read past its end.
    let elf = (0..4).all(|at| {
        // SAFETY: every byte before this one matched the magic, which has
        // no NUL, so this one is inside the text or the image.
        (unsafe { bytes.add(at).read() }) == b"\x7fELF"[at]
    });
    if !elf {
        // SAFETY: not ELF, so NUL-terminated text, as the caller promises.
        let text = unsafe { std::ffi::CStr::from_ptr(image.cast()) }.to_string_lossy();
        // PTX names its ISA version and target first; anything else is
        // not an image the JIT takes.
        return if text.contains(".version") && text.contains(".target") {
            Ok(Image::Ptx)
        } else {
            Err(Fault::InvalidImage)
        };
    }
    // SAFETY: an ELF image, whole, as the caller promises: its header's
    // 64 bytes are readable (unaligned reads).
    let (class, machine, flags) = unsafe {
        (
            bytes.add(4).read(),
            bytes.add(18).cast::<u16>().read_unaligned(),
            bytes.add(48).cast::<u32>().read_unaligned(),
        )
    };
    // A 64-bit image of NVIDIA's machine type; its flags' low byte is the
    // SASS architecture (`sm_90`: 90).
    if class != 2 || u16::from_le(machine) != EM_CUDA {
        return Err(Fault::InvalidImage);
    }
    if runs_on(u32::from_le(flags) & 0xff, ARCH) {
        Ok(Image::Cubin)
    } else {
        Err(Fault::NoBinaryForGpu)
    }
}

/// Whether SASS for `arch` runs on a device of `device` (both major × 10
/// + minor): the same major, a minor no later than the device's.
fn runs_on(arch: u32, device: u32) -> bool {
    arch / 10 == device / 10 && arch % 10 <= device % 10
}
