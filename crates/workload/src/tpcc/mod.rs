//! TPC-C-like, with BenchmarkSQL's semantics.
//!
//! # Schema
//!
//! BenchmarkSQL's nine tables (`bmsql_warehouse` … `bmsql_stock`), its primary keys, its
//! fillfactors (set before the load: oorder and order_line 80, warehouse 50, district 79,
//! customer 90, stock 95), `bmsql_customer_idx1` for lookups by last name, and the primary key
//! on `bmsql_history.hist_id` that BenchmarkSQL adds for replication tools. `bmsql_oorder_idx1`
//! is the revised definition from Peter Geoghegan's BenchmarkSQL change that seed 000 ran with
//! (pgsql-io/benchmarksql pull request 16): keyed by customer and order, and carrying the
//! columns ORDER_STATUS reads, so that its lookup of a customer's newest order is an
//! index-only scan; the price is that Delivery's update of `o_carrier_id` is never HOT.
//!
//! The embedded engine has no `numeric`: money columns (`decimal(p,2)`) hold cents in `int8`,
//! rates (`decimal(4,4)`) hold ten-thousandths in `int4`. [`Column::scale`] records the
//! decimal places, so a SQL target declares `decimal` and converts.
//!
//! # Transactions
//!
//! The five transactions of the specification, with its input distributions ([`inputs`]),
//! run by terminals in the mix 45/43/4/4/4 with no keying or think time (BenchmarkSQL's
//! unthrottled mode), READ COMMITTED. New-Order touches its stock rows in item order, so two
//! New-Orders never deadlock on stock. Delivery is deferred as in BenchmarkSQL: the terminal
//! queues the request and background workers process it, one transaction for the ten
//! districts of a warehouse; that delayed update of every order and order line, long after
//! the insert, is the pattern seed 000 studies. See [`run`].

pub mod embedded;
pub mod inputs;
pub mod load;
pub mod postgres;
pub mod run;

use settledb::Type;

pub use inputs::{CustomerRef, Delivery, NewOrder, NewOrderLine, OrderStatus, Payment, StockLevel};
pub use run::{run, RunConfig, RunProgress, RunResult, TxKind};

/// Districts per warehouse, customers per district, items (clause 1.2 / 4.3.3.1).
pub const DISTRICTS: i32 = 10;
pub const CUSTOMERS: i32 = 3000;
pub const ITEMS: i32 = 100_000;
/// Orders loaded per district, and the first of them still undelivered (the last 900).
pub const ORDERS: i32 = 3000;
pub const FIRST_UNDELIVERED: i32 = 2101;

/// One column: its engine type, nullability, SQL type, and decimal places when the engine
/// stores a decimal as a scaled integer.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub name: &'static str,
    pub ty: Type,
    pub nullable: bool,
    pub sql: &'static str,
    pub scale: u8,
}

#[derive(Clone, Copy, Debug)]
pub struct IndexDef {
    pub name: &'static str,
    pub columns: &'static [&'static str],
    pub unique: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct TableDef {
    pub name: &'static str,
    pub columns: &'static [Column],
    pub primary_key: &'static [&'static str],
    pub indexes: &'static [IndexDef],
    pub fillfactor: u8,
}

impl TableDef {
    /// The position of column `name`.
    pub fn col(&self, name: &str) -> usize {
        self.columns.iter().position(|c| c.name == name).unwrap_or_else(|| panic!("{}: no column {name}", self.name))
    }

    /// The name of the primary key's index.
    pub fn pkey_name(&self) -> String {
        format!("{}_pkey", self.name)
    }
}

const fn c(name: &'static str, ty: Type, sql: &'static str) -> Column {
    Column { name, ty, nullable: true, sql, scale: 0 }
}
const fn nn(name: &'static str, ty: Type, sql: &'static str) -> Column {
    Column { name, ty, nullable: false, sql, scale: 0 }
}
const fn money(name: &'static str, sql: &'static str) -> Column {
    Column { name, ty: Type::Int8, nullable: true, sql, scale: 2 }
}
const fn rate(name: &'static str) -> Column {
    Column { name, ty: Type::Int4, nullable: true, sql: "decimal(4,4)", scale: 4 }
}

use Type::{Int4, Text, Timestamp};

