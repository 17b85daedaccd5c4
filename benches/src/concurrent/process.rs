//! What the benchmark measures of its own process, and the load it runs
//! beside.

use std::time::Duration;

use datafusion::common::Result;

/// The process's CPU time so far (Linux: user + system, from
/// `/proc/self/stat`, in clock ticks of 10 ms).
pub(super) fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name, which is in parentheses.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the whole line.
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The process's resident set now (Linux), in bytes.
pub(super) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// Processes spinning on the CPU until dropped: beside the benchmark, not
/// in it, so that its CPU time per query stays its own.
pub(super) struct BusyLoops(Vec<std::process::Child>);

impl BusyLoops {
    pub(super) fn start(n: usize) -> Result<Self> {
        let children = (0..n)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self(children))
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
