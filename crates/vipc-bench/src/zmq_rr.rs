//! The ZeroMQ baseline: REQ/REP over TCP on loopback (libzmq from Debian).

use crate::error::{BenchError, Result};
use crate::peer::{announce, exit_when_stdin_closes, PeerArgs};
use std::time::{Duration, Instant};

/// The REP peer (`zmq-rep`): echoes every request until stdin closes.
pub fn rep_peer(_a: &PeerArgs) -> Result<()> {
    let ctx = zmq::Context::new();
    let rep = ctx.socket(zmq::REP)?;
    rep.bind("tcp://127.0.0.1:*")?;
    let endpoint = rep.get_last_endpoint()?.map_err(|_| BenchError::Other("zeromq: endpoint is not UTF-8".into()))?;
    announce(&[("endpoint", endpoint)]);
    exit_when_stdin_closes();
    let mut msg = zmq::Message::new();
    loop {
        rep.recv(&mut msg, 0)?;
        rep.send(&*msg, 0)?;
    }
}

/// A REQ socket connected to the REP peer.
pub struct ReqClient {
    _ctx: zmq::Context,
    req: zmq::Socket,
    msg: zmq::Message,
}

impl std::fmt::Debug for ReqClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReqClient")
    }
}

impl ReqClient {
    /// Connects to `endpoint` (`tcp://127.0.0.1:PORT`).
    pub fn connect(endpoint: &str) -> Result<ReqClient> {
        let ctx = zmq::Context::new();
        let req = ctx.socket(zmq::REQ)?;
        req.set_rcvtimeo(10_000)?;
        req.set_linger(0)?;
        req.connect(endpoint)?;
        Ok(ReqClient { _ctx: ctx, req, msg: zmq::Message::new() })
    }

    /// One request/reply of `data`.
    pub fn round_trip(&mut self, data: &[u8]) -> Result<Duration> {
        let start = Instant::now();
        self.req.send(data, 0)?;
        self.req.recv(&mut self.msg, 0)?;
        let t = start.elapsed();
        if self.msg.len() != data.len() {
            return Err(BenchError::Other(format!("zeromq: {} bytes back for {}", self.msg.len(), data.len())));
        }
        Ok(t)
    }
}
