//! Where operations go: partitions, load-share groups, write precedence,
//! failover, fan-out, hash slots, DSA addresses and knowledge flags, the
//! root DSE and search results, aliases, the router's own connections and
//! its name on the DSAs.

mod busy_dsa;
mod dsa_addresses;
mod failover;
mod fanout;
mod horizontal_partitions;
mod knowledge_flags;
mod load_share;
mod operations;
mod out_of_scope;
mod own_block;
mod own_connections;
mod root_dse;
mod router_dsa_name;
mod search_results;
mod slapd_aliases;
