//! How much memory a measurement may take: a GPU's free memory less a
//! reserve, and the host's available memory from /proc/meminfo.

/// NCCL's own buffers, the CUDA context and other processes.
pub fn usable_memory(free: u64) -> u64 {
    const RESERVE_AT_LEAST: u64 = 2 << 30;
    free.saturating_sub(RESERVE_AT_LEAST.max(free / 10))
}

/// MemAvailable of /proc/meminfo, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What host buffers may take: half the host's available memory (no limit
/// where /proc/meminfo cannot be read).
pub fn host_limit() -> u64 {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| parse_mem_available(&m)).map_or(u64::MAX, |a| a / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_memory_keeps_a_reserve() {
        assert_eq!(usable_memory(100 << 30), 90 << 30);
        assert_eq!(usable_memory(10 << 30), 8 << 30);
        assert_eq!(usable_memory(1 << 30), 0);
        assert_eq!(parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"), Some(2 << 20));
    }
}
