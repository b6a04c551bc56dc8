//! `PageVec`'s unit tests.

use std::{cell::Cell, vec::Vec};

use super::*;

/// Counts drops, to catch leaks and double drops (Miri checks the rest).
/// It borrows its counter, so a deliberately leaked item owns no heap
/// memory and Miri's leak check stays meaningful.
#[derive(Debug)]
struct Tracked<'a>(u32, &'a Cell<usize>);
impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.1.set(self.1.get() + 1);
    }
}

fn tracked(n: u32, drops: &Cell<usize>) -> PageVec<Tracked<'_>, 8> {
    let mut v = PageVec::new();
    for i in 0..n {
        v.push(Tracked(i, drops));
    }
    v
}

/// What the accessors and the slice, comparison, iteration and
/// formatting traits promise, from empty to full.
#[test]
fn accessors_and_traits_say_what_the_batch_holds() {
    let mut v: PageVec<u32, 4> = PageVec::new();
    assert_eq!((v.len(), v.capacity(), v.space()), (0, 4, 4));
    assert!(v.is_empty() && !v.is_full());
    v.push(1);
    v.push(2);
    assert_eq!((v.len(), v.space()), (2, 2));
    assert!(!v.is_empty() && !v.is_full());
    // Deref, DerefMut and both borrowed iterators see the items.
    assert_eq!(&*v, &[1, 2]);
    v[0] = 10;
    for x in &mut v {
        *x += 1;
    }
    assert_eq!((&v).into_iter().copied().collect::<Vec<_>>(), [11, 3]);
    assert_eq!(v.as_mut_slice(), &mut [11, 3]);
    let mut w: PageVec<u32, 4> = PageVec::new();
    w.push(11);
    assert_ne!(v, w);
    w.push(3);
    assert_eq!(v, w);
    v.push(5);
    v.push(6);
    assert!(v.is_full());
    assert_eq!(v.space(), 0);
    let e = v.try_push(7).unwrap_err();
    assert_eq!(format!("{e:?}"), "CapacityError: batch is full");
    assert!(e.to_string().contains("drain"), "{e}");
    assert_eq!(e.element(), 7);
    assert_eq!(format!("{v:?}"), "[11, 3, 5, 6]");
    let mut d = v.drain();
    d.next();
    assert_eq!(format!("{d:?}"), "Drain { remaining: 3 }");
    drop(d);
    w.push(8);
    let mut it = w.into_iter();
    assert_eq!(it.size_hint(), (3, Some(3)));
    it.next();
    assert_eq!(it.size_hint(), (2, Some(2)));
    assert_eq!(it.len(), 2);
    assert_eq!(format!("{it:?}"), "IntoIter { remaining: 2 }");
}

/// 256 bytes on a 64-bit target (128 on a 32-bit one).
#[test]
fn default_is_32_words_for_pointers() {
    assert_eq!(
        core::mem::size_of::<PageVec<&u8>>(),
        32 * core::mem::size_of::<usize>()
    );
}

#[test]
fn push_reports_space_like_folio_batch_add() {
    let mut v: PageVec<u8, 3> = PageVec::new();
    assert_eq!(v.push(1), 2);
    assert_eq!(v.push(2), 1);
    assert_eq!(v.push(3), 0);
    assert_eq!(v.try_push(4), Err(CapacityError(4)));
    assert_eq!(v.as_slice(), [1, 2, 3]);
}

#[test]
#[should_panic(expected = "is full")]
fn push_on_full_panics() {
    let mut v: PageVec<u8, 1> = PageVec::new();
    v.push(1);
    v.push(2);
}

/// A drain's and an owning iterator's `Debug` print how many are left,
/// so they need no `Debug` items.
#[test]
fn iterators_debug_without_debug_items() {
    struct Opaque;
    let mut v: PageVec<Opaque, 4> = PageVec::new();
    v.push(Opaque);
    v.push(Opaque);
    assert_eq!(format!("{:?}", v.drain()), "Drain { remaining: 2 }");
    v.push(Opaque);
    assert_eq!(format!("{:?}", v.into_iter()), "IntoIter { remaining: 1 }");
}

#[test]
#[should_panic(expected = "a PageVec<_, 0> holds nothing; give it a capacity N of at least 1")]
fn push_on_a_batch_of_nothing_names_its_capacity() {
    let mut v: PageVec<u8, 0> = PageVec::new();
    assert!(v.is_full());
    v.push(1);
}

#[test]
fn drop_drops_each_item_once() {
    let drops = Cell::new(0);
    let v = tracked(5, &drops);
    drop(v);
    assert_eq!(drops.get(), 5);
}

#[test]
fn partial_drain_drops_the_rest_and_empties() {
    let drops = Cell::new(0);
    let mut v = tracked(6, &drops);
    let mut d = v.drain();
    assert_eq!(d.next().map(|t| t.0), Some(0));
    assert_eq!(d.len(), 5);
    drop(d);
    assert_eq!(drops.get(), 6);
    assert!(v.is_empty());
    drop(v);
    assert_eq!(drops.get(), 6);
}

