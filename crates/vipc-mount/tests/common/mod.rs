//! Test harness: a directory served by a file server on one loopback node and mounted through another
//! node of the same test process; plus checks written over any directory.

#![allow(dead_code)]

pub mod fsx;
pub mod posix;
pub mod programs;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use tempfile::TempDir;
use vipc::{Node, NodeConfig};
use vipc_fs::{ExportConfig, FileServer, FsClient};
use vipc_mount::{MountOptions, Mounted};

/// Why FUSE tests cannot run here, if they cannot.
pub fn fuse_unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root (mounting needs root or a setuid fusermount3 and user_allow_other)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()))
        .unwrap_or(false);
    if !found {
        return Some("no fusermount3 (Debian package fuse3; scripts/setup installs it)".into());
    }
    None
}

/// Returns from the test with a printed reason when FUSE is unavailable.
#[macro_export]
macro_rules! require_fuse {
    () => {
        if let Some(why) = common::fuse_unavailable() {
            vipc::testing::skipped(&why);
            return;
        }
    };
}

/// A served and mounted export: server node (host 1) with the file server, client node (host 2) with the
/// mount. Torn down in order on drop.
pub struct Served {
    pub mounted: Option<Mounted>,
    pub client: Arc<FsClient>,
    pub server: Option<FileServer>,
    pub server_node: Node,
    pub client_node: Node,
    pub export: TempDir,
    pub mnt: TempDir,
}

impl Served {
    /// Serves a fresh temp dir as `test` and mounts it with `opts`.
    pub fn start(opts: MountOptions) -> Served {
        Served::start_with(opts, false)
    }

    /// Like [`Served::start`], the export read-only if `read_only`.
    pub fn start_with(opts: MountOptions, read_only: bool) -> Served {
        let export = tempfile::Builder::new().prefix("vipc-export").tempdir().unwrap();
        // Others may search it (the permission check runs a command as nobody).
        std::fs::set_permissions(export.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mnt = tempfile::Builder::new().prefix("vipc-mnt").tempdir().unwrap();
        let server_node = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let client_node =
            Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![server_node.local_addr()])).unwrap();
        let server = FileServer::start(
            &server_node,
            ExportConfig { name: "test".into(), dir: export.path().to_path_buf(), read_only, workers: 8 },
        )
        .unwrap();
        let client = Arc::new(FsClient::connect(&client_node, "test").unwrap());
        let mounted = vipc_mount::mount(client.clone(), mnt.path(), "vipc:test", opts).unwrap();
        Served { mounted: Some(mounted), client, server: Some(server), server_node, client_node, export, mnt }
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        self.mnt.path()
    }

    /// Stops the file server (as if its process died).
    pub fn stop_server(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }

    /// Starts the file server again on the same node and directory.
    pub fn restart_server(&mut self) {
        self.stop_server();
        let cfg =
            ExportConfig { name: "test".into(), dir: self.export.path().to_path_buf(), read_only: false, workers: 8 };
        self.server = Some(FileServer::start(&self.server_node, cfg).unwrap());
    }

    /// The exported directory on the server's side.
    pub fn export_dir(&self) -> &Path {
        self.export.path()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(m) = self.mounted.take() {
            if let Err(e) = m.unmount() {
                eprintln!("unmount: {e}");
            }
        }
        if let Some(s) = self.server.take() {
            s.stop();
        }
        self.client_node.shutdown();
        self.server_node.shutdown();
    }
}
