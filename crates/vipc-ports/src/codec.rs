//! Marshalling: postcard (compact, varint-based, stable format) between
//! Rust values and the bytes a call carries.

use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};

/// `value` as bytes.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(value).map_err(|e| Error::Encode(e.to_string()))
}

/// `value` appended to `out` (a buffer reused between calls).
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<()> {
    postcard::to_io(value, out).map(|_| ()).map_err(|e| Error::Encode(e.to_string()))
}

/// `bytes` as a `T`; trailing bytes are an error (a type mismatch, not padding).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    match postcard::take_from_bytes(bytes) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(Error::Decode(format!("{} unexpected trailing byte(s)", rest.len()))),
        Err(e) => Err(Error::Decode(e.to_string())),
    }
}

/// A `T` from the front of `bytes` (the rest is padding).
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    postcard::take_from_bytes(bytes).map(|(v, _)| v).map_err(|e| Error::Decode(e.to_string()))
}

/// A stable 64-bit fingerprint of a description (interfaces, port types).
pub fn fingerprint(description: &str) -> u64 {
    let h = blake3::hash(description.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_other_types() {
        let v = (String::from("key"), vec![1u32, 2, 3], Some(7u64));
        let b = encode(&v).unwrap();
        assert_eq!(decode::<(String, Vec<u32>, Option<u64>)>(&b).unwrap(), v);
        assert!(matches!(decode::<(String, Vec<u32>)>(&b), Err(Error::Decode(_))), "trailing bytes");
        assert!(matches!(decode::<u64>(&[0xff; 3]), Err(Error::Decode(_))), "truncated varint");
        // `#[interface]` sends `Vec<u8>` as one byte string: the same bytes as serde's sequence of u8.
        let bulk: Vec<u8> = (0..=255).collect();
        assert_eq!(encode(&serde_bytes::Bytes::new(&bulk)).unwrap(), encode(&bulk).unwrap());
        assert_eq!(decode::<serde_bytes::ByteBuf>(&encode(&bulk).unwrap()).unwrap().into_vec(), bulk);
        assert_ne!(fingerprint("a"), fingerprint("b"));
        assert_eq!(fingerprint("a"), fingerprint("a"));
    }
}
