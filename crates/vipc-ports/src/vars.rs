//! Remote variables (002 ch. 5): a node exports typed read-only variables;
//! other nodes read them — whole, or one field or element of them — through
//! the remote-memory read path, without any thread of the owner running.
//!
//! Each variable lives in an exported segment (read-only to others):
//!
//! ```text
//! 0   version   u64 LE   odd while the owner updates it ("occupied")
//! 8   dir_len   u32 LE   bytes of the directory
//! 12  doc_len   u32 LE   bytes of the value
//! 16  directory          postcard Vec<(path, start, len)>: every field and element
//! ..  value              the value as JSON text
//! ```
//!
//! The owner resolves every qualification when it sets the value: the
//! directory maps each path (`.field`, `[index]`, nested) to the byte range
//! of that part of the value, so a reader fetches only what it names. A
//! reader caches the directory with its version; a read is the range, then
//! the version word — or both in one remote read when the range ends within
//! the first 1 KB of the segment: if the version changed (or is odd: the owner is inside
//! its monitor) the read is re-issued, with the directory read again — 002's
//! occupied test and re-issue. Each remote read is waited for by the reading
//! thread itself, which reads the answer off the socket (no hand-off to
//! another thread); on a node with `poll_spin` it first spins on the socket
//! for that long — 002's processor-synchronous wait — and then blocks.

use crate::codec::{decode, encode, encode_into};
use crate::rpc::{serve, Client, Dispatch, DispatchError};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vipc::{
    Access, AnonSegment, ExportedSegment, HostId, Node, Notify, PendingOp, Process, ProtectionGroup, RemoteSegment,
    SegmentName, SegmentOptions,
};

const HEADER: usize = 16;
/// Parts ending within this many bytes of the segment's start are read
/// together with the version word, in one remote read (one packet).
const ONE_READ: usize = 1024;
/// A read's bound when the caller set none (`within` shortens it).
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// Re-issues at full speed before a reader starts pausing between them.
const REISSUE_EAGER: u32 = 16;
/// The pause between later re-issues (the owner is inside its monitor).
const REISSUE_PAUSE: Duration = Duration::from_micros(100);

/// The registered name of host `host`'s variable directory server.
fn server_name(host: HostId) -> String {
    format!("vipc.vars.{host}")
}

/// The variables this node exports, found by name through a small server.
pub struct Variables {
    node: Node,
    names: Arc<Mutex<HashMap<String, SegmentName>>>,
}

impl std::fmt::Debug for Variables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variables").field("node", &self.node.host_id()).finish()
    }
}

/// The name server's one method: variable name → segment name.
struct Names(Arc<Mutex<HashMap<String, SegmentName>>>);

const NAMES_FINGERPRINT: u64 = 0x7661_7273_6e61_6d65; // "varsname"

impl Dispatch for Names {
    fn interface(&self) -> &'static str {
        "variables"
    }
    fn fingerprint(&self) -> u64 {
        NAMES_FINGERPRINT
    }
    fn dispatch(&self, method: u16, args: &[u8], result: &mut Vec<u8>) -> std::result::Result<(), DispatchError> {
        if method != 0 {
            return Err(DispatchError::NoSuchMethod);
        }
        let name: String = decode(args)?;
        let found = self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&name).copied();
        Ok(encode_into(&found, result)?)
    }
}

impl Variables {
    /// Starts `node`'s variable directory (one per node).
    pub fn start(node: &Node) -> Result<Variables> {
        let names: Arc<Mutex<HashMap<String, SegmentName>>> = Arc::default();
        let d = Names(names.clone());
        node.spawn_server(&server_name(node.host_id()), vipc::Scope::Any, move |p| serve(&p, &d))?;
        Ok(Variables { node: node.clone(), names })
    }

