//! Helpers of the file-service tests: a server node and a client node on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use vipc::{Node, NodeConfig};
use vipc_fs::{ExportConfig, FileServer, FsClient, Tuning};

/// `n` distinct free UDP ports on 127.0.0.1.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    vipc::free_loopback_addrs(n).unwrap()
}

/// Short T_t (300 ms) so that failure tests run fast.
pub fn short(cfg: &mut NodeConfig) {
    cfg.engine.retransmit = Duration::from_millis(20);
    cfg.engine.timeout = Duration::from_millis(300);
}

/// A node with fixed host `host` on `addr`, listing `peers` (no multicast).
pub fn node(host: u16, addr: SocketAddr, peers: Vec<SocketAddr>, tweak: impl Fn(&mut NodeConfig)) -> Node {
    let mut cfg = NodeConfig::fixed(host, addr, peers);
    cfg.conflict_grace = Duration::from_millis(10);
    tweak(&mut cfg);
    Node::start(cfg).expect("node starts")
}

/// [`node`] on an address a node that was just dropped had: its threads
/// let go of the old socket shortly after the drop.
pub fn node_again(host: u16, addr: SocketAddr, peers: Vec<SocketAddr>, tweak: impl Fn(&mut NodeConfig)) -> Node {
    let t = std::time::Instant::now();
    loop {
        let mut cfg = NodeConfig::fixed(host, addr, peers.clone());
        cfg.conflict_grace = Duration::from_millis(10);
        tweak(&mut cfg);
        match Node::start(cfg) {
            Err(vipc::Error::Bind { .. }) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r.expect("node starts again"),
        }
    }
}

/// Two nodes (server host 1, client host 2) that know each other.
pub fn pair(tweak: impl Fn(&mut NodeConfig) + Copy) -> (Node, Node, Vec<SocketAddr>) {
    let addrs = free_addrs(2);
    let a = node(1, addrs[0], addrs.clone(), tweak);
    let b = node(2, addrs[1], addrs.clone(), tweak);
    (a, b, addrs)
}

/// A unique export name for this test process.
pub fn export_name(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{tag}{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Starts a server of `dir` on `node`.
pub fn serve(node: &Node, name: &str, dir: &Path, read_only: bool) -> FileServer {
    let cfg = ExportConfig { name: name.to_string(), dir: dir.to_path_buf(), read_only, workers: 4 };
    FileServer::start_tuned(node, cfg, Tuning { sweep: Duration::from_millis(500), ..Tuning::default() }).unwrap()
}

/// A server node, a client node, a served temporary directory and a connected client.
pub struct Setup {
    pub server_node: Node,
    pub client_node: Node,
    pub dir: tempfile::TempDir,
    pub server: Option<FileServer>,
    pub client: FsClient,
    pub name: String,
}

/// [`Setup`] with `tweak` applied to both nodes.
pub fn setup_with(read_only: bool, tweak: impl Fn(&mut NodeConfig) + Copy) -> Setup {
    let (server_node, client_node, _) = pair(tweak);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("t");
    let server = serve(&server_node, &name, dir.path(), read_only);
    let client = FsClient::connect(&client_node, &name).expect("client connects");
    Setup { server_node, client_node, dir, server: Some(server), client, name }
}

/// [`Setup`] with default nodes.
pub fn setup(read_only: bool) -> Setup {
    setup_with(read_only, |_| {})
}

/// Deterministic test bytes.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}

/// Packets a node sent plus received.
pub fn packets(n: &Node) -> u64 {
    n.stats().ipc_packets()
}

/// A UDP relay between one client node and one server node that can cut
/// the link both ways (a partition). The client node lists `client_side`
/// as its peer, the server node `server_side`: each knows the other only
/// by the relay's address.
pub struct Relay {
    pub client_side: SocketAddr,
    pub server_side: SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// A relay to the server node at `server`.
    pub fn new(server: SocketAddr) -> Relay {
        use std::net::UdpSocket;
        use std::sync::atomic::AtomicBool;
        use std::sync::{Arc, Mutex};
        let a = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let b = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let (cut, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let mut threads = Vec::new();
        for to_server in [true, false] {
            let (from, to) = if to_server { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) };
            let (cut, stop, client) = (cut.clone(), stop.clone(), client.clone());
            from.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, src)) = from.recv_from(&mut buf) else { continue };
                    if cut.load(Ordering::Relaxed) {
                        continue;
                    }
                    let dst = if to_server {
                        *client.lock().unwrap() = Some(src);
                        Some(server)
                    } else {
                        *client.lock().unwrap()
                    };
                    if let Some(dst) = dst {
                        let _ = to.send_to(&buf[..n], dst);
                    }
                }
            }));
        }
        let (client_side, server_side) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        Relay { client_side, server_side, cut, stop, threads }
    }

    /// Cuts the link (`true`) or heals it.
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
