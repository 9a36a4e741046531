//! FlashAttention-2's launch over decodes alone: how many thread blocks it
//! starts and how many keys the longest of them reads, from the library's
//! own rules (its `flash_api.cpp`), so that a decode's attention is priced
//! as waves of blocks over the GPU's SMs rather than as one stream.
//!
//! With one new token a sequence and more query heads than KV heads, the
//! library folds each KV head's query heads into one block's rows
//! (`seqlenq_ngroups_swapped`): a sequence gives a unit of work per KV head.
//! Too few units to fill the GPU, it splits each unit's keys over several
//! blocks (its split-KV kernel, plus a kernel combining the pieces); enough,
//! it runs its forward kernel, a block a unit.

/// Keys one split-KV block takes at a time (`block_n` for a head of 65 to
/// 128 dimensions, flash_api.cpp `set_params_splitkv`).
const KEY_BLOCK: u64 = 128;

/// Most splits the library chooses (`set_params_splitkv`).
const MOST_SPLITS: u64 = 128;

/// Blocks an SM holds that the library's split rule assumes (it doubles
/// the SM count "to hard-code the fact that we're using 128 threads per
/// block", `set_params_splitkv`).
const RULE_BLOCKS_PER_SM: u64 = 2;

/// What FlashAttention's launch over decodes alone depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeLaunch {
    /// Sequences times KV heads on one GPU: one block each, unsplit.
    pub units: u64,
    /// Cached keys a sequence reads, on average (its context and its new token).
    pub mean_keys: f64,
    /// Keys of the longest sequence.
    pub longest_keys: u64,
    /// Keys the library is told a sequence may have (`max_seqlen_k`): how
    /// its splits divide them.
    pub key_limit: u64,
    /// Bytes a block reads for each key (K and V of one head).
    pub key_bytes: f64,
}

/// Which of the library's kernels runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeKernel {
    /// Each unit's keys split over several blocks, and a combining kernel.
    SplitKv,
    /// One block a unit.
    Forward,
}

impl DecodeKernel {
    /// The key of its own measured rates.
    pub fn kind(self) -> &'static str {
        match self {
            DecodeKernel::SplitKv => "flash_varlen_splitkv",
            DecodeKernel::Forward => "flash_varlen_decodes",
        }
    }
}

/// The blocks of one launch: how many, and the bytes they read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blocks {
    pub kernel: DecodeKernel,
    /// Blocks that read keys (a split past a sequence's last key ends at once).
    pub working: u64,
    /// Bytes a working block reads, on average.
    pub mean_bytes: f64,
    /// Bytes the longest block reads.
    pub longest_bytes: f64,
}

impl Blocks {
    /// Rounds of `slots` blocks at once the working blocks take.
    pub fn waves(&self, slots: f64) -> f64 {
        (self.working as f64 / slots.max(1.0)).ceil().max(1.0)
    }

    /// Bytes the busiest of `slots` block slots reads before the launch
    /// ends: average blocks in every wave but the last, whose longest block
    /// it takes.
    pub fn bytes_a_slot(&self, slots: f64) -> f64 {
        (self.waves(slots) - 1.0) * self.mean_bytes + self.longest_bytes
    }
}

impl DecodeLaunch {
    /// The library's choice of kernel and splits on a GPU of `sms` SMs.
    pub fn blocks(&self, sms: u64) -> Blocks {
        let key_blocks = self.key_limit.max(self.longest_keys).div_ceil(KEY_BLOCK).max(1);
        let splits = splits(self.units, RULE_BLOCKS_PER_SM * sms, key_blocks);
        let (kernel, keys_a_block) = if splits == 1 && split_rule_fills(self.units, RULE_BLOCKS_PER_SM * sms) {
            (DecodeKernel::Forward, self.longest_keys)
        } else {
            (DecodeKernel::SplitKv, key_blocks.div_ceil(splits) * KEY_BLOCK)
        };
        let working_a_unit = (self.mean_keys / keys_a_block as f64).ceil().max(1.0);
        Blocks {
            kernel,
            working: self.units * working_a_unit as u64,
            mean_bytes: self.mean_keys / working_a_unit * self.key_bytes,
            longest_bytes: keys_a_block.min(self.longest_keys) as f64 * self.key_bytes,
        }
    }
}

/// Whether `units` blocks nearly fill `slots`: then the library does not split.
fn split_rule_fills(units: u64, slots: u64) -> bool {
    units as f64 >= 0.8 * slots as f64
}

