//! The file-service protocol: request codes and the layout of the 32-byte
//! request and reply messages (docs/PROTOCOL.md, "File service"). All
//! integers in messages and segments are little-endian.

use vipc::Message;

/// HELLO: is this a file server, and is the export read-only.
pub const OP_HELLO: u8 = 1;
/// LOOKUP: lstat of a path.
pub const OP_LOOKUP: u8 = 2;
/// OPEN: open (and with O_CREAT create) a file or directory, returning a handle and attributes.
pub const OP_OPEN: u8 = 3;
/// CLOSE: release a handle.
pub const OP_CLOSE: u8 = 4;
/// READ: read from a handle into the sender's write-granted segment.
pub const OP_READ: u8 = 5;
/// WRITE: write the sender's read-granted segment at an offset of a handle.
pub const OP_WRITE: u8 = 6;
/// FSTAT: attributes of an open handle.
pub const OP_FSTAT: u8 = 7;
/// FSYNC: flush a handle's data (and write-behind) to stable storage.
pub const OP_FSYNC: u8 = 8;
/// READDIR: one batch of a directory's entries with their attributes.
pub const OP_READDIR: u8 = 9;
/// MKDIR: create a directory.
pub const OP_MKDIR: u8 = 10;
/// RMDIR: remove an empty directory.
pub const OP_RMDIR: u8 = 11;
/// UNLINK: remove a non-directory.
pub const OP_UNLINK: u8 = 12;
/// RENAME: rename a path (renameat2 flags).
pub const OP_RENAME: u8 = 13;
/// SETATTR: chmod, truncate, utimes of a path or handle.
pub const OP_SETATTR: u8 = 14;
/// SYMLINK: create a symbolic link.
pub const OP_SYMLINK: u8 = 15;
/// READLINK: the target of a symbolic link.
pub const OP_READLINK: u8 = 16;
/// STATFS: usage of the export's file system.
pub const OP_STATFS: u8 = 17;
/// SEEK: the next data (`a` = 3, SEEK_DATA) or hole (`a` = 4, SEEK_HOLE) of
/// an open file at or after `offset`; the reply's value is its offset.
pub const OP_SEEK: u8 = 18;
/// Sent by a server to a client's owner process: is it alive (reply = yes).
pub const OP_PING_OWNER: u8 = 0x70;
/// Internal: tells a server process to stop (accepted from its own node only).
pub const OP_STOP: u8 = 0x7f;

/// Reply flag (byte 24, bit 0) of HELLO and OPEN: the export is read-only.
pub const RF_READ_ONLY: u32 = 1;
/// Reply flag (byte 24, bit 1) of READDIR: this batch ends the directory.
pub const RF_EOF: u32 = 2;

/// Longest path (bytes) a request may carry.
pub const MAX_PATH: usize = 4096;
/// Most bytes a request's segment may carry after its path: a second path
/// (RENAME's target, SYMLINK's contents) or a SETATTR record.
pub const MAX_EXTRA: usize = MAX_PATH + 64;
/// Largest READ or WRITE request; the client splits larger calls.
pub const MAX_IO: usize = 8 << 20;

/// Smallest transfer unit of a large READ or WRITE: each unit is one
/// MoveTo or MoveFrom, each allowed T_t and more, so 1 KiB units let a
/// client that acknowledges slowly hold a worker for hours per request
/// (8,192 moves of 8 MiB); at 64 KiB it is at most 128 moves.
pub const MIN_UNIT: usize = 64 << 10;
/// The largest data one packet can carry on loopback (65,507 − 72-byte header − 16-byte MAC).
pub const MAX_PACKET_DATA: usize = 65_507 - 72 - 16;
/// The data of one packet on an Ethernet-size path (`max_packet` 1472 − 72 − 16).
pub const ETHERNET_PACKET_DATA: usize = 1472 - 72 - 16;
/// Default transfer unit of MoveTo/MoveFrom for large reads and writes.
pub const DEFAULT_UNIT: usize = 1 << 20;
/// Most bytes of a file's beginning an OPEN returns after the attributes
/// (request bytes 16–23): a small file opened for reading comes with its
/// contents, so its first READ needs no exchange of its own.
pub const OPEN_HEAD_MAX: usize = 64 << 10;

/// A request message: accessors over the 32 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Req(pub Message);

