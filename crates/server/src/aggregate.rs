//! Aggregate transition states: `count`, `sum`, `avg`, `min` and `max` fed one value at a time.
//!
//! PostgreSQL computes an aggregate as a transition function applied to each input value and a
//! final function applied to the state (`nodeAgg.c`; `int8_avg_accum`, `numeric_avg_accum`).
//! [`State`] is that pair: [`State::add`] is the transition (NULLs are skipped, as for a strict
//! transition function), [`State::result`] the final function, callable at any point without
//! consuming the state. The SELECT executor ([`crate::query`]) feeds a group's values once;
//! window aggregates ([`crate::window`]) extend one state while their frame's end advances
//! and its start stays, and start a new one when the start moves (there are no inverse
//! transition functions here, as PostgreSQL has none for `min`/`max` either).
//!
//! Results, as before this module existed: `count` is int8; `sum` of integers is an integer
//! (numeric when it leaves int8), of numerics the exact sum at the largest scale seen, of any
//! float8 a float8 sum of every value; `avg` of exact values is numeric with at least 16
//! decimal places (truncated), of floats a float8. Errors are kept until [`State::result`], so
//! a `sum` that meets a float8 after an exact overflow still answers as float8.

use std::cmp::Ordering;

use crate::error::SqlError;
use crate::expr::as_f64;
use crate::types::{compare, Datum, Num};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// `count(*)`: every row ([`State::add_row`]).
    CountRows,
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

/// One aggregate's running state.
#[derive(Clone, Debug)]
pub struct State {
    kind: Kind,
    /// Non-NULL values added (rows, for `count(*)`).
    n: i64,
    /// `sum`/`avg` of the exact values, at `scale` decimal places.
    exact: i128,
    scale: u8,
    exact_overflow: bool,
    /// The same values summed as float8, used when one of them is a float8.
    float: f64,
    saw_float: bool,
    float_error: Option<SqlError>,
    /// The type of a value `sum`/`avg` cannot add (42883 unless a float8 came too).
    bad_type: Option<String>,
    /// `min`/`max` so far.
    best: Option<Datum>,
}

/// The names [`State::new`] knows.
pub fn is_aggregate_name(name: &str) -> bool {
    matches!(name, "count" | "sum" | "avg" | "min" | "max")
}

impl State {
    /// A fresh state for the aggregate `name`; `star` for `count(*)`. `None` when `name` is
    /// not an aggregate.
    pub fn new(name: &str, star: bool) -> Option<State> {
        let kind = match name {
            "count" if star => Kind::CountRows,
            "count" => Kind::Count,
            "sum" => Kind::Sum,
            "avg" => Kind::Avg,
            "min" => Kind::Min,
            "max" => Kind::Max,
            _ => return None,
        };
        Some(State {
            kind,
            n: 0,
            exact: 0,
            scale: 0,
            exact_overflow: false,
            float: 0.0,
            saw_float: false,
            float_error: None,
            bad_type: None,
            best: None,
        })
    }

    /// Counts one row for `count(*)` (other aggregates ignore it).
    pub fn add_row(&mut self) {
        if self.kind == Kind::CountRows {
            self.n += 1;
        }
    }

    /// The transition: one input value.
    pub fn add(&mut self, v: &Datum) {
        if v.is_null() || self.kind == Kind::CountRows {
            return;
        }
        self.n += 1;
        match self.kind {
            Kind::Count | Kind::CountRows => {}
            Kind::Min | Kind::Max => {
                let better = self.best.as_ref().is_none_or(|b| {
                    let o = compare(v, b).unwrap_or(Ordering::Equal);
                    o == if self.kind == Kind::Min { Ordering::Less } else { Ordering::Greater }
                });
                if better {
                    self.best = Some(v.clone());
                }
            }
            Kind::Sum | Kind::Avg => self.add_number(v),
        }
    }

