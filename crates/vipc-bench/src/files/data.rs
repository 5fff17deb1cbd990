//! The data the workloads run on: one large file and a tree of small files,
//! written once per run into the exported directory.

use crate::error::Result;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Name of the large file inside the export.
pub const BIG: &str = "big.bin";
/// Name of the tree inside the export.
pub const TREE: &str = "tree";
/// Files per directory of the tree.
pub const PER_DIR: usize = 100;

/// Writes `size` bytes of non-repeating data to `path` (each MiB differs, so
/// nothing along the way can deduplicate or compress it away).
pub fn write_big(path: &Path, size: u64) -> Result<()> {
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let mut left = size;
    let mut i: u64 = 0;
    while left > 0 {
        block[..8].copy_from_slice(&i.to_le_bytes());
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
        i += 1;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

/// Writes a tree of `files` small files (0–4 KB, [`PER_DIR`] per directory)
/// under `root`, like a source tree.
pub fn write_tree(root: &Path, files: usize) -> Result<()> {
    let body: Vec<u8> = (0..4096u32).map(|i| b"abcdefghijklmnopqrstuvwxyz\n"[(i % 27) as usize]).collect();
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / PER_DIR));
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let len = (i * 397) % 4096;
        std::fs::write(dir.join(format!("f{i:06}.txt")), &body[..len])?;
    }
    Ok(())
}

/// `tar cf OUT -C DIR NAME`: the archive the untar workload extracts.
pub fn tarball(dir: &Path, name: &str, out: &Path) -> Result<PathBuf> {
    let st = Command::new("tar").arg("cf").arg(out).arg("-C").arg(dir).arg(name).status()?;
    if !st.success() {
        return Err(format!("tar cf {} failed: {st}", out.display()).into());
    }
    Ok(out.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_file_has_the_size_and_distinct_blocks() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b");
        write_big(&p, (2 << 20) + 5).unwrap();
        let v = std::fs::read(&p).unwrap();
        assert_eq!(v.len(), (2 << 20) + 5);
        assert_ne!(v[..1 << 20], v[1 << 20..2 << 20]);
    }

    #[test]
    fn tree_has_the_files() {
        let d = tempfile::tempdir().unwrap();
        write_tree(d.path(), 250).unwrap();
        let dirs = std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(dirs, 3);
        let n: usize =
            std::fs::read_dir(d.path()).unwrap().map(|e| std::fs::read_dir(e.unwrap().path()).unwrap().count()).sum();
        assert_eq!(n, 250);
    }
}
