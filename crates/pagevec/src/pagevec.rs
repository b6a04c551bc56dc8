//! [`PageVec`]: an inline, fixed-capacity batch, as Linux's `struct
//! folio_batch` (formerly `struct pagevec`).

use core::{
    fmt,
    iter::FusedIterator,
    mem::{ManuallyDrop, MaybeUninit},
    ops::{Deref, DerefMut},
    ptr, slice,
};

/// The kernel's batch size: `PAGEVEC_SIZE` / `FOLIO_BATCH_SIZE` is 31, so
/// that 31 pointers plus a one-word header fill 256 bytes.
pub const PAGEVEC_SIZE: usize = 31;

/// A fixed-capacity batch stored inline: no allocation, `no_std`.
///
/// Mirrors the kernel's `struct folio_batch` (`include/linux/pagevec.h`):
/// callers collect up to `N` items, then process them together under one
/// lock. With `N = 31` and pointer-sized `T` it is 256 bytes.
///
/// `N` is a parameter because the right size depends on the lock and the
/// work per item: measure it for yours.
///
/// ```
/// use mmbatch_pagevec::PageVec;
///
/// let mut batch: PageVec<u32, 4> = PageVec::new();
/// for pfn in 0..4 {
///     batch.push(pfn);
/// }
/// assert!(batch.is_full());
/// // A fifth item is handed back, not lost.
/// assert_eq!(batch.try_push(4).unwrap_err().element(), 4);
/// batch.retain(|pfn| *pfn % 2 == 0);
/// assert_eq!(batch.drain().collect::<Vec<_>>(), [0, 2]);
/// assert!(batch.is_empty());
/// ```
#[doc(alias = "folio_batch")]
#[doc(alias = "pagevec")]
pub struct PageVec<T, const N: usize = PAGEVEC_SIZE> {
    len: usize,
    items: [MaybeUninit<T>; N],
}

/// [`PageVec::push`]'s panic: a batch of `n` is full. Out of line, so
/// that `push` stays small where it is inlined.
#[cold]
#[inline(never)]
#[track_caller]
fn full(n: usize) -> ! {
    if n == 0 {
        panic!("PageVec::push: a PageVec<_, 0> holds nothing; give it a capacity N of at least 1");
    }
    panic!("PageVec::push: batch of {n} is full; apply it (drain) first")
}

/// The error of [`PageVec::try_push`]: the batch was full, and here is the
/// item back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CapacityError<T>(T);

impl<T> CapacityError<T> {
    /// The item that did not fit.
    pub fn element(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for CapacityError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CapacityError: batch is full")
    }
}

impl<T> fmt::Display for CapacityError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("batch is full: apply it (drain) before adding more")
    }
}

#[cfg(feature = "std")]
impl<T> std::error::Error for CapacityError<T> {}

impl<T, const N: usize> PageVec<T, N> {
    /// An empty batch (`folio_batch_init`).
    pub const fn new() -> Self {
        Self {
            len: 0,
            items: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Number of items (`folio_batch_count`).
    #[inline]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds nothing.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the batch holds `N` items and must be applied before another
    /// is added.
    #[inline]
    pub const fn is_full(&self) -> bool {
        self.len == N
    }

    /// The fixed capacity `N`.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Free places left (`folio_batch_space`).
    #[inline]
    pub const fn space(&self) -> usize {
        N - self.len
    }

    /// Appends `item` and returns the space left, as `folio_batch_add` does
    /// (0 means "now full: apply the batch").
    ///
    /// # Panics
    /// If the batch is already full (a `PageVec<_, 0>` always is);
    /// [`try_push`](Self::try_push) hands the item back instead.
    #[inline]
    #[track_caller]
    pub fn push(&mut self, item: T) -> usize {
        match self.try_push(item) {
            Ok(space) => space,
            Err(_) => full(N),
        }
    }

    /// Appends `item` and returns the space left, or hands `item` back in
    /// the error when the batch is full.
    #[inline]
    pub fn try_push(&mut self, item: T) -> Result<usize, CapacityError<T>> {
        if self.len == N {
            return Err(CapacityError(item));
        }
        // SAFETY: len < N was just checked.
        unsafe { self.push_unchecked(item) };
        Ok(N - self.len)
    }

    /// Appends `item` without checking capacity.
    ///
    /// # Safety
    /// - The batch must not be full: `self.len() < N`.
    #[inline]
    pub unsafe fn push_unchecked(&mut self, item: T) {
        debug_assert!(self.len < N, "push_unchecked on a full PageVec");
        // SAFETY: the caller guarantees len < N, so the index is in bounds
        // and the slot is uninitialised (only [0, len) is initialised).
        unsafe { self.items.get_unchecked_mut(self.len) }.write(item);
        self.len += 1;
    }

    /// Removes and returns the last item.
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: index `len` (the old len - 1) was initialised and is now
        // outside [0, len), so it is read exactly once.
        Some(unsafe { self.items[self.len].assume_init_read() })
    }

    /// Drops every item (`folio_batch_reinit`).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the first `len` items and drops the rest (nothing if it
    /// holds `len` or fewer).
    pub fn truncate(&mut self, len: usize) {
        let old = self.len;
        if len >= old {
            return;
        }
        // Leak rather than double-drop if an item's Drop panics.
        self.len = len;
        let tail = ptr::slice_from_raw_parts_mut(
            self.items.as_mut_ptr().cast::<T>().wrapping_add(len),
            old - len,
        );
        // SAFETY: [len, old) was initialised, and `self.len` is already
        // `len`, so nothing reads these items again.
        unsafe { ptr::drop_in_place(tail) };
    }

    /// Removes the item at `index` and returns it, the last item taking
    /// its place (no shifting; order is not kept).
    ///
    /// # Panics
    /// If `index` is out of bounds.
    #[track_caller]
    pub fn swap_remove(&mut self, index: usize) -> T {
        let len = self.len;
        assert!(
            index < len,
            "PageVec::swap_remove: index {index} is out of bounds (len {len})"
        );
        self.as_mut_slice().swap(index, len - 1);
        self.pop().expect("not empty: index < len")
    }

    /// The items, in insertion order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: [0, len) is initialised; MaybeUninit<T> has T's layout.
        unsafe { slice::from_raw_parts(self.items.as_ptr().cast::<T>(), self.len) }
    }

