//! The simulated application's own 32-byte messages: a client's request and
//! a server's reply. Each carries the request id and a checksum, so a
//! corrupted, misrouted or mismatched message is recognised.

use vipc_engine::{Access, Message, Pid};

const REQUEST_TAG: u8 = 0xA5;
const REPLY_TAG: u8 = 0x5A;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 31;
    x = x.wrapping_mul(0x7FB5_D329_728E_A185);
    x ^= x >> 27;
    x = x.wrapping_mul(0x81DA_DEF4_BC2D_D44D);
    x ^ (x >> 33)
}

/// A client's request as it travels in the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Unique id of the request within a run.
    pub rid: u64,
    /// Forwards still to be made before a server executes it.
    pub hops: u8,
    /// Sent with `SendOptions::idempotent`.
    pub idempotent: bool,
    /// Access granted to the segment.
    pub access: Access,
    /// Size of the segment (0: none).
    pub seg_len: u32,
}

impl Request {
    fn flags(&self) -> u8 {
        self.idempotent as u8 | (self.access.read as u8) << 1 | (self.access.write as u8) << 2
    }

    fn checksum(&self) -> u64 {
        mix(self.rid ^ (self.hops as u64) << 56 ^ (self.flags() as u64) << 48 ^ (self.seg_len as u64) << 8)
    }

    /// The message bytes.
    pub fn encode(&self) -> Message {
        let mut m = [0u8; 32];
        m[0..8].copy_from_slice(&self.rid.to_be_bytes());
        m[8] = REQUEST_TAG;
        m[9] = self.hops;
        m[10] = self.flags();
        m[12..16].copy_from_slice(&self.seg_len.to_be_bytes());
        m[16..24].copy_from_slice(&self.checksum().to_be_bytes());
        m
    }

    /// Decodes a message; `None` if it is not an intact request.
    pub fn decode(m: &Message) -> Option<Request> {
        if m[8] != REQUEST_TAG || m[11] != 0 || m[10] & !7 != 0 || m[24..] != [0; 8] {
            return None;
        }
        let r = Request {
            rid: u64::from_be_bytes(m[0..8].try_into().ok()?),
            hops: m[9],
            idempotent: m[10] & 1 != 0,
            access: Access { read: m[10] & 2 != 0, write: m[10] & 4 != 0 },
            seg_len: u32::from_be_bytes(m[12..16].try_into().ok()?),
        };
        (u64::from_be_bytes(m[16..24].try_into().ok()?) == r.checksum()).then_some(r)
    }
}

/// How a server fared with a request, reported in its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every planned operation succeeded.
    Ok = 0,
    /// A move failed (the client went away or the network failed meanwhile).
    MoveFailed = 1,
    /// The server could not forward the request and answers itself.
    ForwardFailed = 2,
    /// The reply segment was refused (it is dropped from the reply).
    ReplySegmentRefused = 3,
}

/// A server's reply as it travels in the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request answered.
    pub rid: u64,
    /// Outcome.
    pub status: Status,
    /// The server that executed the request.
    pub executor: Pid,
}

impl Reply {
    /// The function of the request id a correct reply carries.
    pub fn answer(rid: u64) -> u64 {
        mix(rid ^ 0xD1B5_4A32_D192_ED03)
    }

    /// The message bytes.
    pub fn encode(&self) -> Message {
        let mut m = [0u8; 32];
        m[0..8].copy_from_slice(&self.rid.to_be_bytes());
        m[8] = REPLY_TAG;
        m[9] = self.status as u8;
        m[12..16].copy_from_slice(&self.executor.0.to_be_bytes());
        m[16..24].copy_from_slice(&Self::answer(self.rid).to_be_bytes());
        m
    }

    /// Decodes a message; `None` if it is not an intact reply.
    pub fn decode(m: &Message) -> Option<Reply> {
        if m[8] != REPLY_TAG || m[10..12] != [0, 0] || m[24..] != [0; 8] {
            return None;
        }
        let rid = u64::from_be_bytes(m[0..8].try_into().ok()?);
        if u64::from_be_bytes(m[16..24].try_into().ok()?) != Self::answer(rid) {
            return None;
        }
        let status = match m[9] {
            0 => Status::Ok,
            1 => Status::MoveFailed,
            2 => Status::ForwardFailed,
            3 => Status::ReplySegmentRefused,
            _ => return None,
        };
        Some(Reply { rid, status, executor: Pid(u32::from_be_bytes(m[12..16].try_into().ok()?)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_rejects_corruption() {
        let r = Request { rid: 77, hops: 2, idempotent: true, access: Access::READ_WRITE, seg_len: 65536 };
        let m = r.encode();
        assert_eq!(Request::decode(&m), Some(r));
        for i in 0..32 {
            let mut bad = m;
            bad[i] ^= 0x10;
            assert_eq!(Request::decode(&bad), None, "flip in byte {i} undetected");
        }
        // A reply is not a request.
        let rep = Reply { rid: 77, status: Status::Ok, executor: Pid::new(1, 1) };
        assert_eq!(Request::decode(&rep.encode()), None);
    }

    #[test]
    fn reply_round_trips_and_rejects_corruption() {
        let r = Reply { rid: 5, status: Status::MoveFailed, executor: Pid::new(3, 9) };
        let m = r.encode();
        assert_eq!(Reply::decode(&m), Some(r));
        let mut bad = m;
        bad[3] ^= 1; // another request id: the answer no longer matches
        assert_eq!(Reply::decode(&bad), None);
        let req = Request { rid: 5, hops: 0, idempotent: false, access: Access::default(), seg_len: 0 };
        assert_eq!(Reply::decode(&req.encode()), None);
    }
}