pub const WAREHOUSE: TableDef = TableDef {
    name: "bmsql_warehouse",
    columns: &[
        nn("w_id", Int4, "integer"),
        money("w_ytd", "decimal(12,2)"),
        rate("w_tax"),
        c("w_name", Text, "varchar(10)"),
        c("w_street_1", Text, "varchar(20)"),
        c("w_street_2", Text, "varchar(20)"),
        c("w_city", Text, "varchar(20)"),
        c("w_state", Text, "char(2)"),
        c("w_zip", Text, "char(9)"),
    ],
    primary_key: &["w_id"],
    indexes: &[],
    fillfactor: 50,
};

pub const DISTRICT: TableDef = TableDef {
    name: "bmsql_district",
    columns: &[
        nn("d_w_id", Int4, "integer"),
        nn("d_id", Int4, "integer"),
        money("d_ytd", "decimal(12,2)"),
        rate("d_tax"),
        c("d_next_o_id", Int4, "integer"),
        c("d_name", Text, "varchar(10)"),
        c("d_street_1", Text, "varchar(20)"),
        c("d_street_2", Text, "varchar(20)"),
        c("d_city", Text, "varchar(20)"),
        c("d_state", Text, "char(2)"),
        c("d_zip", Text, "char(9)"),
    ],
    primary_key: &["d_w_id", "d_id"],
    indexes: &[],
    fillfactor: 79,
};

pub const CUSTOMER: TableDef = TableDef {
    name: "bmsql_customer",
    columns: &[
        nn("c_w_id", Int4, "integer"),
        nn("c_d_id", Int4, "integer"),
        nn("c_id", Int4, "integer"),
        rate("c_discount"),
        c("c_credit", Text, "char(2)"),
        c("c_last", Text, "varchar(16)"),
        c("c_first", Text, "varchar(16)"),
        money("c_credit_lim", "decimal(12,2)"),
        money("c_balance", "decimal(12,2)"),
        money("c_ytd_payment", "decimal(12,2)"),
        c("c_payment_cnt", Int4, "integer"),
        c("c_delivery_cnt", Int4, "integer"),
        c("c_street_1", Text, "varchar(20)"),
        c("c_street_2", Text, "varchar(20)"),
        c("c_city", Text, "varchar(20)"),
        c("c_state", Text, "char(2)"),
        c("c_zip", Text, "char(9)"),
        c("c_phone", Text, "char(16)"),
        c("c_since", Timestamp, "timestamp"),
        c("c_middle", Text, "char(2)"),
        c("c_data", Text, "varchar(500)"),
    ],
    primary_key: &["c_w_id", "c_d_id", "c_id"],
    indexes: &[IndexDef {
        name: "bmsql_customer_idx1",
        columns: &["c_w_id", "c_d_id", "c_last", "c_first"],
        unique: false,
    }],
    fillfactor: 90,
};

pub const HISTORY: TableDef = TableDef {
    name: "bmsql_history",
    columns: &[
        nn("hist_id", Int4, "integer"),
        c("h_c_id", Int4, "integer"),
        c("h_c_d_id", Int4, "integer"),
        c("h_c_w_id", Int4, "integer"),
        c("h_d_id", Int4, "integer"),
        c("h_w_id", Int4, "integer"),
        c("h_date", Timestamp, "timestamp"),
        money("h_amount", "decimal(6,2)"),
        c("h_data", Text, "varchar(24)"),
    ],
    primary_key: &["hist_id"],
    indexes: &[],
    fillfactor: 100,
};

pub const NEW_ORDER: TableDef = TableDef {
    name: "bmsql_new_order",
    columns: &[nn("no_w_id", Int4, "integer"), nn("no_d_id", Int4, "integer"), nn("no_o_id", Int4, "integer")],
    primary_key: &["no_w_id", "no_d_id", "no_o_id"],
    indexes: &[],
    fillfactor: 100,
};

