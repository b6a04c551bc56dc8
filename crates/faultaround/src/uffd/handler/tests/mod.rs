//! Loom models of the handler's protocols that can be modelled apart from
//! the kernel. Run with `cargo xtask loom faultaround`.

mod loom_remove_vs_copy;
mod loom_teardown;
mod loom_watchdog;
