//! Spot notices (docs/protocol.md#spot-notices): the agent of an instance
//! that EC2 is about to interrupt, or recommends rebalancing away from,
//! records so on the instance's live row, where the scheduler and the
//! operator read it (`notice`, `noticed`).

use std::fmt;

use tokio_postgres::types::Type;

use super::one_trip;
use crate::{Db, DbError};

/// What EC2 said of the instance, weakest first: an interruption outranks
/// a rebalance recommendation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Notice {
    /// `events/recommendations/rebalance`: the instance is at elevated risk
    /// of interruption.
    Rebalance,
    /// `spot/instance-action`: EC2 terminates, stops or hibernates the
    /// instance in about two minutes.
    Interruption,
}

impl Notice {
    /// The value of the `notice` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Notice::Rebalance => "rebalance",
            Notice::Interruption => "interruption",
        }
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Records `notice` on the live row of `instance`, whatever the row is
/// (idle, busy, a hand-out not yet joined), and returns that row's id;
/// `None`: the instance has no live row. An interruption replaces a
/// rebalance, never the other way, and a notice already there is left as
/// it is (`noticed` too), so recording again changes nothing.
pub async fn record_notice(
    db: &Db,
    instance: &str,
    notice: Notice,
) -> Result<Option<i64>, DbError> {
    // Both assignments read the row as it was, so they agree on `stronger`.
    let row = one_trip(
        db,
        "update orca.instances
         set noticed = case when notice is null or (notice = 'rebalance' and $2 = 'interruption')
                            then now() else noticed end,
             notice = case when notice is null or (notice = 'rebalance' and $2 = 'interruption')
                           then $2 else notice end
         where instance = $1 and ended is null
         returning id",
        &[(&instance, Type::TEXT), (&notice.as_str(), Type::TEXT)],
    )
    .await?;
    Ok(row.map(|r| r.get(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_outranks_a_rebalance() {
        assert!(Notice::Interruption > Notice::Rebalance);
        assert_eq!(Notice::Interruption.to_string(), "interruption");
        assert_eq!(Notice::Rebalance.as_str(), "rebalance");
    }
}