pub const OORDER: TableDef = TableDef {
    name: "bmsql_oorder",
    columns: &[
        nn("o_w_id", Int4, "integer"),
        nn("o_d_id", Int4, "integer"),
        nn("o_id", Int4, "integer"),
        c("o_c_id", Int4, "integer"),
        c("o_carrier_id", Int4, "integer"),
        c("o_ol_cnt", Int4, "integer"),
        c("o_all_local", Int4, "integer"),
        c("o_entry_d", Timestamp, "timestamp"),
    ],
    primary_key: &["o_w_id", "o_d_id", "o_id"],
    indexes: &[IndexDef {
        name: "bmsql_oorder_idx1",
        columns: &["o_w_id", "o_d_id", "o_c_id", "o_id", "o_entry_d", "o_carrier_id"],
        unique: true,
    }],
    fillfactor: 80,
};

pub const ORDER_LINE: TableDef = TableDef {
    name: "bmsql_order_line",
    columns: &[
        nn("ol_w_id", Int4, "integer"),
        nn("ol_d_id", Int4, "integer"),
        nn("ol_o_id", Int4, "integer"),
        nn("ol_number", Int4, "integer"),
        nn("ol_i_id", Int4, "integer"),
        c("ol_delivery_d", Timestamp, "timestamp"),
        money("ol_amount", "decimal(6,2)"),
        c("ol_supply_w_id", Int4, "integer"),
        c("ol_quantity", Int4, "integer"),
        c("ol_dist_info", Text, "char(24)"),
    ],
    primary_key: &["ol_w_id", "ol_d_id", "ol_o_id", "ol_number"],
    indexes: &[],
    fillfactor: 80,
};

pub const ITEM: TableDef = TableDef {
    name: "bmsql_item",
    columns: &[
        nn("i_id", Int4, "integer"),
        c("i_name", Text, "varchar(24)"),
        money("i_price", "decimal(5,2)"),
        c("i_data", Text, "varchar(50)"),
        c("i_im_id", Int4, "integer"),
    ],
    primary_key: &["i_id"],
    indexes: &[],
    fillfactor: 100,
};

pub const STOCK: TableDef = TableDef {
    name: "bmsql_stock",
    columns: &[
        nn("s_w_id", Int4, "integer"),
        nn("s_i_id", Int4, "integer"),
        c("s_quantity", Int4, "integer"),
        money("s_ytd", "decimal(8,2)"),
        c("s_order_cnt", Int4, "integer"),
        c("s_remote_cnt", Int4, "integer"),
        c("s_data", Text, "varchar(50)"),
        c("s_dist_01", Text, "char(24)"),
        c("s_dist_02", Text, "char(24)"),
        c("s_dist_03", Text, "char(24)"),
        c("s_dist_04", Text, "char(24)"),
        c("s_dist_05", Text, "char(24)"),
        c("s_dist_06", Text, "char(24)"),
        c("s_dist_07", Text, "char(24)"),
        c("s_dist_08", Text, "char(24)"),
        c("s_dist_09", Text, "char(24)"),
        c("s_dist_10", Text, "char(24)"),
    ],
    primary_key: &["s_w_id", "s_i_id"],
    indexes: &[],
    fillfactor: 95,
};

/// The nine tables, in load order.
pub const TABLES: [TableDef; 9] = [ITEM, WAREHOUSE, STOCK, DISTRICT, CUSTOMER, HISTORY, OORDER, NEW_ORDER, ORDER_LINE];

/// The result of one transaction attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// Rolled back by the transaction's own logic (New-Order's invalid item, 1%).
    RolledBack,
    /// A serialization failure or deadlock: the terminal retries the same input.
    Retry,
}

/// One connection of a target: the five transactions, each one database transaction.
pub trait TpccConn: Send {
    fn new_order(&mut self, t: &NewOrder) -> anyhow::Result<Outcome>;
    fn payment(&mut self, t: &Payment) -> anyhow::Result<Outcome>;
    fn order_status(&mut self, t: &OrderStatus) -> anyhow::Result<Outcome>;
    /// All ten districts of the warehouse in one transaction; districts with no undelivered
    /// order are skipped, as the specification allows.
    fn delivery(&mut self, t: &Delivery) -> anyhow::Result<Outcome>;
    fn stock_level(&mut self, t: &StockLevel) -> anyhow::Result<Outcome>;
    /// The figures the consistency conditions compare (read in one snapshot where possible).
    fn consistency_facts(&mut self) -> anyhow::Result<Facts>;
    /// The heap accesses this connection's thread has made so far, where the target can tell
    /// (the embedded engine); the run charges their differences to each transaction type.
    fn access_counts(&self) -> Option<AccessCounts> {
        None
    }
}

