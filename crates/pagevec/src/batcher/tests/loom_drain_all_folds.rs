//! Guarantee: concurrent `drain_all` calls fold into one pass (the
//! `lru_drain_gen` protocol), and each caller still returns only after its
//! own ops are applied.

use loom::{sync::Arc, thread};

use super::{Log, TestBatcher, is_applied, model};

#[test]
fn drain_all_folds() {
    model(|| {
        let b = Arc::new(TestBatcher::new(Log::default()));
        let callers: Vec<_> = (1..3)
            .map(|t| {
                let b = b.clone();
                thread::spawn(move || {
                    b.queue((t, 0));
                    b.drain_all();
                    assert!(is_applied(&b, (t, 0)), "thread {t}: folded too early");
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        let s = b.stats();
        assert_eq!(s.drain_all_passes + s.drain_all_folded, 2);
        assert!(s.drain_all_passes >= 1);
    });
}
