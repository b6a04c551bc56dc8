//! The engine against the sequential reference model in `model/mod.rs`:
//! random operation sequences from several simulated CPUs, under random
//! batched/immediate modes. After every step (and after a final drain of
//! every CPU) lists with their order, flags, references, mlock counts,
//! events, lock acquisitions and NR_MLOCK must equal the model's.

use mmbatch_models::engine as model;

use mmbatch_lru::{Mode, Modes};
use model::{FRAMES, Step, THREADS, run};
use proptest::prelude::*;

fn step() -> impl Strategy<Value = Step> {
    let t = 0..THREADS;
    let p = 0..FRAMES;
    prop_oneof![
        6 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Add(t, p)),
        8 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Mark(t, p)),
        2 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Activate(t, p)),
        2 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Deactivate(t, p)),
        2 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Rotate(t, p)),
        3 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Isolate(t, p)),
        3 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Putback(t, p)),
        2 => (t.clone(), p.clone()).prop_map(|(t, p)| Step::Mlock(t, p)),
        2 => (t.clone(), p).prop_map(|(t, p)| Step::Munlock(t, p)),
        3 => t.clone().prop_map(Step::Drain),
        2 => (t, 0..6u8, any::<u8>()).prop_map(|(t, n, mask)| Step::Shrink(t, n, mask)),
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Immediate), Just(Mode::Batched)]
}

fn modes() -> impl Strategy<Value = Modes> {
    (mode(), mode(), mode(), mode(), mode()).prop_map(
        |(lru_add, activate, deactivate, rotate, mlock)| Modes {
            lru_add,
            activate,
            deactivate,
            rotate,
            mlock,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_sequential_model(modes in modes(), steps in prop::collection::vec(step(), 1..80)) {
        run(modes, &steps).map_err(TestCaseError::fail)?;
    }
}
