//! Loom models of the handler's protocols that can be modelled apart from
//! the kernel. Run with `cargo xtask loom faultaround`.

mod loom_remove_vs_copy;
mod loom_teardown;
mod loom_watchdog;

/// Waits on `changed` while `cond` holds of what `guard` guards (loom's
/// `Condvar` has no `wait_while`); the models' kernels signal `changed` at
/// every change, so they block rather than spin (a smaller search).
fn wait_while<'a, T>(
    changed: &loom::sync::Condvar,
    mut guard: loom::sync::MutexGuard<'a, T>,
    cond: impl Fn(&T) -> bool,
) -> loom::sync::MutexGuard<'a, T> {
    while cond(&guard) {
        guard = changed.wait(guard).unwrap();
    }
    guard
}