    /// The items, mutably, in insertion order.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: [0, len) is initialised; MaybeUninit<T> has T's layout.
        unsafe { slice::from_raw_parts_mut(self.items.as_mut_ptr().cast::<T>(), self.len) }
    }

    /// Iterates over the items in insertion order.
    #[inline]
    pub fn iter(&self) -> slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    /// Iterates mutably over the items in insertion order.
    #[inline]
    pub fn iter_mut(&mut self) -> slice::IterMut<'_, T> {
        self.as_mut_slice().iter_mut()
    }

    /// Keeps only the items for which `keep` returns true, in order, as the
    /// kernel's batch walkers drop the folios they cannot process.
    ///
    /// If `keep` panics, the items it kept and those not yet visited are
    /// leaked (never dropped twice), and the batch is left empty.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut T) -> bool) {
        let len = self.len;
        // Panic safety: while we shuffle, the batch claims nothing.
        self.len = 0;
        let mut kept = 0;
        for i in 0..len {
            // SAFETY: i < len, and item i is initialised and not yet moved:
            // only indices below `kept` (≤ i) have been written.
            if keep(unsafe { self.items[i].assume_init_mut() }) {
                if kept != i {
                    // Moving the MaybeUninit moves the item; slot `kept` was
                    // vacated earlier, so nothing is overwritten or dropped.
                    self.items[kept] =
                        core::mem::replace(&mut self.items[i], MaybeUninit::uninit());
                }
                kept += 1;
            } else {
                // SAFETY: item i is initialised and dropped exactly once; its
                // slot is then free.
                unsafe { self.items[i].assume_init_drop() };
            }
        }
        self.len = kept;
    }

    /// Removes every item, yielding them in insertion order; the batch is
    /// empty afterwards even if the iterator is dropped early (the rest are
    /// dropped then).
    pub fn drain(&mut self) -> Drain<'_, T, N> {
        let end = self.len;
        // If the Drain is leaked, the items leak too, never double-drop.
        self.len = 0;
        Drain {
            vec: self,
            rest: Remaining { next: 0, end },
        }
    }
}

