//! Conversions between the file service's types and FUSE's.

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vipc_fs::{Attr, FileKind, FsError, SetTime, Timestamp};

/// The errno FUSE passes back to the program for a failed call.
pub fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

/// A name from the kernel as the service's UTF-8 path component. The service speaks UTF-8 paths, so a
/// name that is not UTF-8 cannot be expressed (EINVAL); `/` never comes from the kernel but is refused too.
pub fn name(n: &OsStr) -> Result<&str, Errno> {
    match n.to_str() {
        Some(s) if !s.is_empty() && !s.contains('/') && s != "." && s != ".." => Ok(s),
        _ => Err(Errno::EINVAL),
    }
}

/// A service timestamp as a `SystemTime` (times before 1970 included).
pub fn system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nanos.min(999_999_999)));
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + nanos
    }
}

/// A `SystemTime` as a service timestamp.
pub fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            // -1.25 s is secs -2 + 0.75 s.
            let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos());
            if nanos == 0 {
                Timestamp { secs: -secs, nanos: 0 }
            } else {
                Timestamp { secs: -secs - 1, nanos: 1_000_000_000 - nanos }
            }
        }
    }
}

/// A `utimensat` time from the kernel as the service's.
pub fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(st) => SetTime::At(timestamp(st)),
    }
}

/// The FUSE file type of a service file kind (sockets, fifos and devices are shown as regular files: the
/// service does not open them).
pub fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File | FileKind::Other => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
    }
}

/// The attributes the kernel gets for node `ino` (FUSE reports the node id as `st_ino`).
pub fn file_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: file_type(a.kind),
        perm: a.perm & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: if a.blksize == 0 { 4096 } else { a.blksize },
        flags: 0,
    }
}

/// Attributes for a directory the kernel only needs the type of ("." and ".." in readdirplus).
pub fn dir_attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_before_and_after_1970() {
        for (secs, nanos) in [(0, 0), (1_700_000_000, 123_456_789), (-1, 0), (-2, 750_000_000), (-86400, 1)] {
            let t = Timestamp { secs, nanos };
            assert_eq!(timestamp(system_time(t)), t, "{secs}.{nanos}");
        }
    }

    #[test]
    fn names_that_are_not_utf8_or_special_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(name(OsStr::new("a b")), Ok("a b"));
        assert!(name(OsStr::from_bytes(b"\xff")).is_err());
        assert!(name(OsStr::new("..")).is_err());
        assert!(name(OsStr::new("a/b")).is_err());
    }
}
