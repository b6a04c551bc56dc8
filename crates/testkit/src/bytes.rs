//! [`Bytes`]: sizes, counts and choices read off a fuzzer's input.

/// Reads little-endian integers off the input, zero past its end.
#[derive(Debug)]
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    /// The next 8 bytes (zero-padded).
    pub fn u64(&mut self) -> u64 {
        let n = self.0.len().min(8);
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(b)
    }

    /// The next byte's worth.
    pub fn u8(&mut self) -> u8 {
        self.u64() as u8
    }

    /// A size: small most of the time, near `u64::MAX` or any `u64`
    /// otherwise — where arithmetic wraps.
    pub fn size(&mut self) -> u64 {
        match self.u8() % 4 {
            0 => self.u64(),
            1 => u64::MAX - u64::from(self.u8()),
            _ => u64::from(self.u8()),
        }
    }
}
