//! Loom models of the chunk protocol (`cargo xtask loom ktask`).

mod loom_chunks_run_exactly_once;
mod loom_error_undoes_exactly_the_finished;

fn model(f: impl Fn() + Sync + Send + 'static) {
    mmbatch_testkit::loom_model::check(3, mmbatch_testkit::loom_model::DEFAULT_BRANCHES, f);
}
