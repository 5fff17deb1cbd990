//! The region statement (002 §4.2.2): wait on several ports at once and
//! serve the message that arrived earliest; the sender's reply (for an
//! `OnReturn` call) goes back when the branch's handler ends. Several
//! processes in regions on one port share its messages: each message goes
//! to one of them (the one that has waited longest, where 002 said "at
//! random").

use crate::codec::{decode, encode};
use crate::frame::status;
use crate::port::{done, take, Checkpoint, Port, Ports};
use crate::Result;
use serde::{de::DeserializeOwned, Serialize};
use std::panic::{catch_unwind, AssertUnwindSafe};
use vipc::{Pid, Process};

/// A branch: decodes the message, runs the handler, encodes the result (or a status).
type Branch<'a> = Box<dyn FnMut(&[u8]) -> std::result::Result<Vec<u8>, u8> + 'a>;

/// A region over ports of one node's [`Ports`], served by one process.
pub struct Region<'a> {
    process: &'a Process,
    keeper: Pid,
    branches: Vec<(u64, Branch<'a>)>,
    buf: Vec<u8>,
    /// A port of another `Ports` given to [`Region::on`]: serving fails with it.
    foreign: Option<String>,
}

impl std::fmt::Debug for Region<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("ports", &self.branches.len()).finish()
    }
}

impl<'a> Region<'a> {
    /// An empty region of `process` over ports of `ports` (the process's node's).
    pub fn new(process: &'a Process, ports: &Ports) -> Region<'a> {
        Region { process, keeper: ports.keeper(), branches: Vec::new(), buf: Vec::new(), foreign: None }
    }

    /// Adds a branch: messages of `port` go to `handler`, whose result is
    /// the reply of an `OnReturn` call. A port of another [`Ports`] makes
    /// every [`Region::serve_one`] fail with [`crate::Error::OtherPorts`].
    pub fn on<T, R>(mut self, port: &Port<T, R>, mut handler: impl FnMut(T) -> R + 'a) -> Region<'a>
    where
        T: DeserializeOwned,
        R: Serialize,
    {
        let branch = move |payload: &[u8]| -> std::result::Result<Vec<u8>, u8> {
            let message: T = decode(payload).map_err(|_| status::BAD_ARGUMENTS)?;
            let result = catch_unwind(AssertUnwindSafe(|| handler(message))).map_err(|_| status::PANICKED)?;
            encode(&result).map_err(|_| status::BAD_ARGUMENTS)
        };
        if port.keeper != self.keeper {
            self.foreign.get_or_insert_with(|| port.name().to_string());
        }
        self.branches.push((port.key, Box::new(branch)));
        self
    }

    /// Waits for the earliest-arrived message of the region's ports (bounded
    /// by `within`), runs its branch and answers its sender if it waits for
    /// the result. Returns the index of the branch that ran (in `on` order).
    pub fn serve_one(&mut self) -> Result<usize> {
        if let Some(name) = &self.foreign {
            return Err(crate::Error::OtherPorts(name.clone()));
        }
        if self.branches.is_empty() {
            return Err(crate::Error::NotFound("a port to serve: the region has no branch".into()));
        }
        let keys: Vec<u64> = self.branches.iter().map(|(k, _)| *k).collect();
        let taken = take(self.process, self.keeper, &keys, &mut self.buf)?;
        let Some(i) = keys.iter().position(|k| *k == taken.port) else {
            return Err(crate::Error::Malformed(format!("a message of port {:#x} not asked for", taken.port)));
        };
        let outcome = (self.branches[i].1)(&taken.payload);
        if taken.checkpoint == Checkpoint::OnReturn {
            // Whatever the caller's deadline: the sender waits for it (a
            // local Send to the keeper, which answers at once).
            let (st, result) = match &outcome {
                Ok(result) => (status::OK, &result[..]),
                Err(st) => (*st, &[][..]),
            };
            vipc::without_limit(|| done(self.process, self.keeper, taken.id, st, result))?;
        }
        Ok(i)
    }

    /// Serves messages until an error (the node stopping, the caller's deadline).
    pub fn serve(&mut self) -> Result<()> {
        loop {
            self.serve_one()?;
        }
    }
}
