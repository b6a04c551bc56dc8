//! Test support for the mmbatch crates (not published).
//!
//! [`child`] re-runs one test of the current test binary in a child
//! process with a bounded wait: hangs and fatal signals are tested there,
//! never by hanging or killing the test runner.
//! [`signal`] reads memory that should kill the process and reports the
//! signal. [`bytes`] reads sizes off fuzzer input for the fuzz targets.

pub mod bytes;
pub mod child;
pub mod signal;
