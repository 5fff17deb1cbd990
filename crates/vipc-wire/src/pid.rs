//! Process and group identifiers.

use std::fmt;

/// A 32-bit process or group identifier.
///
/// A process id is a 16-bit logical host (high half) and a 16-bit local id
/// (low half); the top bit is clear. A group id has the top bit set
/// (000 §5.3, §6.5.1). `Pid(0)` is never a valid process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Pid(pub u32);

/// A logical host id: the high 16 bits of every pid on that host. Valid ids are 1..=0x7FFF.
pub type HostId = u16;

/// The largest logical host id a process pid can carry (the top bit marks groups).
pub const MAX_HOST_ID: HostId = 0x7FFF;

impl Pid {
    /// The null pid: "no process".
    pub const NONE: Pid = Pid(0);

    /// Builds a process id from a logical host and a local id.
    pub const fn new(host: HostId, local: u16) -> Pid {
        Pid(((host as u32) << 16) | local as u32)
    }

    /// The logical host this pid lives on.
    pub const fn host(self) -> HostId {
        (self.0 >> 16) as u16
    }

    /// The id local to its host.
    pub const fn local(self) -> u16 {
        self.0 as u16
    }

    /// True for group ids (top bit set).
    pub const fn is_group(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }

    /// True for the null pid.
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Pid {
    /// Written as `host.local` in hex, e.g. `0012.0003`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}.{:04x}", self.host(), self.local())
    }
}

impl std::str::FromStr for Pid {
    type Err = String;

    /// Accepts `host.local` in hex (as displayed) or a plain 32-bit number (decimal or 0x-hex).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("invalid pid {s:?}: expected HOST.LOCAL in hex (e.g. 0012.0003) or a 32-bit number");
        if let Some((h, l)) = s.split_once('.') {
            let h = u16::from_str_radix(h, 16).map_err(|_| bad())?;
            let l = u16::from_str_radix(l, 16).map_err(|_| bad())?;
            return Ok(Pid::new(h, l));
        }
        let v = match s.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => s.parse::<u32>(),
        };
        v.map(Pid).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_and_display_round_trip() {
        let p = Pid::new(0x12, 3);
        assert_eq!(p.host(), 0x12);
        assert_eq!(p.local(), 3);
        assert!(!p.is_group());
        assert_eq!(p.to_string(), "0012.0003");
        assert_eq!("0012.0003".parse::<Pid>().unwrap(), p);
        assert_eq!("0x120003".parse::<Pid>().unwrap(), p);
        assert!(Pid(0x8000_0001).is_group());
        assert!("zz.1".parse::<Pid>().is_err());
    }
}
