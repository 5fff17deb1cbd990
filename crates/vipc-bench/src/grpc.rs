//! The gRPC baseline: a unary echo call with tonic (HTTP/2 over TCP on
//! loopback), each side on a current-thread tokio runtime.

use crate::error::{BenchError, Result};
use crate::pb::echo_client::EchoClient;
use crate::pb::echo_server::{Echo, EchoServer};
use crate::pb::Payload;
use crate::peer::{announce, exit_when_stdin_closes, PeerArgs};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

fn grpc_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Grpc(e.to_string())
}

struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        Ok(Response::new(req.into_inner()))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// The server peer (`grpc-echo`): serves until stdin closes.
pub fn server_peer(_a: &PeerArgs) -> Result<()> {
    let rt = runtime()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let incoming = tonic::transport::server::TcpIncoming::from_listener(listener, true, None).map_err(grpc_err)?;
        announce(&[("addr", addr.to_string())]);
        exit_when_stdin_closes();
        Server::builder()
            .add_service(EchoServer::new(EchoService))
            .serve_with_incoming(incoming)
            .await
            .map_err(grpc_err)
    })
}

/// A gRPC client with its own runtime.
#[derive(Debug)]
pub struct GrpcClient {
    rt: tokio::runtime::Runtime,
    client: EchoClient<Channel>,
}

impl GrpcClient {
    /// Connects to the server at `addr` (`IP:PORT`).
    pub fn connect(addr: &str) -> Result<GrpcClient> {
        let rt = runtime()?;
        let endpoint = Endpoint::from_shared(format!("http://{addr}")).map_err(grpc_err)?.tcp_nodelay(true);
        let channel = rt.block_on(endpoint.connect()).map_err(grpc_err)?;
        Ok(GrpcClient { rt, client: EchoClient::new(channel) })
    }

    /// One unary call carrying `data`.
    pub fn round_trip(&mut self, data: &[u8]) -> Result<Duration> {
        let req = Payload { data: data.to_vec() };
        let start = Instant::now();
        let reply = self.rt.block_on(self.client.echo(Request::new(req))).map_err(grpc_err)?;
        let t = start.elapsed();
        if reply.get_ref().data.len() != data.len() {
            return Err(grpc_err("reply of the wrong size"));
        }
        Ok(t)
    }
}
