//! Packet authentication: a keyed BLAKE3 MAC, truncated to 128 bits.

use std::fmt;

/// Bytes of MAC appended to every packet of a keyed cluster.
pub const MAC_LEN: usize = 16;

/// A 256-bit cluster key.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey([u8; 32]);

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

/// Why a key file's text is not a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a vipc key is 64 hexadecimal characters (32 bytes)")]
pub struct BadKey;

impl AuthKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> AuthKey {
        AuthKey(bytes)
    }

    /// Parses the hex text of a key file (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<AuthKey, BadKey> {
        let t = text.trim();
        if t.len() != 64 || !t.is_ascii() {
            return Err(BadKey);
        }
        let mut k = [0u8; 32];
        for (i, byte) in k.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).map_err(|_| BadKey)?;
        }
        Ok(AuthKey(k))
    }

    /// The hex form written to key files.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The MAC of `body`.
    pub fn mac(&self, body: &[u8]) -> [u8; MAC_LEN] {
        let h = blake3::keyed_hash(&self.0, body);
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&h.as_bytes()[..MAC_LEN]);
        out
    }

    /// Checks `mac` against `body` in constant time.
    pub fn verify(&self, body: &[u8], mac: &[u8]) -> bool {
        constant_time_eq::constant_time_eq(&self.mac(body), mac)
    }
}
