//! Dates and times (UTC) from the system clock, for the provenance of fitted
//! models and measurements. Owns no other logic.

use std::time::{SystemTime, UNIX_EPOCH};

/// A moment in UTC, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcTime {
    pub fn now() -> UtcTime {
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        UtcTime::from_unix_seconds(seconds)
    }

    pub fn from_unix_seconds(seconds: u64) -> UtcTime {
        let days = (seconds / 86_400) as i64;
        let of_day = seconds % 86_400;
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z - era * 146_097;
        let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_index = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * month_index + 2) / 5 + 1;
        let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        UtcTime {
            year,
            month: month as u32,
            day: day as u32,
            hour: (of_day / 3600) as u32,
            minute: (of_day / 60 % 60) as u32,
            second: (of_day % 60) as u32,
        }
    }

    /// YYYY-MM-DD.
    pub fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// RFC 3339: YYYY-MM-DDTHH:MM:SSZ.
    pub fn rfc3339(&self) -> String {
        format!("{}T{:02}:{:02}:{:02}Z", self.date(), self.hour, self.minute, self.second)
    }
}

/// Today's date (UTC) as YYYY-MM-DD.
pub fn today() -> String {
    UtcTime::now().date()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_from_unix_seconds() {
        assert_eq!(UtcTime::from_unix_seconds(0).rfc3339(), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC, a leap day.
        assert_eq!(UtcTime::from_unix_seconds(951_827_696).rfc3339(), "2000-02-29T12:34:56Z");
        // 2026-11-29 09:59:00 UTC.
        assert_eq!(UtcTime::from_unix_seconds(1_795_946_340).rfc3339(), "2026-11-29T09:59:00Z");
    }
}