    fn add_number(&mut self, v: &Datum) {
        match as_f64(v) {
            Ok(f) => self.float += f,
            Err(e) => {
                self.float_error.get_or_insert(e);
            }
        }
        let x = match v {
            Datum::Int(x) => Num { mantissa: i128::from(*x), scale: 0 },
            Datum::Num(x) => *x,
            Datum::Float(_) => {
                self.saw_float = true;
                return;
            }
            other => {
                self.bad_type.get_or_insert_with(|| other.natural_type().display());
                return;
            }
        };
        if x.scale > self.scale {
            match (Num { mantissa: self.exact, scale: self.scale }).rescale(x.scale) {
                Some(t) => (self.exact, self.scale) = (t.mantissa, t.scale),
                None => self.exact_overflow = true,
            }
        }
        match x.rescale(self.scale).and_then(|x| self.exact.checked_add(x.mantissa)) {
            Some(t) => self.exact = t,
            None => self.exact_overflow = true,
        }
    }

    /// The final function: the aggregate of the values added so far.
    pub fn result(&self) -> Result<Datum, SqlError> {
        let name = match self.kind {
            Kind::Count | Kind::CountRows => return Ok(Datum::Int(self.n)),
            Kind::Min | Kind::Max => return Ok(self.best.clone().unwrap_or(Datum::Null)),
            Kind::Sum => "sum",
            Kind::Avg => "avg",
        };
        if self.n == 0 {
            return Ok(Datum::Null);
        }
        if self.saw_float {
            if let Some(e) = &self.float_error {
                return Err(e.clone());
            }
            return Ok(Datum::Float(if self.kind == Kind::Avg { self.float / self.n as f64 } else { self.float }));
        }
        if let Some(t) = &self.bad_type {
            return Err(SqlError::new("42883", format!("function {name}({t}) does not exist")));
        }
        if self.exact_overflow {
            return Err(SqlError::out_of_range("numeric"));
        }
        let total = Num { mantissa: self.exact, scale: self.scale };
        Ok(if self.kind == Kind::Avg {
            let q = total.rescale(self.scale.max(16)).ok_or_else(|| SqlError::out_of_range("numeric"))?;
            Datum::Num(Num { mantissa: q.mantissa / i128::from(self.n), scale: q.scale })
        } else if self.scale == 0 {
            i64::try_from(self.exact).map_or(Datum::Num(total), Datum::Int)
        } else {
            Datum::Num(total)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(name: &str, vals: &[Datum]) -> Datum {
        let mut s = State::new(name, false).unwrap();
        for v in vals {
            s.add(v);
        }
        s.result().unwrap()
    }

    #[test]
    fn sums_keep_the_largest_scale_and_skip_nulls() {
        let n = |m, scale| Datum::Num(Num { mantissa: m, scale });
        assert_eq!(fold("sum", &[Datum::Int(1), n(25, 1), Datum::Null, n(125, 2)]), n(475, 2));
        assert_eq!(fold("sum", &[Datum::Int(2), Datum::Int(3)]), Datum::Int(5));
        assert_eq!(fold("sum", &[Datum::Null]), Datum::Null);
        assert_eq!(fold("count", &[Datum::Null, Datum::Int(1)]), Datum::Int(1));
        assert_eq!(fold("max", &[Datum::Int(1), Datum::Int(7), Datum::Null]), Datum::Int(7));
        assert_eq!(fold("sum", &[Datum::Int(1), Datum::Float(0.5)]), Datum::Float(1.5));
    }

    #[test]
    fn count_star_counts_rows_and_text_cannot_be_summed() {
        let mut s = State::new("count", true).unwrap();
        s.add_row();
        s.add_row();
        assert_eq!(s.result().unwrap(), Datum::Int(2));
        let mut s = State::new("sum", false).unwrap();
        s.add(&Datum::Bool(true));
        assert_eq!(s.result().unwrap_err().code, "42883");
    }
}