/// The library's number of splits (`num_splits_heuristic`): the fewest
/// that reach 85% of the best share of full waves, among split counts that
/// change how many key blocks each split takes.
fn splits(units: u64, slots: u64, key_blocks: u64) -> u64 {
    if split_rule_fills(units, slots) {
        return 1;
    }
    let most = MOST_SPLITS.min(slots).min(key_blocks);
    let eligible = |s: u64| s == 1 || key_blocks.div_ceil(s) != key_blocks.div_ceil(s - 1);
    let wave_share = |s: u64| {
        let waves = (units * s) as f64 / slots as f64;
        waves / waves.ceil()
    };
    let best = (1..=most).filter(|&s| eligible(s)).map(wave_share).fold(0.0, f64::max);
    (1..=most).find(|&s| eligible(s) && wave_share(s) >= 0.85 * best).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200_SMS: u64 = 132;

    /// Llama-3.1-8B's decodes at TP=1: 8 KV heads of 128 dimensions, bf16.
    fn decodes(sequences: u64, keys: u64) -> DecodeLaunch {
        DecodeLaunch { units: sequences * 8, mean_keys: keys as f64, longest_keys: keys, key_limit: keys, key_bytes: 512.0 }
    }

    #[test]
    fn the_library_splits_below_27_sequences_of_8_kv_heads_on_132_sms() {
        // Measured (engine-kernels.jsonl, decode_attention): the split-KV
        // kernel ran at 25 sequences, the forward kernel from 28.
        assert_eq!(decodes(25, 1101).blocks(H200_SMS).kernel, DecodeKernel::SplitKv);
        assert_eq!(decodes(26, 1101).blocks(H200_SMS).kernel, DecodeKernel::SplitKv);
        assert_eq!(decodes(27, 1101).blocks(H200_SMS).kernel, DecodeKernel::Forward);
    }

    #[test]
    fn the_split_count_is_the_fewest_reaching_85_percent_of_the_best_wave_share() {
        // 8 units on 264 slots fill a wave best with every split the keys
        // allow: 18 key blocks, and 16 or 17 splits take two blocks each, as
        // 10 to 17 do, so 18 is the first that beats 9.
        assert_eq!(splits(8, 264, 18), 18);
        // 64 units: 4 splits fill 0.97 of a wave.
        assert_eq!(splits(64, 264, 18), 4);
        assert_eq!(splits(216, 264, 18), 1);
    }

    #[test]
    fn a_split_past_a_sequences_last_key_does_no_work() {
        // 16 sequences of 1,101 keys told 2,304: two splits of 1,152 keys,
        // the second of each empty.
        let launch = DecodeLaunch { key_limit: 2304, ..decodes(16, 1101) };
        let blocks = launch.blocks(H200_SMS);
        assert_eq!((blocks.kernel, blocks.working), (DecodeKernel::SplitKv, 128));
        assert_eq!(blocks.longest_bytes, 1101.0 * 512.0);
    }

    #[test]
    fn the_forward_kernels_longest_block_reads_the_longest_sequence_whatever_the_library_is_told() {
        let told_more = DecodeLaunch { key_limit: 4608, ..decodes(40, 2301) };
        assert_eq!(told_more.blocks(H200_SMS).longest_bytes, 2301.0 * 512.0);
    }

    #[test]
    fn the_forward_kernel_runs_a_block_a_unit_in_waves() {
        let blocks = decodes(40, 2301).blocks(H200_SMS);
        assert_eq!((blocks.kernel, blocks.working), (DecodeKernel::Forward, 320));
        assert_eq!(blocks.waves(132.0), 3.0);
        assert_eq!(decodes(48, 2301).blocks(H200_SMS).waves(132.0), 3.0, "as many waves as 40 sequences");
    }

    #[test]
    fn the_busiest_slot_reads_average_blocks_then_the_longest() {
        // 40 sequences averaging 1,000 keys, the longest 2,301: three waves.
        let varied = DecodeLaunch { mean_keys: 1000.0, ..decodes(40, 2301) };
        assert_eq!(varied.blocks(H200_SMS).bytes_a_slot(132.0), (2.0 * 1000.0 + 2301.0) * 512.0);
        // Alike sequences: every wave as long as the last.
        assert_eq!(decodes(40, 2301).blocks(H200_SMS).bytes_a_slot(132.0), 3.0 * 2301.0 * 512.0);
    }
}