#[test]
fn leaked_drain_leaks_instead_of_double_dropping() {
    let drops = Cell::new(0);
    let mut v = tracked(3, &drops);
    core::mem::forget(v.drain());
    assert!(v.is_empty());
    drop(v);
    assert_eq!(drops.get(), 0);
}

/// `truncate` drops exactly the items past the new length, once;
/// `swap_remove` hands one out and moves the last into its place.
#[test]
fn truncate_and_swap_remove_drop_each_item_once() {
    let drops = Cell::new(0);
    let mut v = tracked(8, &drops);
    v.truncate(9);
    assert_eq!((v.len(), drops.get()), (8, 0));
    v.truncate(5);
    assert_eq!((v.len(), drops.get()), (5, 3));
    let t = v.swap_remove(1);
    assert_eq!(t.0, 1);
    drop(t);
    assert_eq!(v.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 4, 2, 3]);
    assert_eq!(v.swap_remove(3).0, 3);
    assert_eq!(drops.get(), 5);
    v.truncate(0);
    assert_eq!((v.len(), drops.get()), (0, 8));
}

/// A truncation whose item's Drop panics still drops the rest (as a
/// slice's drop goes on past a panic), drops none twice, and leaves
/// the batch at the new length.
#[test]
fn truncate_panic_leaks_but_stays_sound() {
    struct Bomb<'a>(u32, &'a Cell<usize>);
    impl Drop for Bomb<'_> {
        fn drop(&mut self) {
            self.1.set(self.1.get() + 1);
            assert_ne!(self.0, 2, "boom");
        }
    }
    let drops = Cell::new(0);
    let mut v: PageVec<Bomb<'_>, 8> = (0..5).map(|i| Bomb(i, &drops)).collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| v.truncate(1)));
    assert!(r.is_err());
    assert_eq!(v.len(), 1);
    // drop_in_place goes on dropping after a panicking element: 1..5.
    assert_eq!(drops.get(), 4);
    drop(v);
    assert_eq!(drops.get(), 5);
}

#[test]
#[should_panic(expected = "index 2 is out of bounds (len 2)")]
fn swap_remove_out_of_bounds_names_the_index() {
    let mut v: PageVec<u32, 4> = [1, 2].into_iter().collect();
    v.swap_remove(2);
}

/// `Extend` and `FromIterator` fill as `push` does, and panic naming
/// the capacity past it; `AsRef`, `AsMut` and `Hash` are the slice's.
#[test]
fn extend_collect_and_slice_traits() {
    use core::hash::{BuildHasher, Hash, Hasher};
    let mut v: PageVec<u32, 4> = [1, 2].into_iter().collect();
    v.extend([3, 4]);
    assert!(v.is_full());
    assert_eq!(v.as_ref(), &[1, 2, 3, 4]);
    v.as_mut()[0] = 9;
    let s = std::collections::hash_map::RandomState::new();
    let hash = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
        let mut h = s.build_hasher();
        x(&mut h);
        h.finish()
    };
    assert_eq!(hash(&|h| v.hash(h)), hash(&|h| [9u32, 2, 3, 4][..].hash(h)));
    let r = std::panic::catch_unwind(|| {
        let _: PageVec<u32, 2> = (0..3).collect();
    });
    let msg = r
        .unwrap_err()
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(msg.contains("batch of 2 is full"), "{msg}");
}

#[test]
fn retain_keeps_order_and_drops_rejected() {
    let drops = Cell::new(0);
    let mut v = tracked(8, &drops);
    v.retain(|t| t.0 % 3 != 0);
    assert_eq!(v.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 4, 5, 7]);
    assert_eq!(drops.get(), 3);
    drop(v);
    assert_eq!(drops.get(), 8);
}

#[test]
fn retain_panic_leaks_but_stays_sound() {
    let drops = Cell::new(0);
    let mut v = tracked(4, &drops);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        v.retain(|t| if t.0 == 2 { panic!("boom") } else { t.0 != 0 })
    }));
    assert!(r.is_err());
    assert!(v.is_empty());
    drop(v);
    // Item 0 was dropped by retain; the rest leaked, none twice.
    assert_eq!(drops.get(), 1);
}

#[test]
fn into_iter_partial_then_drop() {
    let drops = Cell::new(0);
    let v = tracked(4, &drops);
    let mut it = v.into_iter();
    assert_eq!(it.next().map(|t| t.0), Some(0));
    drop(it);
    assert_eq!(drops.get(), 4);
}

#[test]
fn pop_clear_clone() {
    let mut v: PageVec<String, 4> = PageVec::new();
    v.push("a".into());
    v.push("b".into());
    let c = v.clone();
    assert_eq!(v.pop().as_deref(), Some("b"));
    v.clear();
    assert!(v.is_empty() && v.pop().is_none());
    assert_eq!(c.len(), 2);
    assert_eq!(format!("{c:?}"), r#"["a", "b"]"#);
}

#[test]
fn zero_sized_and_zero_capacity() {
    let mut z: PageVec<(), 2> = PageVec::new();
    z.push(());
    z.push(());
    assert_eq!(z.drain().count(), 2);
    let mut none: PageVec<u8, 0> = PageVec::new();
    assert!(none.is_full());
    assert_eq!(none.try_push(1).unwrap_err().element(), 1);
}
