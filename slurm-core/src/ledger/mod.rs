//! What jobs used, summed and drawn: usage reports grouped by record, name, label,
//! partition, cluster or day ([`summarise`], [`usage_of`]), their pictures as standalone
//! SVG ([`usage_svg`], [`timeline_svg`]), and GPU-hour budgets a submit is checked
//! against ([`Budgets`], [`check_budgets`]).
//!
//! A figure accounting did not give is never counted as zero: every sum says how many
//! records lacked it.

mod budget;
mod summary;
mod svg;

pub use budget::{
    budget_use, check_budgets, worst_case_gpu_hours, Budget, BudgetRefusal, BudgetUse, Budgets,
};
pub use summary::{format_hours, parse_since, summarise, usage_of, GroupBy, UsageReport, UsageRow};
pub use svg::{timeline_svg, usage_svg};
