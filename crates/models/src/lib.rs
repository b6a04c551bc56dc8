//! The sequential reference models the mmbatch crates are checked against
//! (not published): each is shared by a crate's property tests and a
//! cargo-fuzz target, which drive the real code on worker threads and
//! compare it with the model after every step.
//!
//! - [`batcher`]: `mmbatch_pagevec::Batcher` (per-thread batches, drains,
//!   counters);
//! - [`engine`]: the `mmbatch_lru` engine, written from the kernel's rules
//!   (lists in order, flags, references, mlock counts, events);
//! - [`cache`]: `LruCache` against the `lru` crate (exact LRU) and value
//!   accounting;
//! - [`workers`]: the persistent worker threads the first two run steps on;
//! - [`traces`]: request sequences the cache's replacement tests share.

pub mod batcher;
pub mod cache;
pub mod engine;
pub mod traces;
pub mod workers;
