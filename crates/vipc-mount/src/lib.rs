//! vipc-mount: the diskless workstation. A FUSE file system over the vipc file service ([`vipc_fs`]), so
//! that unmodified programs (tar, git, cc, a shell running binaries from the mount) use files that live on
//! another node, as V's workstations used their file servers through the IPC (Zwaenepoel's thesis ch. 3-4,
//! the V kernel paper §6).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let node = vipc::Node::start(vipc::NodeConfig::default())?;
//! let client = Arc::new(vipc_fs::FsClient::connect(&node, "home")?);
//! let mounted = vipc_mount::mount(client, "/mnt/home".as_ref(), "vipc:home", Default::default())?;
//! // ... programs use /mnt/home ...
//! mounted.unmount()?;
//! # Ok(()) }
//! ```
//!
//! What is not supported, and why, is in docs/FILES.md (hard links, locks across clients, xattrs, ...).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod changes;
mod convert;
mod dirahead;
mod fs;
mod heads;
mod inodes;
mod mount;
mod options;

pub use fs::VipcFs;
pub use mount::{is_mount_point, lazy_unmount, mount, prepare_mountpoint, MountError, Mounted};
pub use options::{MountOptions, MAX_THREADS};
