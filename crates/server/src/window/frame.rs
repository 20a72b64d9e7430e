//! Window frames: which rows of its partition a window function sees from each row.
//!
//! A frame is `units BETWEEN start AND end` (PostgreSQL's `frame_extent` in `gram.y`,
//! `update_frameheadpos`/`update frametailpos` in `nodeWindowAgg.c`). With the partition's
//! rows in window order, numbered 0..len, and the current row's peers (rows equal to it in
//! the window's ORDER BY; every row when there is none) at `peers`:
//!
//! ```text
//!   ROWS    n PRECEDING  = i - n        n FOLLOWING  = i + n        CURRENT ROW = i
//!   RANGE   CURRENT ROW  = first peer (as a start), last peer (as an end)
//!   GROUPS  n PRECEDING  = first row of the peer group n groups back, n FOLLOWING the last
//!           row of the group n ahead; CURRENT ROW as RANGE
//!   UNBOUNDED PRECEDING  = 0            UNBOUNDED FOLLOWING = len - 1
//! ```
//!
//! clipped to the partition; a start after the end is an empty frame. The default frame,
//! `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`, is the partition's rows up to the
//! current row's last peer. RANGE with an offset (`RANGE 5 PRECEDING`, arithmetic on the
//! ORDER BY value) and `EXCLUDE` are not built.

use std::ops::Range;

use sqlparser::ast::{Expr, WindowFrame, WindowFrameBound, WindowFrameUnits};

use crate::error::SqlError;
use crate::expr::{eval, Env, Scope};
use crate::types::{Datum, SqlType};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    Rows,
    Range,
    Groups,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    UnboundedPreceding,
    Preceding(u64),
    CurrentRow,
    Following(u64),
    UnboundedFollowing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub units: Units,
    pub start: Bound,
    pub end: Bound,
}

/// Where the current row's peer groups are, for RANGE and GROUPS frames: the partition's
/// peer groups as the start of each (ascending, `starts[0] == 0`), and the group of the row.
pub struct Peers<'a> {
    pub starts: &'a [usize],
    pub group: usize,
}

impl Peers<'_> {
    /// The rows of peer group `g` (clamped to the groups there are).
    fn rows_of(&self, g: usize, len: usize) -> Range<usize> {
        let g = g.min(self.starts.len() - 1);
        self.starts[g]..self.starts.get(g + 1).copied().unwrap_or(len)
    }
}

impl Frame {
    /// `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`.
    pub const DEFAULT: Frame = Frame { units: Units::Range, start: Bound::UnboundedPreceding, end: Bound::CurrentRow };

    /// The frame a window clause gives (the default when it has none), its offsets evaluated
    /// (they may be `$n`, not columns), with PostgreSQL's errors. `order_columns` is the
    /// number of the window's ORDER BY items.
    pub fn from_ast(f: Option<&WindowFrame>, order_columns: usize, env: &mut dyn Env) -> Result<Frame, SqlError> {
        let Some(f) = f else { return Ok(Frame::DEFAULT) };
        let units = match f.units {
            WindowFrameUnits::Rows => Units::Rows,
            WindowFrameUnits::Range => Units::Range,
            WindowFrameUnits::Groups => Units::Groups,
        };
        let end_ast = f.end_bound.clone().unwrap_or(WindowFrameBound::CurrentRow);
        check_shape(&f.start_bound, &end_ast)?;
        let has_offset = |b: &WindowFrameBound| {
            matches!(b, WindowFrameBound::Preceding(Some(_)) | WindowFrameBound::Following(Some(_)))
        };
        if has_offset(&f.start_bound) || has_offset(&end_ast) {
            match units {
                Units::Range if order_columns != 1 => {
                    return Err(SqlError::new(
                        "42P20",
                        "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column",
                    ))
                }
                Units::Range => return Err(SqlError::unsupported("RANGE with offset PRECEDING/FOLLOWING")),
                Units::Groups if order_columns == 0 => {
                    return Err(SqlError::new("42P20", "GROUPS mode requires an ORDER BY clause"))
                }
                _ => {}
            }
        }
        let unit_name = match units {
            Units::Rows => "ROWS",
            Units::Range => "RANGE",
            Units::Groups => "GROUPS",
        };
        let start = bound(&f.start_bound, "starting", unit_name, env)?;
        let end = bound(&end_ast, "ending", unit_name, env)?;
        Ok(Frame { units, start, end })
    }

