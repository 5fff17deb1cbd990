//! The condvar baseline: a round trip between two threads of one process
//! handing a token back and forth through a mutex and two condition variables.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    /// 0 idle, 1 request posted, 2 answer posted, 3 stop.
    state: Mutex<u8>,
    to_server: Condvar,
    to_client: Condvar,
}

/// A server thread answering hand-offs; stopped when dropped.
pub struct HandOff {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HandOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandOff")
    }
}

fn lock(m: &Mutex<u8>) -> std::sync::MutexGuard<'_, u8> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HandOff {
    /// Starts the answering thread.
    pub fn start() -> HandOff {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            let mut st = lock(&s.state);
            loop {
                while *st == 0 || *st == 2 {
                    st = s.to_server.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if *st == 3 {
                    return;
                }
                *st = 2;
                s.to_client.notify_one();
            }
        });
        HandOff { shared, thread: Some(thread) }
    }

    /// One round trip: post a request, wait for the answer.
    pub fn round_trip(&self) -> Duration {
        let s = &self.shared;
        let start = Instant::now();
        let mut st = lock(&s.state);
        *st = 1;
        s.to_server.notify_one();
        while *st != 2 {
            st = s.to_client.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        *st = 0;
        drop(st);
        start.elapsed()
    }
}

impl Drop for HandOff {
    fn drop(&mut self) {
        *lock(&self.shared.state) = 3;
        self.shared.to_server.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_complete() {
        let h = super::HandOff::start();
        for _ in 0..100 {
            assert!(h.round_trip() < std::time::Duration::from_secs(5));
        }
    }
}
