//! The pipe protocol's 32-byte messages (docs/PROTOCOL.md, "Pipe service").
//!
//! Request: byte 0 operation, byte 1 protocol version ([`VERSION`]), bytes
//! 4..8 the end id (u32 LE), bytes 8..12 an argument. Reply: byte 0 status
//! ([`OK`], [`EOF`] or a Linux errno), byte 1 the version, bytes 4..8 the end
//! id, bytes 8..12 a count, bytes 12..16 and 16..20 more figures.

use vipc::Message;

/// Protocol version carried in byte 1 of every message.
pub const VERSION: u8 = 1;

/// Open an end: argument = [`MODE_READ`] or [`MODE_WRITE`].
pub const OP_OPEN: u8 = 1;
/// Read: the request grants a write segment; the reply carries up to its size.
pub const OP_READ: u8 = 2;
/// Write: the request grants a read segment holding the data.
pub const OP_WRITE: u8 = 3;
/// Close an end.
pub const OP_CLOSE: u8 = 4;
/// Keep an end alive (sent by the end's heartbeat process).
pub const OP_HEARTBEAT: u8 = 5;
/// Counters: buffered bytes, readers, writers, held requests.
pub const OP_STAT: u8 = 6;
/// Internal: the server's own ticker wakes it to expire ends.
pub const OP_TICK: u8 = 7;
/// Internal: stop the server (argument = the server's stop token).
pub const OP_STOP: u8 = 8;

/// Open mode: reader.
pub const MODE_READ: u32 = 1;
/// Open mode: writer.
pub const MODE_WRITE: u32 = 2;

/// Status: done.
pub const OK: u8 = 0;
/// Status: end of file (the pipe is empty and every writer has closed).
pub const EOF: u8 = 255;
/// Status: the data could not be moved (the transfer to or from the
/// client failed, or was slower than the stream cap); the end is closed.
pub const EIO: u8 = 5;
/// Status: no such end (closed, expired, or never opened).
pub const EBADF: u8 = 9;
/// Status: bad request (wrong mode for the end, missing segment, unknown mode).
pub const EINVAL: u8 = 22;
/// Status: every reader has gone.
pub const EPIPE: u8 = 32;
/// Status: unknown operation.
pub const ENOSYS: u8 = 38;
/// Status: a write larger than the pipe's capacity.
pub const EMSGSIZE: u8 = 90;
/// Status: another protocol version.
pub const EPROTO: u8 = 71;
/// Status: the server stopped while this read or write waited (a read
/// gets EOF instead if no writer was open).
pub const ESHUTDOWN: u8 = 108;
/// Status: the server holds too many ends.
pub const EMFILE: u8 = 24;
/// Status: the server holds too many waiting reads and writes (as many as
/// its ends allow); try again later.
pub const EAGAIN: u8 = 11;

/// A request with `op`, `end` and `arg`.
pub fn request(op: u8, end: u32, arg: u32) -> Message {
    let mut m: Message = [0; 32];
    m[0] = op;
    m[1] = VERSION;
    put(&mut m, 4, end);
    put(&mut m, 8, arg);
    m
}

/// Writes a u32 LE at `at`.
pub fn put(m: &mut Message, at: usize, v: u32) {
    m[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Reads a u32 LE at `at`.
pub fn get(m: &Message, at: usize) -> u32 {
    u32::from_le_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
}

/// The registered name of pipe `name`: `pipe:NAME`.
pub fn service_name(name: &str) -> String {
    format!("pipe:{name}")
}

/// Longest pipe name (the registered name `pipe:NAME` is at most 32 bytes).
pub const MAX_NAME: usize = 32 - 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        let m = request(OP_WRITE, 0x01020304, 77);
        assert_eq!(m[0], OP_WRITE);
        assert_eq!(m[1], VERSION);
        assert_eq!(get(&m, 4), 0x01020304);
        assert_eq!(get(&m, 8), 77);
        assert_eq!(&m[12..], &[0u8; 20]);
        assert_eq!(service_name("x").len(), 6);
        assert_eq!(service_name(&"n".repeat(MAX_NAME)).len(), 32);
    }
}