impl Req {
    /// A request for `op`.
    pub fn new(op: u8) -> Req {
        let mut m = [0u8; 32];
        m[0] = op;
        Req(m)
    }
    /// Byte 0: the request code.
    pub fn op(&self) -> u8 {
        self.0[0]
    }
    /// Bytes 2–3: length of the (first) path at the start of the segment.
    pub fn path_len(&self) -> usize {
        u16::from_le_bytes([self.0[2], self.0[3]]) as usize
    }
    /// Sets bytes 2–3.
    pub fn set_path_len(&mut self, n: usize) {
        self.0[2..4].copy_from_slice(&(n as u16).to_le_bytes());
    }
    /// Bytes 4–7: op-specific (mode, second path length, transfer unit).
    pub fn a(&self) -> u32 {
        u32::from_le_bytes(self.0[4..8].try_into().expect("4 bytes"))
    }
    /// Sets bytes 4–7.
    pub fn set_a(&mut self, v: u32) {
        self.0[4..8].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 8–15: the handle (READ, WRITE, FSTAT, FSYNC, CLOSE).
    pub fn handle(&self) -> u64 {
        u64::from_le_bytes(self.0[8..16].try_into().expect("8 bytes"))
    }
    /// Sets bytes 8–15.
    pub fn set_handle(&mut self, v: u64) {
        self.0[8..16].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 16–23: file offset, readdir cookie, or (OPEN) the bytes of the
    /// file's beginning wanted in the reply after the attributes.
    pub fn offset(&self) -> u64 {
        u64::from_le_bytes(self.0[16..24].try_into().expect("8 bytes"))
    }
    /// Sets bytes 16–23.
    pub fn set_offset(&mut self, v: u64) {
        self.0[16..24].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 24–27: byte count.
    pub fn count(&self) -> u32 {
        u32::from_le_bytes(self.0[24..28].try_into().expect("4 bytes"))
    }
    /// Sets bytes 24–27.
    pub fn set_count(&mut self, v: u32) {
        self.0[24..28].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 28–31: op-specific (open flags, rename flags, datasync).
    pub fn b(&self) -> u32 {
        u32::from_le_bytes(self.0[28..32].try_into().expect("4 bytes"))
    }
    /// Sets bytes 28–31.
    pub fn set_b(&mut self, v: u32) {
        self.0[28..32].copy_from_slice(&v.to_le_bytes());
    }
}

/// A reply message: accessors over the 32 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rep(pub Message);

impl Rep {
    /// A reply with errno `e` (0 = success).
    pub fn errno(e: i32) -> Rep {
        let mut m = [0u8; 32];
        m[0..4].copy_from_slice(&e.to_le_bytes());
        Rep(m)
    }
    /// Bytes 0–3: 0 on success, else a Linux errno.
    pub fn error(&self) -> i32 {
        i32::from_le_bytes(self.0[0..4].try_into().expect("4 bytes"))
    }
    /// Bytes 4–7: bytes read/written, bytes of the reply segment, entries.
    pub fn count(&self) -> u32 {
        u32::from_le_bytes(self.0[4..8].try_into().expect("4 bytes"))
    }
    /// Sets bytes 4–7.
    pub fn set_count(&mut self, v: u32) {
        self.0[4..8].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 8–15: the new handle (OPEN), the server instance (HELLO).
    pub fn value(&self) -> u64 {
        u64::from_le_bytes(self.0[8..16].try_into().expect("8 bytes"))
    }
    /// Sets bytes 8–15.
    pub fn set_value(&mut self, v: u64) {
        self.0[8..16].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 16–23: the next readdir cookie.
    pub fn next(&self) -> u64 {
        u64::from_le_bytes(self.0[16..24].try_into().expect("8 bytes"))
    }
    /// Sets bytes 16–23.
    pub fn set_next(&mut self, v: u64) {
        self.0[16..24].copy_from_slice(&v.to_le_bytes());
    }
    /// Bytes 24–27: reply flags (`RF_*`).
    pub fn flags(&self) -> u32 {
        u32::from_le_bytes(self.0[24..28].try_into().expect("4 bytes"))
    }
    /// Sets bytes 24–27.
    pub fn set_flags(&mut self, v: u32) {
        self.0[24..28].copy_from_slice(&v.to_le_bytes());
    }
}
