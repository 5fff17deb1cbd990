//! Every operation of the file service over two real loopback nodes.

mod common;
use common::*;
use std::fs;
use vipc_fs::{FileKind, FsError, SetAttr, SetTime, Timestamp};

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Err(e) => e.errno(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn files_round_trip_through_every_operation() {
    let s = setup(false);
    let c = &s.client;
    let d = s.dir.path();
    assert!(!c.read_only());
    assert_eq!(c.export_name(), s.name);

    // create, write, read, fstat, close
    let (h, a) = c.open("f.txt", libc::O_CREAT | libc::O_RDWR | libc::O_EXCL, 0o640).unwrap();
    assert_eq!((a.kind, a.size, a.perm), (FileKind::File, 0, 0o640));
    assert_eq!(c.write(h, 0, b"hello world").unwrap(), 11);
    let mut buf = [0u8; 64];
    assert_eq!(c.read(h, 6, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"world");
    assert_eq!(c.fstat(h).unwrap().size, 11);
    c.fsync(h, false).unwrap();
    c.fsync(h, true).unwrap();
    c.close(h).unwrap();
    assert_eq!(fs::read(d.join("f.txt")).unwrap(), b"hello world");
    assert_eq!(errno(c.close(h)), libc::EBADF);
    assert_eq!(errno(c.open("f.txt", libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600)), libc::EEXIST);

    // O_APPEND and O_TRUNC
    let (h, _) = c.open("f.txt", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    c.write(h, 0, b"!").unwrap();
    c.close(h).unwrap();
    assert_eq!(fs::read(d.join("f.txt")).unwrap(), b"hello world!");
    let (h, a) = c.open("f.txt", libc::O_RDWR | libc::O_TRUNC, 0).unwrap();
    assert_eq!(a.size, 0);
    c.close(h).unwrap();

    // mkdir, lookup, readdir with attributes
    let a = c.mkdir("sub", 0o750).unwrap();
    assert_eq!((a.kind, a.perm), (FileKind::Dir, 0o750));
    fs::write(d.join("sub/x"), b"12345").unwrap();
    // A name that is not UTF-8 cannot be named by a path: not listed (it was, lossily).
    use std::os::unix::ffi::OsStrExt;
    let bad = d.join("sub").join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
    fs::write(&bad, b"").unwrap();
    let listed: Vec<String> = c.readdir("sub").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(listed, ["x"]);
    fs::remove_file(&bad).unwrap();
    assert_eq!(c.lookup("sub/x").unwrap().size, 5);
    assert_eq!(c.lookup("").unwrap().kind, FileKind::Dir);
    let mut names: Vec<(String, FileKind, u64)> =
        c.readdir("").unwrap().into_iter().map(|e| (e.name, e.attr.kind, e.attr.size)).collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(names, vec![("f.txt".into(), FileKind::File, 0), ("sub".into(), FileKind::Dir, names[1].2)]);

    // symlink, readlink, lookup does not follow
    let a = c.symlink("sub/x", "ln").unwrap();
    assert_eq!(a.kind, FileKind::Symlink);
    assert_eq!(c.readlink("ln").unwrap(), "sub/x");
    assert_eq!(c.lookup("ln").unwrap().kind, FileKind::Symlink);
    assert_eq!(errno(c.readlink("f.txt")), libc::EINVAL);
    // opening through a symlink inside the export works
    let (h, a) = c.open("ln", libc::O_RDONLY, 0).unwrap();
    assert_eq!(a.size, 5);
    c.close(h).unwrap();

    // rename, plain and NOREPLACE
    c.rename("sub/x", "sub/y", 0).unwrap();
    assert!(d.join("sub/y").exists() && !d.join("sub/x").exists());
    fs::write(d.join("z"), b"z").unwrap();
    assert_eq!(errno(c.rename("z", "f.txt", libc::RENAME_NOREPLACE)), libc::EEXIST);
    c.rename("z", "f.txt", 0).unwrap();
    assert_eq!(fs::read(d.join("f.txt")).unwrap(), b"z");

    // setattr: chmod, truncate (path and handle), utimes
    let a = c.setattr("f.txt", None, &SetAttr { perm: Some(0o600), ..Default::default() }).unwrap();
    assert_eq!(a.perm, 0o600);
    let a = c.setattr("f.txt", None, &SetAttr { size: Some(1000), ..Default::default() }).unwrap();
    assert_eq!(a.size, 1000);
    let (h, _) = c.open("f.txt", libc::O_RDWR, 0).unwrap();
    let a = c.setattr("f.txt", Some(h), &SetAttr { size: Some(3), ..Default::default() }).unwrap();
    assert_eq!(a.size, 3);
    c.close(h).unwrap();
    let t = Timestamp { secs: 1_000_000_000, nanos: 5 };
    let a = c
        .setattr(
            "f.txt",
            None,
            &SetAttr { atime: Some(SetTime::At(t)), mtime: Some(SetTime::At(t)), ..Default::default() },
        )
        .unwrap();
    assert_eq!((a.atime, a.mtime), (t, t));
    let a = c.setattr("f.txt", None, &SetAttr { mtime: Some(SetTime::Now), ..Default::default() }).unwrap();
    assert!(a.mtime.secs > t.secs);
    assert_eq!(a.atime, t);

    // unlink, rmdir and their errors
    assert_eq!(errno(c.rmdir("sub")), libc::ENOTEMPTY);
    assert_eq!(errno(c.unlink("sub")), libc::EISDIR);
    c.unlink("sub/y").unwrap();
    c.rmdir("sub").unwrap();
    assert_eq!(errno(c.rmdir("f.txt")), libc::ENOTDIR);
    c.unlink("ln").unwrap();
    assert_eq!(errno(c.lookup("ln")), libc::ENOENT);
    assert_eq!(errno(c.open("missing", libc::O_RDONLY, 0)), libc::ENOENT);
    assert_eq!(errno(c.mkdir("f.txt", 0o700)), libc::EEXIST);
    assert_eq!(errno(c.readdir("f.txt")), libc::ENOTDIR);

    // modes are applied as given (the client has already applied its umask)
    let (h, a) = c.open("m", libc::O_CREAT | libc::O_WRONLY, 0o666).unwrap();
    assert_eq!(a.perm, 0o666);
    c.close(h).unwrap();
    assert_eq!(c.mkdir("md", 0o777).unwrap().perm, 0o777);

    // statfs
    let st = c.statfs().unwrap();
    assert!(st.blocks > 0 && st.bsize > 0 && st.namelen >= 255);
}

/// A handle is its client's own: used on another client it is EBADF, even
/// when that client has a file open (handles started at 1 in every client,
/// so it read and wrote the other client's file).
#[test]
fn a_handle_is_only_its_clients() {
    let one = setup(false);
    let other_dir = tempfile::tempdir().unwrap();
    let other_name = export_name("h");
    let _other = serve(&one.server_node, &other_name, other_dir.path(), false);
    let two = vipc_fs::FsClient::connect(&one.client_node, &other_name).unwrap();
    let (mine, _) = one.client.open("mine", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let (theirs, _) = two.open("theirs", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    assert_ne!(mine, theirs);
    assert_eq!(errno(two.write(mine, 0, b"wrong file")), libc::EBADF);
    assert_eq!(errno(two.read(mine, 0, &mut [0; 4])), libc::EBADF);
    assert_eq!(errno(two.close(mine)), libc::EBADF);
    assert_eq!(fs::read(other_dir.path().join("theirs")).unwrap(), b"");
    one.client.write(mine, 0, b"ok").unwrap();
    one.client.close(mine).unwrap(); // the server writes behind: its close has the data on the file
    assert_eq!(fs::read(one.dir.path().join("mine")).unwrap(), b"ok");
}

#[test]
fn settings_a_server_cannot_run_with_are_refused() {
    let (node, _, _) = pair(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let cfg = |workers| vipc_fs::ExportConfig {
        name: "cfg".into(),
        dir: dir.path().to_path_buf(),
        read_only: false,
        workers,
    };
    let t = vipc_fs::Tuning::default;
    for (what, c, tuning) in [
        ("a sweep of zero", cfg(2), vipc_fs::Tuning { sweep: std::time::Duration::ZERO, ..t() }),
        ("a million workers", cfg(1 << 20), t()),
        ("no file per host", cfg(2), vipc_fs::Tuning { max_handles_per_host: 0, ..t() }),
    ] {
        assert!(vipc_fs::FileServer::start_tuned(&node, c, tuning).is_err(), "{what}");
    }
    // An export name a live server of this node holds: refused, nothing left running (it took the name over).
    let first = serve(&node, "twice", dir.path(), false);
    let running = node.stats().processes;
    let again = vipc_fs::FileServer::start(&node, vipc_fs::ExportConfig { name: "twice".into(), ..cfg(2) });
    let e = again.map(|s| s.pid()).unwrap_err().to_string();
    assert!(e.contains(&format!("export \"twice\" is already served by {}", first.pid())), "{e}");
    assert_eq!(node.stats().processes, running, "the refused server stopped");
}

/// A host at its quota of open files gets EMFILE before the open takes
/// place: an O_TRUNC open does not empty the file, an O_CREAT one does not
/// create it (both did, and still said EMFILE).
#[test]
fn an_open_over_the_quota_changes_nothing() {
    let (server_node, client_node, _) = pair(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("quota");
    let cfg = vipc_fs::ExportConfig { name: name.clone(), dir: dir.path().to_path_buf(), read_only: false, workers: 2 };
    let tuning = vipc_fs::Tuning { max_handles_per_host: 1, ..vipc_fs::Tuning::default() };
    let _server = vipc_fs::FileServer::start_tuned(&server_node, cfg, tuning).unwrap();
    let c = vipc_fs::FsClient::connect(&client_node, &name).unwrap();
    fs::write(dir.path().join("a"), b"a").unwrap();
    fs::write(dir.path().join("b"), b"data").unwrap();
    let (h, _) = c.open("a", libc::O_RDONLY, 0).unwrap();
    assert_eq!(errno(c.open("b", libc::O_WRONLY | libc::O_TRUNC, 0)), libc::EMFILE);
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"data", "not truncated");
    assert_eq!(errno(c.open("c", libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o644)), libc::EMFILE);
    assert!(!dir.path().join("c").exists(), "not created");
    c.close(h).unwrap();
    let (h, _) = c.open("b", libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
    c.close(h).unwrap();
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"", "truncated once there is room");
}

/// A client cannot make a set-user-ID (or, but on a directory, a
/// set-group-ID) file: the server creates files as its own user (root,
/// perhaps), whom such a program would run as on the server's machine.
#[test]
fn set_id_bits_are_not_granted() {
    let s = setup(false);
    let c = &s.client;
    let (h, a) = c.open("suid", libc::O_WRONLY | libc::O_CREAT, 0o6755).unwrap();
    c.close(h).unwrap();
    assert_eq!(a.perm, 0o755, "created");
    fs::write(s.dir.path().join("plain"), b"x").unwrap();
    let a = c.setattr("plain", None, &SetAttr { perm: Some(0o4711), ..Default::default() }).unwrap();
    assert_eq!(a.perm, 0o711, "chmod");
    assert_eq!(c.mkdir("shared", 0o4775).unwrap().perm, 0o775, "mkdir(2) itself ignores set-group-ID");
    let a = c.setattr("shared", None, &SetAttr { perm: Some(0o7777), ..Default::default() }).unwrap();
    assert_eq!(a.perm, 0o3777, "a directory keeps set-group-ID and the sticky bit");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(s.dir.path().join("suid")).unwrap().permissions().mode() & 0o7777, 0o755);
}
