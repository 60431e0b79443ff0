//! The behaviour every device-events backend must show, written once.
#![allow(unsafe_code)]

pub mod soft;
