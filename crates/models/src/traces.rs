//! Request sequences that tests of `LruCache`'s replacement share.

/// A loop over `2 n` keys that starts after other requests, for a cache of
/// `n`: `50 n` requests half to `n / 2` hot keys and half to `100 n`
/// others, then 60 passes of the loop with 1% of requests to random other
/// keys. Returns the requests and where the loop's last 20 passes begin
/// (the hits a test counts). Deterministic (xorshift).
pub fn loop_after_other(n: u64) -> (Vec<u64>, usize) {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut rand = move |below: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below
    };
    let other = 1 << 40;
    let mut t: Vec<u64> = (0..50 * n)
        .map(|_| {
            other
                + if rand(2) == 0 {
                    rand(n / 2)
                } else {
                    n / 2 + rand(100 * n)
                }
        })
        .collect();
    let (passes, counted) = (60, 20);
    let mut from = 0;
    for pass in 0..passes {
        if pass == passes - counted {
            from = t.len();
        }
        for k in 0..2 * n {
            t.push(if rand(100) == 0 {
                other + n + rand(100 * n)
            } else {
                k
            });
        }
    }
    (t, from)
}
