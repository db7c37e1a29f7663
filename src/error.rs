//! One error type for the whole crate. Every message names the input and the cause, so that the
//! Lua binding can hand it to the user unchanged.
//! It touches nothing else in the crate; every other module reports through it.

use std::path::PathBuf;

/// Everything that can go wrong in `diversity`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file in question.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file was read but its contents are not what its format requires.
    #[error("{path}: {reason}")]
    Format {
        /// The file in question.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A value handed to the API is out of its valid range (bad start, zero dimension, NaN, ...).
    #[error("{0}")]
    Invalid(String),
    /// A result failed the cross-check the caller asked for (`KnnOptions::verify`, the
    /// rankings' `--verify`): the message names the query, rank and rows.
    #[error("verification failed: {0}")]
    Verification(String),
    /// The job needs more than the device offers; the message names the limit, the need and the
    /// amount available.
    #[error("device limit: {0}")]
    Limit(String),
    /// The device has no feature the job needs (e.g. 16-bit storage for an fp16 table).
    #[error("unsupported on {device}: {what}")]
    Unsupported {
        /// The device's name.
        device: String,
        /// The missing feature.
        what: String,
    },
    /// No Vulkan device matched the request.
    #[error("no Vulkan device: {0}")]
    NoDevice(String),
    /// A Vulkan call failed; `call` names it.
    #[error("Vulkan {call} failed: {result}")]
    Vulkan {
        /// The Vulkan entry point that failed.
        call: &'static str,
        /// Its result code.
        result: ash::vk::Result,
    },
    /// The device was lost while a job ran (driver reset, watchdog, hardware fault).
    #[error("Vulkan device lost during {0}")]
    DeviceLost(String),
    /// gpu-allocator could not allocate memory.
    #[error("device memory allocation of {bytes} bytes for {what} failed: {reason}")]
    Alloc {
        /// The buffer the allocation was for.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The allocator's message.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Wrap an `ash` result with the name of the Vulkan call, mapping device loss to its own variant.
pub(crate) trait VkContext<T> {
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkContext<T> for std::result::Result<T, ash::vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|result| {
            if result == ash::vk::Result::ERROR_DEVICE_LOST {
                Error::DeviceLost(call.to_string())
            } else {
                Error::Vulkan { call, result }
            }
        })
    }
}

/// The message a panic carried (`panic!("…")` gives a `&str` or a `String`), or `otherwise`
/// when it carried something else: for the C ABI's and the stepping threads' reports of a panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send), otherwise: &str) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| otherwise.into())
}
