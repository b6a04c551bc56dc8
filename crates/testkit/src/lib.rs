//! Test support for the mmbatch crates (not published).
//!
//! [`child`] re-runs one test of the current test binary in a child
//! process with a bounded wait: hangs and fatal signals are tested there,
//! never by hanging or killing the test runner.
//! [`signal`] reads memory that should kill the process and reports the
//! signal. [`bytes`] reads sizes off fuzzer input for the fuzz targets.
//! Under `cfg(loom)`, `loom_model::check` runs every crate's loom models
//! the same way.

pub mod bytes;
pub mod child;
#[cfg(loom)]
pub mod loom_model;
pub mod signal;
