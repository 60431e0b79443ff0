//! Status codes each ABI may return: only these cross it, because the Rust
//! bindings declare some status types as enums.

use crate::engine::Fault;

/// How both ABIs spell a fault: HIP numbers these statuses as CUDA does
/// (`hipErrorNotReady` 600, `hipErrorStreamCaptureUnsupported` 900, …),
/// so one table serves both.
pub(crate) fn status(fault: Fault) -> i32 {
    match fault {
        Fault::InvalidValue => 1,
        Fault::NotInitialized => 3,
        Fault::Deinitialized => 4,
        Fault::InvalidDevice => 101,
        Fault::InvalidContext => 201,
        Fault::InvalidHandle => 400,
        Fault::NotReady => 600,
        Fault::ContextDestroyed => 709,
        Fault::NotSupported => 801,
        Fault::InvalidImage => 200,
        Fault::NoBinaryForGpu => 209,
        Fault::NotFound => 500,
        Fault::CaptureUnsupported => 900,
        Fault::CaptureInvalidated => 901,
        Fault::CaptureUnmatched => 903,
        Fault::CaptureUnjoined => 904,
        Fault::CaptureIsolation => 905,
        Fault::CapturedEvent => 907,
        Fault::CaptureWrongThread => 908,
        Fault::Injected(status) => status,
    }
}

/// `CUresult` values of the CUDA 12.8 headers (the bindings level the CUDA
/// backend uses), with their names.
pub(crate) const CUDA: &[(i32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, "CUDA_ERROR_CONTAINED"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (402, "CUDA_ERROR_LOSSY_QUERY"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, "CUDA_ERROR_CAPTURED_EVENT"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, "CUDA_ERROR_TIMEOUT"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, "CUDA_ERROR_KEY_ROTATION"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

/// `hipError_t` values of the HIP 6 headers, with their names.
pub(crate) const HIP: &[(i32, &str)] = &[
    (0, "hipSuccess"),
    (1, "hipErrorInvalidValue"),
    (2, "hipErrorOutOfMemory"),
    (2, "hipErrorMemoryAllocation"),
    (3, "hipErrorNotInitialized"),
    (3, "hipErrorInitializationError"),
    (4, "hipErrorDeinitialized"),
    (5, "hipErrorProfilerDisabled"),
    (6, "hipErrorProfilerNotInitialized"),
    (7, "hipErrorProfilerAlreadyStarted"),
    (8, "hipErrorProfilerAlreadyStopped"),
    (9, "hipErrorInvalidConfiguration"),
    (12, "hipErrorInvalidPitchValue"),
    (13, "hipErrorInvalidSymbol"),
    (17, "hipErrorInvalidDevicePointer"),
    (21, "hipErrorInvalidMemcpyDirection"),
    (35, "hipErrorInsufficientDriver"),
    (52, "hipErrorMissingConfiguration"),
    (53, "hipErrorPriorLaunchFailure"),
    (98, "hipErrorInvalidDeviceFunction"),
    (100, "hipErrorNoDevice"),
    (101, "hipErrorInvalidDevice"),
    (200, "hipErrorInvalidImage"),
    (201, "hipErrorInvalidContext"),
    (202, "hipErrorContextAlreadyCurrent"),
    (205, "hipErrorMapFailed"),
    (205, "hipErrorMapBufferObjectFailed"),
    (206, "hipErrorUnmapFailed"),
    (207, "hipErrorArrayIsMapped"),
    (208, "hipErrorAlreadyMapped"),
    (209, "hipErrorNoBinaryForGpu"),
    (210, "hipErrorAlreadyAcquired"),
    (211, "hipErrorNotMapped"),
    (212, "hipErrorNotMappedAsArray"),
    (213, "hipErrorNotMappedAsPointer"),
    (214, "hipErrorECCNotCorrectable"),
    (215, "hipErrorUnsupportedLimit"),
    (216, "hipErrorContextAlreadyInUse"),
    (217, "hipErrorPeerAccessUnsupported"),
    (218, "hipErrorInvalidKernelFile"),
    (219, "hipErrorInvalidGraphicsContext"),
    (300, "hipErrorInvalidSource"),
    (301, "hipErrorFileNotFound"),
    (302, "hipErrorSharedObjectSymbolNotFound"),
    (303, "hipErrorSharedObjectInitFailed"),
    (304, "hipErrorOperatingSystem"),
    (400, "hipErrorInvalidHandle"),
    (400, "hipErrorInvalidResourceHandle"),
    (401, "hipErrorIllegalState"),
    (500, "hipErrorNotFound"),
    (600, "hipErrorNotReady"),
    (700, "hipErrorIllegalAddress"),
    (701, "hipErrorLaunchOutOfResources"),
    (702, "hipErrorLaunchTimeOut"),
    (704, "hipErrorPeerAccessAlreadyEnabled"),
    (705, "hipErrorPeerAccessNotEnabled"),
    (708, "hipErrorSetOnActiveProcess"),
    (709, "hipErrorContextIsDestroyed"),
    (710, "hipErrorAssert"),
    (712, "hipErrorHostMemoryAlreadyRegistered"),
    (713, "hipErrorHostMemoryNotRegistered"),
    (719, "hipErrorLaunchFailure"),
    (720, "hipErrorCooperativeLaunchTooLarge"),
    (801, "hipErrorNotSupported"),
    (900, "hipErrorStreamCaptureUnsupported"),
    (901, "hipErrorStreamCaptureInvalidated"),
    (902, "hipErrorStreamCaptureMerge"),
    (903, "hipErrorStreamCaptureUnmatched"),
    (904, "hipErrorStreamCaptureUnjoined"),
    (905, "hipErrorStreamCaptureIsolation"),
    (906, "hipErrorStreamCaptureImplicit"),
    (907, "hipErrorCapturedEvent"),
    (908, "hipErrorStreamCaptureWrongThread"),
    (910, "hipErrorGraphExecUpdateFailure"),
    (911, "hipErrorInvalidChannelDescriptor"),
    (912, "hipErrorInvalidTexture"),
    (914, "hipErrorInvalidResourceType"),
    (915, "hipErrorInvalidResourceConfiguration"),
    (916, "hipErrorStreamDetached"),
    (999, "hipErrorUnknown"),
    (1052, "hipErrorRuntimeMemory"),
    (1053, "hipErrorRuntimeOther"),
    (1054, "hipErrorInvalidClusterSize"),
    (1055, "hipErrorTbd"),
];

use std::ffi::{CString, c_char};
use std::sync::LazyLock;

/// Each status's name and description as C strings that live as long as the
/// library, as the drivers' own do.
type Texts = Vec<(i32, CString, CString)>;

fn texts(table: &[(i32, &str)]) -> Texts {
    table
        .iter()
        .filter_map(|(code, name)| {
            let description = format!("{name} (device-events software driver)");
            Some((
                *code,
                CString::new(*name).ok()?,
                CString::new(description).ok()?,
            ))
        })
        .collect()
}

static CUDA_TEXTS: LazyLock<Texts> = LazyLock::new(|| texts(CUDA));
static HIP_TEXTS: LazyLock<Texts> = LazyLock::new(|| texts(HIP));

/// Which C ABI a status belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Abi {
    Cuda,
    Hip,
}

/// The statuses of `abi`.
pub(crate) fn table(abi: Abi) -> &'static [(i32, &'static str)] {
    match abi {
        Abi::Cuda => CUDA,
        Abi::Hip => HIP,
    }
}

