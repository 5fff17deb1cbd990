//! The command guard: a small shell process, started with the team server,
//! that kills the process group of every command still running when the
//! node goes — however it goes. A command's own process dies with the node
//! by its parent-death signal, but the processes it starts do not get
//! that signal (nor does a set-user-id program it runs): `make -j` left its
//! compilers running. The node tells the guard each group it starts and
//! ends on a pipe; the kernel closes the pipe when the node dies, SIGKILL
//! included, and at end of input the guard kills the groups left.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// Lines `+ PGID` and `- PGID` on standard input; at its end, SIGKILL to
/// every group still listed. (In a process group of its own, it does not
/// get the terminal's Ctrl-C with the node.)
const SCRIPT: &str = r#"groups=' '
while read -r op pg; do
  case $op in
    +) groups="$groups$pg " ;;
    -) case $groups in *" $pg "*) groups="${groups%% $pg *} ${groups#* $pg }" ;; esac ;;
  esac
done
for pg in $groups; do kill -s KILL -- "-$pg" 2>/dev/null; done
"#;

/// The node's end of the guard's pipe, and the guard, reaped on drop (the
/// pipe closed: it kills what is left and ends).
#[derive(Debug)]
pub(crate) struct Guard {
    /// `None` if the guard could not be started, or has gone.
    pipe: Mutex<Option<ChildStdin>>,
    child: Option<Child>,
}

impl Guard {
    /// Starts the guard in its own process group. Without one (no
    /// `/bin/sh`), commands still die with the node, their children may not.
    pub(crate) fn start() -> Guard {
        let child = Command::new("/bin/sh")
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match child {
            Ok(mut c) => Guard { pipe: Mutex::new(c.stdin.take()), child: Some(c) },
            Err(e) => {
                tracing::warn!("team server: no command guard ({e}): a command's children may outlive the node");
                Guard { pipe: Mutex::new(None), child: None }
            }
        }
    }

    /// The command leading process group `pgid` has started.
    pub(crate) fn watch(&self, pgid: u32) {
        self.tell('+', pgid);
    }

    /// The command leading `pgid` has ended: what is left of its group is
    /// no longer the node's (as with a shell's background jobs).
    pub(crate) fn release(&self, pgid: u32) {
        self.tell('-', pgid);
    }

    fn tell(&self, op: char, pgid: u32) {
        let mut pipe = self.pipe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pipe.as_mut() {
            // One write, shorter than PIPE_BUF: whole or not at all, even if the node dies.
            if let Err(e) = p.write_all(format!("{op} {pgid}\n").as_bytes()) {
                tracing::warn!(
                    "team server: the command guard is gone ({e}): a command's children may outlive the node"
                );
                *pipe = None;
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.pipe.get_mut().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}
