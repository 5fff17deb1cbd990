//! File attributes as the client sees them, and their fixed binary encoding
//! in reply segments (docs/PROTOCOL.md, "File service").

/// What kind of object a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by `lookup`).
    Symlink,
    /// Anything else (device, fifo, socket): listed, not opened.
    Other,
}

/// A point in time, as seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Timestamp {
    /// Whole seconds (negative before 1970).
    pub secs: i64,
    /// Nanoseconds, 0..1e9.
    pub nanos: u32,
}

/// The attributes of a file (what `lstat` says), as the server saw them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number on the server's file system.
    pub ino: u64,
    /// File, directory, symlink or other.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner on the server.
    pub uid: u32,
    /// Group on the server.
    pub gid: u32,
    /// Last access.
    pub atime: Timestamp,
    /// Last modification of the contents.
    pub mtime: Timestamp,
    /// Last change of the inode.
    pub ctime: Timestamp,
    /// Preferred I/O size.
    pub blksize: u32,
}

/// One directory entry with its attributes (readdir returns both, like NFS's readdirplus).
#[derive(Clone, Debug)]
pub struct DirEntry {
    /// The entry's name (no '/').
    pub name: String,
    /// Its attributes (symlinks not followed).
    pub attr: Attr,
}

/// A time to set with [`SetAttr`].
#[derive(Clone, Copy, Debug)]
pub enum SetTime {
    /// The server's current time.
    Now,
    /// This time.
    At(Timestamp),
}

/// What `setattr` changes: chmod, truncate, utimes (each optional).
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u16>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
}

/// File-system usage of the export (what `statfs` says).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Total blocks (of `bsize` bytes).
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest file name.
    pub namelen: u32,
}

/// Bytes of an encoded [`Attr`].
pub const ATTR_LEN: usize = 80;
/// Bytes of an encoded [`StatFs`].
pub const STATFS_LEN: usize = 48;
/// Bytes of an encoded [`SetAttr`].
pub const SETATTR_LEN: usize = 37;

/// Little-endian reader over a byte slice that never panics.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(b)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
}

fn put_time(out: &mut Vec<u8>, t: Timestamp) {
    out.extend_from_slice(&t.secs.to_le_bytes());
    out.extend_from_slice(&t.nanos.to_le_bytes());
}

fn get_time(r: &mut Reader<'_>) -> Option<Timestamp> {
    let secs = r.u64()? as i64;
    let nanos = r.u32()?;
    (nanos < 1_000_000_000).then_some(Timestamp { secs, nanos })
}

impl FileKind {
    fn code(self) -> u8 {
        match self {
            FileKind::File => 1,
            FileKind::Dir => 2,
            FileKind::Symlink => 3,
            FileKind::Other => 4,
        }
    }
    fn from_code(c: u8) -> Option<FileKind> {
        Some(match c {
            1 => FileKind::File,
            2 => FileKind::Dir,
            3 => FileKind::Symlink,
            4 => FileKind::Other,
            _ => return None,
        })
    }
}

impl Attr {
    /// Appends the 80-byte encoding.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ino.to_le_bytes());
        out.push(self.kind.code());
        out.push(0);
        out.extend_from_slice(&self.perm.to_le_bytes());
        out.extend_from_slice(&self.nlink.to_le_bytes());
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.blocks.to_le_bytes());
        put_time(out, self.atime);
        put_time(out, self.mtime);
        put_time(out, self.ctime);
        out.extend_from_slice(&self.blksize.to_le_bytes());
    }

    /// Decodes an encoding; `None` if it is short or invalid.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Option<Attr> {
        let ino = r.u64()?;
        let kind = FileKind::from_code(r.u8()?)?;
        r.u8()?;
        let perm = r.u16()?;
        let nlink = r.u32()?;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let size = r.u64()?;
        let blocks = r.u64()?;
        let atime = get_time(r)?;
        let mtime = get_time(r)?;
        let ctime = get_time(r)?;
        let blksize = r.u32()?;
        Some(Attr { ino, kind, size, blocks, perm: perm & 0o7777, nlink, uid, gid, atime, mtime, ctime, blksize })
    }
}

