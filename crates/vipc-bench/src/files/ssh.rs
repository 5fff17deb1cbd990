//! The sshfs baseline: an sshd of the bench's own on 127.0.0.1 (own config,
//! host key and authorized key in a temporary directory; stopped with the
//! bench) and sshfs mounts of the export through it.

use crate::error::Result;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

/// Why the sshfs baseline cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("not root (the bench's sshd and FUSE mounts need root)".into());
    }
    if !Path::new(SSHD).exists() {
        return Some(format!("no {SSHD} (Debian package openssh-server; scripts/setup installs it)"));
    }
    for (cmd, pkg) in [("sshfs", "sshfs"), ("ssh-keygen", "openssh-client"), ("fusermount3", "fuse3")] {
        if Command::new(cmd).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return Some(format!("no {cmd} (Debian package {pkg})"));
        }
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    None
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY-free: read our effective uid from /proc (no libc call needed).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{:?} failed ({}): {}", cmd.get_program(), out.status, err.trim()).into());
    }
    Ok(())
}

/// A running sshd on 127.0.0.1; killed when dropped.
#[derive(Debug)]
pub struct Sshd {
    child: Child,
    /// Its TCP port.
    pub port: u16,
    /// The client's private key (authorized by this sshd).
    pub identity: PathBuf,
}

impl Sshd {
    /// Writes keys and a config into `dir` and starts sshd on a free port.
    pub fn start(dir: &Path) -> Result<Sshd> {
        std::fs::create_dir_all(dir)?;
        let host_key = dir.join("host_ed25519");
        let identity = dir.join("id_ed25519");
        for k in [&host_key, &identity] {
            if !k.exists() {
                run(Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-C", "vipc-bench", "-f"])
                    .arg(k))?;
            }
        }
        std::fs::copy(identity.with_extension("pub"), dir.join("authorized_keys"))?;
        // sshd insists on its privilege separation directory.
        std::fs::create_dir_all("/run/sshd")?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUseDNS no\nLogLevel ERROR\n\
                 Subsystem sftp internal-sftp\n",
                host_key.display(),
                dir.join("sshd.pid").display(),
                dir.join("authorized_keys").display()
            ),
        )?;
        run(Command::new(SSHD).arg("-t").arg("-f").arg(&config))?;
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut sshd = Sshd { child, port, identity };
        let t = Instant::now();
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Ok(Some(st)) = sshd.child.try_wait() {
                return Err(format!("sshd exited at start: {st}").into());
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err("sshd did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sshd)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `dir` is a mount point (listed in /proc/self/mounts).
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(canon) = dir.canonicalize() else { return false };
    let want = canon.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| m.lines().any(|l| l.split_whitespace().nth(1) == Some(want.as_str())))
        .unwrap_or(false)
}

/// An sshfs mount; unmounted when dropped.
#[derive(Debug)]
pub struct Sshfs {
    /// The mount point.
    pub dir: PathBuf,
}

impl Sshfs {
    /// Mounts `remote` (a path on the sshd's host) on `dir`; `caching` false
    /// adds `-o direct_io,dir_cache=no` (every read and lookup goes to the server).
    pub fn mount(sshd: &Sshd, remote: &Path, dir: &Path, caching: bool) -> Result<Sshfs> {
        std::fs::create_dir_all(dir)?;
        let mut cmd = Command::new("sshfs");
        cmd.arg("-p")
            .arg(sshd.port.to_string())
            .arg("-o")
            .arg(format!("IdentityFile={}", sshd.identity.display()))
            .args(["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"])
            .args(["-o", "LogLevel=ERROR"]);
        if !caching {
            cmd.args(["-o", "direct_io,dir_cache=no"]);
        }
        cmd.arg(format!("root@127.0.0.1:{}", remote.display())).arg(dir);
        run(&mut cmd)?;
        if !is_mounted(dir) {
            return Err(format!("sshfs returned but {} is not mounted", dir.display()).into());
        }
        Ok(Sshfs { dir: dir.to_path_buf() })
    }
}

impl Drop for Sshfs {
    fn drop(&mut self) {
        unmount(&self.dir);
    }
}

/// Unmounts a FUSE mount (lazily if it is busy).
pub fn unmount(dir: &Path) {
    if !is_mounted(dir) {
        return;
    }
    let quiet = |args: &[&str]| {
        Command::new("fusermount3").args(args).arg(dir).stdout(Stdio::null()).stderr(Stdio::null()).status()
    };
    if !matches!(quiet(&["-u"]), Ok(s) if s.success()) {
        let _ = quiet(&["-u", "-z"]);
    }
}