    /// The frame of the row at `i` of a partition of `len` rows, as a range of positions
    /// (empty when the frame holds no row). `peers` is needed for RANGE and GROUPS.
    pub fn rows(&self, i: usize, len: usize, peers: &Peers<'_>) -> Range<usize> {
        let start = match (self.units, self.start) {
            (_, Bound::UnboundedPreceding) => 0,
            (_, Bound::UnboundedFollowing) => len,
            (Units::Rows, Bound::Preceding(n)) => i.saturating_sub(clamp(n)),
            (Units::Rows, Bound::CurrentRow) => i,
            (Units::Rows, Bound::Following(n)) => i.saturating_add(clamp(n)),
            (_, Bound::CurrentRow) => peers.rows_of(peers.group, len).start,
            (_, Bound::Preceding(n)) => peers.rows_of(peers.group.saturating_sub(clamp(n)), len).start,
            (_, Bound::Following(n)) => match peers.group.checked_add(clamp(n)) {
                Some(g) if g < peers.starts.len() => peers.starts[g],
                _ => len,
            },
        };
        let end = match (self.units, self.end) {
            (_, Bound::UnboundedFollowing) => len,
            (_, Bound::UnboundedPreceding) => 0,
            (Units::Rows, Bound::Preceding(n)) => (i + 1).saturating_sub(clamp(n)),
            (Units::Rows, Bound::CurrentRow) => i + 1,
            (Units::Rows, Bound::Following(n)) => i.saturating_add(clamp(n)).saturating_add(1),
            (_, Bound::CurrentRow) => peers.rows_of(peers.group, len).end,
            (_, Bound::Preceding(n)) => match peers.group.checked_sub(clamp(n)) {
                Some(g) => peers.rows_of(g, len).end,
                None => 0,
            },
            (_, Bound::Following(n)) => peers.rows_of(peers.group.saturating_add(clamp(n)), len).end,
        };
        let start = start.min(len);
        start..end.clamp(start, len)
    }

    /// Whether every row's frame begins at the partition's first row (then an aggregate can
    /// grow one state along the partition).
    pub fn starts_at_partition(&self) -> bool {
        self.start == Bound::UnboundedPreceding
    }
}

