//! Unit tests of `Flights`: the list and the table, sweeps, shrinking.

use super::*;

fn flight(key: u32, id: u64) -> Flight<u32, u32> {
    // Keys 0 and 100 share a hash, as different keys may.
    Flight::new(u64::from(key % 100), key, id, true, None)
}

impl<K, V> Flights<K, V> {
    fn is_list(&self) -> bool {
        matches!(self.held, Held::Few(_))
    }

    /// The table's allocation, in bytes (0 for a list).
    fn room(&self) -> usize {
        match &self.held {
            Held::Few(_) => 0,
            Held::Many(t) => t.allocation_size(),
        }
    }
}

/// Pushes flights of keys `keys` (hash: the key), each with its key as
/// its id.
fn push_all(f: &mut Flights<u32, u32>, keys: std::ops::Range<u32>) {
    let mut gone = Vec::new();
    for k in keys {
        f.push(
            Flight::new(u64::from(k), k, u64::from(k), true, None),
            &mut gone,
        );
    }
    assert!(gone.is_empty());
}

fn abandon(f: &Flights<u32, u32>, k: u32) {
    assert!(
        f.by_id(u64::from(k), u64::from(k))
            .unwrap()
            .abandon()
            .is_none()
    );
}

/// A table sweeps its abandoned flights out once the claims since the
/// last sweep reach the flights it held then (and `FEW`), not at each
/// claim (which cost every miss a walk of the table).
#[test]
fn a_table_sweeps_every_so_many_claims() {
    let mut f = Flights::new();
    push_all(&mut f, 0..FEW as u32 + 1);
    abandon(&f, 3);
    let mut gone = Vec::new();
    for claim in 1..=FEW {
        assert!(f.find_live(1000, |_| false, &mut gone).is_none());
        let swept = f.by_id(3, 3).is_none();
        assert_eq!(swept, claim == FEW, "after {claim} claims");
    }
    assert_eq!(gone.iter().map(|fl| fl.key).collect::<Vec<_>>(), [3]);
    // A key's own claim takes its abandoned flight out at once.
    abandon(&f, 5);
    assert!(f.find_live(5, |k| *k == 5, &mut gone).is_none());
    assert_eq!(gone.len(), 2);
    assert!(f.by_id(5, 5).is_none());
}

/// A full list sweeps its abandoned flights before a push would make
/// it a table: it stays a list while that leaves room.
#[test]
fn a_full_list_sweeps_before_it_grows() {
    let mut f = Flights::new();
    push_all(&mut f, 0..FEW as u32);
    abandon(&f, 2);
    abandon(&f, 6);
    let mut gone = Vec::new();
    f.push(Flight::new(100, 100, 100, true, None), &mut gone);
    assert!(f.is_list());
    assert_eq!(gone.len(), 2);
    push_all(&mut f, 200..202);
    assert!(!f.is_list(), "full again with none given up: a table");
}

/// A table left with few flights after a burst gives its room back.
#[test]
fn a_table_shrinks_after_a_burst() {
    let mut f = Flights::new();
    push_all(&mut f, 0..1000);
    let burst = f.room();
    assert!(burst >= 1000 * size_of::<Flight<u32, u32>>());
    // Not before it is down to a quarter of the most it held (a shrink
    // at every removal would cost each one a rehash of the table).
    for k in 250..1000u32 {
        assert!(f.take(u64::from(k), u64::from(k)).is_some());
    }
    assert_eq!(f.room(), burst, "shrunk at 250 of 1000 flights");
    assert!(f.take(249, 249).is_some());
    let half = f.room();
    assert!(half < burst, "not shrunk at 249 of 1000 flights");
    for k in 5..249u32 {
        assert!(f.take(u64::from(k), u64::from(k)).is_some());
    }
    assert!(f.room() <= burst / 16, "{} bytes of {burst} kept", f.room());
}

/// Up to `FEW` flights are a list, the next moves them to a table,
/// and a table emptied is a list again; every flight is found by its
/// key, and taken by its id, in either.
#[test]
fn a_few_flights_are_a_list_and_more_a_table() {
    let mut f = Flights::new();
    assert!(f.is_empty() && f.is_list());
    let keys: Vec<u32> = (0..FEW as u32).chain([100, 5]).collect();
    let mut gone = Vec::new();
    for (n, &k) in keys.iter().enumerate() {
        let id = f.next_id();
        assert_eq!(id, n as u64);
        if n < keys.len() - 1 {
            assert!(
                f.find_live(u64::from(k % 100), |x| *x == k, &mut gone)
                    .is_none()
            );
        }
        f.push(flight(k, id), &mut gone);
        assert!(!f.is_empty());
        assert_eq!(f.is_list(), n < FEW, "after {} flights", n + 1);
    }
    for (id, &k) in keys.iter().enumerate() {
        let hash = u64::from(k % 100);
        let found = f.find_live(hash, |x| *x == k, &mut gone);
        // Key 5 has two flights: the first found.
        assert_eq!(found.map(|fl| fl.key), Some(k), "key {k}");
        assert_eq!(f.by_id(hash, id as u64).map(|fl| fl.key), Some(k));
    }
    assert!(gone.is_empty());
    for (id, &k) in keys.iter().enumerate().rev() {
        assert!(!f.is_list());
        let taken = f.take(u64::from(k % 100), id as u64).map(|fl| fl.key);
        assert_eq!(taken, Some(k));
    }
    assert!(f.is_empty() && f.is_list());
    assert!(f.take(0, 0).is_none());
}
