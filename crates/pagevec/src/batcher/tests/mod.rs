//! Loom models of the [`Batcher`](super::Batcher) protocol, one per
//! guarantee. Run with `cargo xtask loom pagevec` (`RUSTFLAGS="--cfg mmbatch_loom"`,
//! release, debug assertions on). Batches are tiny (N = 2) so that few ops
//! reach the full-batch, drain and wrap-around paths.

mod loom_disabled_no_op_waits;
mod loom_drain_all_applies_prior_ops;
mod loom_drain_all_folds;
mod loom_no_op_lost_or_applied_twice;
mod loom_one_thread_in_order;
mod loom_remote_drain_vs_owner;

use loom::sync::{Mutex, MutexGuard};

use super::{Apply, Batcher};

/// (thread, sequence number within that thread)
type Op = (usize, u32);

/// A target that records the order ops were applied in.
#[derive(Debug, Default)]
struct Log(Mutex<Vec<Op>>);

impl Apply for Log {
    type Op = Op;
    type Key = ();
    type Guard<'a> = MutexGuard<'a, Vec<Op>>;

    fn key(&self, _: &Op) {}

    fn lock(&self, _: ()) -> Self::Guard<'_> {
        self.0.lock().unwrap()
    }

    fn apply(&self, log: &mut Self::Guard<'_>, op: Op) {
        log.push(op);
    }
}

type TestBatcher = Batcher<Log, 2>;

fn applied(b: &TestBatcher) -> Vec<Op> {
    b.target().0.lock().unwrap().clone()
}

fn is_applied(b: &TestBatcher, op: Op) -> bool {
    b.target().0.lock().unwrap().contains(&op)
}

/// Runs `f` under loom with a preemption bound of 3 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    mmbatch_testkit::loom_model::check(3, mmbatch_testkit::loom_model::DEFAULT_BRANCHES, f);
}