fn clamp(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The errors PostgreSQL's grammar gives for bounds in the wrong order.
fn check_shape(start: &WindowFrameBound, end: &WindowFrameBound) -> Result<(), SqlError> {
    use WindowFrameBound as B;
    let err = |m: &str| Err(SqlError::new("42P20", m.to_string()));
    match (start, end) {
        (B::Following(None), _) => err("frame start cannot be UNBOUNDED FOLLOWING"),
        (_, B::Preceding(None)) => err("frame end cannot be UNBOUNDED PRECEDING"),
        (B::CurrentRow, B::Preceding(Some(_))) => err("frame starting from current row cannot have preceding rows"),
        (B::Following(Some(_)), B::Preceding(Some(_)) | B::CurrentRow) => {
            err("frame starting from following row cannot have preceding rows")
        }
        _ => Ok(()),
    }
}

fn bound(b: &WindowFrameBound, which: &str, units: &str, env: &mut dyn Env) -> Result<Bound, SqlError> {
    Ok(match b {
        WindowFrameBound::CurrentRow => Bound::CurrentRow,
        WindowFrameBound::Preceding(None) => Bound::UnboundedPreceding,
        WindowFrameBound::Following(None) => Bound::UnboundedFollowing,
        WindowFrameBound::Preceding(Some(e)) => Bound::Preceding(offset(e, which, units, env)?),
        WindowFrameBound::Following(Some(e)) => Bound::Following(offset(e, which, units, env)?),
    })
}

/// A frame offset: a constant expression (no columns), not NULL, not negative.
fn offset(e: &Expr, which: &str, units: &str, env: &mut dyn Env) -> Result<u64, SqlError> {
    if super::mentions_column(e) {
        return Err(SqlError::new("42P10", format!("argument of {units} must not contain variables")));
    }
    let v = eval(e, &Scope::empty(), &[], env, None)?;
    let n = match crate::expr::cast(v, SqlType::Int8)? {
        Datum::Null => return Err(SqlError::new("22004", format!("frame {which} offset must not be null"))),
        Datum::Int(n) => n,
        other => {
            return Err(SqlError::new(
                "42804",
                format!("argument of {units} must be type bigint, not type {}", other.natural_type().display()),
            ))
        }
    };
    u64::try_from(n).map_err(|_| SqlError::new("22013", format!("frame {which} offset must not be negative")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(units: Units, start: Bound, end: Bound) -> Frame {
        Frame { units, start, end }
    }

    /// Peer groups of a partition of 6 rows: {0, 1} {2} {3, 4, 5}.
    const STARTS: [usize; 3] = [0, 2, 3];
    const GROUP_OF: [usize; 6] = [0, 0, 1, 2, 2, 2];

    fn all(f: Frame) -> Vec<Range<usize>> {
        (0..6).map(|i| f.rows(i, 6, &Peers { starts: &STARTS, group: GROUP_OF[i] })).collect()
    }

    #[test]
    fn the_default_frame_ends_at_the_last_peer() {
        assert_eq!(all(Frame::DEFAULT), vec![0..2, 0..2, 0..3, 0..6, 0..6, 0..6]);
    }

    #[test]
    fn rows_frames_count_rows_and_clip_to_the_partition() {
        let f = frame(Units::Rows, Bound::Preceding(1), Bound::Following(1));
        assert_eq!(all(f), vec![0..2, 0..3, 1..4, 2..5, 3..6, 4..6]);
        let f = frame(Units::Rows, Bound::UnboundedPreceding, Bound::CurrentRow);
        assert_eq!(all(f), vec![0..1, 0..2, 0..3, 0..4, 0..5, 0..6]);
        let f = frame(Units::Rows, Bound::CurrentRow, Bound::UnboundedFollowing);
        assert_eq!(all(f), vec![0..6, 1..6, 2..6, 3..6, 4..6, 5..6]);
        // Wholly before or after the row: empty at the partition's edges.
        let f = frame(Units::Rows, Bound::Preceding(2), Bound::Preceding(1));
        assert_eq!(all(f), vec![0..0, 0..1, 0..2, 1..3, 2..4, 3..5]);
        let f = frame(Units::Rows, Bound::Following(1), Bound::Following(3));
        assert_eq!(all(f), vec![1..4, 2..5, 3..6, 4..6, 5..6, 6..6]);
        // Offsets too large for the machine saturate.
        let f = frame(Units::Rows, Bound::Preceding(u64::MAX), Bound::Following(u64::MAX));
        assert_eq!(all(f), vec![0..6; 6]);
    }

    #[test]
    fn range_current_row_means_the_peer_group() {
        let f = frame(Units::Range, Bound::CurrentRow, Bound::CurrentRow);
        assert_eq!(all(f), vec![0..2, 0..2, 2..3, 3..6, 3..6, 3..6]);
        let f = frame(Units::Range, Bound::CurrentRow, Bound::UnboundedFollowing);
        assert_eq!(all(f), vec![0..6, 0..6, 2..6, 3..6, 3..6, 3..6]);
    }

    #[test]
    fn groups_frames_count_peer_groups() {
        let f = frame(Units::Groups, Bound::Preceding(1), Bound::CurrentRow);
        assert_eq!(all(f), vec![0..2, 0..2, 0..3, 2..6, 2..6, 2..6]);
        let f = frame(Units::Groups, Bound::CurrentRow, Bound::Following(1));
        assert_eq!(all(f), vec![0..3, 0..3, 2..6, 3..6, 3..6, 3..6]);
        let f = frame(Units::Groups, Bound::Following(1), Bound::Following(5));
        assert_eq!(all(f), vec![2..6, 2..6, 3..6, 6..6, 6..6, 6..6]);
        let f = frame(Units::Groups, Bound::Preceding(5), Bound::Preceding(1));
        assert_eq!(all(f), vec![0..0, 0..0, 0..2, 0..3, 0..3, 0..3]);
    }

    #[test]
    fn bounds_in_the_wrong_order_are_refused_as_postgresql_does() {
        use WindowFrameBound as B;
        let one = || Some(Box::new(Expr::value(sqlparser::ast::Value::Number("1".into(), false))));
        let msg = |s, e| check_shape(&s, &e).unwrap_err().message;
        assert_eq!(msg(B::Following(None), B::CurrentRow), "frame start cannot be UNBOUNDED FOLLOWING");
        assert_eq!(msg(B::CurrentRow, B::Preceding(None)), "frame end cannot be UNBOUNDED PRECEDING");
        assert_eq!(
            msg(B::CurrentRow, B::Preceding(one())),
            "frame starting from current row cannot have preceding rows"
        );
        assert_eq!(
            msg(B::Following(one()), B::CurrentRow),
            "frame starting from following row cannot have preceding rows"
        );
        assert!(check_shape(&B::Preceding(one()), &B::Following(one())).is_ok());
    }
}
