//! Every chunk is claimed, and run, exactly once.

use loom::{
    sync::{Arc, Mutex},
    thread,
};

use super::{super::Shared, model};

#[test]
fn chunks_run_exactly_once() {
    model(|| {
        let shared = Arc::new(Shared::<()>::new(vec![0..1, 1..2, 2..3]));
        let ran = Arc::new(Mutex::new(Vec::new()));
        let (s2, r2) = (shared.clone(), ran.clone());
        let helper = thread::spawn(move || {
            s2.work(&|r| {
                r2.lock().unwrap().push(r.start);
                Ok(())
            })
        });
        let r1 = ran.clone();
        shared.work(&|r| {
            r1.lock().unwrap().push(r.start);
            Ok(())
        });
        // The join is the completion (`std::thread::scope`'s, in `run`).
        helper.join().unwrap();
        let mut ran = ran.lock().unwrap().clone();
        ran.sort_unstable();
        assert_eq!(ran, [0, 1, 2]);
    });
}
