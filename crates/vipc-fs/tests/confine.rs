//! Confinement (nothing outside the export is reachable), read-only exports
//! and errno mapping.

mod common;
use common::*;
use std::fs;
use std::os::unix::fs::symlink;
use vipc_fs::{FsError, SetAttr};

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Err(e) => e.errno(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn nothing_outside_the_export_is_reachable() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"secret").unwrap();
    let s = setup(false);
    let c = &s.client;
    let d = s.dir.path();
    fs::create_dir(d.join("in")).unwrap();
    fs::write(d.join("in/ok"), b"ok").unwrap();
    let secret = outside.path().join("secret");
    let secret_s = secret.to_str().unwrap();
    symlink(&secret, d.join("abs")).unwrap(); // absolute link out
    symlink("../../../../../../../../etc/passwd", d.join("in/rel")).unwrap(); // relative link out
    symlink("rel", d.join("in/chain")).unwrap(); // chain: chain -> rel -> out
    symlink(outside.path(), d.join("dirout")).unwrap(); // directory link out
    symlink("in/ok", d.join("inside")).unwrap(); // link that stays inside

    let rel_out = "../".repeat(12) + "etc/passwd";
    let attempts: Vec<(&str, String)> = vec![
        ("dotdot", "../secret".into()),
        ("deep dotdot", rel_out.clone()),
        ("dotdot after a dir", "in/../../secret".into()),
        ("absolute", secret_s.to_string()),
        ("absolute link", "abs".into()),
        ("relative link", "in/rel".into()),
        ("link chain", "in/chain".into()),
        ("through a dir link", "dirout/secret".into()),
    ];
    for (what, p) in &attempts {
        assert_eq!(errno(c.open(p, libc::O_RDONLY, 0)), libc::EACCES, "open {what}");
        assert_eq!(errno(c.open(p, libc::O_RDWR | libc::O_CREAT, 0o600)), libc::EACCES, "create {what}");
        assert_eq!(
            errno(c.setattr(p, None, &SetAttr { perm: Some(0o777), ..Default::default() })),
            libc::EACCES,
            "chmod {what}"
        );
    }
    for (what, p) in [("dotdot", "../x"), ("absolute", "/tmp/x"), ("dir link", "dirout/x")] {
        assert_eq!(errno(c.mkdir(p, 0o700)), libc::EACCES, "mkdir {what}");
        assert_eq!(errno(c.symlink("/etc", p)), libc::EACCES, "symlink {what}");
        assert_eq!(errno(c.rename("in/ok", p, 0)), libc::EACCES, "rename to {what}");
        assert_eq!(errno(c.unlink(&format!("{p}/secret"))), libc::EACCES, "unlink {what}");
    }
    assert_eq!(errno(c.rename("../secret", "stolen", 0)), libc::EACCES);
    assert_eq!(errno(c.readdir("..")), libc::EACCES);
    assert_eq!(errno(c.readdir("dirout")), libc::EACCES);
    assert_eq!(errno(c.lookup("dirout/secret")), libc::EACCES);
    // the links themselves can be looked at; what they point to cannot be reached
    assert_eq!(c.readlink("abs").unwrap(), secret_s);
    // nothing changed outside
    assert_eq!(fs::read(&secret).unwrap(), b"secret");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
    // staying inside works, including `..` that stays inside and links inside
    assert_eq!(c.lookup("in/../in/ok").unwrap().size, 2);
    let (h, a) = c.open("inside", libc::O_RDONLY, 0).unwrap();
    assert_eq!(a.size, 2);
    c.close(h).unwrap();
}

