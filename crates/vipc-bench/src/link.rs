//! Item `ipc/link`: bulk transfer over a real link, not loopback. Two
//! network namespaces joined by a veth pair with Ethernet's 1,500-byte MTU,
//! as two machines on one switch: the bench server (and a TCP sink) in
//! one, a client (peer `link-client`) in the other. Nodes use their default
//! packet size, 1,472 bytes, so a move is many datagrams — where loopback
//! carries it in a few 64 KiB ones — and the figures show what a cluster
//! gets: MoveTo and MoveFrom of 1 MiB and 16 MiB, the same of 1 MiB between
//! nodes with a cluster key (a second server), and a remote-memory read of
//! 1 MiB (an `rmem-owner` peer's segment), against TCP bulk over the same
//! link, interleaved in one run. Needs root (skipped with the reason
//! elsewhere).

use crate::error::Result;
use crate::ipc::{label, mbps, server_time, Ctx};
use crate::netns::{in_namespace, ip, Namespaces, Setup};
use crate::peer::{announce, parse_fields, say, stdin_lines, Peer, PeerArgs};
use crate::probe::{interleave, Probe};
use crate::tcp::TcpClient;
use crate::vserver::{self, request};
use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use vipc::{Access, Node, NodeConfig, Pid, SegmentRef};

/// The two ends' addresses on the link.
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
/// Transfer sizes measured.
const SIZES: [usize; 2] = [1 << 20, 16 << 20];
/// Bytes of the remote-memory read and of the keyed moves (one of the sizes: their TCP baseline).
const ONE_SIZE: usize = 1 << 20;

/// The two namespaces and the link between them, removed when dropped.
struct Link {
    server_ns: String,
    client_ns: String,
    _namespaces: Namespaces,
}

impl Link {
    fn create(exe: &crate::peer::PeerExe) -> std::result::Result<Link, Setup> {
        let mut namespaces = Namespaces::new(exe, format!("vb{}l-", std::process::id()))?;
        let (s, c) = (namespaces.add("s")?, namespaces.add("c")?);
        ip(&["-n", &s, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &c])
            .map_err(Setup::Failed)?;
        for (ns, addr) in [(&s, SERVER_IP), (&c, CLIENT_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]).map_err(Setup::Failed)?;
            ip(&["-n", ns, "link", "set", "eth0", "up"]).map_err(Setup::Failed)?;
        }
        Ok(Link { server_ns: s, client_ns: c, _namespaces: namespaces })
    }
}

/// A node on the link: a fixed host id, the given static peers, the
/// default packet size (an Ethernet frame's payload).
pub fn link_config(host: vipc::HostId, listen: SocketAddr, peers: Vec<SocketAddr>) -> NodeConfig {
    NodeConfig::fixed(host, listen, peers)
}

/// Runs the item.
pub fn link(ctx: &mut Ctx<'_>) -> Result<()> {
    let link = match Link::create(&ctx.exe) {
        Ok(l) => l,
        Err(Setup::Unavailable(why)) => {
            eprintln!("bench: ipc/link skipped: {why}");
            ctx.out.note(format!("ipc/link: skipped ({why})"));
            return Ok(());
        }
        Err(Setup::Failed(e)) => return Err(format!("setting up the link: {e}").into()),
    };
    let in_server = in_namespace(&ctx.exe, &link.server_ns);
    let host = ctx.host().to_string();
    let listen = SocketAddr::from((SERVER_IP, 0)).to_string();
    let server = Peer::spawn(&in_server, "vipc-server", &["--host".into(), host, "--listen".into(), listen.clone()])?;
    let tcp = Peer::spawn(&in_server, "tcp-echo", &["--listen".into(), listen.clone()])?;
    let owner_host = ctx.host().to_string();
    let owner =
        Peer::spawn(&in_server, "rmem-owner", &["--host".into(), owner_host, "--listen".into(), listen.clone()])?;
    let keyed_host = ctx.host().to_string();
    let keyed = Peer::spawn(
        &in_server,
        "vipc-server",
        &["--host".into(), keyed_host, "--listen".into(), listen, "--keyed".into()],
    )?;
    let (rounds, n, warm) = ctx.scale(5, 8, 2);
    let args = [
        ("host", ctx.host().to_string()),
        ("server-addr", server.field("addr")?.to_string()),
        ("server-pid", server.field("pid")?.to_string()),
        ("tcp-addr", tcp.field("addr")?.to_string()),
        ("owner-addr", owner.field("addr")?.to_string()),
        ("segment", owner.field("name")?.to_string()),
        ("keyed-host", ctx.host().to_string()),
        ("keyed-addr", keyed.field("addr")?.to_string()),
        ("keyed-pid", keyed.field("pid")?.to_string()),
        ("rounds", rounds.to_string()),
        ("per-round", n.to_string()),
        ("warm", warm.to_string()),
    ];
    let args: Vec<String> = args.iter().flat_map(|(k, v)| [format!("--{k}"), v.clone()]).collect();
    let mut client = Peer::spawn(&in_namespace(&ctx.exe, &link.client_ns), "link-client", &args)?;
    client.send_line("RUN")?;
    let line = client.read_line(Duration::from_secs(600))?;
    let fields = parse_fields(line.strip_prefix("RESULT").ok_or_else(|| format!("link-client: {line}"))?);
    let get = |k: &str| -> Result<f64> {
        fields.get(k).and_then(|v| v.parse().ok()).ok_or_else(|| format!("link-client: no {k} in {line:?}").into())
    };
    for size in SIZES {
        let l = label(size);
        let tcp = get(&format!("tcp_bulk_{l}"))?;
        for dir in ["moveto", "movefrom"] {
            ctx.rec(
                &format!("link_{dir}_{l}"),
                get(&format!("{dir}_{l}"))?,
                "MB/s",
                &format!("link_tcp_bulk_{l}"),
                tcp,
            );
        }
    }
    let l = label(ONE_SIZE);
    let tcp = get(&format!("tcp_bulk_{l}"))?;
    for name in [format!("rmem_read_{l}"), format!("keyed_moveto_{l}"), format!("keyed_movefrom_{l}")] {
        ctx.rec(&format!("link_{name}"), get(&name)?, "MB/s", &format!("link_tcp_bulk_{l}"), tcp);
    }
    Ok(())
}

