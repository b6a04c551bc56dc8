//! The one way the crates run a loom model (`cargo xtask loom`).

/// loom's default bound on branches per execution.
pub const DEFAULT_BRANCHES: usize = 1_000;

/// Checks `f` under every interleaving loom explores: preemptions bounded
/// by `LOOM_MAX_PREEMPTIONS` when set (xtask sets 3), else by
/// `preemptions`; at most `max_branches` branches per execution.
pub fn check(preemptions: usize, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = max_branches;
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder.check(f);
}

/// [`check`] at no more than `most` preemptions: `LOOM_MAX_PREEMPTIONS`
/// where that is set and lower, else `most`. For a model whose schedules
/// at the usual bound take minutes, while another model checks its
/// protocol there.
pub fn check_at_most(most: usize, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = max_branches;
    builder.preemption_bound = Some(builder.preemption_bound.map_or(most, |b| b.min(most)));
    builder.check(f);
}