    /// Exports variable `name` with room for `capacity` bytes (directory and
    /// value as JSON) and sets it to `value`.
    pub fn export<T: Serialize>(&self, name: &str, capacity: usize, value: &T) -> Result<Variable<T>> {
        let opts = SegmentOptions { access: Access::READ, notify: Notify::Never, protection: ProtectionGroup::Any };
        let size =
            capacity.checked_add(HEADER).ok_or_else(|| Error::Encode(format!("a variable of {capacity} bytes")))?;
        let seg = self.node.export_segment(size, opts)?;
        let entry = (self.names.clone(), name.to_string());
        let mut v = Variable { seg, version: 0, entry, _type: PhantomData };
        v.set(value)?;
        self.names.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), v.seg.name());
        Ok(v)
    }
}

/// An exported variable, as its owner holds it. Dropping it unexports it
/// and takes its name out of the directory.
pub struct Variable<T> {
    seg: ExportedSegment,
    version: u64,
    /// The directory and the name it is listed under.
    entry: (Arc<Mutex<HashMap<String, SegmentName>>>, String),
    _type: PhantomData<fn(&T)>,
}

impl<T> Drop for Variable<T> {
    fn drop(&mut self) {
        let (names, name) = &self.entry;
        let mut names = names.lock().unwrap_or_else(|e| e.into_inner());
        // Not a newer export of the same name's.
        if names.get(name) == Some(&self.seg.name()) {
            names.remove(name);
        }
    }
}

impl<T> std::fmt::Debug for Variable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variable").field("version", &self.version).finish()
    }
}

impl<T: Serialize> Variable<T> {
    /// Sets the value: the monitor is occupied (odd version) while the
    /// directory and value are written, then released with a new version.
    pub fn set(&mut self, value: &T) -> Result<()> {
        let (dir, doc) = layout(value)?;
        let size = self.seg.size() as usize;
        if HEADER + dir.len() + doc.len() > size {
            return Err(Error::Encode(format!(
                "the value takes {} bytes, the variable has room for {}",
                dir.len() + doc.len(),
                size - HEADER
            )));
        }
        self.occupy()?;
        let mut body = Vec::with_capacity(8 + dir.len() + doc.len());
        body.extend_from_slice(&(dir.len() as u32).to_le_bytes());
        body.extend_from_slice(&(doc.len() as u32).to_le_bytes());
        body.extend_from_slice(&dir);
        body.extend_from_slice(&doc);
        self.seg.write(8, &body)?;
        self.version += 1;
        self.seg.write(0, &self.version.to_le_bytes())?;
        Ok(())
    }

    /// Enters the monitor: readers re-issue until [`Variable::set`] leaves it
    /// (a version of its own for owners that prepare a value at length).
    pub fn occupy(&mut self) -> Result<()> {
        if self.version % 2 == 0 {
            self.version += 1;
            self.seg.write(0, &self.version.to_le_bytes())?;
        }
        Ok(())
    }
}

/// The directory and JSON text of `value`: every part's path and byte range.
fn layout<T: Serialize>(value: &T) -> Result<(Vec<u8>, Vec<u8>)> {
    let v = serde_json::to_value(value).map_err(|e| Error::Encode(e.to_string()))?;
    let (mut doc, mut dir, mut path) = (Vec::new(), Vec::new(), String::new());
    emit(&v, &mut path, &mut doc, &mut dir)?;
    Ok((encode(&dir)?, doc))
}

/// Writes `v` as JSON into `out`, recording the range of it and of every part.
fn emit(v: &Value, path: &mut String, out: &mut Vec<u8>, dir: &mut Vec<(String, u32, u32)>) -> Result<()> {
    let start = out.len();
    match v {
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json(out, k.as_str())?;
                out.push(b':');
                let len = path.len();
                path.push('.');
                path.push_str(k);
                emit(x, path, out, dir)?;
                path.truncate(len);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                emit(x, path, out, dir)?;
                path.truncate(len);
            }
            out.push(b']');
        }
        scalar => json(out, scalar)?,
    }
    dir.push((path.clone(), start as u32, (out.len() - start) as u32));
    Ok(())
}

