//! `vipc::within`: a deadline around any block, on real nodes.

mod common;
use common::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vipc::within;

const LIMIT: Duration = Duration::from_millis(60);

#[test]
fn a_remote_send_nobody_answers_fails_at_the_deadline_and_can_be_retried() {
    let nodes = cluster(2);
    let (go, answer) = mpsc::channel::<()>();
    let (server, thread) = nodes[0]
        .spawn(move |p| -> Result<(), vipc::Error> {
            let mut m = [0u8; 32];
            let c = p.receive(&mut m)?; // the first request: answered only after the client gave up
            answer.recv().unwrap();
            let late = p.reply(&m, c).unwrap_err();
            assert_eq!(late.protocol(), Some(&vipc::ProtocolError::NotAwaitingReply(c)));
            let c = p.receive(&mut m)?; // the retry: answered at once
            m[0] += 1;
            p.reply(&m, c)
        })
        .unwrap();
    let me = nodes[1].attach().unwrap();
    let mut msg = [0u8; 32];
    let t = Instant::now();
    let e = within(LIMIT, || me.send(&mut msg, server)).unwrap_err();
    let took = t.elapsed();
    assert!(e.is_deadline(), "{e}");
    assert!(took >= LIMIT && took < LIMIT + Duration::from_millis(500), "took {took:?}");
    std::thread::sleep(Duration::from_millis(50)); // the Cancel reaches the server's node
    go.send(()).unwrap();
    msg[0] = 7;
    within(Duration::from_secs(5), || me.send(&mut msg, server)).unwrap();
    assert_eq!(msg[0], 8);
    thread.join().unwrap().unwrap();
    assert_eq!(nodes[1].stats().deadlines, 1);
}

#[test]
fn every_call_inside_shares_one_deadline() {
    let nodes = cluster(1);
    let me = nodes[0].attach().unwrap();
    let mut msg = [0u8; 32];
    let t = Instant::now();
    let (first, second) = within(LIMIT, || (me.receive(&mut msg), me.receive(&mut msg)));
    assert!(first.unwrap_err().is_deadline());
    assert!(second.unwrap_err().is_deadline(), "the second call finds the deadline passed");
    assert!(t.elapsed() < LIMIT + Duration::from_millis(500));
    // GetReply's own limit is capped too.
    let t = Instant::now();
    let r = within(LIMIT, || me.get_reply(Duration::from_secs(10)));
    assert!(matches!(r, Err(vipc::Error::Protocol(vipc::ProtocolError::NoGroupSend))), "no group send: {r:?}");
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_call_that_completes_in_time_is_untouched() {
    let nodes = cluster(2);
    let (server, thread) = nodes[0]
        .spawn(|p| -> Result<(), vipc::Error> {
            for _ in 0..100 {
                let mut m = [0u8; 32];
                let c = p.receive(&mut m)?;
                p.reply(&m, c)?;
            }
            Ok(())
        })
        .unwrap();
    let me = nodes[1].attach().unwrap();
    within(Duration::from_secs(10), || {
        for i in 0..100u8 {
            let mut m = [i; 32];
            me.send(&mut m, server).unwrap();
            assert_eq!(m[0], i);
        }
    });
    thread.join().unwrap().unwrap();
    assert_eq!(nodes[1].stats().deadlines, 0);
}