/// Heap accesses, cumulative or charged to one transaction type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AccessCounts {
    /// Transactions charged (0 in a connection's cumulative figures).
    pub transactions: u64,
    pub heap_blks_hit: u64,
    pub heap_blks_read: u64,
    /// Index-only scan entries that had to be checked in the heap / were answered from the
    /// index alone because the visibility map said the heap page was all-visible.
    pub index_only_heap_fetches: u64,
    pub index_only_fetches_avoided: u64,
}

impl AccessCounts {
    pub fn since(self, earlier: AccessCounts) -> AccessCounts {
        AccessCounts {
            transactions: self.transactions.saturating_sub(earlier.transactions),
            heap_blks_hit: self.heap_blks_hit.saturating_sub(earlier.heap_blks_hit),
            heap_blks_read: self.heap_blks_read.saturating_sub(earlier.heap_blks_read),
            index_only_heap_fetches: self.index_only_heap_fetches.saturating_sub(earlier.index_only_heap_fetches),
            index_only_fetches_avoided: self
                .index_only_fetches_avoided
                .saturating_sub(earlier.index_only_fetches_avoided),
        }
    }

    pub fn add(&mut self, o: &AccessCounts) {
        self.transactions += o.transactions;
        self.heap_blks_hit += o.heap_blks_hit;
        self.heap_blks_read += o.heap_blks_read;
        self.index_only_heap_fetches += o.index_only_heap_fetches;
        self.index_only_fetches_avoided += o.index_only_fetches_avoided;
    }
}

/// A place the workload runs: hands out connections.
pub trait TpccTarget: Sync {
    type Conn<'a>: TpccConn
    where
        Self: 'a;
    fn connect(&self) -> anyhow::Result<Self::Conn<'_>>;
}

/// Per district, the figures of consistency conditions 1–4 (clause 3.3.2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistrictFacts {
    pub w_id: i32,
    pub d_id: i32,
    pub d_ytd: i64,
    pub d_next_o_id: i32,
    pub max_o_id: Option<i32>,
    pub max_no_o_id: Option<i32>,
    pub min_no_o_id: Option<i32>,
    pub new_orders: i64,
    pub sum_ol_cnt: i64,
    pub order_lines: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// (w_id, w_ytd)
    pub warehouses: Vec<(i32, i64)>,
    pub districts: Vec<DistrictFacts>,
}

impl Facts {
    /// Consistency conditions 1 to 4 of the specification; the violations, described.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for &(w, w_ytd) in &self.warehouses {
            let sum: i64 = self.districts.iter().filter(|d| d.w_id == w).map(|d| d.d_ytd).sum();
            if sum != w_ytd {
                out.push(format!("condition 1: warehouse {w}: W_YTD {w_ytd} != sum(D_YTD) {sum}"));
            }
        }
        for d in &self.districts {
            let (w, id) = (d.w_id, d.d_id);
            if d.max_o_id != Some(d.d_next_o_id - 1) {
                out.push(format!(
                    "condition 2: district {w}/{id}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {:?}",
                    d.d_next_o_id - 1,
                    d.max_o_id
                ));
            }
            if let Some(max_no) = d.max_no_o_id {
                if Some(max_no) != d.max_o_id {
                    out.push(format!(
                        "condition 2: district {w}/{id}: max(NO_O_ID) = {max_no} but max(O_ID) = {:?}",
                        d.max_o_id
                    ));
                }
            }
            if let (Some(max), Some(min)) = (d.max_no_o_id, d.min_no_o_id) {
                if (max - min + 1) as i64 != d.new_orders {
                    out.push(format!(
                        "condition 3: district {w}/{id}: max(NO_O_ID) - min(NO_O_ID) + 1 = {} but {} rows",
                        max - min + 1,
                        d.new_orders
                    ));
                }
            } else if d.new_orders != 0 {
                out.push(format!("condition 3: district {w}/{id}: {} rows but no NO_O_ID", d.new_orders));
            }
            if d.sum_ol_cnt != d.order_lines {
                out.push(format!(
                    "condition 4: district {w}/{id}: sum(O_OL_CNT) = {} but {} order lines",
                    d.sum_ol_cnt, d.order_lines
                ));
            }
        }
        out
    }
}