/// The JSON text of a key or a scalar.
fn json<S: Serialize + ?Sized>(out: &mut Vec<u8>, x: &S) -> Result<()> {
    serde_json::to_writer(out, x).map_err(|e| Error::Encode(e.to_string()))
}

/// What a reader knows of one variable.
struct Known {
    node: Node,
    remote: RemoteSegment,
    /// Where reads land: as large as the largest read so far.
    into: AnonSegment,
    /// The directory, if read.
    dir: Option<Directory>,
}

/// A variable's directory as of one stable version.
struct Directory {
    version: u64,
    /// Path → (start, len) in the value.
    parts: HashMap<String, (u32, u32)>,
    /// Where the value starts in the segment.
    doc: u32,
}

/// Reads the variables of one other node.
pub struct RemoteVars<'p> {
    node: Node,
    names: Client<'p>,
    known: RefCell<HashMap<String, Known>>,
    reissued: Cell<u64>,
}

impl std::fmt::Debug for RemoteVars<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteVars").field("server", &self.names.server()).finish()
    }
}

impl<'p> RemoteVars<'p> {
    /// A reader, on `node` as `process`, of host `host`'s variables.
    pub fn connect(node: &Node, process: &'p Process, host: HostId) -> Result<RemoteVars<'p>> {
        let names = Client::connect(process, &server_name(host), "variables", NAMES_FINGERPRINT)?;
        Ok(RemoteVars { node: node.clone(), names, known: RefCell::default(), reissued: Cell::new(0) })
    }

    /// Reads the part `path` (`""` for all of it, else e.g. `.cells[3].temp`)
    /// of variable `var` as a `U`.
    pub fn read<U: DeserializeOwned>(&self, var: &str, path: &str) -> Result<U> {
        let cached = self.known.borrow().contains_key(var);
        match self.read_once(var, path) {
            // The segment read before may be gone (the variable dropped or
            // exported again): forget it, and look the name up once more.
            Err(Error::Vipc(_)) if cached => {
                self.known.borrow_mut().remove(var);
                self.read_once(var, path)
            }
            Err(e @ Error::Vipc(_)) => {
                self.known.borrow_mut().remove(var);
                Err(e)
            }
            r => r,
        }
    }

    fn read_once<U: DeserializeOwned>(&self, var: &str, path: &str) -> Result<U> {
        let mut known = self.known.borrow_mut();
        if !known.contains_key(var) {
            let seg: Option<SegmentName> = self.names.call(0, &var.to_string())?;
            let seg = seg.ok_or_else(|| Error::NotFound(format!("variable {var}")))?;
            let remote = self.node.import_segment(seg, Access::READ, READ_TIMEOUT)?;
            // Sized by what is read, not by the size the exporter declares.
            let into = self.node.anonymous_segment((remote.size() as usize).min(ONE_READ))?;
            known.insert(var.to_string(), Known { node: self.node.clone(), remote, into, dir: None });
        }
        let k = known.get_mut(var).expect("inserted above");
        let give_up = Instant::now() + READ_TIMEOUT;
        for round in 0.. {
            if round > REISSUE_EAGER {
                if Instant::now() >= give_up {
                    break;
                }
                std::thread::sleep(REISSUE_PAUSE);
            }
            let (version, range) = match &k.dir {
                Some(d) => match d.parts.get(path) {
                    Some(&(start, len)) => {
                        let at =
                            d.doc.checked_add(start).ok_or_else(|| Error::Malformed("a part past 4 GiB".into()))?;
                        (d.version, (at, len))
                    }
                    None => return Err(Error::NotFound(format!("{var}{path}"))),
                },
                None => {
                    k.dir = read_directory(k)?;
                    if k.dir.is_none() {
                        self.reissued.set(self.reissued.get() + 1);
                    }
                    continue;
                }
            };
            let (start, len) = (range.0 as usize, range.1 as usize);
            let (now, bytes) = if start + len <= ONE_READ {
                // Near the front: the version word and the part in one read, one snapshot.
                let all = read(k, 0, (start + len) as u32)?;
                (u64::from_le_bytes(all[..8].try_into().expect("8 bytes")), all[start..].to_vec())
            } else {
                // The part, then the version: unchanged means the part was read inside that version.
                let bytes = read(k, range.0, range.1)?;
                (u64::from_le_bytes(read(k, 0, 8)?.try_into().expect("8 bytes")), bytes)
            };
            if now == version {
                return serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()));
            }
            k.dir = None; // updated meanwhile: re-issue with the new directory
            self.reissued.set(self.reissued.get() + 1);
        }
        Err(Error::Malformed(format!("variable {var} stayed occupied for {READ_TIMEOUT:?}")))
    }

    /// Reads that were re-issued because the owner was updating the variable.
    pub fn reissued(&self) -> u64 {
        self.reissued.get()
    }
}

