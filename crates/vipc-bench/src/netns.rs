//! Network namespaces for the items that need a real link between nodes
//! (suite `groups`, item `ipc/link`): made with iproute2 as root, peers run
//! inside them with `ip netns exec`, and a reaper process that removes them
//! however the bench ends (a bench killed outright leaves namespaces named
//! `vb<pid>…-…`, which `ip netns list` shows).

use crate::error::Result;
use crate::peer::PeerExe;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// Why the namespaces could not be set up.
pub enum Setup {
    /// The machine cannot make them (not root, no iproute2, no namespaces):
    /// the suite is skipped.
    Unavailable(String),
    /// They were made but something failed: the item fails.
    Failed(String),
}

/// The namespaces named `PREFIX…` an item makes, and the reaper that removes
/// them however the bench ends; dropped, it removes them itself (newest
/// first, after what runs in them) and lets the reaper go.
pub struct Namespaces {
    prefix: String,
    /// Stdin of the reaper: when it closes (the bench exits, however it
    /// exits, Ctrl-C and SIGKILL included) the reaper removes our namespaces.
    reaper: Option<Child>,
    created: Vec<String>,
}

impl Namespaces {
    /// Checks that namespaces can be made here (root, iproute2) and starts
    /// the reaper for `prefix` (`vb…-`).
    pub fn new(exe: &PeerExe, prefix: String) -> std::result::Result<Namespaces, Setup> {
        if !rustix::process::geteuid().is_root() {
            return Err(Setup::Unavailable("not root (network namespaces need root)".into()));
        }
        ip(&["-V"]).map_err(|e| Setup::Unavailable(format!("no iproute2 ({e})")))?;
        let reaper = spawn_reaper(exe, &prefix).map_err(|e| Setup::Failed(format!("cannot start the reaper: {e}")))?;
        Ok(Namespaces { prefix, reaper: Some(reaper), created: Vec::new() })
    }

    /// The name of namespace `suffix`.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// Makes namespace `suffix` with its loopback up; its name.
    pub fn add(&mut self, suffix: &str) -> std::result::Result<String, Setup> {
        let ns = self.name(suffix);
        ip(&["netns", "add", &ns])
            .map_err(|e| Setup::Unavailable(format!("cannot create a network namespace ({e})")))?;
        self.created.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]).map_err(Setup::Failed)?;
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.created.drain(..).rev() {
            remove_namespace(&ns);
        }
        if let Some(mut r) = self.reaper.take() {
            drop(r.stdin.take());
            let _ = r.wait();
        }
    }
}

/// Runs `ip ARGS`: its error output as the error.
pub fn ip(args: &[&str]) -> std::result::Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// `exe` run inside namespace `ns` (`ip netns exec` execs it, so the peer's
/// pid is the program's own).
pub fn in_namespace(exe: &PeerExe, ns: &str) -> PeerExe {
    let mut prefix = vec!["netns".to_string(), "exec".to_string(), ns.to_string()];
    prefix.push(exe.program.to_string_lossy().into_owned());
    prefix.extend(exe.prefix.iter().cloned());
    PeerExe { program: "ip".into(), prefix }
}

/// Kills what runs in namespace `ns` (only our peers run there) and removes it.
fn remove_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

/// The namespaces whose names start with `prefix`, from `ip netns list`
/// (lines such as `vb12-h1 (id: 3)`).
pub fn namespaces_with_prefix(list: &str, prefix: &str) -> Vec<String> {
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Starts `bench-peer group-reaper --prefix P` in a process group of its own
/// (a Ctrl-C at the terminal does not reach it).
fn spawn_reaper(exe: &PeerExe, prefix: &str) -> std::io::Result<Child> {
    Command::new(&exe.program)
        .args(&exe.prefix)
        .args(["group-reaper", "--prefix", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
}

/// `bench-peer group-reaper --prefix P`: waits until its stdin closes (the
/// bench has exited or dropped its topology), then removes every namespace
/// named `P…` and what runs in it.
pub fn reaper_peer(a: &crate::peer::PeerArgs) -> Result<()> {
    let prefix: String = a.get("prefix")?;
    if !prefix.starts_with("vb") || !prefix.ends_with('-') {
        return Err(format!("group-reaper: refusing prefix {prefix:?}").into());
    }
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    let out = Command::new("ip").args(["netns", "list"]).output()?;
    let list = String::from_utf8_lossy(&out.stdout);
    // Member hosts and the client first, the bridge last.
    let mut names = namespaces_with_prefix(&list, &prefix);
    names.sort_by_key(|n| n.ends_with("br"));
    for ns in names {
        remove_namespace(&ns);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaper_picks_only_our_namespaces() {
        let list = "vb12-h1 (id: 3)\nvb12-br (id: 0)\nvb123-h1\nother\nvb12-c (id: 4)\n";
        assert_eq!(namespaces_with_prefix(list, "vb12-"), vec!["vb12-h1", "vb12-br", "vb12-c"]);
        assert!(namespaces_with_prefix("", "vb12-").is_empty());
    }
}