/// The name (or, with `describe`, the description) of `code`, if `abi` has it.
pub(crate) fn c_name(abi: Abi, code: i32, describe: bool) -> Option<*const c_char> {
    let texts = match abi {
        Abi::Cuda => &*CUDA_TEXTS,
        Abi::Hip => &*HIP_TEXTS,
    };
    texts
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, name, description)| {
            if describe {
                description.as_ptr()
            } else {
                name.as_ptr()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_a_status_of_both_abis() {
        for fault in [
            Fault::InvalidValue,
            Fault::NotInitialized,
            Fault::Deinitialized,
            Fault::InvalidDevice,
            Fault::InvalidContext,
            Fault::InvalidHandle,
            Fault::NotReady,
            Fault::ContextDestroyed,
            Fault::NotSupported,
            Fault::InvalidImage,
            Fault::NoBinaryForGpu,
            Fault::NotFound,
            Fault::CaptureUnsupported,
            Fault::CaptureInvalidated,
            Fault::CaptureUnmatched,
            Fault::CaptureUnjoined,
            Fault::CaptureIsolation,
            Fault::CapturedEvent,
            Fault::CaptureWrongThread,
        ] {
            let code = status(fault);
            for abi in [Abi::Cuda, Abi::Hip] {
                assert!(
                    table(abi).iter().any(|(c, _)| *c == code),
                    "{fault:?} ({code}) is not a status of {abi:?}"
                );
            }
        }
    }
}
