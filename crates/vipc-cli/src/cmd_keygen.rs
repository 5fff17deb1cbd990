//! `vipc keygen`: write a fresh cluster key.

use crate::error::{CliError, CliResult};
use std::io::Write;
use std::path::Path;
use vipc::AuthKey;

/// Writes a random 32-byte key as hex to `path` (mode 0600).
pub fn run(path: &Path, force: bool) -> CliResult<()> {
    if path.is_dir() {
        return Err(CliError(format!("{} is a directory", path.display())));
    }
    let key = AuthKey::from_bytes(rand::random::<[u8; 32]>());
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            CliError(format!("{} already exists (use --force to overwrite)", path.display()))
        }
        _ => CliError(format!("cannot write {}: {e}", path.display())),
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    writeln!(f, "{}", key.to_hex()).map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
    say!("vipc keygen: wrote a new cluster key to {}", path.display());
    Ok(())
}
