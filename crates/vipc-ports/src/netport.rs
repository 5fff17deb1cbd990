//! Network ports (002 §4.4): one call to every node that imports a port,
//! answered by a map from node to result. Built on the reliable group Send
//! of 004 (`ALL_REPLY`): the importers of port `name` are the members of
//! its group on the hosts alive when the call begins; the call returns when
//! all of them answered or the caller's time is up, with the results that
//! came and the hosts that are missing.
//!
//! The message rides in the 32-byte group Send itself, so it is at most 16
//! encoded bytes (a bound, a key, a command — what 002's broadcasts
//! carried); results of any size come back (larger ones fetched from each
//! importer with one more exchange).

use crate::codec::{decode, encode, encode_into, fingerprint};
use crate::frame::{kind, read_answer, status, Request, ANSWER_INLINE, REQUEST_INLINE};
use crate::port::port_key;
use crate::rpc::{serve, Dispatch, DispatchError};
use crate::transfer::{fetch, Failure};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::{Duration, Instant};
use vipc::{within, HostId, Message, Node, Pid, Process, Reliable, SendOptions};

/// First well-known group number of network ports; names hash into the next 16,384.
const GROUP_BASE: u16 = 0x4000;

/// The group of network port `name`. Two names may share a group: each
/// importer answers only its own port's messages.
pub fn port_group(name: &str) -> Pid {
    vipc::well_known_group(GROUP_BASE | (fingerprint(name) as u16 & 0x3FFF))
}

/// A network port for messages `T` answered by `R`, as callers see it.
#[derive(Debug)]
pub struct NetPort<T, R> {
    name: String,
    group: Pid,
    key: u64,
    _types: PhantomData<fn(T) -> R>,
}

/// What a network port call gathered.
#[derive(Debug, PartialEq, Eq)]
pub struct Gathered<R> {
    /// Each answering node's result.
    pub results: BTreeMap<HostId, R>,
    /// The nodes alive at the start whose importers did not all answer.
    pub missing: Vec<HostId>,
}

impl<R> Gathered<R> {
    /// The results if every importer answered, else an error naming the missing nodes.
    pub fn complete(self) -> Result<BTreeMap<HostId, R>> {
        if self.missing.is_empty() {
            Ok(self.results)
        } else {
            Err(Error::Missing { missing: self.missing, answered: self.results.len() })
        }
    }
}

impl<T: Serialize + DeserializeOwned + 'static, R: Serialize + DeserializeOwned + 'static> NetPort<T, R> {
    /// The network port `name`.
    pub fn new(name: &str) -> NetPort<T, R> {
        NetPort { name: name.to_string(), group: port_group(name), key: port_key::<T, R>(name), _types: PhantomData }
    }

    /// Imports the port on `node`: a new process joins its group and answers
    /// every call with `handler` until the node stops or [`NetPort::unimport`].
    pub fn import(&self, node: &Node, handler: impl Fn(T) -> R + Send + Sync + 'static) -> Result<Pid> {
        let d = Importer { key: self.key, handler, _types: PhantomData };
        // Joined here: a join refused (the node's memberships full) is the
        // caller's error, not a thread's that ends unseen.
        let p = node.attach()?;
        p.join_group(self.group)?;
        let pid = p.pid();
        std::thread::Builder::new()
            .name(format!("vipc-{pid}"))
            .spawn(move || serve(&p, &d))
            .map_err(vipc::Error::from)?;
        Ok(pid)
    }

    /// Stops the importer `importer` (as [`NetPort::import`] returned it) of
    /// `node`: its process ends and leaves the port's group, so calls no
    /// longer count on it.
    pub fn unimport(&self, node: &Node, importer: Pid) -> Result<()> {
        crate::rpc::stop_server(node, importer)
    }

    /// Calls every importer with `message`; waits until all importers on
    /// the alive hosts answered, or `limit` passed.
    pub fn call_all(&self, p: &Process, message: &T, limit: Duration) -> Result<Gathered<R>> {
        let args = encode(message)?;
        if args.len() > REQUEST_INLINE {
            return Err(Error::Encode(format!(
                "network port {}: the message takes {} bytes, at most {REQUEST_INLINE} fit",
                self.name,
                args.len()
            )));
        }
        let req = Request { kind: kind::CALL, flags: 0, method: 0, fingerprint: self.key, len: args.len() as u32 };
        let deadline = vipc::deadline_after(Instant::now(), limit);
        let outcome = within(limit, || {
            p.send_reliable(&req.encode(&args), self.group, Reliable::AllReply, SendOptions::default())
        })?;
        let mut answers: Vec<(Pid, Message)> = Vec::new();
        if !outcome.first_replier.is_none() {
            answers.push((outcome.first_replier, outcome.reply));
        }
        while let Some(a) = p.get_reply(Duration::ZERO)? {
            answers.push(a);
        }
        let (mut results, mut unusable) = (BTreeMap::new(), Vec::new());
        let mut buf = Vec::new();
        for (from, m) in answers {
            let (st, n, inline) = read_answer(&m);
            let n = n as usize;
            let bytes = match st {
                status::OK if n <= ANSWER_INLINE => &inline[..n],
                // Fetched within what is left of `limit`.
                status::MORE => {
                    match within(deadline.saturating_duration_since(Instant::now()), || fetch(p, from, n, &mut buf)) {
                        Ok(()) => &buf[..n],
                        Err(Failure::Vipc(e @ Error::Vipc(vipc::Error::NodeStopped))) => return Err(e),
                        Err(_) => {
                            unusable.push(from.host());
                            continue;
                        }
                    }
                }
                // Another port's importer that shares the group: not this port's.
                status::MISMATCH => continue,
                // This port's importer failed (its handler panicked, the
                // message did not decode there): no use, so missing (it
                // counted as neither, and `complete()` said Ok).
                _ => {
                    unusable.push(from.host());
                    continue;
                }
            };
            // One importer's bad answer costs its own result only.
            match decode(bytes) {
                Ok(r) => {
                    results.entry(from.host()).or_insert(r);
                }
                Err(_) => unusable.push(from.host()),
            }
        }
        let mut missing = if outcome.met { Vec::new() } else { p.reliable_missing()? };
        // A host one of whose importers failed did not answer whole, whatever its others said.
        missing.extend(unusable);
        missing.sort_unstable();
        missing.dedup();
        Ok(Gathered { results, missing })
    }
}

/// An importer's dispatcher: one method, the port's handler.
struct Importer<T, R, F> {
    key: u64,
    handler: F,
    _types: PhantomData<fn(T) -> R>,
}

impl<T, R, F> Dispatch for Importer<T, R, F>
where
    T: DeserializeOwned,
    R: Serialize,
    F: Fn(T) -> R + Send + Sync,
{
    fn interface(&self) -> &'static str {
        "network port"
    }
    fn fingerprint(&self) -> u64 {
        self.key
    }
    fn dispatch(&self, method: u16, args: &[u8], result: &mut Vec<u8>) -> std::result::Result<(), DispatchError> {
        if method != 0 {
            return Err(DispatchError::NoSuchMethod);
        }
        Ok(encode_into(&(self.handler)(decode(args)?), result)?)
    }
}
