//! Loads that also replace a cached value the caller refuses:
//! `get_or_insert_with_if` and its fallible and async forms (moka's
//! `or_insert_with_if`).

use std::{
    borrow::Cow,
    future::Future,
    hash::{BuildHasher, Hash},
};

#[cfg(doc)]
use super::RemovalCause;
use super::{LruCache, Weigher, flight::NotShared};

impl<K, V, S, W> LruCache<K, V, S, W>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher,
    W: Weigher<K, V>,
{
    /// [`get_or_insert_with`](Self::get_or_insert_with) that also loads
    /// again when `replace_if` says so of the cached value (an error
    /// cached, a token past its use), as moka's `or_insert_with_if`: the
    /// load is single-flight as a miss's, and its value replaces the
    /// cached one (heard as [`RemovalCause::Replaced`]). Meanwhile other
    /// callers get the cached value, but for those whose own `replace_if`
    /// refuses it too: they wait for the load, and get its value without
    /// their own `replace_if` asked of it. `replace_if` may be called more
    /// than once, once or twice under the shard's write lock (as
    /// [`remove_if`](Self::remove_if)'s predicate); a value an `insert`
    /// stored while `f` ran is kept if `replace_if` passes it, and `f`'s
    /// dropped.
    ///
    /// ```
    /// use mmbatch_cache::LruCache;
    ///
    /// let cache: LruCache<&str, Result<u32, String>> = LruCache::new(100);
    /// cache.insert("k", Err("backend down".into()));
    /// let v = cache.get_or_insert_with_if("k", || Ok(7), |cached| cached.is_err());
    /// assert_eq!((v, cache.get("k")), (Ok(7), Some(Ok(7))));
    /// ```
    ///
    /// # Panics
    /// As [`get_or_insert_with`](Self::get_or_insert_with), and if
    /// `replace_if` uses this cache's shard.
    pub fn get_or_insert_with_if(
        &self,
        key: K,
        f: impl FnOnce() -> V,
        replace_if: impl FnMut(&V) -> bool,
    ) -> V {
        let f = || Ok::<V, std::convert::Infallible>(f());
        match self.load(Cow::Owned(key), f, replace_if, NotShared) {
            Ok(v) => v,
        }
    }

    /// [`get_or_insert_with_if`](Self::get_or_insert_with_if) for a
    /// fallible `f`: its error is returned, the cached value is left, and
    /// callers waiting on the load start over, as
    /// [`try_get_or_insert_with`](Self::try_get_or_insert_with)'s do.
    ///
    /// # Errors
    /// `f`'s error, when this call ran the loader.
    ///
    /// # Panics
    /// As [`get_or_insert_with_if`](Self::get_or_insert_with_if).
    pub fn try_get_or_insert_with_if<E>(
        &self,
        key: K,
        f: impl FnOnce() -> Result<V, E>,
        replace_if: impl FnMut(&V) -> bool,
    ) -> Result<V, E> {
        self.load(Cow::Owned(key), f, replace_if, NotShared)
    }

    /// [`get_or_insert_with_if`](Self::get_or_insert_with_if) for a
    /// loader that is a future, as
    /// [`get_or_insert_async`](Self::get_or_insert_async) is to
    /// [`get_or_insert_with`](Self::get_or_insert_with).
    ///
    /// # Panics
    /// As [`get_or_insert_async`](Self::get_or_insert_async), and if
    /// `replace_if` uses this cache's shard.
    pub async fn get_or_insert_async_if(
        &self,
        key: K,
        load: impl Future<Output = V>,
        replace_if: impl FnMut(&V) -> bool,
    ) -> V {
        let infallible = async { Ok::<V, std::convert::Infallible>(load.await) };
        match self
            .load_async(Cow::Owned(key), infallible, replace_if, NotShared)
            .await
        {
            Ok(v) => v,
        }
    }

    /// [`get_or_insert_async_if`](Self::get_or_insert_async_if) for a
    /// fallible loader, as
    /// [`try_get_or_insert_with_if`](Self::try_get_or_insert_with_if) is
    /// to [`get_or_insert_with_if`](Self::get_or_insert_with_if): its
    /// error is returned, the cached value is left, and the tasks waiting
    /// on the load start over.
    ///
    /// # Errors
    /// The loader's error, when this call ran it.
    ///
    /// # Panics
    /// As [`get_or_insert_async_if`](Self::get_or_insert_async_if).
    pub async fn try_get_or_insert_async_if<E>(
        &self,
        key: K,
        load: impl Future<Output = Result<V, E>>,
        replace_if: impl FnMut(&V) -> bool,
    ) -> Result<V, E> {
        self.load_async(Cow::Owned(key), load, replace_if, NotShared)
            .await
    }
}
