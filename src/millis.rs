//! Durations as whole milliseconds, the unit of the spec's settings (`SPROUT_AGENT_HOOK_TIMEOUT_MS`)
//! and of every record: one conversion, saturating, and the serde form of a [`Duration`] field
//! written as milliseconds.

use std::time::Duration;

/// `duration` in whole milliseconds; `u64::MAX` for one too long to count so.
pub(crate) fn of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A [`Duration`] field written as a number of milliseconds (`#[serde(with = "crate::millis")]`).
pub(crate) fn serialize<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(of(*duration))
}

/// A [`Duration`] field read from a number of milliseconds.
pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    <u64 as serde::Deserialize>::deserialize(deserializer).map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_too_long_to_count_saturates() {
        assert_eq!(of(Duration::from_millis(2_500)), 2_500);
        assert_eq!(of(Duration::from_micros(1_999)), 1);
        assert_eq!(of(Duration::MAX), u64::MAX);
    }
}