/// Peer `link-client --host H --server-addr A --server-pid P --tcp-addr T
/// --owner-addr O --segment NAME --keyed-host K --keyed-addr KA --keyed-pid
/// KP --rounds R --per-round N --warm W`: a node on the link's client end,
/// and a keyed one; at `RUN`, measures TCP bulk, MoveTo and MoveFrom of
/// each size, keyed ones of [`ONE_SIZE`] and a remote read of the owner's
/// segment, interleaved, and answers `RESULT NAME=MB/s …` (medians).
pub fn client_peer(a: &PeerArgs) -> Result<()> {
    let server: SocketAddr = a.get("server-addr")?;
    let to = Pid(a.get("server-pid")?);
    let peers = vec![server, a.get("owner-addr")?];
    let node = Node::start(link_config(a.get("host")?, SocketAddr::from((CLIENT_IP, 0)), peers))?;
    let p = node.attach()?;
    let segment = crate::rmem::unhex(&a.get::<String>("segment")?)?;
    let remote = node.import_segment(segment, Access::READ, Duration::from_secs(5))?;
    let anon = node.anonymous_segment(ONE_SIZE)?;
    let keyed_to = Pid(a.get("keyed-pid")?);
    let keyed_config = link_config(a.get("keyed-host")?, SocketAddr::from((CLIENT_IP, 0)), vec![a.get("keyed-addr")?]);
    let keyed_node = Node::start(vserver::keyed(keyed_config))?;
    let kp = keyed_node.attach()?;
    let tc = RefCell::new(TcpClient::connect(a.get("tcp-addr")?)?);
    let (rounds, n, warm): (usize, usize, usize) = (a.get("rounds")?, a.get("per-round")?, a.get("warm")?);
    let seg = RefCell::new(vec![0u8; SIZES[SIZES.len() - 1]]);
    announce(&[]);
    for line in stdin_lines() {
        if line != "RUN" {
            continue;
        }
        let mut probes = Vec::new();
        for size in SIZES {
            let tc = &tc;
            let l = label(size);
            probes.push(Probe::new(&format!("tcp_bulk_{l}"), n, move || Ok(mbps(size, tc.borrow_mut().bulk(size)?))));
            probes.extend(move_probes("", (&p, to), &seg, size, n));
        }
        probes.extend(move_probes("keyed_", (&kp, keyed_to), &seg, ONE_SIZE, n));
        let l = label(ONE_SIZE);
        let (remote, anon) = (&remote, &anon);
        probes.push(Probe::new(&format!("rmem_read_{l}"), n, move || {
            let t = std::time::Instant::now();
            remote.read(0, ONE_SIZE as u32, (anon, 0), false)?.wait(Duration::from_secs(5))?;
            Ok(mbps(ONE_SIZE, t.elapsed()))
        }));
        interleave(&mut probes, rounds, warm)?;
        let mut answer = String::from("RESULT");
        for probe in &probes {
            answer.push_str(&format!(" {}={:.1}", probe.name, probe.rounds.median()));
        }
        say(&answer);
    }
    Ok(())
}

/// Probes `{prefix}moveto_SIZE` and `{prefix}movefrom_SIZE`: the bench
/// server `to` moves `size` bytes into and out of `seg` for `p` (MB/s,
/// the server's time of the move).
fn move_probes<'a>(
    prefix: &str,
    (p, to): (&'a vipc::Process, Pid),
    seg: &'a RefCell<Vec<u8>>,
    size: usize,
    n: usize,
) -> [Probe<'a>; 2] {
    let l = label(size);
    [
        Probe::new(&format!("{prefix}moveto_{l}"), n, move || {
            let mut s = seg.borrow_mut();
            let msg = request(vserver::OP_MOVE_TO, size, 0);
            Ok(mbps(size, server_time(p, to, msg, Some(SegmentRef::Write(&mut s[..size])))?))
        }),
        Probe::new(&format!("{prefix}movefrom_{l}"), n, move || {
            let s = seg.borrow();
            let msg = request(vserver::OP_MOVE_FROM, size, 0);
            Ok(mbps(size, server_time(p, to, msg, Some(SegmentRef::Read(&s[..size])))?))
        }),
    ]
}
