//! Client policies (`--policy`): rules and rates, group membership,
//! hidden attributes.

mod policy_groups;
mod policy_hide;
pub(crate) mod rules;