impl<T, const N: usize> Default for PageVec<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> Drop for PageVec<T, N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<T: Clone, const N: usize> Clone for PageVec<T, N> {
    fn clone(&self) -> Self {
        let mut out = Self::new();
        for item in self.iter() {
            // SAFETY: `out` receives at most self.len() ≤ N items.
            unsafe { out.push_unchecked(item.clone()) };
        }
        out
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for PageVec<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq, const N: usize> PartialEq for PageVec<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Eq, const N: usize> Eq for PageVec<T, N> {}

impl<T: core::hash::Hash, const N: usize> core::hash::Hash for PageVec<T, N> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl<T, const N: usize> AsRef<[T]> for PageVec<T, N> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T, const N: usize> AsMut<[T]> for PageVec<T, N> {
    fn as_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

/// Appends every item, as `push` does.
///
/// # Panics
/// When the batch fills before the items end (as `arrayvec`'s); take
/// [`space`](PageVec::space) items, or [`try_push`](PageVec::try_push),
/// to stop at the capacity.
impl<T, const N: usize> Extend<T> for PageVec<T, N> {
    #[track_caller]
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        for item in items {
            self.push(item);
        }
    }
}

/// A batch of the items, as [`Extend`] fills one (panics past `N`).
impl<T, const N: usize> FromIterator<T> for PageVec<T, N> {
    #[track_caller]
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut v = Self::new();
        v.extend(items);
        v
    }
}

impl<T, const N: usize> Deref for PageVec<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T, const N: usize> DerefMut for PageVec<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a PageVec<T, N> {
    type Item = &'a T;
    type IntoIter = slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a mut PageVec<T, N> {
    type Item = &'a mut T;
    type IntoIter = slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<T, const N: usize> IntoIterator for PageVec<T, N> {
    type Item = T;
    type IntoIter = IntoIter<T, N>;
    fn into_iter(self) -> Self::IntoIter {
        let mut vec = ManuallyDrop::new(self);
        let end = vec.len;
        vec.len = 0;
        // SAFETY: `vec` is never used or dropped again; its items array is
        // moved out exactly once, with [0, end) initialised.
        let items = unsafe { ptr::read(&vec.items) };
        IntoIter {
            items,
            rest: Remaining { next: 0, end },
        }
    }
}

/// The items `[next, end)` of an array whose batch has given them up: each
/// is initialised and owned here, and is yielded or dropped exactly once.
/// The one place [`Drain`] and [`IntoIter`] read items out.
struct Remaining {
    next: usize,
    end: usize,
}

impl Remaining {
    fn len(&self) -> usize {
        self.end - self.next
    }

    /// # Safety
    /// - `items[self.next..self.end]` is initialised and owned by `self`.
    #[inline]
    unsafe fn next<T>(&mut self, items: &[MaybeUninit<T>]) -> Option<T> {
        if self.next == self.end {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // SAFETY: i was in [next, end), initialised and owned by us (the
        // caller's promise); `next` moved past it, so it is read only once.
        Some(unsafe { items[i].assume_init_read() })
    }

    /// Drops every item not yet yielded.
    ///
    /// # Safety
    /// - `items[self.next..self.end]` is initialised and owned by `self`.
    unsafe fn drop_rest<T>(&mut self, items: &mut [MaybeUninit<T>]) {
        let rest = &mut items[self.next..self.end];
        // Claim nothing before dropping: a panicking Drop cannot repeat one.
        self.next = self.end;
        let rest = ptr::slice_from_raw_parts_mut(rest.as_mut_ptr().cast::<T>(), rest.len());
        // SAFETY: the range is initialised and owned (the caller's promise),
        // and no longer claimed by `self`, so each item is dropped once.
        unsafe { ptr::drop_in_place(rest) };
    }
}

/// Draining iterator of a [`PageVec`]; see [`PageVec::drain`].
pub struct Drain<'a, T, const N: usize> {
    /// Its `len` is already 0: the items belong to `rest`.
    vec: &'a mut PageVec<T, N>,
    rest: Remaining,
}

impl<T, const N: usize> Iterator for Drain<'_, T, N> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        // SAFETY: `drain` moved [0, len) from the batch to `rest`.
        unsafe { self.rest.next(&self.vec.items) }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.rest.len(), Some(self.rest.len()))
    }
}

impl<T, const N: usize> ExactSizeIterator for Drain<'_, T, N> {}
impl<T, const N: usize> FusedIterator for Drain<'_, T, N> {}

impl<T, const N: usize> Drop for Drain<'_, T, N> {
    fn drop(&mut self) {
        // SAFETY: as in `next`.
        unsafe { self.rest.drop_rest(&mut self.vec.items) };
    }
}

impl<T, const N: usize> fmt::Debug for Drain<'_, T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("remaining", &self.rest.len())
            .finish()
    }
}

/// Owning iterator of a [`PageVec`], in insertion order.
pub struct IntoIter<T, const N: usize> {
    items: [MaybeUninit<T>; N],
    rest: Remaining,
}

impl<T, const N: usize> Iterator for IntoIter<T, N> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        // SAFETY: `into_iter` moved the array with [0, len) to us.
        unsafe { self.rest.next(&self.items) }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.rest.len(), Some(self.rest.len()))
    }
}

impl<T, const N: usize> ExactSizeIterator for IntoIter<T, N> {}
impl<T, const N: usize> FusedIterator for IntoIter<T, N> {}

impl<T, const N: usize> Drop for IntoIter<T, N> {
    fn drop(&mut self) {
        // SAFETY: as in `next`.
        unsafe { self.rest.drop_rest(&mut self.items) };
    }
}

impl<T, const N: usize> fmt::Debug for IntoIter<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoIter")
            .field("remaining", &self.rest.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
