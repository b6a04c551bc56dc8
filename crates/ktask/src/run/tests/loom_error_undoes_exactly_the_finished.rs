//! After a chunk fails, undo covers exactly the chunks that completed —
//! not the failed one, not one that never ran — and the error comes back.

use loom::{
    sync::{Arc, Mutex},
    thread,
};

use super::{super::RunError, super::Shared, model};

#[test]
fn error_undoes_exactly_the_finished() {
    model(|| {
        let shared = Arc::new(Shared::<&'static str>::new(vec![0..1, 1..2, 2..3]));
        let completed = Arc::new(Mutex::new(Vec::new()));
        let f = {
            let completed = completed.clone();
            move |r: std::ops::Range<usize>| {
                if r.start == 1 {
                    return Err("chunk 1 fails");
                }
                completed.lock().unwrap().push(r.start);
                Ok(())
            }
        };
        let (s2, f2) = (shared.clone(), f.clone());
        let helper = thread::spawn(move || s2.work(&f2));
        shared.work(&f);
        // The join is the completion (`std::thread::scope`'s, in `run`).
        helper.join().unwrap();
        let undone = Mutex::new(Vec::new());
        let shared = Arc::try_unwrap(shared).ok().expect("helper joined");
        let r = shared.finish(&|r: std::ops::Range<usize>| undone.lock().unwrap().push(r.start));
        assert!(matches!(r, Err(RunError::Failed("chunk 1 fails"))));
        let mut undone = undone.into_inner().unwrap();
        let mut completed = completed.lock().unwrap().clone();
        undone.sort_unstable();
        completed.sort_unstable();
        assert_eq!(
            undone, completed,
            "undo must cover exactly the completed chunks"
        );
    });
}
