//! `vipc hosts`: the alive-host table (I-Am-Here), of this command's own node
//! or of another node through its kernel server.

use crate::error::CliResult;
use crate::opts::NodeArgs;
use crate::target::{exchange_error, Target};
use std::time::Duration;
use vipc::{services, AliveHosts, Node};

/// Prints the alive-host table: `target`'s node's, or — without a target —
/// the one this command's node builds while it listens for `listen`.
pub fn run(target: Option<&str>, listen: Duration, args: &NodeArgs) -> CliResult<()> {
    let node = Node::start(args.build()?)?;
    let (whose, table) = match target {
        None => {
            // Our HELLO makes every live host answer within 10 ms.
            std::thread::sleep(listen);
            (format!("host {:#06x} (this command)", node.host_id()), node.alive_hosts()?)
        }
        Some(t) => {
            let target = Target::parse(t, true)?;
            let p = node.attach()?;
            let host = target.resolve(&p)?.host();
            let table = services::query_hosts(&p, host).map_err(|e| exchange_error(&target, e))?;
            (format!("host {host:#06x}"), table)
        }
    };
    print_table(&whose, &table);
    node.shutdown();
    Ok(())
}

fn print_table(whose: &str, t: &AliveHosts) {
    let alive = t.hosts().count();
    say!("vipc hosts: {whose} hears {alive} host(s) (table sequence number {})", t.seq);
    say!("{:>4}  {:>6}  address", "row", "host");
    for (row, h) in t.rows.iter().enumerate() {
        if let Some(h) = h {
            say!("{row:>4}  {:#06x}  {}", h.host, h.addr);
        }
    }
}
