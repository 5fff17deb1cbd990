//! The node: its public handle, start-up and shutdown. The runtime it
//! drives lives in [`crate::runtime`]; see [`Node`] for how the threads cooperate.

use crate::config::NodeConfig;
use crate::faults::Faults;
use crate::net::{self, Sockets};
use crate::process::Process;
use crate::runtime::{self, Origin, Parts, Shared};
use crate::{services, Error, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vipc_engine::{AliveHosts, Engine, HostId, HostIdConfig, Pid, Scope, Stats, Time};

/// The part of a node its user handles share; dropping the last one stops the node.
struct Handle {
    shared: Arc<Shared>,
    host: HostId,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Handle {
    fn shutdown(&self) {
        self.shared.stop();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A running vipc node: a logical host with its sockets and threads.
///
/// `Node` is a cheap handle (clone it freely). The node runs until
/// [`Node::shutdown`] is called or the last `Node` handle is dropped
/// ([`Process`]es do not keep it running: their calls then fail with
/// [`Error::NodeStopped`]).
///
/// # Threads and wake-ups
/// The sans-IO engine sits behind one mutex, together with a slot per local
/// process (its pending completion, work on a buffer it lends, a flag and a
/// condition variable). A thread hand-off costs about two thirds of a UDP
/// round trip, so the datagram that completes a call is, whenever possible,
/// read by the thread waiting for it (leader/follower):
/// - A **reader token** says who reads the unicast socket; one thread at a
///   time does, so datagrams reach the engine in arrival order.
/// - A **process blocked in a call** whose answer comes from the network (a
///   remote Send, Move or GetPid, or a Receive of a process that heard from
///   the network in the last 100 ms) takes the token if it is free and reads
///   the socket itself: it feeds each datagram to the engine, fills other
///   processes' slots (waking them), and returns as soon as its own slot is
///   filled, handing the token to a process sleeping for it. Others sleep on
///   their slot. A completion for a reader blocked in `recv` that arrives
///   another way (a local call, a timer) is signalled with an empty datagram
///   to our own socket.
/// - The **background network thread** reads the socket while no process
///   does: when the token has been free for 2 ms. After each datagram it
///   hands the token to a process that asks for it (waking itself with a
///   datagram if it is blocked in `recv` when one asks).
/// - The **sender thread** sends the datagrams that remote-memory writes
///   queued (the writer pays for the queue, not the system call).
/// - The **timer thread** runs [`handle_timeout`](vipc_engine::Engine::handle_timeout)
///   when the engine's [`poll_timeout`](vipc_engine::Engine::poll_timeout)
///   (or the release of a datagram held back by fault injection) is due, at
///   most once a millisecond; whoever drains the engine notifies it of an
///   earlier deadline.
/// - The **multicast socket** (if enabled) has a token of its own: a process
///   blocked in Receive whose messages came by multicast lately reads it
///   itself; otherwise the **multicast thread** does.
/// - With [`NodeConfig::poll_spin`], a blocked process first spins: the
///   reader on non-blocking receives, the others on their slot's flag.
///
/// Draining moves completions into slots and datagrams into a send queue,
/// sent after the lock is released by one thread at a time in queue order,
/// so the wire order is the engine's order. Remote moves are zero-copy:
/// the data of a MoveTo are sent from the mover's buffer and those of a
/// MoveFrom land in it (see [`Process::move_to`]); only the mover's thread
/// touches its buffer, so another thread that reads or drains such a chunk
/// queues it in the mover's slot and wakes it.
#[derive(Clone)]
pub struct Node {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("host", &self.handle.host).field("addr", &self.handle.shared.local).finish()
    }
}

/// The bulk window a node keeps within its socket's `recv_buffer`: windows
/// must fit in the peer's receive buffer (ours is the estimate), those of
/// streams coming from several movers at once too, so a quarter of it each.
/// With half, two 4 MiB MoveTos of 64 KiB loopback chunks into one node
/// overflowed its 8 MiB buffer, and every lost chunk waited for T_r (`vipc
/// cp` with 4 MiB units and two readers: 0.7–2.1 GB/s, with a quarter
/// 4.0–4.5 GB/s; one stream alone moves as fast either way). A small buffer
/// (416 KiB, what a user other than root gets under Debian's `rmem_max`)
/// keeps half, up to 256 KiB: a quarter there is two loopback chunks in
/// flight, and single moves ran at half the speed.
fn window_bytes(configured: usize, recv_buffer: usize) -> usize {
    let share = (recv_buffer / 4).max((recv_buffer / 2).min(256 << 10));
    configured.min(share).max(64 << 10)
}

impl Node {
    /// Binds the sockets, starts the threads and waits until the node has its
    /// logical host id. With a fixed id it then waits `conflict_grace` for a
    /// complaint from a node already holding the id. Unless disabled, it then
    /// creates the kernel server as process 1.
    pub fn start(config: NodeConfig) -> Result<Node> {
        config.check().map_err(Error::Config)?;
        let Sockets { unicast, multicast, local, targets, peers, groups, own, recv_buffer } = net::open(&config)?;
        let mut ecfg = config.engine.clone();
        ecfg.host_id = config.host_id;
        ecfg.key = config.key.clone();
        if recv_buffer > 0 {
            ecfg.window_bytes = window_bytes(ecfg.window_bytes, recv_buffer);
        }
        if ecfg.seed == 0 {
            ecfg.seed = rand::random::<u64>() | 1;
        }
        if ecfg.token_key.is_none() {
            ecfg.token_key = Some(rand::random());
        }
        let engine = Engine::new(ecfg.clone(), Time::ZERO);
        let has_multicast = multicast.is_some();
        let bells = multicast.as_ref().map(runtime::mcast_set_up).transpose()?;
        let shared = Arc::new(Shared::new(
            engine,
            Parts {
                unicast,
                multicast,
                bells,
                targets,
                peers,
                groups,
                own,
                local,
                faults: Faults::new(&config.faults),
                log_conflicts: !matches!(config.host_id, HostIdConfig::Fixed(_)),
                poll_spin: config.poll_spin,
                keyed: config.key.is_some(),
            },
        ));
        {
            let mut st = shared.lock();
            let now = shared.now();
            shared.drain(&mut st, Origin::Timer, now);
            shared.flush(st);
        }

        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.to_string()).spawn(f).map_err(Error::Io)
        };
        let s = shared.clone();
        threads.push(spawn("vipc-timer", Box::new(move || runtime::timer_loop(s)))?);
        let s = shared.clone();
        threads.push(spawn("vipc-send", Box::new(move || runtime::sender_loop(s)))?);
        let s = shared.clone();
        threads.push(spawn("vipc-net", Box::new(move || runtime::net_loop(s)))?);
        if has_multicast {
            let s = shared.clone();
            threads.push(spawn("vipc-mcast", Box::new(move || runtime::multicast_loop(s)))?);
        }
        let mut handle = Handle { shared: shared.clone(), host: 0, threads: Mutex::new(threads) };

        // Wait for the logical host id.
        let wait = ecfg.host_alloc_wait.saturating_mul(20).saturating_add(Duration::from_secs(2));
        let deadline = crate::within::deadline_after(Instant::now(), wait);
        let fixed = matches!(config.host_id, HostIdConfig::Fixed(_));
        let host = {
            let mut st = shared.lock();
            loop {
                if let (true, Some((host, addr))) = (fixed, st.conflict) {
                    drop(st);
                    return Err(Error::HostConflict { host, addr });
                }
                if let Some(h) = st.ready {
                    break h;
                }
                let now = Instant::now();
                if now >= deadline {
                    drop(st);
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("logical host allocation did not finish within {wait:?}"),
                    )));
                }
                st = shared.ready_cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        };
        if fixed {
            let deadline = crate::within::deadline_after(Instant::now(), config.conflict_grace);
            let mut st = shared.lock();
            loop {
                if let Some((host, addr)) = st.conflict {
                    drop(st);
                    return Err(Error::HostConflict { host, addr });
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                st = shared.ready_cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        handle.host = host;
        shared.lock().log_conflicts = true;
        let node = Node { handle: Arc::new(handle) };
        if config.kernel_server {
            // The kernel server's pid first (always local id 1), then its mover's.
            let server = node.attach()?;
            let (mover, _) = node.spawn(services::kernel_mover)?;
            let (ks, _) = run_on_thread(server, move |p| services::kernel_server(p, mover))?;
            // A member of the kernel servers' group before start returns, so
            // that a location query sent right after finds it.
            let group = crate::locate::KERNEL_SERVER_GROUP;
            node.handle.shared.call(None, |e, _| e.join_group(ks, group))?;
        }
        Ok(node)
    }

    /// The runtime state shared with processes and segments.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The node's logical host id.
    pub fn host_id(&self) -> HostId {
        self.handle.host
    }

    /// The address of the node's unicast socket (peers reach it there).
    pub fn local_addr(&self) -> SocketAddr {
        self.handle.shared.local
    }

    /// The node's counters.
    pub fn stats(&self) -> Stats {
        self.handle.shared.stats()
    }

    /// The alive-host table (I-Am-Here, 004 §4.2): the hosts this node hears,
    /// by row, with the table's sequence number.
    pub fn alive_hosts(&self) -> Result<AliveHosts> {
        self.handle.shared.call(None, |e, _| Ok(e.alive_hosts()))
    }

    /// AllocateGroupId: a new group id, unique in the cluster (it carries
    /// this node's host id). Well-known groups use [`crate::well_known_group`].
    pub fn allocate_group_id(&self) -> Result<Pid> {
        self.handle.shared.call(None, |e, _| e.allocate_group_id())
    }

    /// Registers `pid` under `name` with `scope` (SetPid). A null pid removes the name.
    pub fn set_pid(&self, name: &str, pid: Pid, scope: Scope) -> Result<()> {
        self.handle.shared.call(None, |e, _| e.set_pid(name.as_bytes(), pid, scope))
    }

    /// Registers `pid` under `name` unless another live process holds it
    /// ([`ProtocolError::NameTaken`](crate::ProtocolError::NameTaken)): how a
    /// server starts, rather than taking over a running one's name.
    pub fn claim_name(&self, name: &str, pid: Pid, scope: Scope) -> Result<()> {
        self.handle.shared.call(None, |e, _| e.claim_name(name.as_bytes(), pid, scope))
    }

    /// [`ProtocolError::BadName`](crate::ProtocolError::BadName) unless
    /// `name` can be registered (1 to 32 bytes): for a caller that would
    /// start a process only to find its name refused.
    pub fn check_name(name: &str) -> Result<()> {
        Ok(vipc_engine::check_name(name.as_bytes())?)
    }

    /// Removes the registration of `name` if it is `pid`'s (not one that
    /// another process has taken over since); whether it was.
    pub fn unset_pid(&self, name: &str, pid: Pid) -> Result<bool> {
        self.handle.shared.call(None, |e, _| Ok(e.unset_pid(name.as_bytes(), pid)))
    }

    /// Makes the calling thread a V process: the returned [`Process`] owns a
    /// new pid, destroyed when it is dropped.
    pub fn attach(&self) -> Result<Process> {
        let pid = self.handle.shared.create_process()?;
        Ok(Process::new(self.handle.shared.clone(), pid))
    }

    /// Creates a process running `f` on a new thread; returns its pid and the
    /// thread's handle. The process is destroyed when `f` returns.
    pub fn spawn<F, T>(&self, f: F) -> Result<(Pid, JoinHandle<T>)>
    where
        F: FnOnce(Process) -> T + Send + 'static,
        T: Send + 'static,
    {
        run_on_thread(self.attach()?, f)
    }

    /// [`Node::spawn`] for a server registered as `name`: the name is claimed
    /// for the new process first ([`Node::claim_name`]), so that a name taken
    /// by another live process, or invalid, starts nothing.
    pub fn spawn_server<F, T>(&self, name: &str, scope: Scope, f: F) -> Result<(Pid, JoinHandle<T>)>
    where
        F: FnOnce(Process) -> T + Send + 'static,
        T: Send + 'static,
    {
        let process = self.attach()?;
        let pid = process.pid();
        self.claim_name(name, pid, scope)?;
        run_on_thread(process, f).inspect_err(|_| {
            let _ = self.unset_pid(name, pid);
        })
    }

    /// Stops the node: its threads exit and every blocked or later call on
    /// its processes returns [`Error::NodeStopped`]. Idempotent.
    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}

/// Runs `f` with `process` on a new thread named after its pid (the
/// process is destroyed when `f` returns, or at once if no thread starts).
fn run_on_thread<F, T>(process: Process, f: F) -> Result<(Pid, JoinHandle<T>)>
where
    F: FnOnce(Process) -> T + Send + 'static,
    T: Send + 'static,
{
    let pid = process.pid();
    let jh = std::thread::Builder::new().name(format!("vipc-{pid}")).spawn(move || f(process))?;
    Ok((pid, jh))
}

#[cfg(test)]
mod tests {
    use super::window_bytes;

    /// A process that goes while it holds the reader token and its receive
    /// buffer (its call unwound by a panic) gives both back, and another
    /// process's remote Send completes: the token stayed with the process
    /// that was gone, and nobody would have read the socket once the
    /// background thread parked.
    #[test]
    fn a_process_gone_while_reading_leaves_the_socket_readable() {
        use crate::runtime::Reader;
        let nodes = crate::loopback_cluster(2, 45, |_, _| {}).unwrap();
        let echo = crate::services::spawn_echo(&nodes[1], None).unwrap();
        let lost = nodes[0].attach().unwrap();
        let gone = lost.pid();
        {
            // As a leader's unwinding leaves it: the token held, the buffer taken.
            let mut st = nodes[0].shared().lock();
            st.reader = Reader::Process(gone);
            drop(std::mem::take(&mut st.rxbuf));
        }
        drop(lost);
        {
            let st = nodes[0].shared().lock();
            assert!(st.reader != Reader::Process(gone), "the token stayed with a process that is gone");
            assert!(!st.rxbuf.is_empty(), "no receive buffer");
        }
        let p = nodes[0].attach().unwrap();
        let mut m = [5u8; 32];
        crate::within(std::time::Duration::from_secs(2), || p.send(&mut m, echo)).unwrap();
        assert_eq!(m[0], 5);
    }

    /// While one process holds the reader token (a Send nobody answers),
    /// another's thousands of remote Sends leave no trail in the queue of
    /// processes waiting for it (one entry per call before).
    #[test]
    fn calls_made_while_another_process_reads_leave_no_waiters_behind() {
        let nodes = crate::loopback_cluster(2, 41, |_, _| {}).unwrap();
        let echo = crate::services::spawn_echo(&nodes[1], None).unwrap();
        let (silent, silent_thread) = nodes[1]
            .spawn(|p| {
                let mut m = [0u8; 32];
                let from = p.receive(&mut m).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1500));
                p.reply(&m, from).unwrap();
            })
            .unwrap();
        let waiter = nodes[0].attach().unwrap();
        let held = std::thread::spawn(move || waiter.send(&mut [0u8; 32], silent).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(100));
        let caller = nodes[0].attach().unwrap();
        let mut most = 0;
        for i in 0..2000u32 {
            let mut m = [0u8; 32];
            m[..4].copy_from_slice(&i.to_le_bytes());
            caller.send(&mut m, echo).unwrap();
            most = most.max(nodes[0].shared().lock().lead_waiters.len());
        }
        held.join().unwrap();
        silent_thread.join().unwrap();
        assert!(most <= 2, "{most} processes queued for the reader token");
    }

    #[test]
    fn the_bulk_window_is_a_quarter_of_a_large_buffer_and_half_of_a_small_one() {
        const DEFAULT: usize = 4 << 20;
        // Root's forced 4 MiB (the kernel doubles it): a quarter.
        assert_eq!(window_bytes(DEFAULT, 8 << 20), 2 << 20);
        // A user's 208 KiB under Debian's rmem_max (doubled): half, three loopback chunks.
        assert_eq!(window_bytes(DEFAULT, 425_984), 212_992);
        // Half only up to 256 KiB, never less than a quarter or 64 KiB, never more than configured.
        assert_eq!(window_bytes(DEFAULT, 1 << 20), 256 << 10);
        assert_eq!(window_bytes(DEFAULT, 100_000), 64 << 10);
        assert_eq!(window_bytes(1 << 20, 64 << 20), 1 << 20);
    }
}