#[test]
fn read_only_exports_refuse_every_mutation_with_erofs() {
    let s = setup(true);
    let c = &s.client;
    let d = s.dir.path();
    fs::write(d.join("f"), b"data").unwrap();
    fs::create_dir(d.join("dir")).unwrap();
    assert!(c.read_only());
    let erofs = libc::EROFS;
    assert_eq!(errno(c.open("f", libc::O_WRONLY, 0)), erofs);
    assert_eq!(errno(c.open("f", libc::O_RDWR, 0)), erofs);
    assert_eq!(errno(c.open("new", libc::O_CREAT | libc::O_RDONLY, 0o600)), erofs);
    assert_eq!(errno(c.open("f", libc::O_RDONLY | libc::O_TRUNC, 0)), erofs);
    assert_eq!(errno(c.mkdir("d2", 0o700)), erofs);
    assert_eq!(errno(c.rmdir("dir")), erofs);
    assert_eq!(errno(c.unlink("f")), erofs);
    assert_eq!(errno(c.rename("f", "g", 0)), erofs);
    assert_eq!(errno(c.symlink("f", "l")), erofs);
    for set in [
        SetAttr { perm: Some(0o600), ..Default::default() },
        SetAttr { size: Some(0), ..Default::default() },
        SetAttr { mtime: Some(vipc_fs::SetTime::Now), ..Default::default() },
    ] {
        assert_eq!(errno(c.setattr("f", None, &set)), erofs);
    }
    // reading still works
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(c.read(h, 0, &mut b).unwrap(), 4);
    // A read-only handle: write(2)'s EBADF, decided by the client.
    assert_eq!(errno(c.write(h, 0, b"x")), libc::EBADF);
    c.close(h).unwrap();
    assert_eq!(c.readdir("").unwrap().len(), 2);
    assert_eq!(fs::read(d.join("f")).unwrap(), b"data");
}

#[test]
fn errors_map_to_their_errno() {
    let s = setup(false);
    let c = &s.client;
    let d = s.dir.path();
    fs::write(d.join("f"), b"data").unwrap();
    fs::create_dir_all(d.join("dir/sub")).unwrap();
    assert_eq!(errno(c.lookup("nope")), libc::ENOENT);
    assert_eq!(errno(c.lookup("f/x")), libc::ENOTDIR);
    assert_eq!(errno(c.open("dir", libc::O_WRONLY, 0)), libc::EISDIR);
    assert_eq!(errno(c.open("f", libc::O_RDONLY | libc::O_DIRECTORY, 0)), libc::ENOTDIR);
    assert_eq!(errno(c.rmdir("dir")), libc::ENOTEMPTY);
    assert_eq!(errno(c.rename("dir", "dir/sub/x", 0)), libc::EINVAL);
    assert_eq!(errno(c.rename("f", "dir", 0)), libc::EISDIR);
    assert_eq!(errno(c.rmdir(".")), libc::EINVAL);
    assert_eq!(errno(c.unlink("")), libc::EINVAL);
    // A trailing '/' names a directory: "f/" is not "f" (unlink removed it).
    assert_eq!(errno(c.unlink("f/")), libc::ENOTDIR);
    assert_eq!(errno(c.rename("f/", "g", 0)), libc::ENOTDIR);
    assert!(d.join("f").is_file(), "left alone");
    assert_eq!(errno(c.unlink("dir/")), libc::EISDIR);
    assert_eq!(errno(c.open(&"x".repeat(300), libc::O_RDONLY, 0)), libc::ENAMETOOLONG);
    assert_eq!(errno(c.lookup(&"a/".repeat(3000))), libc::ENAMETOOLONG);
    assert_eq!(errno(c.open("f", libc::O_RDONLY | 0o40000000 /* O_PATH */, 0)), libc::EINVAL);
    assert_eq!(errno(c.rename("f", "g", 0xffff)), libc::EINVAL);
    symlink("f", d.join("l")).unwrap();
    assert_eq!(errno(c.open("l", libc::O_RDONLY | libc::O_NOFOLLOW, 0)), libc::ELOOP);
    // A handle used against its access mode is EBADF, and is not taken for
    // one the server forgot (reopened: each such call leaked a handle).
    let server = s.server.as_ref().unwrap();
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(errno(c.write(h, 0, b"x")), libc::EBADF);
    c.close(h).unwrap();
    let (h, _) = c.open("f", libc::O_WRONLY, 0).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(errno(c.read(h, 0, &mut b)), libc::EBADF);
    // A write ending past the largest file offset is refused, not acknowledged
    // and then lost behind the reply (write-behind), nor an overflow here.
    assert_eq!(errno(c.write(h, 1 << 63, b"x")), libc::EINVAL);
    assert_eq!(errno(c.write(h, u64::MAX - 2, b"xyz")), libc::EINVAL);
    c.fsync(h, false).unwrap();
    c.close(h).unwrap();
    assert_eq!(server.open_handles(), 0, "no handle left behind");
    // errors display as the system's message
    let e = c.lookup("nope").unwrap_err();
    assert!(e.to_string().contains("No such file"), "{e}");
}
