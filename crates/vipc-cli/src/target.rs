//! What a command is aimed at: a pid, a logical host or a registered name.

use crate::error::{CliError, CliResult};
use vipc::{Pid, Process};

/// A parsed TARGET argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A pid written `HOST.LOCAL` in hex.
    Pid(Pid),
    /// A logical host id (decimal or 0x hex).
    Host(u16),
    /// A name registered with SetPid.
    Name(String),
}

impl Target {
    /// Parses TARGET: `0012.0003` is a pid, a number is a host id (when
    /// `numbers_are_hosts`) or a 32-bit pid, anything else a name.
    pub fn parse(s: &str, numbers_are_hosts: bool) -> CliResult<Target> {
        if s.is_empty() {
            return Err("empty target".into());
        }
        if s.contains('.') {
            return s.parse::<Pid>().map(Target::Pid).map_err(CliError);
        }
        let numeric = s.chars().all(|c| c.is_ascii_digit())
            || (s.starts_with("0x") && s.len() > 2 && s[2..].chars().all(|c| c.is_ascii_hexdigit()));
        if numeric {
            if numbers_are_hosts {
                return crate::opts::parse_host(s).map(Target::Host).map_err(CliError);
            }
            return s.parse::<Pid>().map(Target::Pid).map_err(CliError);
        }
        if s.len() > 32 {
            return Err(CliError(format!("invalid name {s:?}: names are 1 to 32 bytes")));
        }
        Ok(Target::Name(s.to_string()))
    }

    /// Resolves the target to a pid (a host to its kernel server), looking a
    /// name up on every node: GetPid (scope Any), then the kernel servers'
    /// group ([`vipc::locate::resolve`]).
    pub fn resolve(&self, p: &Process) -> CliResult<Pid> {
        match self {
            Target::Pid(pid) if pid.is_none() || pid.is_group() => Err(CliError(format!("{pid} is not a process id"))),
            Target::Pid(pid) => Ok(*pid),
            Target::Host(h) => Ok(vipc::services::kernel_pid(*h)),
            Target::Name(n) => match vipc::locate::resolve(p, n)? {
                Some(pid) => Ok(pid),
                None => Err(CliError(format!(
                    "no process is registered as {n:?} (unknown name, wrong key, or node not running?)"
                ))),
            },
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pid(p) => write!(f, "{p}"),
            Target::Host(h) => write!(f, "host {h:#06x}"),
            Target::Name(n) => f.write_str(n),
        }
    }
}

/// Rephrases a failed exchange with `target` for the user.
pub fn exchange_error(target: &Target, e: vipc::Error) -> CliError {
    match e {
        vipc::Error::Protocol(vipc::ProtocolError::Timeout(_)) => {
            CliError(format!("no answer from {target} (wrong key, or node not running?)"))
        }
        vipc::Error::Protocol(vipc::ProtocolError::NoSuchProcess(p)) => {
            CliError(format!("no process {p} on its node (target {target})"))
        }
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    /// A host as the commands print it (`host 0x2f89`) is read back as the
    /// same host; unprefixed digits are decimal, so the prefix is what
    /// keeps a printed `1234` from meaning host 1234 instead of 0x1234.
    #[test]
    fn a_printed_host_reads_back_as_itself() {
        for h in [1u16, 0x000c, 0x1234, 0x2f89, 0x7fff] {
            let shown = Target::Host(h).to_string();
            let number = shown.strip_prefix("host ").expect("host prefix");
            assert_eq!(Target::parse(number, true).unwrap(), Target::Host(h), "{shown}");
        }
        assert_eq!(Target::parse("1234", true).unwrap(), Target::Host(1234));
    }
}
