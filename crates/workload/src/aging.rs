//! Aging profiles: every XID-age parameter scaled together by one ratio.
//!
//! `--aging 1:N` means that one XID consumed here stands for N in a PostgreSQL running with
//! its default ages: each age parameter is PostgreSQL's default divided by N, so a run that
//! consumes X XIDs ages the tables as X·N XIDs would age a production system. Anti-wraparound
//! vacuums, aggressive vacuums and freezing decisions then come at the same points of the
//! workload's life as they would there, only sooner.
//!
//! PostgreSQL does not accept every value: `autovacuum_freeze_max_age` is at least 100,000, and
//! at run time it also caps `vacuum_freeze_table_age` at 95% of `autovacuum_freeze_max_age` and
//! `vacuum_freeze_min_age` at half of it. settledb applies the same floor and caps, so the
//! largest ratio is 1:2000 on both targets.

use serde::Serialize;

/// PostgreSQL's defaults.
pub const DEFAULTS: [(&str, u64); 4] = [
    ("autovacuum_freeze_max_age", 200_000_000),
    ("vacuum_freeze_min_age", 50_000_000),
    ("vacuum_freeze_table_age", 150_000_000),
    ("vacuum_failsafe_age", 1_600_000_000),
];

/// PostgreSQL's defaults for MultiXact ages, scaled for a PostgreSQL target only (settledb
/// has no MultiXacts yet).
pub const MULTIXACT_DEFAULTS: [(&str, u64); 4] = [
    ("autovacuum_multixact_freeze_max_age", 400_000_000),
    ("vacuum_multixact_freeze_min_age", 5_000_000),
    ("vacuum_multixact_freeze_table_age", 150_000_000),
    ("vacuum_multixact_failsafe_age", 1_600_000_000),
];

/// Seed 000's autovacuum cadence on the orders tables, for `settle tpcc` at one warehouse.
///
/// The seed's log of `bmsql_oorder` shows removable cutoffs 243,783,407, 276,319,403,
/// 313,328,445, 354,149,019 and 401,955,979: 39.5M XIDs between autovacuums on average, so
/// [`SEED_AUTOVACUUMS_PER_FREEZE_MAX_AGE`] of them per `autovacuum_freeze_max_age` (200M), and
/// each vacuum ended within 1.5M XIDs of its cutoff (a few percent of the interval). Scaling
/// the XID ages alone does not keep that: the insert and dead-tuple thresholds are counted in
/// rows, which do not scale, and the cost delay in wall-clock time. With PostgreSQL's scale
/// factors (0.2) the orders tables of one warehouse were vacuumed 3 times per
/// `autovacuum_freeze_max_age`, falling to under 2 as they grew, and a cost-delayed vacuum of
/// `bmsql_order_line` lasted 40% of the interval. Halving both scale factors and running
/// autovacuum without the cost delay measured 5.4 to 5.5 autovacuums per
/// `autovacuum_freeze_max_age` on `bmsql_oorder` in the default run at 2,000/s (see `settle tpcc`'s report, which prints the achieved cadence beside the
/// seed's). Both targets get these settings.
pub const SEED_CADENCE: [(&str, &str); 3] = [
    ("autovacuum_vacuum_scale_factor", "0.1"),
    ("autovacuum_vacuum_insert_scale_factor", "0.1"),
    ("autovacuum_vacuum_cost_delay", "0"),
];

/// Autovacuums of `bmsql_oorder` per `autovacuum_freeze_max_age` in seed 000's log (200M over
/// a mean interval of 39.5M XIDs).
pub const SEED_AUTOVACUUMS_PER_FREEZE_MAX_AGE: f64 = 5.06;

/// The smallest `autovacuum_freeze_max_age` PostgreSQL accepts.
pub const MIN_FREEZE_MAX_AGE: u64 = 100_000;

/// One XID here stands for `ratio` XIDs of a default-configured PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Aging {
    pub ratio: u64,
}

impl std::str::FromStr for Aging {
    type Err = String;

    /// `1:N` (or just `N`).
    fn from_str(s: &str) -> Result<Aging, String> {
        let n = match s.split_once(':') {
            Some((one, n)) if one.trim() == "1" => n,
            Some(_) => return Err(format!("aging {s:?}: expected 1:N")),
            None => s,
        };
        let ratio: u64 = n.trim().parse().map_err(|_| format!("aging {s:?}: {n:?} is not a whole number"))?;
        let max = DEFAULTS[0].1 / MIN_FREEZE_MAX_AGE;
        if ratio == 0 || ratio > max {
            return Err(format!(
                "aging {s:?}: the ratio must be between 1 and {max} (autovacuum_freeze_max_age is at least {MIN_FREEZE_MAX_AGE})"
            ));
        }
        Ok(Aging { ratio })
    }
}

impl std::fmt::Display for Aging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "1:{}", self.ratio)
    }
}

impl Aging {
    /// The scaled XID-age settings, as (name, value).
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        DEFAULTS.iter().map(|&(name, v)| (name, (v / self.ratio).to_string())).collect()
    }

    /// The scaled MultiXact-age settings (PostgreSQL targets).
    pub fn multixact_settings(&self) -> Vec<(&'static str, String)> {
        // PostgreSQL's floor for autovacuum_multixact_freeze_max_age is 10,000.
        MULTIXACT_DEFAULTS
            .iter()
            .map(|&(name, v)| {
                let scaled = v / self.ratio;
                let floor = if name == "autovacuum_multixact_freeze_max_age" { 10_000 } else { 0 };
                (name, scaled.max(floor).to_string())
            })
            .collect()
    }

    /// The scaled `autovacuum_freeze_max_age`.
    pub fn freeze_max_age(&self) -> u64 {
        DEFAULTS[0].1 / self.ratio
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_every_age_by_the_ratio() {
        let a: Aging = "1:1000".parse().unwrap();
        let s = a.settings();
        assert_eq!(s[0], ("autovacuum_freeze_max_age", "200000".to_string()));
        assert_eq!(s[1], ("vacuum_freeze_min_age", "50000".to_string()));
        assert_eq!(s[2], ("vacuum_freeze_table_age", "150000".to_string()));
        assert_eq!(s[3], ("vacuum_failsafe_age", "1600000".to_string()));
        assert_eq!(a.to_string(), "1:1000");
    }

    #[test]
    fn refuses_ratios_postgres_cannot_follow() {
        assert!("1:2000".parse::<Aging>().is_ok());
        assert!("1:2001".parse::<Aging>().is_err());
        assert!("2:100".parse::<Aging>().is_err());
        assert!("1:0".parse::<Aging>().is_err());
        assert!("x".parse::<Aging>().is_err());
        assert_eq!("50".parse::<Aging>().unwrap().ratio, 50);
        // Every scaled setting is one settledb accepts.
        let a: Aging = "1:2000".parse().unwrap();
        let mut c = settledb::Config::default();
        for (k, v) in a.settings() {
            c.set(k, &v).unwrap();
        }
    }
}
