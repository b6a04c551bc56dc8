//! Loads whose error the waiting callers share: `try_get_or_insert_shared`
//! and its async form (moka's `try_get_with`).

use std::{
    borrow::{Borrow, Cow},
    future::Future,
    hash::{BuildHasher, Hash},
    sync::Arc,
};

use super::{LruCache, Weigher, flight::Shared};

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// [`try_get_or_insert_with`](Self::try_get_or_insert_with) whose
    /// error the callers waiting on the load share (moka's
    /// `try_get_with`): when `f` fails, every call that was waiting for
    /// it returns the same `Arc` of its error instead of loading again, so
    /// a backend that is down or a key it does not have costs one call per
    /// burst of misses, not one per caller. Nothing is cached; the next
    /// miss loads again. A waiting call shares only an error of its own
    /// type from a loader of this form: waiting on a loader of another
    /// form, or one that panicked, it starts over, as the others do.
    ///
    /// ```
    /// use mmbatch_cache::LruCache;
    /// use std::sync::Arc;
    ///
    /// #[derive(Debug)]
    /// struct NotFound;
    ///
    /// let cache: LruCache<u32, String> = LruCache::new(100);
    /// let r = cache.try_get_or_insert_shared(7, || Err(NotFound));
    /// assert!(matches!(r, Err(e) if matches!(*e, NotFound)));
    /// let r: Result<_, Arc<NotFound>> = cache.try_get_or_insert_shared(7, || Ok("seven".into()));
    /// assert_eq!(r.unwrap(), "seven");
    /// ```
    ///
    /// # Errors
    /// `f`'s error, when this call ran the loader or waited for a loader
    /// of this form whose error has type `E`.
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with).
    pub fn try_get_or_insert_shared<E>(
        &self,
        key: K,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, Arc<E>>
    where
        E: Send + Sync + 'static,
    {
        let f = || f().map_err(Arc::new);
        self.load(Cow::Owned(key), f, |_| false, Shared)
    }

    /// [`try_get_or_insert_shared`](Self::try_get_or_insert_shared) for a
    /// loader that is a future, as
    /// [`try_get_or_insert_async`](Self::try_get_or_insert_async) is to
    /// [`try_get_or_insert_with`](Self::try_get_or_insert_with) (moka's
    /// `future::Cache::try_get_with`).
    ///
    /// # Errors
    /// The loader's error, when this call ran it or awaited a loader of
    /// this form whose error has type `E`.
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async).
    pub async fn try_get_or_insert_async_shared<E>(
        &self,
        key: K,
        load: impl Future<Output = Result<V, E>>,
    ) -> Result<V, Arc<E>>
    where
        E: Send + Sync + 'static,
    {
        let load = async { load.await.map_err(Arc::new) };
        self.load_async(Cow::Owned(key), load, |_| false, Shared)
            .await
    }

    /// [`try_get_or_insert_shared`](Self::try_get_or_insert_shared) by a
    /// borrowed key (a `&str` for a `String` key), owned only if it loads
    /// (moka's `try_get_with_by_ref`).
    ///
    /// # Errors
    /// As [`try_get_or_insert_shared`](Self::try_get_or_insert_shared).
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with).
    pub fn try_get_or_insert_shared_ref<Q, E>(
        &self,
        key: &Q,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, Arc<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        E: Send + Sync + 'static,
    {
        let f = || f().map_err(Arc::new);
        self.load(Cow::Borrowed(key), f, |_| false, Shared)
    }

    /// [`try_get_or_insert_async_shared`](Self::try_get_or_insert_async_shared)
    /// by a borrowed key (moka's `future::Cache::try_get_with_by_ref`).
    ///
    /// # Errors
    /// As [`try_get_or_insert_async_shared`](Self::try_get_or_insert_async_shared).
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async).
    pub async fn try_get_or_insert_async_shared_ref<Q, E>(
        &self,
        key: &Q,
        load: impl Future<Output = Result<V, E>>,
    ) -> Result<V, Arc<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        E: Send + Sync + 'static,
    {
        let load = async { load.await.map_err(Arc::new) };
        self.load_async(Cow::Borrowed(key), load, |_| false, Shared)
            .await
    }
}
