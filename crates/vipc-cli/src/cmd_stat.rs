//! `vipc stat`: a node's counters, from its kernel server.

use crate::error::CliResult;
use crate::opts::NodeArgs;
use crate::target::{exchange_error, Target};
use vipc::{services, Node};

/// Prints the counters of the node `target` lives on.
pub fn run(target: &str, args: &NodeArgs) -> CliResult<()> {
    let target = Target::parse(target, true)?;
    let node = Node::start(args.build()?)?;
    let p = node.attach()?;
    let host = target.resolve(&p)?.host();
    let fields = services::query_stats(&p, host).map_err(|e| exchange_error(&target, e))?;
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    say!("vipc stat: host {host:#06x} ({} counters)", fields.len());
    for (k, v) in &fields {
        say!("{k:<width$}  {v:>12}");
    }
    drop(p);
    node.shutdown();
    Ok(())
}
