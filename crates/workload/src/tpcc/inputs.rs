//! The inputs of the five transactions, drawn as clause 2 of the specification says.

use super::{DISTRICTS, ITEMS};
use crate::rng::TpccRng;

/// A customer chosen by ID (40%) or by last name (60%, the middle one of those with that name
/// in the district, by first name).
#[derive(Clone, Debug, PartialEq)]
pub enum CustomerRef {
    Id(i32),
    Last(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewOrderLine {
    pub i_id: i32,
    pub supply_w_id: i32,
    pub quantity: i32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewOrder {
    pub w_id: i32,
    pub d_id: i32,
    pub c_id: i32,
    /// In item order (by supply warehouse, then item), the order in which stock is locked.
    pub lines: Vec<NewOrderLine>,
    /// Whether every line is supplied by the home warehouse (`o_all_local`).
    pub all_local: bool,
    /// Microseconds since 2000-01-01, as the engine's timestamps.
    pub entry_d: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Payment {
    pub w_id: i32,
    pub d_id: i32,
    pub c_w_id: i32,
    pub c_d_id: i32,
    pub customer: CustomerRef,
    /// Cents, 100..=500000.
    pub amount: i64,
    pub date: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OrderStatus {
    pub w_id: i32,
    pub d_id: i32,
    pub customer: CustomerRef,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub w_id: i32,
    pub carrier_id: i32,
    pub date: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StockLevel {
    pub w_id: i32,
    pub d_id: i32,
    pub threshold: i32,
}

/// An item ID that does not exist: New-Order's 1% rollback (clause 2.4.1.4).
pub const UNUSED_ITEM: i32 = ITEMS + 1;

/// The current time as the engine's timestamp (microseconds since 2000-01-01).
pub fn now_timestamp() -> i64 {
    const UNIX_TO_2000: i64 = 946_684_800_000_000;
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(UNIX_TO_2000);
    micros - UNIX_TO_2000
}

fn customer(r: &mut TpccRng) -> CustomerRef {
    if r.percent(60) {
        CustomerRef::Last(r.run_last_name())
    } else {
        CustomerRef::Id(r.customer_id())
    }
}

/// Another warehouse than `home`, uniformly (there must be at least two).
fn remote_warehouse(r: &mut TpccRng, home: i32, warehouses: i32) -> i32 {
    let w = r.int32(1, warehouses - 1);
    if w >= home {
        w + 1
    } else {
        w
    }
}

impl NewOrder {
    pub fn draw(r: &mut TpccRng, w_id: i32, warehouses: i32) -> NewOrder {
        let d_id = r.int32(1, DISTRICTS);
        let c_id = r.customer_id();
        let count = r.int32(5, 15);
        let rollback = r.percent(1);
        let mut lines = Vec::with_capacity(count as usize);
        for n in 0..count {
            let i_id = if rollback && n == count - 1 { UNUSED_ITEM } else { r.item_id() };
            let supply_w_id = if warehouses > 1 && r.percent(1) { remote_warehouse(r, w_id, warehouses) } else { w_id };
            lines.push(NewOrderLine { i_id, supply_w_id, quantity: r.int32(1, 10) });
        }
        let all_local = lines.iter().all(|l| l.supply_w_id == w_id);
        // Stock rows are updated in (warehouse, item) order so that concurrent New-Orders
        // cannot deadlock; the line numbers follow that order. The unused item sorts last.
        lines.sort_by_key(|l| (l.i_id == UNUSED_ITEM, l.supply_w_id, l.i_id));
        NewOrder { w_id, d_id, c_id, lines, all_local, entry_d: now_timestamp() }
    }
}

impl Payment {
    pub fn draw(r: &mut TpccRng, w_id: i32, warehouses: i32) -> Payment {
        let d_id = r.int32(1, DISTRICTS);
        let (c_w_id, c_d_id) = if warehouses > 1 && !r.percent(85) {
            (remote_warehouse(r, w_id, warehouses), r.int32(1, DISTRICTS))
        } else {
            (w_id, d_id)
        };
        Payment {
            w_id,
            d_id,
            c_w_id,
            c_d_id,
            customer: customer(r),
            amount: r.int(100, 500_000),
            date: now_timestamp(),
        }
    }
}

impl OrderStatus {
    pub fn draw(r: &mut TpccRng, w_id: i32) -> OrderStatus {
        OrderStatus { w_id, d_id: r.int32(1, DISTRICTS), customer: customer(r) }
    }
}

impl Delivery {
    pub fn draw(r: &mut TpccRng, w_id: i32) -> Delivery {
        Delivery { w_id, carrier_id: r.int32(1, 10), date: now_timestamp() }
    }
}

impl StockLevel {
    pub fn draw(r: &mut TpccRng, w_id: i32) -> StockLevel {
        StockLevel { w_id, d_id: r.int32(1, DISTRICTS), threshold: r.int32(10, 20) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::NurandConstants;

    #[test]
    fn new_order_rolls_back_about_one_percent_and_locks_in_order() {
        let mut r = TpccRng::new(3, 0, NurandConstants::from_seed(3));
        let mut rollbacks = 0;
        for _ in 0..20_000 {
            let t = NewOrder::draw(&mut r, 2, 4);
            assert!((5..=15).contains(&t.lines.len()));
            let keys: Vec<_> = t.lines.iter().map(|l| (l.i_id == UNUSED_ITEM, l.supply_w_id, l.i_id)).collect();
            assert!(keys.windows(2).all(|w| w[0] <= w[1]));
            if t.lines.iter().any(|l| l.i_id == UNUSED_ITEM) {
                rollbacks += 1;
            }
            assert_eq!(t.all_local, t.lines.iter().all(|l| l.supply_w_id == 2));
        }
        assert!((120..=280).contains(&rollbacks), "{rollbacks} rollbacks in 20000");
    }

    #[test]
    fn payment_remote_customers_are_in_other_warehouses() {
        let mut r = TpccRng::new(5, 0, NurandConstants::from_seed(5));
        let mut remote = 0;
        for _ in 0..10_000 {
            let p = Payment::draw(&mut r, 1, 3);
            if p.c_w_id != p.w_id {
                remote += 1;
                assert!((2..=3).contains(&p.c_w_id));
            }
            assert!((100..=500_000).contains(&p.amount));
        }
        assert!((1200..=1800).contains(&remote), "{remote} remote payments in 10000");
        // One warehouse: never remote.
        assert!((0..1000).all(|_| Payment::draw(&mut r, 1, 1).c_w_id == 1));
    }
}
