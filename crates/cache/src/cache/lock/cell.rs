//! The lock's value cell and the pointers its guards hold: std's, or
//! loom's tracked ones under loom.

/// The value cell: std's `UnsafeCell`, or loom's, which checks that no
/// `&mut T` overlaps another reference in any interleaving.
#[cfg(not(mmbatch_loom))]
pub(super) struct Data<T>(std::cell::UnsafeCell<T>);

#[cfg(not(mmbatch_loom))]
impl<T> Data<T> {
    pub(super) fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// # Safety
    /// No [`Exclusive`] may exist while the result lives.
    pub(super) unsafe fn shared(&self) -> Shared<'_, T> {
        Shared(ptr(&self.0), std::marker::PhantomData)
    }

    /// # Safety
    /// No other [`Shared`] or [`Exclusive`] may exist while the result
    /// lives.
    pub(super) unsafe fn exclusive(&self) -> Exclusive<'_, T> {
        Exclusive(ptr(&self.0), std::marker::PhantomData)
    }
}

/// The cell's pointer, never null.
#[cfg(not(mmbatch_loom))]
fn ptr<T>(cell: &std::cell::UnsafeCell<T>) -> std::ptr::NonNull<T> {
    std::ptr::NonNull::from(cell).cast()
}

/// Pointers, not references, as std's guards hold: a reference in a
/// guard passed by value would outlive the count or `block` it depends on
/// for the rest of that call.
#[cfg(not(mmbatch_loom))]
pub(super) struct Shared<'a, T>(std::ptr::NonNull<T>, std::marker::PhantomData<&'a T>);

#[cfg(not(mmbatch_loom))]
impl<T> Shared<'_, T> {
    pub(super) fn get(&self) -> &T {
        // SAFETY: `Data::shared`'s caller holds the read side for our
        // life, so no `&mut T` exists.
        unsafe { self.0.as_ref() }
    }
}

#[cfg(not(mmbatch_loom))]
pub(super) struct Exclusive<'a, T>(std::ptr::NonNull<T>, std::marker::PhantomData<&'a mut T>);

#[cfg(not(mmbatch_loom))]
impl<T> Exclusive<'_, T> {
    pub(super) fn get(&self) -> &T {
        // SAFETY: `Data::exclusive`'s caller holds the write side for our
        // life: the only other references are ours.
        unsafe { self.0.as_ref() }
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        // SAFETY: as above; `&mut self` makes this one unique.
        unsafe { self.0.as_mut() }
    }
}

#[cfg(mmbatch_loom)]
pub(super) struct Data<T>(loom::cell::UnsafeCell<T>);

#[cfg(mmbatch_loom)]
impl<T> Data<T> {
    pub(super) fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }

    /// # Safety
    /// As the std version's.
    pub(super) unsafe fn shared(&self) -> Shared<'_, T> {
        Shared(self.0.get(), std::marker::PhantomData)
    }

    /// # Safety
    /// As the std version's.
    pub(super) unsafe fn exclusive(&self) -> Exclusive<'_, T> {
        Exclusive(self.0.get_mut(), std::marker::PhantomData)
    }
}

/// Loom's tracked pointers: loom fails the model when a `&mut T` and
/// another reference to `T` are live in the same interleaving.
#[cfg(mmbatch_loom)]
pub(super) struct Shared<'a, T>(loom::cell::ConstPtr<T>, std::marker::PhantomData<&'a T>);

#[cfg(mmbatch_loom)]
impl<T> Shared<'_, T> {
    pub(super) fn get(&self) -> &T {
        // SAFETY: `Data::shared`'s caller holds a read lock for our life.
        unsafe { self.0.deref() }
    }
}

#[cfg(mmbatch_loom)]
pub(super) struct Exclusive<'a, T>(loom::cell::MutPtr<T>, std::marker::PhantomData<&'a mut T>);

#[cfg(mmbatch_loom)]
impl<T> Exclusive<'_, T> {
    pub(super) fn get(&self) -> &T {
        // SAFETY: `Data::exclusive`'s caller holds the write side.
        self.0.with(|p| unsafe { &*p })
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        // SAFETY: as above.
        unsafe { self.0.deref() }
    }
}