impl StatFs {
    /// Appends the 48-byte encoding.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.blocks, self.bfree, self.bavail, self.files, self.ffree] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.bsize.to_le_bytes());
        out.extend_from_slice(&self.namelen.to_le_bytes());
    }

    /// Decodes an encoding; `None` if it is short.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Option<StatFs> {
        Some(StatFs {
            blocks: r.u64()?,
            bfree: r.u64()?,
            bavail: r.u64()?,
            files: r.u64()?,
            ffree: r.u64()?,
            bsize: r.u32()?,
            namelen: r.u32()?,
        })
    }
}

fn put_settime(out: &mut Vec<u8>, t: Option<SetTime>) {
    let (tag, ts) = match t {
        None => (0u8, Timestamp::default()),
        Some(SetTime::Now) => (1, Timestamp::default()),
        Some(SetTime::At(ts)) => (2, ts),
    };
    out.push(tag);
    put_time(out, ts);
}

fn get_settime(r: &mut Reader<'_>) -> Option<Option<SetTime>> {
    let tag = r.u8()?;
    let ts = get_time(r)?;
    match tag {
        0 => Some(None),
        1 => Some(Some(SetTime::Now)),
        2 => Some(Some(SetTime::At(ts))),
        _ => None,
    }
}

impl SetAttr {
    /// Appends the 37-byte encoding: presence byte (bit 0 perm, bit 1 size), perm, size, atime, mtime.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let present = u8::from(self.perm.is_some()) | (u8::from(self.size.is_some()) << 1);
        out.push(present);
        out.extend_from_slice(&self.perm.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.size.unwrap_or(0).to_le_bytes());
        put_settime(out, self.atime);
        put_settime(out, self.mtime);
    }

    /// Decodes an encoding; `None` if it is short or invalid.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Option<SetAttr> {
        let present = r.u8()?;
        let perm = r.u16()?;
        let size = r.u64()?;
        let atime = get_settime(r)?;
        let mtime = get_settime(r)?;
        Some(SetAttr {
            perm: (present & 1 != 0).then_some(perm & 0o7777),
            size: (present & 2 != 0).then_some(size),
            atime,
            mtime,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn attr() -> Attr {
        let t = |s| Timestamp { secs: s, nanos: 7 };
        Attr {
            ino: 42,
            kind: FileKind::Symlink,
            size: 1 << 40,
            blocks: 9,
            perm: 0o4755,
            nlink: 3,
            uid: 1000,
            gid: 100,
            atime: t(-5),
            mtime: t(6),
            ctime: t(7),
            blksize: 4096,
        }
    }

    #[test]
    fn attr_round_trips_at_its_documented_size() {
        let mut v = Vec::new();
        attr().encode(&mut v);
        assert_eq!(v.len(), ATTR_LEN);
        assert_eq!(Attr::decode(&mut Reader::new(&v)), Some(attr()));
        assert_eq!(Attr::decode(&mut Reader::new(&v[..ATTR_LEN - 1])), None);
        v[8] = 99; // bad kind
        assert_eq!(Attr::decode(&mut Reader::new(&v)), None);
    }

    #[test]
    fn setattr_and_statfs_round_trip() {
        let s = SetAttr {
            perm: Some(0o600),
            size: None,
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::At(Timestamp { secs: 5, nanos: 1 })),
        };
        let mut v = Vec::new();
        s.encode(&mut v);
        assert_eq!(v.len(), SETATTR_LEN);
        let d = SetAttr::decode(&mut Reader::new(&v)).unwrap();
        assert_eq!((d.perm, d.size), (Some(0o600), None));
        assert!(matches!(d.atime, Some(SetTime::Now)));
        assert!(matches!(d.mtime, Some(SetTime::At(Timestamp { secs: 5, nanos: 1 }))));
        let f = StatFs { blocks: 1, bfree: 2, bavail: 3, files: 4, ffree: 5, bsize: 6, namelen: 7 };
        let mut v = Vec::new();
        f.encode(&mut v);
        assert_eq!(v.len(), STATFS_LEN);
        assert_eq!(StatFs::decode(&mut Reader::new(&v)), Some(f));
    }
}