/// The directory as of a stable version, or `None` if the owner is inside its monitor.
fn read_directory(k: &mut Known) -> Result<Option<Directory>> {
    let head = read(k, 0, HEADER as u32)?;
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let dir_len = word(8);
    let total = dir_len.checked_add(HEADER as u32).ok_or_else(|| Error::Malformed("a 4 GiB directory".into()))?;
    // Version and directory in one read: one atomic snapshot.
    let all = read(k, 0, total)?;
    parse_directory(&all, dir_len)
}

/// The directory in `all` (the segment's first bytes, version word first),
/// as announced by `dir_len`; `None` if the owner is inside its monitor or
/// changed the directory meanwhile. The bytes come from another host:
/// anything malformed is an error, never a panic.
fn parse_directory(all: &[u8], dir_len: u32) -> Result<Option<Directory>> {
    if all.len() < HEADER || all.len() - HEADER != dir_len as usize {
        return Err(Error::Malformed(format!("a {}-byte directory read for {dir_len}", all.len())));
    }
    let version = u64::from_le_bytes(all[..8].try_into().expect("8 bytes"));
    if version % 2 == 1 || u32::from_le_bytes(all[8..12].try_into().expect("4 bytes")) != dir_len {
        return Ok(None);
    }
    let entries: Vec<(String, u32, u32)> = decode(&all[HEADER..])?;
    let doc = dir_len.checked_add(HEADER as u32).ok_or_else(|| Error::Malformed("a 4 GiB directory".into()))?;
    let doc_len = u32::from_le_bytes(all[12..16].try_into().expect("4 bytes"));
    if entries.iter().any(|(_, s, l)| s.checked_add(*l).is_none_or(|end| end > doc_len)) {
        return Err(Error::Malformed("a directory entry outside the value".into()));
    }
    let parts = entries.into_iter().map(|(p, s, l)| (p, (s, l))).collect();
    Ok(Some(Directory { version, parts, doc }))
}

/// Every parser of this crate on `data`, for the fuzz target and the
/// no-panic property test: each returns an error or a value, never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    if data.len() >= 32 {
        let m: vipc::Message = data[..32].try_into().expect("32 bytes");
        if let Some(r) = crate::frame::Request::decode(&m) {
            let _ = r.inline(&m);
        }
        let _ = crate::frame::read_answer(&m);
    }
    let _ = decode::<Vec<u64>>(data);
    let _ = decode::<(String, Vec<u8>, Option<u64>)>(data);
    let _ = decode::<Option<SegmentName>>(data);
    if data.len() >= HEADER {
        let _ = parse_directory(data, (data.len() - HEADER) as u32);
    }
    let _ = serde_json::from_slice::<Value>(data);
}

/// One remote read of `len` bytes at `offset`.
fn read(k: &mut Known, offset: u32, len: u32) -> Result<Vec<u8>> {
    if len > k.into.size() {
        k.into = k.node.anonymous_segment(len as usize)?;
    }
    let op: PendingOp = k.remote.read(offset, len, (&k.into, 0), false)?;
    op.wait(READ_TIMEOUT)?;
    Ok(k.into.to_vec(0, len as usize)?)
}
