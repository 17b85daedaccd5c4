//! SplitMix64 (Steele, Lea and Flood, 2014): a tiny generator whose output
//! function mixes any 64-bit value into well-distributed bits. Deterministic
//! and seedable, with no dependency, so generated data never changes under us.

/// The increment between SplitMix64's states (2^64 divided by the golden ratio).
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: mixes `z` into well-distributed bits.
pub fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A pseudo-random value for `x`, without state: the value SplitMix64 seeded
/// with `x` would return first. Generators call it with a row number (salted
/// per column) so any row can be produced on its own, in any order.
pub fn mix(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN_GAMMA))
}

/// The SplitMix64 generator: a stream of pseudo-random values from a seed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first value is `mix(seed)`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        finalize(self.state)
    }

    /// A value in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `len` pseudo-random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 seeded with 0 (as in the paper's
    /// reference implementation): the data every suite generates rests on them.
    #[test]
    fn matches_the_reference_sequence() {
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn mix_is_the_first_value_of_a_seeded_generator() {
        for seed in [0, 1, 42, u64::MAX] {
            assert_eq!(mix(seed), SplitMix64::new(seed).next_u64());
        }
    }

    #[test]
    fn below_stays_below() {
        let mut rng = SplitMix64::new(7);
        assert!((0..1000).all(|_| rng.below(10) < 10));
        assert_eq!(rng.below(0), 0);
    }
}
