//! Where a fire stands as a whole, judged from the states of its items (one run per
//! shard or zone): what `GET /v1/runs/{id}` shows as `fire_state`.

use serde::{Deserialize, Serialize};

use super::run::RunState;

/// Where a fire stands as a whole, from the states of its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FireState {
    /// Some item is neither `succeeded` nor `dead` yet, and none is `dead`.
    Running,
    /// Every item succeeded.
    Succeeded,
    /// Some item is `dead`: the fire will not complete without a replay.
    Dead,
    /// Every item finished, none is `dead` and some were `cancelled`.
    Cancelled,
}

impl FireState {
    /// `dead` if any item is dead, else `succeeded` if every item succeeded (and there
    /// is at least one), else `cancelled` if every item finished and some were
    /// cancelled, else `running`.
    pub fn of(states: impl IntoIterator<Item = RunState>) -> Self {
        let mut any = false;
        let mut all_succeeded = true;
        let mut all_finished = true;
        for state in states {
            any = true;
            match state {
                RunState::Dead => return FireState::Dead,
                RunState::Succeeded => {}
                RunState::Cancelled => all_succeeded = false,
                _ => {
                    all_succeeded = false;
                    all_finished = false;
                }
            }
        }
        if any && all_succeeded {
            FireState::Succeeded
        } else if any && all_finished {
            FireState::Cancelled
        } else {
            FireState::Running
        }
    }

    /// The state's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            FireState::Running => "running",
            FireState::Succeeded => "succeeded",
            FireState::Dead => "dead",
            FireState::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fire_state_is_dead_if_any_item_is_else_succeeded_only_when_all_are() {
        use RunState::*;
        let of = |states: &[RunState]| FireState::of(states.iter().copied());
        assert_eq!(of(&[Succeeded]), FireState::Succeeded);
        assert_eq!(of(&[Succeeded, Succeeded, Succeeded]), FireState::Succeeded);
        assert_eq!(of(&[Succeeded, Acked, Succeeded]), FireState::Running);
        assert_eq!(of(&[Scheduled, Dispatched, Failed]), FireState::Running);
        assert_eq!(of(&[Succeeded, Dead, Acked]), FireState::Dead);
        assert_eq!(of(&[Dead]), FireState::Dead);
        assert_eq!(of(&[]), FireState::Running);
        assert_eq!(of(&[Succeeded, Cancelled]), FireState::Cancelled);
        assert_eq!(of(&[Cancelled, Acked]), FireState::Running);
        assert_eq!(of(&[Cancelled, Dead]), FireState::Dead);
        assert_eq!(
            serde_json::to_value(FireState::Dead).unwrap(),
            json!("dead")
        );
        assert_eq!(FireState::Running.as_str(), "running");
    }
}
