//! Loom models of the chunk protocol (`cargo xtask loom ktask`).

mod loom_chunks_run_exactly_once;
mod loom_completion_waits_for_all;
mod loom_error_undoes_exactly_the_finished;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}
