//! Loom models of the cache.
