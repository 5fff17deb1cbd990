//! What the examples share: reading `--name number` from the command line.

/// The number after `name` in `args`, or `default` without one.
pub fn arg(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or(format!("{name} wants a number")),
    }
}
